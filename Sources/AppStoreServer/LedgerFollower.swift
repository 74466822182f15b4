import AppStoreSigning
import EventLog
import Foundation
import StoreKitModel
import StoreKitRuntime

/// The ledger of a run's log, read once (a finished run) or kept up with (`--follow`): each partition is
/// read on from the record after the last one folded, so following costs only the new records.
public actor LedgerFollower {
    public let logDirectory: URL
    private var ledger = AppStoreLedger()
    private var nextSequence: [String: UInt64] = [:]

    public init(logDirectory: URL) {
        self.logDirectory = logDirectory
    }

    /// The ledger as of the last `refresh`.
    public var current: AppStoreLedger { ledger }

    /// Folds every record written since the last call. A partition that appeared since is read from its start.
    @discardableResult
    public func refresh() throws -> AppStoreLedger {
        guard FileManager.default.fileExists(atPath: logDirectory.path) else { return ledger }
        let names = (try? LogDirectory.partitions(in: logDirectory)) ?? []
        for name in names {
            let reader: PartitionReader
            do {
                reader = try PartitionReader(directory: logDirectory, partition: name)
            } catch {
                continue  // a partition its queue is only creating; read at the next refresh
            }
            var next = nextSequence[name] ?? 1
            // Folded in place (a copy would cost the whole ledger at every refresh); what was folded
            // before an error stays, and the next refresh goes on from the record after it.
            defer { nextSequence[name] = next }
            try reader.forEachRecord(from: next, through: .max) { view in
                let recorded = try LogProjection.decode(sequence: view.sequence, timestamp: view.timestampNanoseconds, payload: view.payload)
                try ledger.apply(recorded, partition: name)
                next = view.sequence + 1
            }
        }
        return ledger
    }
}
