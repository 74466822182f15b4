// An app's own StoreKit code, written as for iOS: only the import differs, and only on Linux.
#if canImport(StoreKit)
import Foundation
import StoreKit
#else
import StoreKitSim
#endif

/// The app's own persistence (on iOS, a file or the keychain): its coins, and how many times it
/// credited each transaction, by transaction identifier (a restored one's by its original's).
public final class CoinStore {
    public var coins = 0
    public var credits: [String: Int] = [:]

    public init() {}
}

/// The app's transaction observer: credits 100 coins per consumable bought, then finishes.
///
/// Deliberately buggy (this is the example's point): it remembers what it credited only in
/// memory. StoreKit delivers an unfinished transaction again after a relaunch (R-Q4), and may
/// deliver an update twice, so a consumable can be credited twice. `fixed: true` checks the
/// app's persistent record first, as an app must.
public final class ShopObserver: NSObject, SKPaymentTransactionObserver {
    let store: CoinStore
    let fixed: Bool
    private var creditedThisLaunch: Set<String> = []

    public init(store: CoinStore, fixed: Bool = false) {
        self.store = store
        self.fixed = fixed
        super.init()
        SKPaymentQueue.default().add(self)
    }

    public func paymentQueue(_ queue: SKPaymentQueue, updatedTransactions transactions: [SKPaymentTransaction]) {
        for transaction in transactions {
            switch transaction.transactionState {
            case .purchased, .restored:
                let identifier = transaction.original?.transactionIdentifier ?? transaction.transactionIdentifier ?? ""
                let alreadyCredited = fixed ? store.credits[identifier, default: 0] > 0 : creditedThisLaunch.contains(identifier)
                if !alreadyCredited {
                    creditedThisLaunch.insert(identifier)
                    store.coins += 100 * transaction.payment.quantity
                    store.credits[identifier, default: 0] += 1
                }
                queue.finishTransaction(transaction)
            case .failed:
                queue.finishTransaction(transaction)
            default:
                continue
            }
        }
    }
}
