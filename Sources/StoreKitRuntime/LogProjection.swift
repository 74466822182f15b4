import EventLog
import Foundation
import StoreKitModel

/// Rebuilds state from a recorded log: the queue projection and the invariant check,
/// folded record by record in bounded memory (the events are never all held).
public struct LogProjection {
    /// The partition `simulate` and `run` write.
    public static let partition = "queue"

    public var projection = QueueProjection()
    public var checker = InvariantChecker()
    public var recordCount: UInt64 = 0
    public var tornTail: String?

    public init() {}

    /// Decodes one record's payload, naming the record when it is not an event this build reads.
    public static func decode(sequence: UInt64, timestamp: Int64, payload: UnsafeRawBufferPointer) throws(LogContentError) -> RecordedEvent {
        do throws(DecodingFailure) {
            let decoded = try EventCodec.decodeEvent(payload)
            return RecordedEvent(sequence: sequence, timestamp: timestamp, commandID: decoded.commandID, event: decoded.event)
        } catch {
            throw LogContentError(sequence: sequence, failure: error, version: payload.first)
        }
    }

    /// Folds the partition's records up to and including `through`.
    public static func build(directory: URL, partition: String = LogProjection.partition,
                             through: UInt64 = .max, checkInvariants: Bool = true) throws -> LogProjection {
        let reader = try PartitionReader(directory: directory, partition: partition)
        // Local state, not fields of a captured `LogProjection`: a struct the closure captures
        // is boxed and every access to it checked for exclusivity at run time (once per field per event).
        var checker = InvariantChecker()
        var recordCount: UInt64 = 0
        let summary: ReadSummary
        let projection: QueueProjection
        if checkInvariants {
            // The checker reads whole events, so each is decoded once and handed to both.
            var folded = QueueProjection()
            summary = try reader.forEachRecord(from: 1, through: through) { view in
                let recorded = try decode(sequence: view.sequence, timestamp: view.timestampNanoseconds, payload: view.payload)
                folded.apply(recorded)
                checker.check(recorded)
                recordCount += 1
            }
            projection = folded
        } else {
            // The projection alone: folded from the encoded payloads, with the same result (EncodedEventFold).
            var fold = EncodedEventFold()
            summary = try reader.forEachRecord(from: 1, through: through) { view in
                do throws(DecodingFailure) {
                    try fold.apply(sequence: view.sequence, timestamp: view.timestampNanoseconds, payload: view.payload)
                } catch {
                    throw LogContentError(sequence: view.sequence, failure: error, version: view.payload.first)
                }
                recordCount += 1
            }
            projection = fold.projection
        }
        var result = LogProjection()
        result.projection = projection
        result.checker = checker
        result.recordCount = recordCount
        result.tornTail = summary.tornTail.map { "\($0)" }
        return result
    }
}

// MARK: Several partitions

/// One log folder's partitions (one per queue process, docs/load-testing.md "Partitions"): which
/// there are, each folded on its own, the run's figures summed, and every event read merged by
/// time. The one place tools (`log`, `run`, `load`, `replay`) learn about several partitions.
public struct PartitionedLogProjection {
    /// Each partition's fold, in name order.
    public var partitions: [(name: String, projection: LogProjection)]

    public init(partitions: [(name: String, projection: LogProjection)]) {
        self.partitions = partitions
    }

    /// The partitions of a log folder, sorted; a folder without any is an error naming what to give.
    public static func partitionNames(in directory: URL) throws -> [String] {
        let names = try LogDirectory.partitions(in: directory)
        guard !names.isEmpty else {
            throw LogSelectionError("\(directory.path) holds no log partition (no subfolder with .segment files); give a run's log folder, e.g. out/local/log", code: .noPartition)
        }
        return names
    }

    /// `only` picks one partition by name (`--partition`); nil reads them all.
    public static func selectPartitions(in directory: URL, only: String?) throws -> [String] {
        let names = try partitionNames(in: directory)
        guard let only else { return names }
        guard names.contains(only) else {
            throw LogSelectionError("\(directory.path) has no partition '\(only)'; it has \(names.joined(separator: ", "))", code: .unknownPartition)
        }
        return [only]
    }

    /// Folds every partition (or the one named) of `directory`, each in bounded memory.
    public static func build(directory: URL, only: String? = nil, checkInvariants: Bool = true) throws -> PartitionedLogProjection {
        var result = PartitionedLogProjection(partitions: [])
        for name in try selectPartitions(in: directory, only: only) {
            result.partitions.append((name, try LogProjection.build(directory: directory, partition: name, checkInvariants: checkInvariants)))
        }
        return result
    }

