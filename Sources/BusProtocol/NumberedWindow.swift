/// Values under ascending numbers, most removed near the lowest: a sender's commands awaiting an
/// answer (`CommandRetries`). A ring with one slot per number from the lowest held to the highest,
/// so a lookup is an index and a removal moves nothing. A dictionary hashed every number, and each
/// removal shifted the entries probed after it (docs/performance.md). The bench's driver keeps
/// each device's lifecycles in flight in one, by transaction number.
public struct NumberedWindow<Value>: Sequence {
    /// A power of two long; `occupied` says which slots hold a value, so finding the next one copies none.
    @usableFromInline var slots: [Value?] = []
    @usableFromInline var occupied: [Bool] = []
    /// The slot of `lowest`.
    @usableFromInline var head = 0
    /// Numbers from `lowest` to the highest held, empty slots between them included.
    @usableFromInline var span = 0
    /// The lowest number held (meaningful only while `held > 0`), and how many are held.
    @usableFromInline var lowestHeld: UInt64 = 0
    @usableFromInline var held = 0
    /// The lowest number held; meaningful only while `count > 0`.
    @inlinable public var lowest: UInt64 { lowestHeld }
    @inlinable public var count: Int { held }

    @inlinable
    public init() {}

    @inlinable
    public var isEmpty: Bool { held == 0 }
    /// Slots allocated: a power of two, at most twice the largest span held.
    @inlinable
    public var slotCount: Int { slots.count }

    @inlinable func slot(_ number: UInt64) -> Int? {
        guard held > 0, number >= lowestHeld, number - lowestHeld < UInt64(span) else { return nil }
        return (head + Int(number - lowestHeld)) & (slots.count - 1)
    }

    /// The value under `number`. Setting nil removes it; setting a number not held adds it, and it
    /// must be above every number held (numbers ascend; a gap costs one empty slot per number).
    @inlinable
    public subscript(number: UInt64) -> Value? {
        get { slot(number).flatMap { occupied[$0] ? slots[$0] : nil } }
        set {
            guard let newValue else { remove(number); return }
            if let index = slot(number), occupied[index] {
                slots[index] = newValue
            } else {
                insert(newValue, at: number)
            }
        }
    }

    /// Adds `value` under `number`, which must be above every number held.
    @inlinable
    public mutating func insert(_ value: consuming Value, at number: UInt64) {
        if held == 0 {
            head = 0
            span = 0
            lowestHeld = number
        }
        precondition(number >= lowestHeld + UInt64(span), "numbered window: \(number) is not above the highest held")
        let needed = Int(number - lowestHeld) + 1
        if needed > slots.count { grow(toHold: needed) }
        let index = (head + needed - 1) & (slots.count - 1)
        slots[index] = consume value
        occupied[index] = true
        span = needed
        held += 1
    }

    /// Lays the held slots out again, in order from slot 0, in a ring large enough for `needed`.
    @usableFromInline mutating func grow(toHold needed: Int) {
        var capacity = Swift.max(16, slots.count)
        while capacity < needed { capacity *= 2 }
        var newSlots = [Value?](repeating: nil, count: capacity)
        var newOccupied = [Bool](repeating: false, count: capacity)
        for offset in 0..<span {
            let index = (head + offset) & (slots.count - 1)
            guard occupied[index] else { continue }
            swap(&newSlots[offset], &slots[index])
            newOccupied[offset] = true
        }
        slots = newSlots
        occupied = newOccupied
        head = 0
    }

    /// Removes and returns the value under `number`; nil when it is not held.
    @discardableResult
    @inlinable
    public mutating func remove(_ number: UInt64) -> Value? {
        guard let index = slot(number), occupied[index] else { return nil }
        // Moved out, not copied: a copy would retain what the value holds.
        var value: Value?
        swap(&value, &slots[index])
        occupied[index] = false
        held -= 1
        if held == 0 {
            span = 0
        } else if index == head {
            let mask = slots.count - 1
            repeat {
                head = (head + 1) & mask
                lowestHeld += 1
                span -= 1
            } while !occupied[head]
        }
        return value
    }

    /// What `body` reads from the value under `number`; nil when it is not held.
    @inlinable
    public func read<Result>(_ number: UInt64, _ body: (Value) -> Result) -> Result? {
        guard let index = slot(number), occupied[index] else { return nil }
        return body(slots[index]!)
    }

    /// Changes the value under `number` in place (no copy of it is made); false when it is not held.
    @discardableResult
    @inlinable
    public mutating func update(_ number: UInt64, _ change: (inout Value) -> Void) -> Bool {
        guard let index = slot(number), occupied[index] else { return false }
        change(&slots[index]!)
        return true
    }

    /// The numbers held and their values, in ascending order.
    @inlinable
    public func makeIterator() -> Iterator { Iterator(window: self, offset: 0) }

    public struct Iterator: IteratorProtocol {
        @usableFromInline let window: NumberedWindow
        @usableFromInline var offset: Int

        @inlinable init(window: NumberedWindow, offset: Int) {
            self.window = window
            self.offset = offset
        }

        @inlinable
        public mutating func next() -> (number: UInt64, value: Value)? {
            while offset < window.span {
                let index = (window.head + offset) & (window.slots.count - 1)
                defer { offset += 1 }
                if window.occupied[index] { return (window.lowestHeld + UInt64(offset), window.slots[index]!) }
            }
            return nil
        }
    }
}

extension NumberedWindow: Sendable where Value: Sendable {}
