import Bus
import Testing

/// `PrefixIndex`: which names a name begins with, found by length, in bytes.
struct PrefixIndexTests {
    func positions(_ index: PrefixIndex, _ name: String) -> [Int] {
        var found: [Int] = []
        index.forEachPosition(prefixing: name) { found.append($0) }
        return found
    }

    @Test("each name the given one begins with, shortest first, itself included; a repeated name keeps its first position; bytes, not characters")
    func lookups() {
        let index = PrefixIndex(["device-10", "device-1", "other", "device-", "device-1", "caf"])
        #expect(positions(index, "device-100") == [3, 1, 0])
        #expect(positions(index, "device-1") == [3, 1])
        #expect(positions(index, "device-2") == [3])
        #expect(positions(index, "devic").isEmpty)
        #expect(positions(index, "").isEmpty)
        #expect(index.position(of: "device-1") == 1 && index.position(of: "device-100") == nil)
        // "café" begins with the bytes of "caf", as a topic does; a name cut inside a character matches nothing.
        #expect(positions(index, "café") == [5])
        #expect(positions(PrefixIndex(["cafe", "caf\u{FFFD}"]), "café").isEmpty)
        #expect(positions(PrefixIndex([]), "device-1").isEmpty)
    }
}
