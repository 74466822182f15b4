import Foundation
import StoreKitModel

/// `SKPaymentTransactionObserver`, with Apple's optional methods as empty defaults. Declare the
/// ones you implement in the class itself (a subclass's override of a method the class did not
/// declare is not seen through the protocol, as with any Swift protocol default).
public protocol SKPaymentTransactionObserver: NSObjectProtocol {
    func paymentQueue(_ queue: SKPaymentQueue, updatedTransactions transactions: [SKPaymentTransaction])
    func paymentQueue(_ queue: SKPaymentQueue, removedTransactions transactions: [SKPaymentTransaction])
    func paymentQueue(_ queue: SKPaymentQueue, restoreCompletedTransactionsFailedWithError error: any Error)
    func paymentQueueRestoreCompletedTransactionsFinished(_ queue: SKPaymentQueue)
    func paymentQueue(_ queue: SKPaymentQueue, updatedDownloads downloads: [SKDownload])
    func paymentQueue(_ queue: SKPaymentQueue, shouldAddStorePayment payment: SKPayment, for product: SKProduct) -> Bool
    func paymentQueueDidChangeStorefront(_ queue: SKPaymentQueue)
    func paymentQueue(_ queue: SKPaymentQueue, didRevokeEntitlementsForProductIdentifiers productIdentifiers: [String])
}

extension SKPaymentTransactionObserver {
    public func paymentQueue(_ queue: SKPaymentQueue, removedTransactions transactions: [SKPaymentTransaction]) {}
    public func paymentQueue(_ queue: SKPaymentQueue, restoreCompletedTransactionsFailedWithError error: any Error) {}
    public func paymentQueueRestoreCompletedTransactionsFinished(_ queue: SKPaymentQueue) {}
    public func paymentQueue(_ queue: SKPaymentQueue, updatedDownloads downloads: [SKDownload]) {}
    public func paymentQueue(_ queue: SKPaymentQueue, shouldAddStorePayment payment: SKPayment, for product: SKProduct) -> Bool { true }
    public func paymentQueueDidChangeStorefront(_ queue: SKPaymentQueue) {}
    public func paymentQueue(_ queue: SKPaymentQueue, didRevokeEntitlementsForProductIdentifiers productIdentifiers: [String]) {}
}

/// `SKPaymentQueueDelegate`, with Apple's optional methods as defaults: continue the transaction, show the
/// consent sheet. The simulated store changes no storefront and raises no price, so neither is ever asked.
public protocol SKPaymentQueueDelegate: NSObjectProtocol {
    func paymentQueue(_ paymentQueue: SKPaymentQueue, shouldContinue transaction: SKPaymentTransaction, in newStorefront: SKStorefront) -> Bool
    func paymentQueueShouldShowPriceConsent(_ paymentQueue: SKPaymentQueue) -> Bool
}

extension SKPaymentQueueDelegate {
    public func paymentQueue(_ paymentQueue: SKPaymentQueue, shouldContinue transaction: SKPaymentTransaction, in newStorefront: SKStorefront) -> Bool {
        true
    }
    public func paymentQueueShouldShowPriceConsent(_ paymentQueue: SKPaymentQueue) -> Bool { true }
}

/// `SKPaymentQueue`: the payment queue of the simulated device whose app code is running.
/// Its calls become commands to the simulator's queue; its observers are called as StoreKit calls them.
open class SKPaymentQueue: NSObject, @unchecked Sendable {
    /// Nil for the queue `default()` gives outside any simulated device's code, which does nothing.
    private unowned(unsafe) let device: SimulatedDevice?
    private var attached: [ObserverBridge] = []
    /// One object per transaction for this launch, updated as the transaction changes.
    private var objects: [TransactionKey: SKPaymentTransaction] = [:]
    /// Objects held before those of finished transactions are let go (a long launch, as a load driver's, finishes thousands).
    private var objectsBound = 1_024
    /// Payments this launch added whose transaction was not delivered yet, oldest first, with what
    /// each was when added; bounded: a payment the queue refused never gets one.
    private var paymentsAwaitingTransactions: [(object: SKPayment, productIdentifier: String, quantity: Int)] = []
    private static let paymentsAwaitingLimit = 64

