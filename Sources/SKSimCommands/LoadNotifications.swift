import AppStoreServer
import EventLog
import Foundation
import StoreKitLoad
import StoreKitModel
import StoreKitRuntime

/// Stage `notified` of `sksim load --notification-url`: every notification the log produced, timed
/// from its event's log time to the webhook's 2xx as the App Store server role's journal records it
/// (`NotificationJournal`), with the counts delivered, retried and undelivered.
enum LoadNotifications {
    static func measure(runDirectory: URL, certificates: URL, into figures: inout LoadFigures) throws {
        let logDirectory = runDirectory.appendingPathComponent("log", isDirectory: true)
        let ledger = try AppStoreLedger.build(logDirectory: logDirectory)
        let starts = try partitionStarts(logDirectory)
        var outcomes: [String: NotificationJournal.Entry] = [:]
        for entry in NotificationJournal.read(certificates.appendingPathComponent("notifications.journal")) {
            outcomes[entry.notificationUUID] = entry
        }
        var counts = NotificationCounts()
        for notification in ledger.notifications {
            guard let outcome = outcomes[notification.notificationUUID] else {
                counts.undelivered += 1
                continue
            }
            if (outcome.attempts ?? 1) > 1 { counts.retried += 1 }
            guard outcome.delivered else {
                counts.undelivered += 1
                continue
            }
            counts.delivered += 1
            // A log time counts from its own partition's recorded start (LiveClock.wallNanoseconds() - startedAt).
            if let deliveredAt = outcome.unixNanoseconds, let start = starts[notification.partition] {
                figures.stages.record(.notified, nanoseconds: deliveredAt - (start + notification.time))
            }
        }
        figures.notifications = counts
    }

    /// Each partition's wall-clock start, from its first record (runStarted).
    static func partitionStarts(_ logDirectory: URL) throws -> [String: Int64] {
        var starts: [String: Int64] = [:]
        for name in try LogDirectory.partitions(in: logDirectory) {
            try PartitionReader(directory: logDirectory, partition: name).forEachRecord(from: 1, through: 1) { view in
                let recorded = try LogProjection.decode(sequence: view.sequence, timestamp: view.timestampNanoseconds, payload: view.payload)
                if case .runStarted(let header) = recorded.event { starts[name] = header.startedAtUnixNanoseconds }
            }
        }
        return starts
    }
}
