/// Values under ascending numbers, most removed near the lowest: a sender's commands awaiting an
/// answer (`CommandRetries`). One slot per number from the lowest held to the highest, on an array
/// with a moving head, so a lookup is an index and a removal moves nothing. A dictionary hashed
/// every number, and each removal shifted the entries probed after it (a tenth of the store's and
/// the load drivers' CPU under load, docs/performance.md).
struct NumberedWindow<Value>: Sequence {
    private var slots: [Value?] = []
    /// The slot of `lowest`.
    private var head = 0
    /// The lowest number held; meaningful only while `count > 0`.
    private(set) var lowest: UInt64 = 0
    private(set) var count = 0

    var isEmpty: Bool { count == 0 }
    /// Slots in use, empty ones included (at most about twice the span from the lowest number to the highest).
    var slotCount: Int { slots.count }

    /// One past the highest number a slot exists for.
    private var end: UInt64 { lowest + UInt64(slots.count - head) }

    private func slot(_ number: UInt64) -> Int? {
        guard count > 0, number >= lowest, number < end else { return nil }
        return head + Int(number - lowest)
    }

    /// The value under `number`. Setting nil removes it; setting a number not held adds it, and it
    /// must be above every number held (numbers ascend; a gap costs one empty slot per number).
    subscript(number: UInt64) -> Value? {
        get { slot(number).flatMap { slots[$0] } }
        set {
            if let index = slot(number) {
                guard newValue != nil else { remove(number); return }
                slots[index] = newValue
            } else if let newValue {
                insert(newValue, at: number)
            }
        }
    }

    private mutating func insert(_ value: Value, at number: UInt64) {
        if count == 0 {
            slots.removeAll(keepingCapacity: true)
            head = 0
            lowest = number
        }
        precondition(number >= end, "numbered window: \(number) is not above the highest held (\(end - 1))")
        for _ in end..<number { slots.append(nil) }
        slots.append(value)
        count += 1
    }

    /// Removes and returns the value under `number`; nil when it is not held.
    @discardableResult
    mutating func remove(_ number: UInt64) -> Value? {
        guard let index = slot(number), let value = slots[index] else { return nil }
        slots[index] = nil
        count -= 1
        if count == 0 {
            slots.removeAll(keepingCapacity: true)
            head = 0
            return value
        }
        if index == head {
            while slots[head] == nil {
                head += 1
                lowest += 1
            }
            // Slots before the head are dropped once they are half of the array, so it stays within twice the window.
            if head >= 1_024 && head * 2 >= slots.count {
                slots.removeFirst(head)
                head = 0
            }
        }
        return value
    }

    /// What `body` reads from the value under `number` (no copy of it is made); nil when it is not held.
    func read<Result>(_ number: UInt64, _ body: (Value) -> Result) -> Result? {
        guard let index = slot(number), let value = slots[index] else { return nil }
        return body(value)
    }

    /// Changes the value under `number` in place (no copy of it is made); false when it is not held.
    @discardableResult
    mutating func update(_ number: UInt64, _ change: (inout Value) -> Void) -> Bool {
        guard let index = slot(number), slots[index] != nil else { return false }
        change(&slots[index]!)
        return true
    }

    /// The numbers held and their values, in ascending order.
    func makeIterator() -> Iterator { Iterator(window: self, index: head) }

    struct Iterator: IteratorProtocol {
        let window: NumberedWindow
        var index: Int

        mutating func next() -> (number: UInt64, value: Value)? {
            while index < window.slots.count {
                defer { index += 1 }
                if let value = window.slots[index] { return (window.lowest + UInt64(index - window.head), value) }
            }
            return nil
        }
    }
}