    init(device: SimulatedDevice?) { self.device = device }

    private static let detached = SKPaymentQueue(device: nil)

    /// The queue of the device whose app code is running.
    open class func `default`() -> SKPaymentQueue { SimulatedDevice.current?.paymentQueue ?? detached }

    /// False when the device's user may not authorise payments (R-Q1), and outside a simulated device.
    open class func canMakePayments() -> Bool { SimulatedDevice.current?.queue.canMakePayments ?? false }

    /// The unfinished transactions; empty while no observer is attached (R-Q6).
    open var transactions: [SKPaymentTransaction] { device?.queue.transactions.map(object) ?? [] }

    /// The App Store country the user buys in; nil when the catalog sets none (F-S4).
    open var storefront: SKStorefront? { device?.queue.storefront.map(SKStorefront.init) }

    /// The device's queue below Apple's API, nil outside a simulated device's code: for this package's
    /// tests of apps that misuse it (forged commands, made-up transactions) where Apple's API has no way to.
    package var simulatedQueue: PaymentQueue? { device?.queue }

    /// The app's delegate, held weakly as StoreKit holds it (`SKPaymentQueueDelegate`: never asked here).
    open weak var delegate: (any SKPaymentQueueDelegate)?

    /// The offer-code redemption sheet: the simulated store has no sheet and no offer codes, so nothing happens.
    open func presentCodeRedemptionSheet() {}

    /// The price-increase consent sheet: the simulated store raises no price, so there is never one to show.
    open func showPriceConsentIfNeeded() {}

    /// The observers added to this queue, in the order added.
    open var transactionObservers: [any SKPaymentTransactionObserver] { attached.map(\.observer) }

    /// Attaches an observer (R-Q3); every unfinished transaction is then delivered to it (R-Q4).
    open func add(_ observer: any SKPaymentTransactionObserver) {
        let typeName = String(describing: type(of: observer))
        let sameType = attached.filter { $0.typeName == typeName }.count
        add(observer, named: sameType == 0 ? typeName : "\(typeName)-\(sameType + 1)")
    }

    /// Attaches an observer under the name the queue logs for it (the built-in behaviours' `behaviour-N`).
    package func add(_ observer: any SKPaymentTransactionObserver, named name: String) {
        guard let device, !attached.contains(where: { $0.observer === observer }) else { return }
        let bridge = ObserverBridge(name: name, typeName: String(describing: type(of: observer)), observer: observer, queue: self, device: device)
        attached.append(bridge)
        device.queue.add(bridge)
    }

    open func remove(_ observer: any SKPaymentTransactionObserver) {
        guard let device, let index = attached.firstIndex(where: { $0.observer === observer }) else { return }
        device.queue.remove(attached.remove(at: index))
    }

    /// Adds a payment (R-Q7). StoreKit raises an exception for a quantity out of range; here such a
    /// payment, or one for a product the store does not sell, is not added.
    open func add(_ payment: SKPayment) {
        guard let device else { return }
        device.noteBelief()
        let value = payment.payment
        guard (try? device.queue.add(value)) != nil else { return }
        if paymentsAwaitingTransactions.count == Self.paymentsAwaitingLimit { paymentsAwaitingTransactions.removeFirst() }
        paymentsAwaitingTransactions.append((payment, value.productIdentifier, value.quantity))
    }

    /// Finishes a transaction (R-Q8). Finishing one that is still purchasing is StoreKit's exception;
    /// here it is ignored, as is finishing one twice.
    open func finishTransaction(_ transaction: SKPaymentTransaction) {
        guard let device else { return }
        // The queue's current state of it: the app's object may be older (a completion arriving late).
        let current = device.queue.transaction(transaction.value.key) ?? transaction.value
        device.noteBelief(finishing: current)
        device.grantIfOwned(current)
        try? device.queue.finishTransaction(current)
    }

