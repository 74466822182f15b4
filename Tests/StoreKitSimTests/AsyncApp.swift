// An app that checks purchases with its server in a task, written as for iOS.
#if canImport(StoreKit)
import Foundation
import StoreKit
#else
import StoreKitSim
#endif

/// The app's server client, async (on iOS, `URLSession.data(for:)`).
protocol AsyncServer: AnyObject, Sendable {
    func check(transactionIdentifier: String) async -> Bool
}

/// Checks each purchase with the server in a task, then credits and finishes it.
class AsyncObserver: NSObject, SKPaymentTransactionObserver, @unchecked Sendable {
    let store: EntitlementStore
    let server: AsyncServer
    private var checking: Set<String> = []

    init(store: EntitlementStore, server: AsyncServer) {
        self.store = store
        self.server = server
        super.init()
        SKPaymentQueue.default().add(self)
    }

    func paymentQueue(_ queue: SKPaymentQueue, updatedTransactions transactions: [SKPaymentTransaction]) {
        for transaction in transactions {
            switch transaction.transactionState {
            case .purchased, .restored:
                guard let identifier = transaction.transactionIdentifier, checking.insert(identifier).inserted else { continue }
                Task { await self.complete(transaction, identifier) }
            case .failed:
                queue.finishTransaction(transaction)
            default:
                break
            }
        }
    }

    func complete(_ transaction: SKPaymentTransaction, _ identifier: String) async {
        // A failed check is tried again until it succeeds (bounded: the next launch delivers it again).
        for _ in 0..<10 where await server.check(transactionIdentifier: identifier) {
            let purchase = transaction.original?.transactionIdentifier ?? identifier
            if store.credits[purchase, default: 0] == 0 { store.credits[purchase] = 1 }
            SKPaymentQueue.default().finishTransaction(transaction)
            break
        }
        checking.remove(identifier)
    }
}

/// A bug from the field: finishes as soon as the check is sent, credits when it answers.
final class FinishesWhileChecking: AsyncObserver, @unchecked Sendable {
    override func complete(_ transaction: SKPaymentTransaction, _ identifier: String) async {
        SKPaymentQueue.default().finishTransaction(transaction)
        if await server.check(transactionIdentifier: identifier) {
            store.credits[transaction.original?.transactionIdentifier ?? identifier] = 1
        }
    }
}
