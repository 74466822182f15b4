/// A min-heap of actions by (time, insertion order): the deterministic runtime's only
/// source of ordering, and the timer queue of live roles. Ties go to the earlier
/// insertion, so the same choices give the same order.
///
/// Actions are kept in the heap's entries: every user's actions are small (the deterministic
/// runtime's are a few integers; its commands and timer tokens wait in slabs of their own), and
/// a separate store of actions cost two more array updates per action than moving them.
public struct Scheduler<Action> {
    @usableFromInline struct Entry {
        @usableFromInline var time: Int64
        @usableFromInline var order: UInt64
        @usableFromInline var action: Action
        @inlinable init(time: Int64, order: UInt64, action: consuming Action) {
            self.time = time
            self.order = order
            self.action = action
        }
        @inlinable func precedes(_ other: Entry) -> Bool {
            time < other.time || (time == other.time && order < other.order)
        }
    }

    @usableFromInline var heap: [Entry] = []
    /// Orders of `schedule`: from the middle of the range, so that `scheduleBeforeOthers` has the lower half.
    @usableFromInline var inserted: UInt64 = 1 << 63
    @usableFromInline var insertedBeforeOthers: UInt64 = 0

    public init() {}

    @inlinable public var count: Int { heap.count }
    @inlinable public var isEmpty: Bool { heap.isEmpty }
    @inlinable public var nextTime: Int64? { heap.first?.time }

    @inlinable
    public mutating func schedule(at time: Int64, _ action: consuming Action) {
        heap.append(Entry(time: time, order: inserted, action: action))
        inserted += 1
        siftUpLast()
    }

    /// Schedules `action` before everything `schedule` put at the same time (and after what this
    /// put there before): work that waited for an outage goes first when it ends, so each link
    /// keeps its order.
    @inlinable
    public mutating func scheduleBeforeOthers(at time: Int64, _ action: consuming Action) {
        heap.append(Entry(time: time, order: insertedBeforeOthers, action: action))
        insertedBeforeOthers += 1
        siftUpLast()
    }

    @inlinable
    mutating func siftUpLast() {
        heap.withUnsafeMutableBufferPointer { entries in
            // Sift the new entry up: parents that come after it move down into the hole it leaves.
            let base = entries.baseAddress!
            var hole = entries.count - 1
            let moving = (base + hole).move()
            while hole > 0 {
                let parent = (hole - 1) / 2
                guard moving.precedes(base[parent]) else { break }
                (base + hole).moveInitialize(from: base + parent, count: 1)
                hole = parent
            }
            (base + hole).initialize(to: moving)
        }
    }

    @inlinable
    public mutating func next() -> (time: Int64, action: Action)? {
        guard !heap.isEmpty else { return nil }
        let last = heap.removeLast()
        guard !heap.isEmpty else { return (last.time, last.action) }
        let top = heap.withUnsafeMutableBufferPointer { entries in
            // Take the root out and sift the last entry down from there: earlier children move up
            // into the hole.
            let base = entries.baseAddress!
            let count = entries.count
            let top = base.move()
            var hole = 0
            while true {
                let left = 2 * hole + 1
                guard left < count else { break }
                let right = left + 1
                let earlier = right < count && base[right].precedes(base[left]) ? right : left
                guard base[earlier].precedes(last) else { break }
                (base + hole).moveInitialize(from: base + earlier, count: 1)
                hole = earlier
            }
            (base + hole).initialize(to: last)
            return top
        }
        return (top.time, top.action)
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
