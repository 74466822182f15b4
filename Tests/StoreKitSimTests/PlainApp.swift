// Written as an iOS app writes it: only the import differs, and only on Linux.
#if canImport(StoreKit)
import StoreKit
#else
import StoreKitSim
#endif

/// A plain app: grants and finishes what it is told, and reads its receipt as apps do.
final class PlainStoreObserver: NSObject, SKPaymentTransactionObserver {
    private(set) var updates: [(identifier: String?, state: SKPaymentTransactionState)] = []
    private(set) var receiptSizes: [Int] = []
    /// The receipt read last, and the transaction identifiers the app was told of until then.
    private(set) var lastReceipt: Data?
    private(set) var paidIdentifiers: [String] = []
    private(set) var paidDates: [Date] = []
    private(set) var queueIdentity: ObjectIdentifier?
    private(set) var removed = 0

    override init() {
        super.init()
        queueIdentity = ObjectIdentifier(SKPaymentQueue.default())
        SKPaymentQueue.default().add(self)
    }

    func paymentQueue(_ queue: SKPaymentQueue, updatedTransactions transactions: [SKPaymentTransaction]) {
        for transaction in transactions {
            updates.append((transaction.transactionIdentifier, transaction.transactionState))
            switch transaction.transactionState {
            case .purchased, .restored:
                if let identifier = transaction.transactionIdentifier { paidIdentifiers.append(identifier) }
                if let date = transaction.transactionDate { paidDates.append(date) }
                if let url = Bundle.main.appStoreReceiptURL, let receipt = try? Data(contentsOf: url) {
                    receiptSizes.append(receipt.count)
                    lastReceipt = receipt
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

    func paymentQueue(_ queue: SKPaymentQueue, removedTransactions transactions: [SKPaymentTransaction]) {
        removed += transactions.count
    }
}

/// Reads the receipt the way apps read it, from a file that imports StoreKitSim.
func readAppReceipt() -> Data? {
    guard let url = Bundle.main.appStoreReceiptURL else { return nil }
    return try? Data(contentsOf: url)
}
