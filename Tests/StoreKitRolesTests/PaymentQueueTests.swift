import Foundation
import Testing
import StoreKitModel
@testable import StoreKitRoles
import StoreKitTestKit

@Suite struct PaymentQueueTests {
    let coins = "com.example.sksim.coins.small"
    let forest = "com.example.sksim.levelpack.forest"

    @Test("R-Q7: add(payment) throws at once for an unknown product or a quantity of 0 or less")
    func localValidation() {
        let device = LoopbackDevice()
        #expect(throws: Rejection.self) { try device.paymentQueue.add(Payment(productIdentifier: "nope")) }
        #expect(throws: Rejection.self) { try device.paymentQueue.add(Payment(productIdentifier: coins, quantity: 0)) }
        #expect(device.paymentQueue.drainOutbox().isEmpty)
    }

    @Test("R-O1, R-Q7: an added payment reaches observers as purchasing, then purchased")
    func updatedTransactions() throws {
        let device = LoopbackDevice()
        let observer = device.launchWithObserver()
        try device.buy(coins)
        device.send(.decidePurchase(TransactionKey(device: "d1", number: 1), .purchased(charged: true)))
        #expect(observer.calls == ["updated:1=purchasing", "updated:1=purchased"])
    }

    @Test("R-Q8, R-O2: finishing a purchasing transaction throws; finishing a purchased one removes it")
    func finishAndRemoved() throws {
        let device = LoopbackDevice()
        _ = device.launchWithObserver()
        try device.buy(coins)
        let purchasing = try #require(device.paymentQueue.transactions.first)
        #expect(throws: Rejection.self) { try device.paymentQueue.finishTransaction(purchasing) }
        device.send(.decidePurchase(purchasing.key, .purchased(charged: true)))
        try device.paymentQueue.finishTransaction(device.paymentQueue.transactions[0])
        try device.paymentQueue.finishTransaction(device.paymentQueue.transactions[0])  // Twice is harmless.
        #expect(device.paymentQueue.drainOutbox() == [.finishTransaction(purchasing.key)])
    }

    @Test("R-Q3, R-Q6: transactions are undefined (empty) while no observer is attached")
    func transactionsNeedAnObserver() throws {
        let device = LoopbackDevice()
        device.launch()
        try device.paymentQueue.add(Payment(productIdentifier: coins))
        device.pump()
        #expect(device.paymentQueue.transactions.isEmpty)
        device.paymentQueue.add(RecordingObserver("o1"))
        device.pump()
        #expect(device.paymentQueue.transactions.count == 1)
    }

    @Test("R-Q4: after a relaunch every unfinished transaction is delivered again to the new observer")
    func relaunchDeliversAgain() throws {
        let device = LoopbackDevice()
        device.launch()
        let first = RecordingObserver("o1")
        device.paymentQueue.add(first)
        try device.paymentQueue.add(Payment(productIdentifier: coins))
        try device.paymentQueue.add(Payment(productIdentifier: coins))
        device.pump()
        device.send(.decidePurchase(TransactionKey(device: "d1", number: 1), .purchased(charged: true)))
        device.paymentQueue.terminateApp()
        device.pump()
        device.paymentQueue.enqueue(.launchApp(device: "d1"))
        let second = RecordingObserver("o1")
        device.paymentQueue.add(second)
        device.pump()
        #expect(second.calls == ["updated:1=purchased,2=purchasing"])
    }

    @Test("R-Q3, R-Q4: an observer attached late, beside one attached at launch, hears every unfinished transaction as it attaches")
    func lateObserverHearsUnfinished() throws {
        let device = LoopbackDevice()
        let first = device.launchWithObserver("o1")
        try device.buy(coins)
        try device.buy(coins)
        device.send(.decidePurchase(TransactionKey(device: "d1", number: 1), .purchased(charged: true)))
        let late = RecordingObserver("late")
        device.paymentQueue.add(late)
        device.pump()
        #expect(late.calls == ["updated:1=purchased,2=purchasing"])
        #expect(first.calls == ["updated:1=purchasing", "updated:2=purchasing", "updated:1=purchased"])
    }

