#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The sparse index of one segment: the byte offset of every K-th record (sequences base, base+K, base+2K, ...).
///
/// Derived data: always rebuilt from the segment when missing, damaged or stale, never trusted over it
/// (readers check that the record found at an indexed offset carries the indexed sequence).
struct SparseIndex: Equatable {
    static let magic: [UInt8] = Array("SKSIMIDX".utf8)
    static let version: UInt16 = 1
    static let headerBytes = 24
    static let entryBytes = 16

    struct Entry: Equatable {
        var sequence: UInt64
        var byteOffset: UInt64
    }

    var intervalRecords: UInt32
    var baseSequence: UInt64
    var entries: [Entry] = []

    /// True when the record with this sequence gets an index entry.
    static func isIndexed(_ sequence: UInt64, baseSequence: UInt64, intervalRecords: UInt32) -> Bool {
        (sequence - baseSequence) % UInt64(intervalRecords) == 0
    }

    static func encodeHeader(intervalRecords: UInt32, baseSequence: UInt64) -> [UInt8] {
        var bytes = magic
        bytes.appendLittleEndian(version)
        bytes.appendLittleEndian(UInt16(0))
        bytes.appendLittleEndian(intervalRecords)
        bytes.appendLittleEndian(baseSequence)
        return bytes
    }

    static func appendEntry(_ entry: Entry, to bytes: inout [UInt8]) {
        bytes.appendLittleEndian(entry.sequence)
        bytes.appendLittleEndian(entry.byteOffset)
    }

    func encoded() -> [UInt8] {
        var bytes = Self.encodeHeader(intervalRecords: intervalRecords, baseSequence: baseSequence)
        bytes.reserveCapacity(Self.headerBytes + entries.count * Self.entryBytes)
        for entry in entries { Self.appendEntry(entry, to: &bytes) }
        return bytes
    }

    /// The last entry at or before `sequence`.
    func entry(atOrBefore sequence: UInt64) -> Entry? {
        var low = 0
        var high = entries.count
        while low < high {
            let middle = (low + high) / 2
            if entries[middle].sequence <= sequence { low = middle + 1 } else { high = middle }
        }
        return low == 0 ? nil : entries[low - 1]
    }

    /// Loads the usable prefix of an index file: entries stop at the first one that breaks the
    /// expected shape (sequence = base + i*K, increasing offsets inside the segment). Nil when unusable.
    static func load(path: String, baseSequence: UInt64, segmentHeaderBytes: Int, segmentSize: UInt64) -> SparseIndex? {
        guard let descriptor = try? FileIO.open(path, flags: O_RDONLY) else { return nil }
        defer { FileIO.close(descriptor) }
        guard let size = try? FileIO.size(descriptor, path: path), size >= UInt64(headerBytes),
            size <= 1 << 32
        else { return nil }
        var bytes = [UInt8](repeating: 0, count: Int(size))
        let count = bytes.withUnsafeMutableBytes { try? FileIO.read(descriptor, into: $0, at: 0, path: path) }
        guard count == Int(size), bytes[0..<8].elementsEqual(magic),
            bytes.loadLittleEndian(UInt16.self, at: 8) == version,
            bytes.loadLittleEndian(UInt64.self, at: 16) == baseSequence
        else { return nil }
        let interval = bytes.loadLittleEndian(UInt32.self, at: 12)
        guard interval > 0 else { return nil }
        var index = SparseIndex(intervalRecords: interval, baseSequence: baseSequence)
        var offset = headerBytes
        var previousOffset = UInt64(segmentHeaderBytes)
        while offset + entryBytes <= bytes.count {
            let entry = Entry(
                sequence: bytes.loadLittleEndian(UInt64.self, at: offset),
                byteOffset: bytes.loadLittleEndian(UInt64.self, at: offset + 8))
            let expectedSequence = baseSequence &+ UInt64(index.entries.count) &* UInt64(interval)
            let offsetIsPlausible = index.entries.isEmpty
                ? entry.byteOffset == UInt64(segmentHeaderBytes)
                : entry.byteOffset > previousOffset
            guard entry.sequence == expectedSequence, offsetIsPlausible, entry.byteOffset < segmentSize else { break }
            index.entries.append(entry)
            previousOffset = entry.byteOffset
            offset += entryBytes
        }
        return index
    }

    /// Reads the index file's raw bytes (for exact comparison with the expected index), or nil if absent.
    static func fileBytes(path: String) -> [UInt8]? {
        guard let descriptor = try? FileIO.open(path, flags: O_RDONLY) else { return nil }
        defer { FileIO.close(descriptor) }
        guard let size = try? FileIO.size(descriptor, path: path), size <= 1 << 32 else { return nil }
        var bytes = [UInt8](repeating: 0, count: Int(size))
        let count = bytes.withUnsafeMutableBytes { try? FileIO.read(descriptor, into: $0, at: 0, path: path) }
        return count == Int(size) ? bytes : nil
    }

    /// Writes the index atomically (temporary file + rename); no fsync because it can always be rebuilt.
    func write(path: String, directory: String) throws(LogError) {
        try FileIO.replaceFile(path, with: encoded(), directory: directory, durable: false)
    }
}
