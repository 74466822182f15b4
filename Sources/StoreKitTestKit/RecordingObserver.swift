import Foundation
import StoreKitModel
import StoreKitRoles

/// An observer on Apple's API that records every callback it hears, in order, for tests of what an
/// app hears when: attach it to a `LoopbackDevice` (`launchWithObserver`) or to a `PaymentQueue`
/// (`add(_:)`, under its `observerName`). What it heard is kept as the queue's values.
public final class RecordingObserver: NSObject, SKPaymentTransactionObserver, ReceiptRefreshListener, @unchecked Sendable {
    public let observerName: String
    /// Every callback as one line: `updated:1=purchased,2=failed`, `removed:1`, `restoreFinished`,
    /// `restoreFailed:CODE`, `receipt:ID,ID`, `downloads:0=active`.
    public var calls: [String] = []
    public var updated: [PaymentTransaction] = []
    public var removed: [PaymentTransaction] = []
    public var downloads: [Download] = []
    /// Every receipt the observer's device was answered (R-R2), whole, with each entry's introductory offer (F-O3).
    public var receipts: [[OriginalTransaction]] = []
    /// Whether the observer finishes each transaction as soon as it completes, as most apps do.
    public var finishOnCompletion: Bool

    public init(_ name: String, finishOnCompletion: Bool = false) {
        observerName = name
        self.finishOnCompletion = finishOnCompletion
    }

    public func paymentQueue(_ queue: SKPaymentQueue, updatedTransactions transactions: [SKPaymentTransaction]) {
        let values = transactions.map(\.value)
        calls.append("updated:\(values.map { "\($0.key.number)=\($0.transactionState)" }.joined(separator: ","))")
        updated += values
        guard finishOnCompletion else { return }
        for transaction in transactions where transaction.value.transactionState.isComplete { queue.finishTransaction(transaction) }
    }

    public func paymentQueue(_ queue: SKPaymentQueue, removedTransactions transactions: [SKPaymentTransaction]) {
        calls.append("removed:\(transactions.map { "\($0.value.key.number)" }.joined(separator: ","))")
        removed += transactions.map(\.value)
    }

    public func paymentQueueRestoreCompletedTransactionsFinished(_ queue: SKPaymentQueue) { calls.append("restoreFinished") }

    public func paymentQueue(_ queue: SKPaymentQueue, restoreCompletedTransactionsFailedWithError error: any Error) {
        calls.append("restoreFailed:\((error as? SKError).map { "\($0.code)" } ?? "\(error)")")
    }

    package func receiptRefreshed(_ receipt: [OriginalTransaction]) {
        calls.append("receipt:\(receipt.map(\.transactionIdentifier).joined(separator: ","))")
        receipts.append(receipt)
    }

    public func paymentQueue(_ queue: SKPaymentQueue, updatedDownloads downloads: [SKDownload]) {
        calls.append("downloads:\(downloads.map { "\($0.value.key.index)=\($0.value.downloadState)" }.joined(separator: ","))")
        self.downloads += downloads.map(\.value)
    }
}

extension PaymentQueue {
    /// Attaches a recording observer as the app's code does, under its `observerName`.
    public func add(_ observer: RecordingObserver) { add(observer, named: observer.observerName) }
}

extension LoopbackDevice {
    /// Launches the app and attaches `observer` under its `observerName`.
    public func launch(account: String = "a1", with observer: RecordingObserver) {
        launch(account: account, with: observer, named: observer.observerName)
    }

    /// Launches the app with one recording observer attached.
    public func launchWithObserver(_ name: String = "o1", finishOnCompletion: Bool = false) -> RecordingObserver {
        let observer = RecordingObserver(name, finishOnCompletion: finishOnCompletion)
        launch(with: observer, named: name)
        return observer
    }
}
