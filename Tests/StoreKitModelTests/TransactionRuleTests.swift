import StoreKitTestKit
import Testing
@testable import StoreKitModel

@Suite struct TransactionRuleTests {
    @Test("R-T1: purchasing may become deferred, then purchased; a completed transaction never changes state")
    func stateMachine() {
        var queue = QueueHarness()
        queue.ready()
        let key = queue.buy(SampleProducts.coins)
        queue.send(.decidePurchase(key, .deferred))
        #expect(queue.transaction(key)?.transactionState == .deferred)
        #expect(queue.rejection(queue.send(.decidePurchase(key, .deferred))) == .transactionNotAwaitingStore)
        queue.send(.decidePurchase(key, .purchased(charged: true)))
        #expect(queue.transaction(key)?.transactionState == .purchased)
        #expect(queue.rejection(queue.send(.decidePurchase(key, .failed(StoreError(.unknown, "late"))))) == .transactionNotAwaitingStore)
        #expect(queue.transaction(key)?.transactionState == .purchased)
    }

    @Test("R-T2: identifier, date and downloads only when purchased; error only when failed")
    func fieldsByState() {
        var queue = QueueHarness()
        queue.ready()
        let key = queue.buy(SampleProducts.forest)
        var transaction = queue.transaction(key)
        #expect(transaction?.transactionIdentifier == nil && transaction?.transactionDate == nil)
        #expect(transaction?.downloads.isEmpty == true && transaction?.error == nil)
        queue.send(.decidePurchase(key, .purchased(charged: true)))
        transaction = queue.transaction(key)
        #expect(transaction?.transactionIdentifier != nil)
        #expect(transaction?.transactionDate == queue.recorded.last?.timestamp)
        #expect(transaction?.downloads.count == 1)
        #expect(transaction?.error == nil && transaction?.originalTransaction == nil)
        let failedKey = queue.buy(SampleProducts.coins)
        queue.send(.decidePurchase(failedKey, .failed(StoreError(.paymentInvalid, "bad"))))
        let failed = queue.transaction(failedKey)
        #expect(failed?.error?.code == .paymentInvalid)
        #expect(failed?.transactionIdentifier == nil && failed?.downloads.isEmpty == true)
    }

    @Test("R-T3: every processed payment gets its own identifier")
    func uniqueIdentifiers() {
        var queue = QueueHarness()
        queue.ready()
        let keys = (0..<20).map { _ in queue.purchase(SampleProducts.coins) }
        let identifiers = keys.compactMap { queue.transaction($0)?.transactionIdentifier }
        #expect(identifiers.count == 20)
        #expect(Set(identifiers).count == 20)
    }

    @Test("R-T4: finishing cancels downloads still running; afterwards they can no longer be queued")
    func finishEndsDownloads() {
        var queue = QueueHarness()
        queue.ready()
        let key = queue.purchase(SampleProducts.desert)
        let first = DownloadKey(transaction: key, index: 0)
        queue.send(.startDownloads([first]))
        #expect(queue.send(.finishTransaction(key)) == .accept([.downloadCancelled(first), .transactionFinished(key)]))
        let second = DownloadKey(transaction: key, index: 1)
        #expect(queue.rejection(queue.send(.startDownloads([second]))) == .downloadNotAllowed)
    }
}
