// The simulator's built-in observer behaviours, rewritten as an app writes them on Apple's API.
#if canImport(StoreKit)
import Foundation
import StoreKit
#else
import StoreKitSim
#endif

/// Downloads hosted content, credits once, then finishes; shows a restore done once every
/// transaction it restored was handled. The correct behaviour; subclasses make one mistake each.
class ContentObserver: NSObject, SKPaymentTransactionObserver {
    let store: EntitlementStore
    private var restoredOutstanding: Set<String> = []
    /// Restores that ended and are not shown done yet: each is shown once its restored transactions are handled.
    private var restoresEnded = 0

    init(store: EntitlementStore) {
        self.store = store
        super.init()
        SKPaymentQueue.default().add(self)
    }

    func paymentQueue(_ queue: SKPaymentQueue, updatedTransactions transactions: [SKPaymentTransaction]) {
        for transaction in transactions {
            switch transaction.transactionState {
            case .purchased, .restored:
                if transaction.transactionState == .restored, let identifier = transaction.transactionIdentifier {
                    restoredOutstanding.insert(identifier)
                }
                let waiting = downloadsNeeded(transaction).filter { $0.state == .waiting }
                if !waiting.isEmpty { queue.start(waiting) }
                if downloadsNeeded(transaction).allSatisfy({ Self.hasEnded($0) }) { complete(transaction, queue) }
            case .failed:
                queue.finishTransaction(transaction)
            case .deferred:
                deferred(transaction)
            default:
                break
            }
        }
    }

    func paymentQueue(_ queue: SKPaymentQueue, updatedDownloads downloads: [SKDownload]) {
        for download in downloads where Self.hasEnded(download) {
            let transaction = download.transaction
            if downloadsNeeded(transaction).allSatisfy({ Self.hasEnded($0) }) { complete(transaction, queue) }
        }
    }

    func paymentQueueRestoreCompletedTransactionsFinished(_ queue: SKPaymentQueue) {
        restoresEnded += 1
        showRestoreDoneWhenHandled()
    }

    func paymentQueue(_ queue: SKPaymentQueue, restoreCompletedTransactionsFailedWithError error: any Error) {}

    func deferred(_ transaction: SKPaymentTransaction) {}

    /// The downloads the app fetches before it credits and finishes: all of them.
    func downloadsNeeded(_ transaction: SKPaymentTransaction) -> [SKDownload] { transaction.downloads }

    static func hasEnded(_ download: SKDownload) -> Bool {
        download.state == .finished || download.state == .failed || download.state == .cancelled
    }

    func credit(_ transaction: SKPaymentTransaction) {
        let purchase = transaction.original?.transactionIdentifier ?? transaction.transactionIdentifier ?? ""
        if store.credits[purchase, default: 0] == 0 { store.credits[purchase] = 1 }
    }

    func complete(_ transaction: SKPaymentTransaction, _ queue: SKPaymentQueue) {
        credit(transaction)
        queue.finishTransaction(transaction)
        if let identifier = transaction.transactionIdentifier, restoredOutstanding.remove(identifier) != nil { showRestoreDoneWhenHandled() }
    }

    func showRestoreDoneWhenHandled() {
        guard restoredOutstanding.isEmpty else { return }
        for _ in 0..<restoresEnded { store.restoresShownDone += 1 }
        restoresEnded = 0
    }
}

/// Credits on every delivery, without remembering what it credited.
final class CreditEveryDeliveryObserver: ContentObserver {
    override func credit(_ transaction: SKPaymentTransaction) {
        store.credits[transaction.original?.transactionIdentifier ?? transaction.transactionIdentifier ?? "", default: 0] += 1
    }
}

/// Finishes when the first of several downloads ends.
final class FinishOnFirstDownloadObserver: ContentObserver {
    override func paymentQueue(_ queue: SKPaymentQueue, updatedDownloads downloads: [SKDownload]) {
        for download in downloads where Self.hasEnded(download) { complete(download.transaction, queue) }
    }
}

/// Assumes one download per product: starts and waits for the first only, so the others are never started.
final class FirstDownloadOnlyObserver: ContentObserver {
    override func downloadsNeeded(_ transaction: SKPaymentTransaction) -> [SKDownload] { Array(transaction.downloads.prefix(1)) }
}

/// Takes progress 1.0 for finished.
final class FinishAtFullProgressObserver: ContentObserver {
    override func paymentQueue(_ queue: SKPaymentQueue, updatedDownloads downloads: [SKDownload]) {
        for download in downloads where download.progress >= 1 { complete(download.transaction, queue) }
    }
}

/// Shows "restore done" as soon as StoreKit says the restore finished.
final class RestoreDoneEarlyObserver: ContentObserver {
    override func paymentQueueRestoreCompletedTransactionsFinished(_ queue: SKPaymentQueue) {
        store.restoresShownDone += 1
    }
}

/// Takes a deferred purchase for a failed one and forgets it.
final class DeferredAsFailedObserver: ContentObserver {
    private var forgotten: Set<String> = []
    override func deferred(_ transaction: SKPaymentTransaction) {
        forgotten.insert("\(transaction.payment.productIdentifier) \(ObjectIdentifier(transaction))")
    }
    override func paymentQueue(_ queue: SKPaymentQueue, updatedTransactions transactions: [SKPaymentTransaction]) {
        super.paymentQueue(queue, updatedTransactions: transactions.filter {
            !forgotten.contains("\($0.payment.productIdentifier) \(ObjectIdentifier($0))")
        })
    }
}

