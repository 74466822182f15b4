/// Names (topic groups, followed devices) looked up by the names they begin: which of them a device's
/// name starts with, in bytes, as ZeroMQ matches topics. A lookup costs one dictionary probe per distinct
/// name length, not one comparison per name, so a queue with many groups, or an observer following many
/// devices, spends the same per record as with a few.
public struct PrefixIndex: Sendable {
    private let positions: [String: Int]
    private let byteCounts: [Int]
    /// The names' lengths in UTF-8 bytes, ascending.
    private let lengths: [Int]

    /// `names[i]` is found as position `i`; a repeated name keeps its first position.
    public init(_ names: [String]) {
        var positions: [String: Int] = [:]
        for (position, name) in names.enumerated() where positions[name] == nil { positions[name] = position }
        self.positions = positions
        byteCounts = names.map(\.utf8.count)
        lengths = Set(names.map(\.utf8.count)).sorted()
    }

    /// The position of `name` itself.
    public func position(of name: String) -> Int? { positions[name] }

    /// Calls `body` with the position of each name that `name` begins with (itself included), shortest first.
    public func forEachPosition(prefixing name: String, _ body: (Int) -> Void) {
        let count = name.utf8.count
        for length in lengths {
            guard length <= count else { return }
            let prefix = length == count ? name : String(decoding: name.utf8.prefix(length), as: UTF8.self)
            // A cut inside a character decodes to U+FFFD, which a name may hold at another length.
            if let position = positions[prefix], byteCounts[position] == length { body(position) }
        }
    }
}
