/// A min-heap of actions by (time, insertion order): the deterministic runtime's only
/// source of ordering, and the timer queue of live roles. Ties go to the earlier
/// insertion, so the same choices give the same order.
///
/// The heap moves only small entries (time, order, slot); actions stay in a slab, so a
/// large action is never copied while the heap is reordered.
public struct Scheduler<Action> {
    @usableFromInline struct Entry {
        @usableFromInline var time: Int64
        @usableFromInline var order: UInt64
        @usableFromInline var slot: Int
        @inlinable init(time: Int64, order: UInt64, slot: Int) {
            self.time = time
            self.order = order
            self.slot = slot
        }
        @inlinable func precedes(_ other: Entry) -> Bool {
            time < other.time || (time == other.time && order < other.order)
        }
    }

    @usableFromInline var heap: [Entry] = []
    @usableFromInline var actions: [Action?] = []
    @usableFromInline var freeSlots: [Int] = []
    @usableFromInline var inserted: UInt64 = 0

    public init() {}

    @inlinable public var count: Int { heap.count }
    @inlinable public var isEmpty: Bool { heap.isEmpty }
    @inlinable public var nextTime: Int64? { heap.first?.time }

    @inlinable
    public mutating func schedule(at time: Int64, _ action: Action) {
        let slot: Int
        if let free = freeSlots.popLast() {
            slot = free
            actions[slot] = action
        } else {
            slot = actions.count
            actions.append(action)
        }
        let entry = Entry(time: time, order: inserted, slot: slot)
        inserted += 1
        heap.append(entry)
        var child = heap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard entry.precedes(heap[parent]) else { break }
            heap[child] = heap[parent]
            child = parent
        }
        heap[child] = entry
    }

    @inlinable
    public mutating func next() -> (time: Int64, action: Action)? {
        guard let top = heap.first else { return nil }
        let last = heap.removeLast()
        if !heap.isEmpty {
            // Sift the last entry down from the root, moving children up into the hole.
            var parent = 0
            let count = heap.count
            while true {
                let left = 2 * parent + 1
                guard left < count else { break }
                let right = left + 1
                let smallest = right < count && heap[right].precedes(heap[left]) ? right : left
                guard heap[smallest].precedes(last) else { break }
                heap[parent] = heap[smallest]
                parent = smallest
            }
            heap[parent] = last
        }
        let action = actions[top.slot].take()!
        freeSlots.append(top.slot)
        return (top.time, action)
    }
}