/// A second SDK in the app that finishes every completed transaction at once.
final class EagerSDK: NSObject, SKPaymentTransactionObserver {
    override init() {
        super.init()
        SKPaymentQueue.default().add(self)
    }
    func paymentQueue(_ queue: SKPaymentQueue, updatedTransactions transactions: [SKPaymentTransaction]) {
        for transaction in transactions where transaction.transactionState == .purchased || transaction.transactionState == .restored {
            queue.finishTransaction(transaction)
        }
    }
}

/// Keys a restored transaction's credit by its own identifier: a new purchase, not the original one.
final class RestoreAsPurchaseObserver: ContentObserver {
    override func credit(_ transaction: SKPaymentTransaction) {
        let purchase = transaction.transactionIdentifier ?? ""
        if store.credits[purchase, default: 0] == 0 { store.credits[purchase] = 1 }
    }
}

/// A passive analytics observer: reports each purchase as revenue once, remembered on disk, and
/// never a restore. `remembers` false: a per-launch memory, so a purchase redelivered after a
/// relaunch is reported again; `countsRestores` true: a restore is reported as revenue too.
final class RevenueAnalytics: NSObject, SKPaymentTransactionObserver {
    let store: EntitlementStore
    let remembers: Bool
    let countsRestores: Bool
    private var reportedThisLaunch: Set<String> = []

    init(store: EntitlementStore, remembers: Bool = true, countsRestores: Bool = false) {
        self.store = store
        self.remembers = remembers
        self.countsRestores = countsRestores
        super.init()
        SKPaymentQueue.default().add(self)
    }

    func paymentQueue(_ queue: SKPaymentQueue, updatedTransactions transactions: [SKPaymentTransaction]) {
        for transaction in transactions {
            guard transaction.transactionState == .purchased || (countsRestores && transaction.transactionState == .restored),
                  let identifier = transaction.transactionIdentifier else { continue }
            let reported = remembers ? store.revenue[identifier, default: 0] > 0 : reportedThisLaunch.contains(identifier)
            guard !reported else { continue }
            reportedThisLaunch.insert(identifier)
            store.revenue[identifier, default: 0] += 1
        }
    }
}

/// An analytics observer the app attaches a while after launch.
final class LateAnalytics: NSObject, SKPaymentTransactionObserver {
    func paymentQueue(_ queue: SKPaymentQueue, updatedTransactions transactions: [SKPaymentTransaction]) {}
}

/// The app's purchase screen: adds a payment for the product the user taps and tells the user
/// how that purchase ended, once. It knows its purchase's transaction from the `purchasing` update
/// that follows its `add` (the oldest request for that product without one), so an update of
/// another transaction (an earlier launch's, a renewal, a late approval) is never taken for it.
class PurchaseScreen: NSObject, SKPaymentTransactionObserver {
    let store: EntitlementStore
    /// Purchases asked for and not ended yet, oldest first, with their transaction once heard.
    var requests: [(payment: SKPayment, transaction: SKPaymentTransaction?)] = []

    init(store: EntitlementStore) {
        self.store = store
        super.init()
        SKPaymentQueue.default().add(self)
    }

    func buy(_ product: SKProduct, quantity: Int) {
        let payment = SKMutablePayment(product: product)
        payment.quantity = quantity
        requests.append((payment, nil))
        SKPaymentQueue.default().add(payment)
    }

    func paymentQueue(_ queue: SKPaymentQueue, updatedTransactions transactions: [SKPaymentTransaction]) {
        for transaction in transactions {
            switch transaction.transactionState {
            case .purchasing:
                if let index = requests.firstIndex(where: { $0.transaction == nil && $0.payment.productIdentifier == transaction.payment.productIdentifier }) {
                    requests[index].transaction = transaction
                }
            case .purchased, .failed:
                ended(transaction)
            default:
                break
            }
        }
    }

    func ended(_ transaction: SKPaymentTransaction) {
        guard let index = requests.firstIndex(where: { $0.transaction === transaction }) else { return }
        store.purchasesShown.append((requests.remove(at: index).payment, transaction))
    }
}

/// Keeps one completion for the whole screen: the last purchase asked for is told the end of
/// whichever transaction ends next (a second purchase started before the first ended, a late
/// approval, a renewal).
final class SingleCompletionScreen: PurchaseScreen {
    override func ended(_ transaction: SKPaymentTransaction) {
        guard let last = requests.last else { return }
        requests.removeAll()
        store.purchasesShown.append((last.payment, transaction))
    }
}

/// Tells the end of its purchase at every delivery of it, without forgetting the request: a
/// repeated update shows the purchase completed twice.
final class CompletionOnEveryDeliveryScreen: PurchaseScreen {
    override func ended(_ transaction: SKPaymentTransaction) {
        guard let request = requests.first(where: { $0.transaction === transaction }) else { return }
        store.purchasesShown.append((request.payment, transaction))
    }
}

/// Starts the app's analytics after the first purchase it completed: the analytics observer never
/// hears of what was finished before it attached.
final class AnalyticsAfterFirstPurchaseObserver: ContentObserver {
    private var analytics: RevenueAnalytics?
    override func complete(_ transaction: SKPaymentTransaction, _ queue: SKPaymentQueue) {
        super.complete(transaction, queue)
        if analytics == nil { analytics = RevenueAnalytics(store: store) }
    }
}

/// The app's objects of one launch.
final class AppObjects {
    var objects: [AnyObject] = []
    /// The purchase screen, when the app has one; else the user's taps add a plain payment.
    var screen: PurchaseScreen?

    func buy(_ product: SKProduct, quantity: Int) {
        if let screen { return screen.buy(product, quantity: quantity) }
        let payment = SKMutablePayment(product: product)
        payment.quantity = quantity
        SKPaymentQueue.default().add(payment)
    }
}
