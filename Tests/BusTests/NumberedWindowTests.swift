@testable import BusProtocol
import Testing

/// The sender's window of outstanding commands (`NumberedWindow`) against a dictionary: the same
/// values under the same numbers, in ascending order, whatever is removed where.
@Suite struct NumberedWindowTests {
    /// A fixed xorshift, so the sequence of operations is the same in every run.
    struct Xorshift: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            return state
        }
    }

    @Test func matchesADictionaryOverRandomOperations() {
        var window = NumberedWindow<String>()
        var model: [UInt64: String] = [:]
        var random = Xorshift(state: 0x9E37_79B9_7F4A_7C15)
        var next: UInt64 = 1
        for step in 0..<20_000 {
            switch random.next() % 10 {
            case 0...3:
                // Numbers ascend; now and then one is skipped (a gap of empty slots).
                next += random.next() % 8 == 0 ? 1 + random.next() % 3 : 0
                window[next] = "value \(next)"
                model[next] = "value \(next)"
                next += 1
            case 4...6:
                // Mostly near the front, as answers come.
                let number = model.keys.min().map { $0 + random.next() % 4 } ?? next
                #expect(window.remove(number) == model.removeValue(forKey: number), "step \(step)")
            case 7:
                let number = next > 1 ? 1 + random.next() % next : 1
                window.update(number) { $0 += "!" }
                model[number]? += "!"
            default:
                let number = next > 1 ? 1 + random.next() % next : 1
                #expect(window[number] == model[number], "step \(step)")
                #expect(window.read(number, \.count) == model[number]?.count, "step \(step)")
            }
            #expect(window.count == model.count, "step \(step)")
            #expect(window.isEmpty || window.lowest == model.keys.min(), "step \(step)")
        }
        #expect(window.map(\.number) == model.keys.sorted())
        #expect(window.map(\.value) == model.keys.sorted().map { model[$0]! })
    }

    @Test func settingNilRemovesAndTheWindowStartsAgainWhenEmpty() {
        var window = NumberedWindow<Int>()
        window[10] = 1
        window[11] = 2
        window[10] = nil
        #expect(window.lowest == 11)
        window[11] = nil
        #expect(window.isEmpty)
        // Empty, it takes any number, even a lower one.
        window[3] = 3
        #expect(window.lowest == 3 && window.count == 1 && window[3] == 3)
        #expect(window.remove(4) == nil && window.update(2) { $0 += 1 } == false)
    }

    @Test func holdsLongRunsWithoutGrowing() {
        // A window of 100 moving through a million numbers keeps its slots within twice the window.
        var window = NumberedWindow<UInt64>()
        for number in UInt64(1)...1_000_000 {
            window[number] = number
            if number > 100 { #expect(window.remove(number - 100) == number - 100) }
            if number % 1_000 == 0 { #expect(window.slotCount <= 2_048) }
        }
        #expect(window.count == 100 && window.lowest == 999_901)
        #expect(window.map(\.value) == Array(999_901...1_000_000))
    }
}
