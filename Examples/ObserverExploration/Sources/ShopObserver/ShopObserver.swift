import StoreKitModel
import StoreKitRoles

/// The app's transaction observer: credits coins for consumables and unlocks the rest.
///
/// Deliberately buggy (this is the example's point): it remembers what it credited only in
/// memory. StoreKit delivers an unfinished transaction again after a relaunch (R-Q4), and may
/// deliver an update twice, so a consumable can be credited twice. `fixed: true` checks the
/// app's persistent record first, as an app must.
public final class ShopObserver: PaymentTransactionObserver {
    public let observerName = "shop"
    public let fixed: Bool
    private var creditedThisLaunch: Set<TransactionKey> = []

    public init(fixed: Bool = false) {
        self.fixed = fixed
    }

    public func paymentQueue(_ queue: PaymentQueue, updatedTransactions transactions: [PaymentTransaction]) {
        for transaction in transactions {
            switch transaction.transactionState {
            case .purchased, .restored:
                let alreadyCredited = fixed ? queue.wasGranted(transaction) : creditedThisLaunch.contains(transaction.key)
                if !alreadyCredited {
                    creditedThisLaunch.insert(transaction.key)
                    queue.contentGranted(transaction)
                }
                try? queue.finishTransaction(transaction)
            case .failed:
                queue.failureShown(transaction)
                try? queue.finishTransaction(transaction)
            case .purchasing, .deferred:
                continue
            }
        }
    }
}
