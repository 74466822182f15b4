import EventLog
import Foundation
import StoreKitModel

/// Rebuilds state from a recorded log: the queue projection and the invariant check,
/// folded record by record in bounded memory (the events are never all held).
public struct LogProjection {
    public var projection = QueueProjection()
    public var checker = InvariantChecker()
    public var recordCount: UInt64 = 0
    public var tornTail: String?

    public init() {}

    /// Folds the partition's records up to and including `through`.
    public static func build(directory: URL, partition: String = DeterministicSimulation.partition,
                             through: UInt64 = .max, checkInvariants: Bool = true) throws -> LogProjection {
        var result = LogProjection()
        let reader = try PartitionReader(directory: directory, partition: partition)
        let summary = try reader.forEachRecord(from: 1, through: through) { view in
            let decoded: (commandID: CommandID?, event: Event)
            do throws(DecodingFailure) {
                decoded = try EventCodec.decodeEvent(view.payload)
            } catch {
                throw LogContentError(sequence: view.sequence, failure: error)
            }
            let recorded = RecordedEvent(sequence: view.sequence, timestamp: view.timestampNanoseconds,
                                         commandID: decoded.commandID, event: decoded.event)
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
    public var description: String {
        "record \(sequence) holds no valid event (\(failure)); the log was written by an incompatible sksim or altered. Read it with the version that wrote it."
    }
}