    open func restoreCompletedTransactions() {
        device?.noteBelief()
        device?.queue.restoreCompletedTransactions()
    }

    open func restoreCompletedTransactions(withApplicationUsername username: String?) {
        device?.noteBelief()
        device?.queue.restoreCompletedTransactions(applicationUsername: username)
    }

    open func start(_ downloads: [SKDownload]) {
        device?.noteBelief()
        device?.queue.start(downloads.map(\.value))
    }
    open func pause(_ downloads: [SKDownload]) { device?.queue.pause(downloads.map(\.value)) }
    open func resume(_ downloads: [SKDownload]) { device?.queue.resume(downloads.map(\.value)) }
    open func cancel(_ downloads: [SKDownload]) { device?.queue.cancel(downloads.map(\.value)) }

    // MARK: Objects handed to the app

    /// The object of `transaction` for this launch, brought up to date.
    func object(_ transaction: PaymentTransaction) -> SKPaymentTransaction {
        if let known = objects[transaction.key] {
            if known.value != transaction { known.value = transaction }
            return known
        }
        let made = SKPaymentTransaction(transaction, startDate: device?.queue.startDate ?? Scenario.defaultStartDate)
        if objects.count >= objectsBound { forgetFinishedObjects() }
        objects[transaction.key] = made
        // A transaction first heard purchasing in this launch was made by one of its payments: the
        // oldest one added for that product and quantity (one device's commands reach the queue in order).
        if transaction.transactionState == .purchasing,
           let index = paymentsAwaitingTransactions.firstIndex(where: {
               $0.productIdentifier == transaction.payment.productIdentifier && $0.quantity == transaction.payment.quantity
           }) {
            let payment = paymentsAwaitingTransactions.remove(at: index).object
            payment.madeTransaction = transaction.key
        }
        return made
    }

    /// Lets go of the objects of transactions the queue no longer holds; the bound grows with what it still holds.
    private func forgetFinishedObjects() {
        let pending = device?.queue.pendingByNumber ?? [:]
        objects = objects.filter { pending[$0.key.number] != nil }
        objectsBound = max(1_024, 2 * objects.count)
    }

    /// The object of `download`'s transaction brought up to date with it, and its download object.
    func object(_ download: Download) -> SKDownload? {
        guard let transaction = objects[download.key.transaction], transaction.value.downloads.indices.contains(download.key.index) else {
            return nil
        }
        if transaction.value.downloads[download.key.index] != download { transaction.value.downloads[download.key.index] = download }
        return transaction.downloads[download.key.index]
    }

    /// The objects of the delivery being made (`PaymentQueue.deliveryNumber`), made once for all its observers.
    private var deliveredTransactions: (delivery: UInt64, objects: [SKPaymentTransaction]) = (0, [])
    private var deliveredDownloads: (delivery: UInt64, objects: [SKDownload]) = (0, [])

    /// The objects of `transactions`, delivered as delivery number `delivery` (the same array for each of its
    /// observers). `notingReceipt`: a purchase or a restore is in the device's receipt from then on, as on
    /// iOS, noted before any of the app's code hears of it.
    func objects(of transactions: [PaymentTransaction], delivery: UInt64, notingReceipt: Bool) -> [SKPaymentTransaction] {
        if deliveredTransactions.delivery == delivery { return deliveredTransactions.objects }
        if notingReceipt, let storage = device?.storage {
            for transaction in transactions {
                guard transaction.transactionState.isPaid, let identifier = transaction.transactionIdentifier,
                      !storage.hasReceiptEntry(identifier) else { continue }
                storage.note(OriginalTransaction(transactionIdentifier: identifier, payment: transaction.payment.withoutDiscount,
                                                 transactionDate: transaction.transactionDate ?? 0),
                             original: transaction.originalTransaction?.transactionIdentifier)
            }
        }
        let made = transactions.map(object)
        deliveredTransactions = (delivery, made)
        return made
    }

