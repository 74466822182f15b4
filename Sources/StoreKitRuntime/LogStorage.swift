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
    /// Appends a unit that begins with its input record (`input`: the command as accepted and what its
    /// sender had heard, docs/log-format.md), followed by the events in `bytes` (possibly none: a command
    /// that changed nothing leaves its input alone). Returns the sequence of the unit's first event (for an
    /// input alone, the next event's). A storage that keeps no inputs appends the events alone.
    func appendUnit(input: UnsafeRawBufferPointer, bytes: UnsafeRawBufferPointer, ends: [Int], timestamp: Int64) throws -> UInt64
    /// Calls `body` with every event record from `from` on, in order (input records are left out).
    func forEachRecord(from: UInt64, _ body: (_ sequence: UInt64, _ timestamp: Int64, _ payload: UnsafeRawBufferPointer) throws -> Void) throws
    /// Calls `body` with every record from the first on, each unit's input record before its events.
    func forEachRecordIncludingInputs(_ body: (StoredRecord) throws -> Void) throws
    func close() throws
}

/// A record of a storage, its payload valid only during the call that receives it.
public struct StoredRecord {
    /// The event's sequence; for an input, its unit's first event's (for an input alone, the next event's).
    public var sequence: UInt64
    public var timestamp: Int64
    public var payload: UnsafeRawBufferPointer
    /// An input record (`RecordedInput`) rather than an event.
    public var isInput: Bool
    /// The last record of its unit (an input alone ends its unit).
    public var endsUnit: Bool

    public init(sequence: UInt64, timestamp: Int64, payload: UnsafeRawBufferPointer, isInput: Bool, endsUnit: Bool) {
        self.sequence = sequence
        self.timestamp = timestamp
        self.payload = payload
        self.isInput = isInput
        self.endsUnit = endsUnit
    }
}

extension LogStorage {
    /// Keeps no input: appends the events alone.
    public func appendUnit(input: UnsafeRawBufferPointer, bytes: UnsafeRawBufferPointer, ends: [Int], timestamp: Int64) throws -> UInt64 {
        guard !ends.isEmpty else { return lastSequence + 1 }
        return try appendUnit(bytes: bytes, ends: ends, timestamp: timestamp)
    }

    /// Holds no inputs: the events, each taken for the end of its unit.
    public func forEachRecordIncludingInputs(_ body: (StoredRecord) throws -> Void) throws {
        try forEachRecord(from: 1) { sequence, timestamp, payload in
            try body(StoredRecord(sequence: sequence, timestamp: timestamp, payload: payload, isInput: false, endsUnit: true))
        }
    }

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

    public func appendUnit(input: UnsafeRawBufferPointer, bytes: UnsafeRawBufferPointer, ends: [Int], timestamp: Int64) throws -> UInt64 {
        try writer.appendUnit(input: input, bytes: bytes, ends: ends, timestampNanoseconds: timestamp)
    }

    public func forEachRecord(from: UInt64, _ body: (UInt64, Int64, UnsafeRawBufferPointer) throws -> Void) throws {
        guard writer.lastSequence >= from else { return }
        try writer.flush()  // A reader sees only what reached the file.
        let reader = try PartitionReader(directory: writer.directory, partition: writer.partition)
        try reader.forEachRecord(from: from, through: writer.lastSequence) { view in
            try body(view.sequence, view.timestampNanoseconds, view.payload)
        }
    }

