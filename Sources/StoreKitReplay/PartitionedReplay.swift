import StoreKitModel
import StoreKitRuntime

/// Replays a recording of several queue partitions (a topology with several queues,
/// docs/load-testing.md "Partitions"). Each partition is the log of its own queue engine, and
/// every account's devices are routed to one of them (`PartitionRouting`), so no command of one
/// partition depends on another's: each is replayed by its own `ReplaySession`, compared with
/// its own log, and the results are reported as one.
public final class PartitionedReplay {
    public let recordings: [Recording]
    public let options: ReplayOptions
    private let makeStorage: (_ partition: String) throws -> LogStorage

    /// `storage` gives each partition's replayed log (by default it is only counted).
    public init(recordings: [Recording], options: ReplayOptions = ReplayOptions(),
                storage: @escaping (_ partition: String) throws -> LogStorage = { _ in DiscardingLogStorage() }) throws {
        precondition(!recordings.isEmpty, "a recording has at least one partition")
        try options.validate()
        if recordings.count > 1 {
            // Sequence numbers are per partition, and timing one partition against another needs
            // them replayed at once: both are for one partition at a time.
            if options.from != 1 || options.to != .max {
                throw ReplayInputError("--from and --to name the sequence numbers of one partition, and this recording has \(recordings.count) (\(recordings.map(\.partition).joined(separator: ", "))); add --partition NAME", code: .invalidOption)
            }
            if options.speed != nil {
                throw ReplayInputError("--speed K replays one partition at a time, and this recording has \(recordings.count) (\(recordings.map(\.partition).joined(separator: ", "))); use --speed max, or add --partition NAME", code: .invalidOption)
            }
        }
        self.recordings = recordings
        self.options = options
        self.makeStorage = storage
    }

    /// Replays every partition in name order and merges what they found.
    public func run(clock: ReplayClock? = nil) throws -> (merged: ReplayResult, partitions: [(name: String, result: ReplayResult)]) {
        var partitions: [(name: String, result: ReplayResult)] = []
        for recording in recordings {
            let session = try ReplaySession(recording: recording, options: options, storage: try makeStorage(recording.partition), clock: clock)
            partitions.append((recording.partition, try session.run()))
        }
        return (Self.merge(partitions), partitions)
    }

    /// One result for several partitions: counts summed, identical when every partition is, the
    /// first divergence the earliest in recorded time (ties: the partition named first), each
    /// violation naming its partition.
    public static func merge(_ partitions: [(name: String, result: ReplayResult)]) -> ReplayResult {
        guard partitions.count > 1 else { return partitions[0].result }
        var merged = ReplayResult()
        merged.header = partitions[0].result.header
        merged.observers = partitions[0].result.observers
        merged.app = partitions[0].result.app
        merged.identical = true
        for (name, result) in partitions {
            merged.events += result.events
            merged.comparedEvents += result.comparedEvents
            merged.commands += result.commands
            merged.identical = merged.identical && result.identical
            merged.different += result.different
            merged.missing += result.missing
            merged.extra += result.extra
            merged.seconds += result.seconds
            merged.violationCount += result.violationCount
            merged.violations += result.violations.map { violation in
                var named = violation
                named.message = "[\(name)] " + violation.message
                return named
            }
            merged.stoppedRunawayObserver = merged.stoppedRunawayObserver || result.stoppedRunawayObserver
            if let warning = result.warning { merged.warning = (merged.warning.map { $0 + "; " } ?? "") + "\(name): \(warning)" }
            if var divergence = result.firstDivergence {
                divergence.partition = name
                if merged.firstDivergence.map({ time(of: divergence) < time(of: $0) }) ?? true { merged.firstDivergence = divergence }
            }
        }
        return merged
    }

    private static func time(of divergence: Divergence) -> Int64 {
        divergence.recorded?.timestamp ?? divergence.replayed?.timestamp ?? .max
    }
}