    @Test("R-Q5: every attached observer hears each change, in an order drawn from the seed")
    func severalObservers() throws {
        var orders: Set<[String]> = []
        for seed in 1...20 as ClosedRange<UInt64> {
            let device = LoopbackDevice(seed: seed)
            device.launch()
            var heard: [String] = []
            final class Tap: NSObject, SKPaymentTransactionObserver {
                let name: String
                let record: (String) -> Void
                init(_ name: String, _ record: @escaping (String) -> Void) { self.name = name; self.record = record }
                func paymentQueue(_ queue: SKPaymentQueue, updatedTransactions transactions: [SKPaymentTransaction]) { record(name) }
            }
            for name in ["a", "b", "c"] { device.paymentQueue.add(Tap(name) { heard.append($0) }, named: name) }
            device.pump()
            try device.paymentQueue.add(Payment(productIdentifier: coins))
            device.pump()
            #expect(Set(heard) == ["a", "b", "c"] && heard.count == 3)
            orders.insert(heard)
        }
        #expect(orders.count > 1)
    }

    @Test("R-Q5: several observers finishing the same transaction send one finish and nothing breaks")
    func severalObserversFinish() throws {
        let device = LoopbackDevice()
        device.launch()
        let first = RecordingObserver("o1", finishOnCompletion: true)
        let second = RecordingObserver("o2", finishOnCompletion: true)
        device.paymentQueue.add(first)
        device.paymentQueue.add(second)
        try device.paymentQueue.add(Payment(productIdentifier: coins))
        device.pump()
        device.send(.decidePurchase(TransactionKey(device: "d1", number: 1), .purchased(charged: true)))
        device.pump()
        #expect(device.harness.projection.totals.finished == 1)
        #expect(device.harness.projection.totals.rejections == 0)
        #expect(first.removed.count == 1 && second.removed.count == 1)
    }

    @Test("R-O3: restore ends with restoreCompletedTransactionsFinished, or Failed with the error")
    func restoreCallbacks() {
        let device = LoopbackDevice()
        let observer = device.launchWithObserver()
        device.paymentQueue.restoreCompletedTransactions(applicationUsername: "a1")
        device.pump()
        device.send(.completeRestore(device: "d1", restore: 1, firstIndex: 0, originals: [], isLast: true))
        device.paymentQueue.restoreCompletedTransactions()
        device.pump()
        device.send(.failRestore(device: "d1", restore: 2, error: StoreError(.unknown, "offline")))
        #expect(observer.calls == ["restoreFinished", "restoreFailed:unknown"])
    }

    @Test("R-O4, R-D2: every download state change and progress is reported through updatedDownloads")
    func downloadCallbacks() throws {
        let device = LoopbackDevice()
        let observer = device.launchWithObserver()
        try device.buy(forest)
        let key = TransactionKey(device: "d1", number: 1)
        device.send(.decidePurchase(key, .purchased(charged: true)))
        device.paymentQueue.start(device.paymentQueue.transactions[0].downloads)
        device.pump()
        let download = DownloadKey(transaction: key, index: 0)
        device.send(.reportDownloadProgress(download, progress: 0.5, timeRemaining: 1))
        device.paymentQueue.pause(device.paymentQueue.transactions[0].downloads)
        device.pump()
        device.paymentQueue.resume(device.paymentQueue.transactions[0].downloads)
        device.pump()
        device.send(.completeDownload(download, contentURL: "/tmp/x"))
        #expect(observer.calls.filter { $0.hasPrefix("downloads") }
                == ["downloads:0=active", "downloads:0=active", "downloads:0=paused", "downloads:0=active", "downloads:0=finished"])
        #expect(observer.downloads.last?.contentURL == "/tmp/x")
    }

    @Test("R-Q1: canMakePayments follows the device's setting")
    func canMakePayments() {
        let device = LoopbackDevice()
        device.launch()
        #expect(device.paymentQueue.canMakePayments)
        device.send(.setPaymentsAllowed(device: "d1", allowed: false))
        #expect(!device.paymentQueue.canMakePayments)
    }
}