    public func forEachRecordIncludingInputs(_ body: (StoredRecord) throws -> Void) throws {
        try writer.flush()
        let reader = try PartitionReader(directory: writer.directory, partition: writer.partition)
        try reader.forEachRecord(includingInputs: true) { view in
            try body(StoredRecord(sequence: view.sequence, timestamp: view.timestampNanoseconds, payload: view.payload,
                                  isInput: view.isInput, endsUnit: view.endsUnit))
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
    /// Whether each record ends its unit.
    @exclusivity(unchecked) private var recordEndsUnit: [Bool] = []
    /// Input records, in the same way, each with the sequence of its unit's first event and whether
    /// it was alone in its unit.
    @exclusivity(unchecked) private var inputBytes: [UInt8] = []
    @exclusivity(unchecked) private var inputEnds: [Int] = []
    @exclusivity(unchecked) private var inputSequences: [UInt64] = []
    @exclusivity(unchecked) private var inputTimestamps: [Int64] = []
    @exclusivity(unchecked) private var inputAlone: [Bool] = []

    public init() {}

    public var lastSequence: UInt64 { UInt64(ends.count) }
    public var byteCount: Int { bytes.count }

    /// Empties the log, keeping its buffers' capacity: exploration writes thousands of short logs
    /// one after another into one storage instead of growing a new one for each.
    public func removeAll() {
        bytes.removeAll(keepingCapacity: true)
        ends.removeAll(keepingCapacity: true)
        timestamps.removeAll(keepingCapacity: true)
        recordEndsUnit.removeAll(keepingCapacity: true)
        inputBytes.removeAll(keepingCapacity: true)
        inputEnds.removeAll(keepingCapacity: true)
        inputSequences.removeAll(keepingCapacity: true)
        inputTimestamps.removeAll(keepingCapacity: true)
        inputAlone.removeAll(keepingCapacity: true)
    }

    public func appendUnit(input: UnsafeRawBufferPointer, bytes: UnsafeRawBufferPointer, ends unitEnds: [Int], timestamp: Int64) throws -> UInt64 {
        inputBytes.append(contentsOf: input)
        inputEnds.append(inputBytes.count)
        inputSequences.append(UInt64(ends.count + 1))
        inputTimestamps.append(timestamp)
        inputAlone.append(unitEnds.isEmpty)
        guard !unitEnds.isEmpty else { return UInt64(ends.count + 1) }
        return try appendUnit(bytes: bytes, ends: unitEnds, timestamp: timestamp)
    }

    public func forEachRecordIncludingInputs(_ body: (StoredRecord) throws -> Void) throws {
        var next = 0
        try inputBytes.withUnsafeBytes { inputs in
            func deliverInputs(through sequence: UInt64) throws {
                while next < inputEnds.count && inputSequences[next] <= sequence {
                    let start = next == 0 ? 0 : inputEnds[next - 1]
                    try body(StoredRecord(sequence: inputSequences[next], timestamp: inputTimestamps[next],
                                          payload: UnsafeRawBufferPointer(rebasing: inputs[start..<inputEnds[next]]),
                                          isInput: true, endsUnit: inputAlone[next]))
                    next += 1
                }
            }
            try bytes.withUnsafeBytes { buffer in
                for index in 0..<ends.count {
                    let sequence = UInt64(index + 1)
                    try deliverInputs(through: sequence)
                    let start = index == 0 ? 0 : ends[index - 1]
                    let endsUnit = recordEndsUnit[index]
                    try body(StoredRecord(sequence: sequence, timestamp: timestamps[index],
                                          payload: UnsafeRawBufferPointer(rebasing: buffer[start..<ends[index]]),
                                          isInput: false, endsUnit: endsUnit))
                }
            }
            try deliverInputs(through: .max)
        }
    }

    public func appendUnit(_ payloads: [[UInt8]], timestamp: Int64) throws -> UInt64 {
        let first = UInt64(ends.count + 1)
        for payload in payloads {
            bytes.append(contentsOf: payload)
            ends.append(bytes.count)
            timestamps.append(timestamp)
            recordEndsUnit.append(false)
        }
        if !payloads.isEmpty { recordEndsUnit[recordEndsUnit.count - 1] = true }
        return first
    }

    public func appendUnit(bytes: UnsafeRawBufferPointer, ends unitEnds: [Int], timestamp: Int64) throws -> UInt64 {
        let first = UInt64(ends.count + 1)
        let base = self.bytes.count
        self.bytes.append(contentsOf: bytes)
        for end in unitEnds {
            ends.append(base + end)
            timestamps.append(timestamp)
            recordEndsUnit.append(false)
        }
        if !unitEnds.isEmpty { recordEndsUnit[recordEndsUnit.count - 1] = true }
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
