// The app's StoreKit code, as an iOS app writes it; on Linux only the import differs.
#if canImport(StoreKit)
import Foundation
import StoreKit
#else
import StoreKitSim
#endif

/// What the app keeps on disk: the coins it credited, by transaction, once each.
final class Wallet {
    private(set) var credited: Set<String> = []
    private(set) var coins = 0

    func credit(_ transaction: String, coins amount: Int) {
        guard credited.insert(transaction).inserted else { return }
        coins += amount
    }
}

/// The shop's payment-queue observer: credits coins once per purchase, finishes every transaction
/// that is complete, and leaves deferred (Ask to Buy) ones to the parent's decision.
final class ShopObserver: NSObject, SKPaymentTransactionObserver {
    static let coins = ["com.example.sksim.coins.small": 100, "com.example.sksim.coins.large": 1_000]
    private let wallet: Wallet

    init(wallet: Wallet) {
        self.wallet = wallet
        super.init()
        SKPaymentQueue.default().add(self)
    }

    func paymentQueue(_ queue: SKPaymentQueue, updatedTransactions transactions: [SKPaymentTransaction]) {
        for transaction in transactions {
            switch transaction.transactionState {
            case .purchased, .restored:
                if let identifier = transaction.transactionIdentifier {
                    wallet.credit(identifier, coins: Self.coins[transaction.payment.productIdentifier] ?? 0)
                }
                queue.finishTransaction(transaction)
            case .failed:
                queue.finishTransaction(transaction)
            case .purchasing, .deferred:
                break
            @unknown default:
                break
            }
        }
    }

    /// The app on every simulated device: a wallet kept across launches, an observer per launch.
    static func simulatedApp() -> SimulatedApp {
        SimulatedApp(storage: { Wallet() }, belief: { _ in AppBelief() }, launch: { wallet in ShopObserver(wallet: wallet) })
    }
}
