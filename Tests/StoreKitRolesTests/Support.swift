import Foundation
import StoreKitModel
import StoreKitRoles

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

    func paymentQueue(_ queue: PaymentQueue, updatedDownloads downloads: [Download]) {
        calls.append("downloads:\(downloads.map { "\($0.key.index)=\($0.downloadState)" }.joined(separator: ","))")
        self.downloads += downloads
    }
}

/// Drives a `PaymentQueue` against an in-memory queue role: commands it emits are
/// decided at once and the resulting events delivered back, as a runtime would.
final class LoopbackDevice {
    let queueRole = QueueRole(catalog: .sample)
    let paymentQueue: PaymentQueue
    var clock: Int64 = 0
    var commandNumber: UInt64 = 0
    var events: [RecordedEvent] = []

    init(device: String = "d1", seed: UInt64 = 1, ordering: ObserverOrdering = .seededShuffle) {
        paymentQueue = PaymentQueue(device: device, catalog: .sample, ordering: ordering, seed: seed)
    }

    /// Sends a command as another role would (the store, the downloader).
    func send(_ body: CommandBody) { process([body]) }

    /// Delivers everything the app's queue asked for, until nothing more comes.
    func pump() { process(paymentQueue.drainOutbox()) }

    private func process(_ bodies: [CommandBody]) {
        var pendingBodies = bodies
        var rounds = 0
        while !pendingBodies.isEmpty {
            rounds += 1
            precondition(rounds < 1_000, "commands keep producing commands")
            for body in pendingBodies {
                commandNumber += 1
                let (produced, _) = queueRole.handle(Command(id: CommandID(origin: "test", number: commandNumber), body: body))
                for event in produced {
                    clock += 1_000
                    let recorded = RecordedEvent(sequence: queueRole.projection.lastSequence + 1, timestamp: clock, commandID: nil, event: event)
                    queueRole.apply(recorded)
                    events.append(recorded)
                    paymentQueue.deliver(recorded)
                }
            }
            pendingBodies = paymentQueue.drainOutbox()
        }
    }

    /// Launches the app with one recording observer attached.
    func launchWithObserver(_ name: String = "o1", finishOnCompletion: Bool = false) -> RecordingObserver {
        launch()
        let observer = RecordingObserver(name, finishOnCompletion: finishOnCompletion)
        paymentQueue.add(observer)
        pump()
        return observer
    }

    /// Adds a payment through the app's queue and delivers what follows.
    func buy(_ product: String) throws {
        try paymentQueue.add(Payment(productIdentifier: product))
        pump()
    }

    func launch(account: String = "a1") {
        paymentQueue.enqueue(.registerDevice(device: paymentQueue.device, account: account))
        paymentQueue.enqueue(.launchApp(device: paymentQueue.device))
        pump()
    }
}
