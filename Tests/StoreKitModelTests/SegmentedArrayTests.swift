import StoreKitModel
import Testing

/// An account's purchase history (`SegmentedArray`) against an array: the same elements in the same
/// order at every length, across chunk boundaries, and the same equality and hashing.
@Suite struct SegmentedArrayTests {
    @Test func matchesAnArrayAtEveryLength() {
        var segmented = SegmentedArray<Int>()
        var model: [Int] = []
        #expect(segmented.isEmpty)
        let length = SegmentedArray<Int>.chunkCapacity * 4 + 3
        for value in 0..<length {
            segmented.append(value * 7)
            model.append(value * 7)
            // Lengths around each chunk boundary, and a sample between them.
            let boundary = model.count % SegmentedArray<Int>.chunkCapacity
            if boundary <= 1 || boundary == SegmentedArray<Int>.chunkCapacity - 1 || model.count % 97 == 0 {
                #expect(Array(segmented) == model)
                #expect(segmented.count == model.count)
                #expect(segmented.last == model.last)
            }
        }
        #expect(segmented[SegmentedArray<Int>.chunkCapacity] == model[SegmentedArray<Int>.chunkCapacity])
        #expect(segmented.last { $0 % 5 == 3 } == model.last { $0 % 5 == 3 })
        #expect(Array(segmented.reversed()) == model.reversed())
    }

    @Test func equalContentsAreEqualAndHashAlike() {
        let contents = (0..<600).map { "transaction-\($0)" }
        let first = SegmentedArray(contents)
        var second = SegmentedArray<String>()
        for element in contents { second.append(element) }
        #expect(first == second)
        #expect(first.hashValue == second.hashValue)
        var longer = second
        longer.append("one more")
        #expect(longer != first)
        #expect(second.count == 600)  // the copy appended to is a value of its own
        var differing = SegmentedArray(contents.dropLast())
        differing.append("other")
        #expect(differing != first)
    }
}
