/// An append-only collection kept in chunks of at most `chunkCapacity` elements, so that appending
/// never copies what is already there. An array copies all of its elements each time it outgrows its
/// capacity: for a long purchase history that is a copy of megabytes into freshly faulted pages, and
/// for many histories that grow together (a load test's accounts, bought from in turn) it is many of
/// them within the same milliseconds, a stall of every lifecycle in flight.
public struct SegmentedArray<Element>: RandomAccessCollection {
    /// Elements per chunk. The first chunk grows as an array does (a short history costs no more than
    /// an array); each later one is allocated whole.
    public static var chunkCapacity: Int { 256 }

    private var chunks: [[Element]] = []
    public private(set) var count = 0

    public init() {}

    public init(_ elements: some Sequence<Element>) {
        for element in elements { append(element) }
    }

    public var startIndex: Int { 0 }
    public var endIndex: Int { count }

    public subscript(position: Int) -> Element {
        precondition(position >= 0 && position < count, "SegmentedArray index \(position) out of 0..<\(count)")
        return chunks[position / Self.chunkCapacity][position % Self.chunkCapacity]
    }

    public mutating func append(_ element: Element) {
        if let last = chunks.indices.last, chunks[last].count < Self.chunkCapacity {
            chunks[last].append(element)
        } else {
            var chunk: [Element] = []
            if !chunks.isEmpty { chunk.reserveCapacity(Self.chunkCapacity) }
            chunk.append(element)
            chunks.append(chunk)
        }
        count += 1
    }
}

extension SegmentedArray: Sendable where Element: Sendable {}

extension SegmentedArray: Equatable where Element: Equatable {
    public static func == (left: SegmentedArray, right: SegmentedArray) -> Bool {
        left.count == right.count && left.elementsEqual(right)
    }
}

extension SegmentedArray: Hashable where Element: Hashable {
    public func hash(into hasher: inout Hasher) {
        hasher.combine(count)
        for element in self { hasher.combine(element) }
    }
}
