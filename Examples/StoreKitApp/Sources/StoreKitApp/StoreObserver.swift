// The app's StoreKit code, as an iOS app writes it. On Linux only the import differs: StoreKitSim
// gives Apple's names, and Foundation with them (import Foundation only on Apple's platforms, so
// that StoreKitSim's `Bundle.main.appStoreReceiptURL` is the one this file sees).
#if canImport(StoreKit)
import Foundation
import StoreKit
#else
import StoreKitSim
#endif

/// The app's client of its own server, which checks a receipt (on iOS, over `URLSession`).
public protocol ReceiptVerifier: AnyObject {
    func verify(receipt: Data, transactionIdentifier: String, completion: @escaping (Result<Bool, any Error>) -> Void)
}

/// What the app keeps on disk: what it credited, by the purchase it credited (a restored
/// transaction's original), and how often it told the user a restore is done.
public final class Entitlements {
    public private(set) var credits: [String: Int] = [:]
    public private(set) var restoresShownDone = 0
    public init() {}

    /// Credits a purchase once, however often it is delivered.
    func credit(_ purchase: String) {
        if credits[purchase, default: 0] == 0 { credits[purchase] = 1 }
    }

    func restoreShownDone() { restoresShownDone += 1 }
}

/// The app's payment-queue observer: loads its products, downloads hosted content, has its server
/// check the receipt, credits the purchase once, then finishes the transaction.
public final class StoreObserver: NSObject, SKPaymentTransactionObserver, SKProductsRequestDelegate {
    public static let productIdentifiers: Set<String> = [
        "com.example.sksim.coins.small", "com.example.sksim.removeads", "com.example.sksim.levelpack.forest",
    ]
    /// A server check that fails is tried again, at most this many times in one launch; the next
    /// launch delivers the transaction again.
    static let maximumChecks = 10

    private let entitlements: Entitlements
    private let verifier: ReceiptVerifier
    private var productsRequest: SKProductsRequest?
    public private(set) var products: [String: SKProduct] = [:]
    /// Transactions whose server check is under way, and how many checks each had.
    private var checks: [String: Int] = [:]
    /// Restored transactions not credited yet, and whether the restore has ended.
    private var restoredOutstanding: Set<String> = []
    /// Restores that ended and are not shown done yet: each is shown once its restored transactions are handled.
    private var restoresEnded = 0

    public init(entitlements: Entitlements, verifier: ReceiptVerifier) {
        self.entitlements = entitlements
        self.verifier = verifier
        super.init()
        SKPaymentQueue.default().add(self)
        let request = SKProductsRequest(productIdentifiers: Self.productIdentifiers)
        request.delegate = self
        productsRequest = request
        request.start()
    }

    public func productsRequest(_ request: SKProductsRequest, didReceive response: SKProductsResponse) {
        for product in response.products { products[product.productIdentifier] = product }
    }

    public func paymentQueue(_ queue: SKPaymentQueue, updatedTransactions transactions: [SKPaymentTransaction]) {
        for transaction in transactions {
            switch transaction.transactionState {
            case .purchased, .restored:
                if transaction.transactionState == .restored, let identifier = transaction.transactionIdentifier {
                    restoredOutstanding.insert(identifier)
                }
                let waiting = transaction.downloads.filter { $0.state == .waiting }
                if !waiting.isEmpty { queue.start(waiting) }
                if transaction.downloads.allSatisfy({ Self.hasEnded($0.state) }) { check(transaction) }
            case .failed:
                queue.finishTransaction(transaction)
            case .purchasing, .deferred:
                break
            @unknown default:
                break
            }
        }
    }

    public func paymentQueue(_ queue: SKPaymentQueue, updatedDownloads downloads: [SKDownload]) {
        for download in downloads where Self.hasEnded(download.state) {
            // The content is ready (or will not come): once every download has ended, check and finish.
            let transaction = download.transaction
            if transaction.downloads.allSatisfy({ Self.hasEnded($0.state) }) { check(transaction) }
        }
    }

    public func paymentQueueRestoreCompletedTransactionsFinished(_ queue: SKPaymentQueue) {
        restoresEnded += 1
        showRestoreDoneWhenHandled()
    }

    private static func hasEnded(_ state: SKDownloadState) -> Bool {
        state == .finished || state == .failed || state == .cancelled
    }

    /// Has the server check the app receipt, read as on iOS, then credits and finishes.
    private func check(_ transaction: SKPaymentTransaction) {
        guard let identifier = transaction.transactionIdentifier, checks[identifier] == nil else { return }
        checks[identifier] = 1
        send(transaction, identifier)
    }

    private func send(_ transaction: SKPaymentTransaction, _ identifier: String) {
        guard let url = Bundle.main.appStoreReceiptURL, let receipt = try? Data(contentsOf: url) else { return }
        verifier.verify(receipt: receipt, transactionIdentifier: identifier) { [self] result in
            switch result {
            case .success(true):
                entitlements.credit(transaction.original?.transactionIdentifier ?? identifier)
                SKPaymentQueue.default().finishTransaction(transaction)
                checks[identifier] = nil
                restoredOutstanding.remove(identifier)
                showRestoreDoneWhenHandled()
            case .success(false):
                // The server says the receipt does not hold it: not credited, left for the next launch.
                checks[identifier] = nil
            case .failure:
                let count = checks[identifier, default: 0]
                guard count < Self.maximumChecks else { checks[identifier] = nil; return }
                checks[identifier] = count + 1
                send(transaction, identifier)
            }
        }
    }

    private func showRestoreDoneWhenHandled() {
        guard restoredOutstanding.isEmpty else { return }
        for _ in 0..<restoresEnded { entitlements.restoreShownDone() }
        restoresEnded = 0
    }
}
