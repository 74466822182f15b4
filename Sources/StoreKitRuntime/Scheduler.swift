/// A min-heap of actions by (time, insertion order): the deterministic runtime's only
/// source of ordering, and the timer queue of live roles. Ties go to the earlier
/// insertion, so the same choices give the same order.
///
/// The heap moves only small entries (time, order, slot); actions stay in a `Slab`, so a
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
    @usableFromInline var actions = Slab<Action>()
    @usableFromInline var inserted: UInt64 = 0

    public init() {}

    @inlinable public var count: Int { heap.count }
    @inlinable public var isEmpty: Bool { heap.isEmpty }
    @inlinable public var nextTime: Int64? { heap.first?.time }

    @inlinable
    public mutating func schedule(at time: Int64, _ action: consuming Action) {
        let slot = actions.insert(action)
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
        return (top.time, actions.remove(top.slot))
    }
}

/// Values kept by a small integer (a slot) until taken out; freed slots are used again, so the
/// storage grows to the most values held at once. What the scheduler's heap and the
/// deterministic runtime's actions refer to, so that large values are not moved around.
public struct Slab<Element> {
    @usableFromInline var elements: [Element?] = []
    @usableFromInline var freeSlots: [Int] = []

    public init() {}

    /// Keeps `element`; returns its slot.
    @inlinable
    public mutating func insert(_ element: consuming Element) -> Int {
        if let free = freeSlots.popLast() {
            elements[free] = element
            return free
        }
        elements.append(element)
        return elements.count - 1
    }

    /// Takes the element out of `slot` (which becomes free).
    @inlinable
    public mutating func remove(_ slot: Int) -> Element {
        freeSlots.append(slot)
        return elements[slot].take()!
    }
}
