import EventLog
import Foundation

/// Where the queue engine keeps its partition: on disk (live runs, `simulate`) or in memory
/// (exploration, benchmarks). Each command's events are one atomic unit.
public protocol LogStorage: AnyObject {
    /// Sequence of the last appended record (0 when empty).
    var lastSequence: UInt64 { get }
    /// Appends one command's events as one unit: after a crash, all of them or none.
    /// Returns the sequence of the first.
    func appendUnit(_ payloads: [[UInt8]], timestamp: Int64) throws -> UInt64
    /// The same, with the payloads one after another in `bytes`, each ending at its offset in
    /// `ends` (the engine encodes a command's events into one reused buffer).
    func appendUnit(bytes: UnsafeRawBufferPointer, ends: [Int], timestamp: Int64) throws -> UInt64
    /// Calls `body` with every record from `from` on, in order.
    func forEachRecord(from: UInt64, _ body: (_ sequence: UInt64, _ timestamp: Int64, _ payload: UnsafeRawBufferPointer) throws -> Void) throws
    func close() throws
}

extension LogStorage {
    public func appendUnit(bytes: UnsafeRawBufferPointer, ends: [Int], timestamp: Int64) throws -> UInt64 {
        var start = 0
        let payloads = ends.map { end in
            defer { start = end }
            return [UInt8](bytes[start..<end])
        }
        return try appendUnit(payloads, timestamp: timestamp)
    }
}

/// A partition on disk, through the durable `PartitionWriter`.
public final class DiskLogStorage: LogStorage {
    public let writer: PartitionWriter

    public init(writer: PartitionWriter) {
        self.writer = writer
    }

    public convenience init(directory: URL, partition: String, durability: DurabilityPolicy) throws {
        self.init(writer: try PartitionWriter(directory: directory, partition: partition,
                                              configuration: PartitionWriterConfiguration(durability: durability)))
    }

    public var lastSequence: UInt64 { writer.lastSequence }

    public func appendUnit(_ payloads: [[UInt8]], timestamp: Int64) throws -> UInt64 {
        try writer.appendUnit(payloads, timestampNanoseconds: timestamp)
    }

    /// Straight from the engine's buffer into the writer's: no array per event on the way.
    public func appendUnit(bytes: UnsafeRawBufferPointer, ends: [Int], timestamp: Int64) throws -> UInt64 {
        try writer.appendUnit(bytes: bytes, ends: ends, timestampNanoseconds: timestamp)
    }

    public func forEachRecord(from: UInt64, _ body: (UInt64, Int64, UnsafeRawBufferPointer) throws -> Void) throws {
        guard writer.lastSequence >= from else { return }
        try writer.flush()  // A reader sees only what reached the file.
        let reader = try PartitionReader(directory: writer.directory, partition: writer.partition)
        try reader.forEachRecord(from: from, through: writer.lastSequence) { view in
            try body(view.sequence, view.timestampNanoseconds, view.payload)
        }
    }

    public func close() throws { try writer.close() }
}

/// A partition in memory: payloads in one growing buffer, so a run of a million events
/// costs its bytes and two integers per record, not an allocation per event.
public final class MemoryLogStorage: LogStorage {
    // Unchecked exclusivity: only these methods touch the buffers, one access at a time.
    @exclusivity(unchecked) private var bytes: [UInt8] = []
    @exclusivity(unchecked) private var ends: [Int] = []
    @exclusivity(unchecked) private var timestamps: [Int64] = []

    public init() {}

    public var lastSequence: UInt64 { UInt64(ends.count) }
    public var byteCount: Int { bytes.count }

    /// Empties the log, keeping its buffers' capacity: exploration writes thousands of short logs
    /// one after another into one storage instead of growing a new one for each.
    public func removeAll() {
        bytes.removeAll(keepingCapacity: true)
        ends.removeAll(keepingCapacity: true)
        timestamps.removeAll(keepingCapacity: true)
    }

    public func appendUnit(_ payloads: [[UInt8]], timestamp: Int64) throws -> UInt64 {
        let first = UInt64(ends.count + 1)
        for payload in payloads {
            bytes.append(contentsOf: payload)
            ends.append(bytes.count)
            timestamps.append(timestamp)
        }
        return first
    }

    public func appendUnit(bytes: UnsafeRawBufferPointer, ends unitEnds: [Int], timestamp: Int64) throws -> UInt64 {
        let first = UInt64(ends.count + 1)
        let base = self.bytes.count
        self.bytes.append(contentsOf: bytes)
        for end in unitEnds {
            ends.append(base + end)
            timestamps.append(timestamp)
        }
        return first
    }

    public func forEachRecord(from: UInt64, _ body: (UInt64, Int64, UnsafeRawBufferPointer) throws -> Void) throws {
        guard from >= 1, from <= UInt64(ends.count) else { return }
        try bytes.withUnsafeBytes { buffer in
            for index in Int(from - 1)..<ends.count {
                let start = index == 0 ? 0 : ends[index - 1]
                try body(UInt64(index + 1), timestamps[index], UnsafeRawBufferPointer(rebasing: buffer[start..<ends[index]]))
            }
        }
    }

    public func close() throws {}
}
