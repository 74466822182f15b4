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
        var result = LogProjection()
        let reader = try PartitionReader(directory: directory, partition: partition)
        let summary = try reader.forEachRecord(from: 1, through: through) { view in
            let recorded = try decode(sequence: view.sequence, timestamp: view.timestampNanoseconds, payload: view.payload)
            result.projection.apply(recorded)
            if checkInvariants { result.checker.check(recorded) }
            result.recordCount += 1
        }
        result.tornTail = summary.tornTail.map { "\($0)" }
        return result
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
