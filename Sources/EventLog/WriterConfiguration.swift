/// When appended records are forced to stable storage (fsync).
public enum DurabilityPolicy: Sendable, Equatable, CustomStringConvertible {
    /// fsync before `append` returns: `durableSequence == lastSequence` after every append. Slowest, safest.
    case always
    /// A background flusher writes and fdatasyncs without waiting on purpose (as PostgreSQL and Kafka do): when
    /// it is idle, a new record is synced at once; records appended while a sync runs form the next batch,
    /// synced as soon as that sync ends. So a batch is exactly what one sync's duration collects, and a record
    /// waits at most about two syncs. While `4 × maximumRecords` records are not yet durable (the disk is
    /// behind), `append` waits for the flusher's sync, bounding what a crash can lose. `maximumDelayMilliseconds`
    /// is kept for compatibility and validated, but the flusher no longer waits for it.
    case groupCommit(maximumRecords: Int, maximumDelayMilliseconds: Int)
    /// Records are handed to the kernel with write(2) within about a millisecond (or when the write buffer
    /// fills) and fsynced only by `flush()`, a segment roll and `close()`. Survives a process crash once
    /// written, not a machine crash.
    case operatingSystem

    public static let defaultGroupCommit = DurabilityPolicy.groupCommit(maximumRecords: 256, maximumDelayMilliseconds: 1)

    public var description: String {
        switch self {
        case .always: "always"
        case .groupCommit(let records, let milliseconds): "groupCommit(\(records) records, \(milliseconds) ms)"
        case .operatingSystem: "operatingSystem"
        }
    }
}

/// Settings of a `PartitionWriter`. Same configuration and same appends give byte-identical files.
public struct PartitionWriterConfiguration: Sendable {
    public var durability: DurabilityPolicy
    /// A new segment starts when the next record would push the current one past this size (a segment
    /// always holds at least one record).
    public var maximumSegmentBytes: UInt64
    /// Appends with larger payloads throw `.payloadTooLarge`; recorded in each segment header.
    public var maximumPayloadBytes: Int
    /// Every K-th record of a segment gets a sparse index entry; reads from a sequence scan at most K records.
    public var indexIntervalRecords: Int
    /// Encoded records are written out with one write(2) when this many bytes are buffered (or earlier).
    public var writeBufferBytes: Int
    /// Called with the new `durableSequence` each time it advances (always the end of a unit), outside the
    /// writer's lock, right after the sync that advanced it: on the flusher thread under group commit, on the
    /// appending thread under `.always`, `flush()` and rolls. Calls are serialized and increasing. It delays the
    /// next sync while it runs, so keep it cheap (e.g. signal a waiting consumer instead of polling) and do not
    /// call `close()` from it.
    public var onDurable: (@Sendable (UInt64) -> Void)?
    /// Group commit only: appends do not wake the flusher; the owner either makes them durable itself
    /// (`flush()`, where a lone append is synced on the thread that made it, with no hand-off) or hands
    /// them to the flusher (`requestSync()`). The flusher still syncs whatever it finds pending when it
    /// wakes on its own (at least every 100 ms), so nothing waits for ever. Off by default.
    public var ownerRequestsSyncs = false
    /// Reserve each segment's disk space a megabyte ahead of its records (fallocate, keeping the file's size),
    /// so a sync does not also allocate blocks. Sizes and bytes are the same either way; on by default.
    public var reservesSpace = true

    public init(
        durability: DurabilityPolicy = .defaultGroupCommit,
        maximumSegmentBytes: UInt64 = 64 << 20,
        maximumPayloadBytes: Int = 1 << 20,
        indexIntervalRecords: Int = 1024,
        writeBufferBytes: Int = 1 << 20,
        onDurable: (@Sendable (UInt64) -> Void)? = nil
    ) {
        self.durability = durability
        self.maximumSegmentBytes = maximumSegmentBytes
        self.maximumPayloadBytes = maximumPayloadBytes
        self.indexIntervalRecords = indexIntervalRecords
        self.writeBufferBytes = writeBufferBytes
        self.onDurable = onDurable
    }

    func validate() throws(LogError) {
        func invalid(_ message: String) -> LogError { LogError(.invalidConfiguration, message) }
        if case .groupCommit(let records, let milliseconds) = durability {
            guard records >= 1 else { throw invalid("groupCommit maximumRecords must be at least 1 (got \(records))") }
            guard milliseconds >= 0 else { throw invalid("groupCommit maximumDelayMilliseconds must be >= 0 (got \(milliseconds))") }
        }
        guard maximumPayloadBytes >= 0, UInt64(maximumPayloadBytes) <= UInt64(SegmentFormat.absoluteMaximumPayloadBytes) else {
            throw invalid("maximumPayloadBytes must be in 0...\(SegmentFormat.absoluteMaximumPayloadBytes)")
        }
        guard indexIntervalRecords >= 1, indexIntervalRecords <= Int(UInt32.max) else {
            throw invalid("indexIntervalRecords must be at least 1")
        }
        guard maximumSegmentBytes >= 1 else { throw invalid("maximumSegmentBytes must be at least 1") }
        guard writeBufferBytes >= 1 else { throw invalid("writeBufferBytes must be at least 1") }
    }
}

/// What opening a partition for writing removed from its tail after a crash.
public struct TailRecovery: Sendable, Equatable, CustomStringConvertible {
    /// The segment file that was truncated or removed.
    public var path: String
    /// Whole records end here; everything from this offset on was dropped.
    public var byteOffset: UInt64
    public var droppedBytes: UInt64
    /// True when bytes of a record (not just of a segment header) were dropped.
    public var partialRecord: Bool
    /// True when the segment file was removed because it ended inside its header (it held no records).
    public var removedSegment: Bool
    public var reason: String

    public var description: String {
        removedSegment
            ? "removed \(path): \(reason) (\(droppedBytes) bytes, no records)"
            : "truncated \(path) at byte offset \(byteOffset), dropping \(droppedBytes) bytes: \(reason)"
    }
}
