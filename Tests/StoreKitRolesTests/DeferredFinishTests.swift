import StoreKitModel
import StoreKitRoles
import StoreKitTestKit
import Testing

/// A finish the queue refuses must not stop the app's later, correct finish of the same transaction.
@Suite struct DeferredFinishTests {
    @Test("R-Q8, R-T1: a deferred transaction finished too early is refused, and its finish after approval is sent and removes it")
    func finishAfterApprovalIsSent() throws {
        let device = LoopbackDevice()
        let observer = RecordingObserver("o1")
        device.launch(with: observer)
        try device.buy("com.example.sksim.coins.small")
        let key = TransactionKey(device: "d1", number: 1)
        device.send(.decidePurchase(key, .deferred))
        let deferred = try #require(device.paymentQueue.transactions.first)
        #expect(deferred.transactionState == .deferred)
        // The app's mistake: StoreKit refuses it, and the queue logs the refusal.
        try device.paymentQueue.finishTransaction(deferred)
        device.pump()
        #expect(device.events.contains { if case .commandRejected = $0.event { true } else { false } })
        device.send(.decidePurchase(key, .purchased(charged: true)))
        let purchased = try #require(device.paymentQueue.transactions.first)
        #expect(purchased.transactionState == .purchased)
        // The correct finish, after approval: it must reach the queue and remove the transaction.
        try device.paymentQueue.finishTransaction(purchased)
        device.pump()
        #expect(device.events.contains { $0.event == .transactionFinished(key) })
        #expect(observer.calls.last == "removed:1")
        #expect(device.paymentQueue.transactions.isEmpty)
    }
}
