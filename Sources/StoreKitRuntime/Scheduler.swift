/// A min-heap of actions by (time, insertion order): the deterministic simulation's
/// only source of ordering, and the timer queue of live roles. Ties go to the earlier insertion, so a seed fixes the order.
public struct Scheduler<Action> {
    private struct Entry {
        var time: Int64
        var order: UInt64
        var action: Action
        func precedes(_ other: Entry) -> Bool { (time, order) < (other.time, other.order) }
    }

    private var heap: [Entry] = []
    private var inserted: UInt64 = 0

    public init() {}

    public var count: Int { heap.count }
    public var isEmpty: Bool { heap.isEmpty }
    public var nextTime: Int64? { heap.first?.time }

    public mutating func schedule(at time: Int64, _ action: Action) {
        heap.append(Entry(time: time, order: inserted, action: action))
        inserted += 1
        var child = heap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child].precedes(heap[parent]) else { break }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    public mutating func next() -> (time: Int64, action: Action)? {
        guard !heap.isEmpty else { return nil }
        heap.swapAt(0, heap.count - 1)
        let entry = heap.removeLast()
        var parent = 0
        while true {
            let left = 2 * parent + 1
            let right = left + 1
            var smallest = parent
            if left < heap.count && heap[left].precedes(heap[smallest]) { smallest = left }
            if right < heap.count && heap[right].precedes(heap[smallest]) { smallest = right }
            guard smallest != parent else { break }
            heap.swapAt(parent, smallest)
            parent = smallest
        }
        return (entry.time, entry.action)
    }
}