    /// The objects of `downloads`, delivered as delivery number `delivery`, as `objects(of:delivery:notingReceipt:)`.
    func objects(of downloads: [Download], delivery: UInt64) -> [SKDownload] {
        if deliveredDownloads.delivery == delivery { return deliveredDownloads.objects }
        let made = downloads.compactMap(object)
        deliveredDownloads = (delivery, made)
        return made
    }

    /// The observer that hears of receipt refreshes for this queue's requests: the first attached.
    func isFirst(_ bridge: ObserverBridge) -> Bool { attached.first === bridge }
}

/// A test's observer that also hears every receipt refresh its queue's device was answered (R-R2),
/// whole: StoreKit tells only the `SKReceiptRefreshRequest`'s delegate, and the receipt file.
package protocol ReceiptRefreshListener: AnyObject {
    func receiptRefreshed(_ receipt: [OriginalTransaction])
}

/// What the queue holds for each of the app's observers: it turns the queue's callbacks (R-O1 … R-O4)
/// into StoreKit's, run as the app's code on its device, under the name the queue logs for it.
final class ObserverBridge {
    let observerName: String
    let typeName: String
    let observer: any SKPaymentTransactionObserver
    private unowned let queue: SKPaymentQueue
    private let device: SimulatedDevice

    init(name: String, typeName: String, observer: any SKPaymentTransactionObserver, queue: SKPaymentQueue, device: SimulatedDevice) {
        self.observerName = name
        self.typeName = typeName
        self.observer = observer
        self.queue = queue
        self.device = device
    }

    func paymentQueue(_ simulated: PaymentQueue, updatedTransactions transactions: [PaymentTransaction]) {
        let objects = queue.objects(of: transactions, delivery: simulated.deliveryNumber, notingReceipt: true)
        device.run { observer.paymentQueue(queue, updatedTransactions: objects) }
    }

    func paymentQueue(_ simulated: PaymentQueue, removedTransactions transactions: [PaymentTransaction]) {
        let objects = queue.objects(of: transactions, delivery: simulated.deliveryNumber, notingReceipt: false)
        device.run { observer.paymentQueue(queue, removedTransactions: objects) }
    }

    func paymentQueueRestoreCompletedTransactionsFinished(_ simulated: PaymentQueue) {
        // Noted by the first observer called, before any of the app's code hears it: observers are
        // called in any order (R-Q5), and one that shows "done" at once must find it noted.
        // Restores of one device may end in another order than they began.
        if let restore = simulated.lastFinishedRestore, device.notedRestores.insert(restore).inserted {
            device.restoresToShow.append(restore)
        }
        device.run { observer.paymentQueueRestoreCompletedTransactionsFinished(queue) }
    }

    func paymentQueue(_ simulated: PaymentQueue, restoreCompletedTransactionsFailedWithError error: StoreError) {
        device.run { observer.paymentQueue(queue, restoreCompletedTransactionsFailedWithError: SKError(error)) }
    }

    func paymentQueue(_ simulated: PaymentQueue, updatedDownloads downloads: [Download]) {
        let objects = queue.objects(of: downloads, delivery: simulated.deliveryNumber)
        guard !objects.isEmpty else { return }
        device.run { observer.paymentQueue(queue, updatedDownloads: objects) }
    }

    func paymentQueue(_ simulated: PaymentQueue, didRevokeEntitlementsForProductIdentifiers productIdentifiers: [String]) {
        device.run { observer.paymentQueue(queue, didRevokeEntitlementsForProductIdentifiers: productIdentifiers) }
    }

    func paymentQueue(_ simulated: PaymentQueue, receiptRefreshFinished receipt: [OriginalTransaction]) {
        (observer as? ReceiptRefreshListener)?.receiptRefreshed(receipt)
        guard queue.isFirst(self) else { return }
        device.storage.replaceReceipt(with: receipt)
        device.run { device.finishReceiptRefresh() }
    }
}
