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
    private var restoredOutstanding: Set<String> = []
    /// Restores that ended and are not shown done yet: each is shown once its restored transactions are handled.
    private var restoresEnded = 0

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
                if transaction.transactionState == .restored { restoredOutstanding.insert(identifier) }
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
            if restoredOutstanding.remove(identifier) != nil { showRestoreDoneWhenHandled() }
            break
        }
        checking.remove(identifier)
    }

    func paymentQueueRestoreCompletedTransactionsFinished(_ queue: SKPaymentQueue) {
        restoresEnded += 1
        showRestoreDoneWhenHandled()
    }

    private func showRestoreDoneWhenHandled() {
        guard restoredOutstanding.isEmpty else { return }
        for _ in 0..<restoresEnded { store.restoresShownDone += 1 }
        restoresEnded = 0
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
