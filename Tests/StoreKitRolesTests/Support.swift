import Foundation
import StoreKitModel
import StoreKitRoles
import StoreKitRuntime
import StoreKitSimulation
import StoreKitTestKit

/// Runs `scenario` in the deterministic runtime with an in-memory log: its report, and every event
/// of the log decoded, as a test reads a whole run.
func runInMemory(_ scenario: Scenario) throws -> (RunReport, [RecordedEvent]) {
    let environment = DeterministicEnvironment.inMemory(seed: scenario.seed)
    let report = try DeterministicRuntime(scenario: scenario, environment: environment).run()
    var events: [RecordedEvent] = []
    try environment.storage.forEachRecord(from: 1) { sequence, timestamp, payload in
        let decoded = try EventCodec.decodeEvent(payload)
        events.append(RecordedEvent(sequence: sequence, timestamp: timestamp, commandID: decoded.commandID, event: decoded.event))
    }
    return (report, events)
}

/// A scratch directory removed when the test ends.
final class TemporaryDirectory {
    let url: URL
    init() {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("sksim-test-\(UUID().uuidString)", isDirectory: true)
        try? FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }
    deinit { try? FileManager.default.removeItem(at: url) }
    func path(_ name: String) -> URL { url.appendingPathComponent(name, isDirectory: true) }
}

/// An observer that records every callback, for tests of what the queue calls when.
final class RecordingObserver: PaymentTransactionObserver {
    let observerName: String
    var calls: [String] = []
    var updated: [PaymentTransaction] = []
    var removed: [PaymentTransaction] = []
    var downloads: [Download] = []
    /// Every receipt the observer heard (R-R2), whole, with each entry's introductory offer (F-O3).
    var receipts: [[OriginalTransaction]] = []
    var finishOnCompletion: Bool

    init(_ name: String, finishOnCompletion: Bool = false) {
        observerName = name
        self.finishOnCompletion = finishOnCompletion
    }

    func paymentQueue(_ queue: PaymentQueue, updatedTransactions transactions: [PaymentTransaction]) {
        calls.append("updated:\(transactions.map { "\($0.key.number)=\($0.transactionState)" }.joined(separator: ","))")
        updated += transactions
        guard finishOnCompletion else { return }
        for transaction in transactions where transaction.transactionState.isComplete { try? queue.finishTransaction(transaction) }
    }

    func paymentQueue(_ queue: PaymentQueue, removedTransactions transactions: [PaymentTransaction]) {
        calls.append("removed:\(transactions.map { "\($0.key.number)" }.joined(separator: ","))")
        removed += transactions
    }

    func paymentQueueRestoreCompletedTransactionsFinished(_ queue: PaymentQueue) { calls.append("restoreFinished") }

    func paymentQueue(_ queue: PaymentQueue, restoreCompletedTransactionsFailedWithError error: StoreError) {
        calls.append("restoreFailed:\(error.code)")
    }

    func paymentQueue(_ queue: PaymentQueue, receiptRefreshFinished receipt: [OriginalTransaction]) {
        calls.append("receipt:\(receipt.map(\.transactionIdentifier).joined(separator: ","))")
        receipts.append(receipt)
    }

    func paymentQueue(_ queue: PaymentQueue, updatedDownloads downloads: [Download]) {
        calls.append("downloads:\(downloads.map { "\($0.key.index)=\($0.downloadState)" }.joined(separator: ","))")
        self.downloads += downloads
    }
}

extension LoopbackDevice {
    /// Launches the app with one recording observer attached.
    func launchWithObserver(_ name: String = "o1", finishOnCompletion: Bool = false) -> RecordingObserver {
        let observer = RecordingObserver(name, finishOnCompletion: finishOnCompletion)
        launch(with: observer)
        return observer
    }
}
