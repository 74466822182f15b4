import StoreKitTestKit
import Testing
@testable import StoreKitModel

@Suite struct RestoreRuleTests {
    /// A store projection fed with the harness's events, as the store role would be.
    private func store(of queue: QueueHarness) -> StoreProjection {
        var store = StoreProjection()
        for record in queue.recorded { store.apply(record, catalog: queue.catalog) }
        return store
    }

    private func restore(_ queue: inout QueueHarness, device: String, username: String? = nil) -> [Event] {
        guard case .accept(let started) = queue.send(.restoreCompletedTransactions(device: device, applicationUsername: username)),
              case .restoreStarted(_, let number, _) = started.first else { return [] }
        let store = store(of: queue)
        let account = store.account(device: device, applicationUsername: username)!
        guard case .accept(let events) = queue.send(.completeRestore(device: device, restore: number, firstIndex: 0,
                                                                        originals: store.history(of: account).restorable, isLast: true)) else { return [] }
        return events
    }

    @Test("R-Q9: restoring adds a new restored transaction per restorable purchase, with a copy of the original, then finishes")
    func restoreCreatesTransactions() {
        var queue = QueueHarness()
        queue.ready("d1", account: "a1")
        let removeAds = queue.purchase(SampleProducts.removeAds)
        _ = queue.purchase(SampleProducts.coins)  // Consumable: not restorable.
        let originalIdentifier = queue.transaction(removeAds)!.transactionIdentifier!
        queue.ready("d2", account: "a1")
        let events = restore(&queue, device: "d2")
        #expect(events.count == 2)
        guard case .transactionRestored(let key, _, let identifier, let original, _) = events.first,
              case .restoreFinished = events.last else {
            Issue.record("expected one restored transaction then restoreFinished, got \(events)")
            return
        }
        #expect(original.transactionIdentifier == originalIdentifier)
        #expect(original.payment.productIdentifier == SampleProducts.removeAds)
        #expect(identifier != originalIdentifier)  // R-T3: a restored transaction has its own identifier.
        let restored = queue.transaction(key)
        #expect(restored?.transactionState == .restored)
        #expect(restored?.originalTransaction?.transactionIdentifier == originalIdentifier)
    }

    @Test("R-Q10: applicationUsername selects whose purchases are restored")
    func applicationUsernameSelectsAccount() {
        var queue = QueueHarness()
        queue.ready("d1", account: "a1")
        queue.send(.addPayment(device: "d1", payment: Payment(productIdentifier: SampleProducts.removeAds, applicationUsername: "player-7")))
        queue.send(.decidePurchase(TransactionKey(device: "d1", number: 1), .purchased(charged: true)))
        queue.ready("d2", account: "a2")
        #expect(restore(&queue, device: "d2").count == 1)  // a2 owns nothing: only restoreFinished.
        #expect(restore(&queue, device: "d2", username: "player-7").count == 2)
    }

    @Test("R-R3: restoring twice yields two restored transactions per original")
    func restoreTwice() {
        var queue = QueueHarness()
        queue.ready()
        _ = queue.purchase(SampleProducts.removeAds)
        _ = queue.purchase(SampleProducts.forest)
        let first = restore(&queue, device: "d1").filter { if case .transactionRestored = $0 { true } else { false } }
        let second = restore(&queue, device: "d1").filter { if case .transactionRestored = $0 { true } else { false } }
        #expect(first.count == 2 && second.count == 2)
        #expect(queue.projection.totals.restored == 4)
    }

    @Test("R-R4: buying an owned non-consumable again is an ordinary, uncharged purchase, not a restore")
    func rebuyIsNotCharged() {
        var queue = QueueHarness()
        queue.ready()
        _ = queue.purchase(SampleProducts.removeAds)
        let again = queue.buy(SampleProducts.removeAds)
        let store = store(of: queue)
        #expect(store.history(of: "a1").ownedNonConsumables.contains(SampleProducts.removeAds))
        queue.send(.decidePurchase(again, .purchased(charged: false)))
        #expect(queue.transaction(again)?.transactionState == .purchased)
        #expect(queue.transaction(again)?.charged == false)
        #expect(self.store(of: queue).history(of: "a1").restorable.count == 1)
    }

    @Test("R-R2: refreshing the receipt lists every purchase of the account, creates no transactions, and is idempotent")
    func receiptRefresh() {
        var queue = QueueHarness()
        queue.ready("d1", account: "a1")
        queue.ready("d2", account: "a1")
        _ = queue.purchase(SampleProducts.removeAds, device: "d1")
        _ = queue.purchase(SampleProducts.monthly, device: "d2")
        let store = store(of: queue)
        let pendingBefore = queue.projection.pendingCount
        let once = store.receipt(of: "a1")
        let twice = store.receipt(of: "a1")
        #expect(once == twice)
        #expect(once.purchases.map(\.payment.productIdentifier).sorted() == [SampleProducts.monthly, SampleProducts.removeAds].sorted())
        #expect(queue.projection.pendingCount == pendingBefore)
    }

    @Test("A restore completes only while in progress, and a consumable is never restored (R-Q9)")
    func restoreValidation() {
        var queue = QueueHarness()
        queue.ready()
        #expect(queue.rejection(queue.send(.completeRestore(device: "d1", restore: 5, firstIndex: 0, originals: [], isLast: true))) == .restoreNotInProgress)
        queue.send(.restoreCompletedTransactions(device: "d1", applicationUsername: nil))
        let consumable = OriginalTransaction(transactionIdentifier: "x", payment: Payment(productIdentifier: SampleProducts.coins), transactionDate: 0)
        #expect(queue.rejection(queue.send(.completeRestore(device: "d1", restore: 1, firstIndex: 0, originals: [consumable], isLast: true))) == .invalidArgument)
        queue.send(.failRestore(device: "d1", restore: 1, error: StoreError(.unknown, "no")))
        #expect(queue.projection.totals.restoresFailed == 1)
    }
}
