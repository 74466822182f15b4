import StoreKitModel
import StoreKitRoles

/// An observer that records every callback the queue makes, in order, for tests of what an app
/// hears when: attach it to a `LoopbackDevice` (`launchWithObserver`) or to a `PaymentQueue`.
public final class RecordingObserver: PaymentTransactionObserver {
    public let observerName: String
    /// Every callback as one line: `updated:1=purchased,2=failed`, `removed:1`, `restoreFinished`,
    /// `restoreFailed:CODE`, `receipt:ID,ID`, `downloads:0=active`.
    public var calls: [String] = []
    public var updated: [PaymentTransaction] = []
    public var removed: [PaymentTransaction] = []
    public var downloads: [Download] = []
    /// Every receipt the observer heard (R-R2), whole, with each entry's introductory offer (F-O3).
    public var receipts: [[OriginalTransaction]] = []
    /// Whether the observer finishes each transaction as soon as it completes, as most apps do.
    public var finishOnCompletion: Bool

    public init(_ name: String, finishOnCompletion: Bool = false) {
        observerName = name
        self.finishOnCompletion = finishOnCompletion
    }

    public func paymentQueue(_ queue: PaymentQueue, updatedTransactions transactions: [PaymentTransaction]) {
        calls.append("updated:\(transactions.map { "\($0.key.number)=\($0.transactionState)" }.joined(separator: ","))")
        updated += transactions
        guard finishOnCompletion else { return }
        for transaction in transactions where transaction.transactionState.isComplete { try? queue.finishTransaction(transaction) }
    }

    public func paymentQueue(_ queue: PaymentQueue, removedTransactions transactions: [PaymentTransaction]) {
        calls.append("removed:\(transactions.map { "\($0.key.number)" }.joined(separator: ","))")
        removed += transactions
    }

    public func paymentQueueRestoreCompletedTransactionsFinished(_ queue: PaymentQueue) { calls.append("restoreFinished") }

    public func paymentQueue(_ queue: PaymentQueue, restoreCompletedTransactionsFailedWithError error: StoreError) {
        calls.append("restoreFailed:\(error.code)")
    }

    public func paymentQueue(_ queue: PaymentQueue, receiptRefreshFinished receipt: [OriginalTransaction]) {
        calls.append("receipt:\(receipt.map(\.transactionIdentifier).joined(separator: ","))")
        receipts.append(receipt)
    }

    public func paymentQueue(_ queue: PaymentQueue, updatedDownloads downloads: [Download]) {
        calls.append("downloads:\(downloads.map { "\($0.key.index)=\($0.downloadState)" }.joined(separator: ","))")
        self.downloads += downloads
    }
}

extension LoopbackDevice {
    /// Launches the app with one recording observer attached.
    public func launchWithObserver(_ name: String = "o1", finishOnCompletion: Bool = false) -> RecordingObserver {
        let observer = RecordingObserver(name, finishOnCompletion: finishOnCompletion)
        launch(with: observer)
        return observer
    }
}
