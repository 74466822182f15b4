/// A record borrowed from the reader's buffer: valid only inside the closure that receives it
/// (copy with `record` to keep it). Not `Sendable` because it points into that buffer.
public struct LogRecordView {
    public let sequence: UInt64
    /// Caller-supplied time in nanoseconds (never read from a clock by the log).
    public let timestampNanoseconds: Int64
    /// Payload bytes, pointing into the reader's chunk buffer.
    public let payload: UnsafeRawBufferPointer
    /// True for the last record of its atomic unit (always true for a record appended alone).
    public let endsUnit: Bool
    /// True for an input record: its unit's first record, holding what the unit's events answer (the
    /// command as accepted); it takes no sequence of its own, and `sequence` is the one its unit's first
    /// event has (or, for a unit of the input alone, the next event's). Log format 3 only.
    public let isInput: Bool

    init(sequence: UInt64, timestampNanoseconds: Int64, payload: UnsafeRawBufferPointer, endsUnit: Bool, isInput: Bool = false) {
        self.sequence = sequence
        self.timestampNanoseconds = timestampNanoseconds
        self.payload = payload
        self.endsUnit = endsUnit
        self.isInput = isInput
    }

    /// An owned copy.
    public var record: LogRecord {
        LogRecord(sequence: sequence, timestampNanoseconds: timestampNanoseconds, payload: Array(payload))
    }
}

/// An owned record, for small reads and tests.
public struct LogRecord: Sendable, Hashable {
    public var sequence: UInt64
    public var timestampNanoseconds: Int64
    public var payload: [UInt8]

    public init(sequence: UInt64, timestampNanoseconds: Int64, payload: [UInt8]) {
        self.sequence = sequence
        self.timestampNanoseconds = timestampNanoseconds
        self.payload = payload
    }
}
