import Foundation
import StoreKitModel

/// The built-in observer behaviours, written on the public observer API exactly as an
/// app would write them.
public enum ObserverBehavior: String, Sendable, Hashable, Codable, CaseIterable {
    /// Unlock the product, then finish (ignores hosted content).
    case deliverThenFinish
    /// Download every piece of hosted content, keep it, then finish (R-D3).
    case downloadThenFinish
    /// Like downloadThenFinish for restored transactions with content, and finish every
    /// other restored transaction at once (R-R5's selective restore).
    case restoreThenFinish
    /// Only watches and counts; never finishes (a second observer, R-Q5).
    case audit
    /// Buggy on purpose: finishes right after starting downloads, losing content (R-T4).
    case finishBeforeDownloads
}

/// The observer the simulator attaches for each behaviour.
public final class BuiltInObserver: PaymentTransactionObserver {
    public let observerName: String
    public let behavior: ObserverBehavior
    /// Where finished downloads are copied to keep them (the app's own storage), and the
    /// folder in it, relative to the content root; nil keeps nothing.
    public let storage: ContentStorage?
    public let persistentFolder: String
    /// Product identifiers unlocked so far.
    public private(set) var unlocked: Set<String> = []
    public private(set) var keptContent: [String] = []
    public private(set) var errors: [String] = []
    public private(set) var restoresFinished = 0
    public private(set) var restoresFailed = 0

    public init(name: String, behavior: ObserverBehavior, storage: ContentStorage?, persistentFolder: String = "apps") {
        self.observerName = name
        self.behavior = behavior
        self.storage = storage
        self.persistentFolder = persistentFolder
    }

    public func paymentQueue(_ queue: PaymentQueue, updatedTransactions transactions: [PaymentTransaction]) {
        guard behavior != .audit else { return }
        for transaction in transactions {
            switch transaction.transactionState {
            case .purchasing, .deferred:
                continue
            case .failed:
                finish(transaction, on: queue)
            case .purchased, .restored:
                process(transaction, on: queue)
            }
        }
    }

    private func process(_ transaction: PaymentTransaction, on queue: PaymentQueue) {
        let wantsContent: Bool = switch behavior {
        case .deliverThenFinish, .audit: false
        case .downloadThenFinish, .restoreThenFinish, .finishBeforeDownloads: !transaction.downloads.isEmpty
        }
        guard wantsContent else {
            unlocked.insert(transaction.payment.productIdentifier)
            finish(transaction, on: queue)
            return
        }
        let notStarted = transaction.downloads.filter { !$0.started && $0.downloadState == .waiting }
        queue.start(notStarted)
        if behavior == .finishBeforeDownloads {
            finish(transaction, on: queue)
        } else if transaction.downloads.allSatisfy({ $0.downloadState.isFinal }) {
            // Delivered again after a relaunch with everything already downloaded (R-Q4).
            completeIfDone(transaction.key, on: queue)
        }
    }

    public func paymentQueue(_ queue: PaymentQueue, updatedDownloads downloads: [Download]) {
        guard behavior == .downloadThenFinish || behavior == .restoreThenFinish else { return }
        for download in downloads where download.downloadState.isFinal {
            if download.downloadState == .finished, let url = download.contentURL { keep(url, download) }
            completeIfDone(download.key.transaction, on: queue)
        }
    }

    /// Finishes only when every download of the transaction has ended (R-D3).
    private func completeIfDone(_ key: TransactionKey, on queue: PaymentQueue) {
        guard let transaction = queue.transactions.first(where: { $0.key == key }) else { return }
        guard transaction.downloads.allSatisfy({ $0.downloadState.isFinal }) else { return }
        unlocked.insert(transaction.payment.productIdentifier)
        finish(transaction, on: queue)
    }

    /// Moves the downloaded file somewhere persistent before its URL becomes invalid (R-D3, R-T4).
    private func keep(_ contentURL: String, _ download: Download) {
        guard let storage else { return }
        let destination = "\(persistentFolder)/\(download.contentIdentifier)-\(download.contentVersion)"
        do {
            try storage.copy(contentURL, to: destination)
            keptContent.append(destination)
        } catch {
            errors.append("could not keep \(contentURL): \(error)")
        }
    }

    private func finish(_ transaction: PaymentTransaction, on queue: PaymentQueue) {
        do {
            try queue.finishTransaction(transaction)
        } catch {
            errors.append("\(error)")
        }
    }

    public func paymentQueueRestoreCompletedTransactionsFinished(_ queue: PaymentQueue) { restoresFinished += 1 }

    public func paymentQueue(_ queue: PaymentQueue, restoreCompletedTransactionsFailedWithError error: StoreError) {
        restoresFailed += 1
    }
}