    /// Folds the partitions a run wrote, for its report. A partition a queue never created (it
    /// failed before writing) is missing from the figures, so the caller names the expected ones.
    public static func build(directory: URL, partitions names: [String]) throws -> PartitionedLogProjection {
        PartitionedLogProjection(partitions: try names.map { ($0, try LogProjection.build(directory: directory, partition: $0)) })
    }

    public var totals: EventTotals {
        partitions.reduce(into: EventTotals()) { sum, entry in sum.add(entry.projection.projection.totals) }
    }
    public var pendingCount: Int { partitions.reduce(0) { $0 + $1.projection.projection.pendingCount } }
    public var violationCount: Int { partitions.reduce(0) { $0 + $1.projection.checker.violationCount } }
    public var recordCount: UInt64 { partitions.reduce(0) { $0 + $1.projection.recordCount } }
    /// Every partition's kept violations; with several partitions each names its partition.
    public var violations: [Violation] {
        partitions.flatMap { entry in
            entry.projection.checker.violations.map { violation in
                guard partitions.count > 1 else { return violation }
                var named = violation
                named.message = "[\(entry.name)] " + violation.message
                return named
            }
        }
    }

    /// Calls `body` with every event of the named partitions, merged by timestamp (ties: the
    /// partition listed first). Each partition's events keep their own order. Memory is bounded:
    /// at most `chunk` decoded events per partition are held.
    public static func forEachEventMergedByTime(
        directory: URL, partitions names: [String], chunk: UInt64 = 1_024,
        _ body: (_ partition: String, _ recorded: RecordedEvent) throws -> Void
    ) throws {
        struct Cursor {
            var reader: PartitionReader
            var buffered: [RecordedEvent] = []
            var head = 0
            var next: UInt64 = 1
            var exhausted = false
        }
        var cursors = try names.map { Cursor(reader: try PartitionReader(directory: directory, partition: $0)) }
        func refill(_ index: Int) throws {
            var cursor = cursors[index]
            cursor.buffered.removeAll(keepingCapacity: true)
            cursor.head = 0
            try cursor.reader.forEachRecord(from: cursor.next, through: cursor.next + chunk - 1) { view in
                cursor.buffered.append(try LogProjection.decode(sequence: view.sequence, timestamp: view.timestampNanoseconds, payload: view.payload))
            }
            cursor.next += UInt64(cursor.buffered.count)
            cursor.exhausted = cursor.buffered.count < Int(chunk)
            cursors[index] = cursor
        }
        for index in cursors.indices { try refill(index) }
        while true {
            var earliest: Int?
            for index in cursors.indices where cursors[index].head < cursors[index].buffered.count {
                if earliest == nil || cursors[index].buffered[cursors[index].head].timestamp < cursors[earliest!].buffered[cursors[earliest!].head].timestamp {
                    earliest = index
                }
            }
            guard let index = earliest else { return }
            try body(names[index], cursors[index].buffered[cursors[index].head])
            cursors[index].head += 1
            if cursors[index].head == cursors[index].buffered.count && !cursors[index].exhausted { try refill(index) }
        }
    }
}

/// A log folder or partition that is not there; the message says what to give instead.
public struct LogSelectionError: Error, CustomStringConvertible {
    /// What kind of problem, for code (and tests) that tell problems apart.
    public enum Code: String, Sendable, Hashable, CaseIterable {
        /// The folder holds no partition with segment files.
        case noPartition
        /// The partition asked for is not among the folder's.
        case unknownPartition
        /// One partition is needed and the folder has several.
        case severalPartitions
    }

    public var code: Code
    public var description: String
    public init(_ description: String, code: Code) {
        self.description = description
        self.code = code
    }
}

/// A record whose checksum is right but whose payload is not an event this build reads.
public struct LogContentError: Error, CustomStringConvertible {
    public var sequence: UInt64
    public var failure: DecodingFailure
    /// The payload's first byte (its encoding version), when it has one.
    public var version: UInt8?

    public var description: String {
        if let version, version >= 1, version < EventCodec.formatVersion {
            return "record \(sequence) is in event format \(version), written by another sksim; this build reads format \(EventCodec.formatVersion). Read the log with the sksim that wrote it, or record the run again with this one."
        }
        return "record \(sequence) holds no valid event (\(failure)); the log was altered or written by an incompatible sksim. Run `sksim log verify` on it."
    }
}
