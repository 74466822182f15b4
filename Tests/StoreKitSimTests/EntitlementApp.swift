// An app's entitlement code, written as for iOS: only the import differs, and only on Linux.
#if canImport(StoreKit)
import StoreKit
#else
import StoreKitSim
#endif

/// The app's own persistence: what it credited, by transaction identifier (a restored transaction's
/// credit is keyed by its original purchase, so owning something twice is impossible).
final class EntitlementStore {
    var credits: [String: Int] = [:]
    var restoresShownDone = 0
    /// What the app's analytics reported as revenue, by transaction identifier.
    var revenue: [String: Int] = [:]
    /// What the purchase screen told its user, oldest first: the payment it added and the transaction
    /// it took for that payment's.
    var purchasesShown: [(payment: SKPayment, transaction: SKPaymentTransaction)] = []
}

/// Credits each purchase once, then finishes it; shows a restore done when StoreKit says so.
class EntitlementObserver: NSObject, SKPaymentTransactionObserver {
    let store: EntitlementStore

    init(store: EntitlementStore) {
        self.store = store
        super.init()
        SKPaymentQueue.default().add(self)
    }

    func paymentQueue(_ queue: SKPaymentQueue, updatedTransactions transactions: [SKPaymentTransaction]) {
        for transaction in transactions {
            switch transaction.transactionState {
            case .purchased, .restored:
                deliver(transaction, queue)
            case .failed:
                queue.finishTransaction(transaction)
            default:
                break
            }
        }
    }

    func deliver(_ transaction: SKPaymentTransaction, _ queue: SKPaymentQueue) {
        let identifier = transaction.original?.transactionIdentifier ?? transaction.transactionIdentifier ?? ""
        if store.credits[identifier, default: 0] == 0 { store.credits[identifier] = 1 }
        queue.finishTransaction(transaction)
    }

    func paymentQueueRestoreCompletedTransactionsFinished(_ queue: SKPaymentQueue) {
        store.restoresShownDone += 1
    }
}

/// A bug from the field: credits again at every delivery (a relaunch, a repeated update).
final class CreditsEveryDelivery: EntitlementObserver {
    override func deliver(_ transaction: SKPaymentTransaction, _ queue: SKPaymentQueue) {
        let identifier = transaction.original?.transactionIdentifier ?? transaction.transactionIdentifier ?? ""
        store.credits[identifier, default: 0] += 1
        queue.finishTransaction(transaction)
    }
}

/// A bug from the field: finishes first, credits afterwards (a kill in between loses the purchase).
final class FinishesBeforeCrediting: EntitlementObserver {
    override func deliver(_ transaction: SKPaymentTransaction, _ queue: SKPaymentQueue) {
        queue.finishTransaction(transaction)
        let identifier = transaction.original?.transactionIdentifier ?? transaction.transactionIdentifier ?? ""
        if store.credits[identifier, default: 0] == 0 { store.credits[identifier] = 1 }
    }
}
