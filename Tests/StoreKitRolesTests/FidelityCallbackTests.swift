import Foundation
import Testing
import StoreKitModel
import StoreKitRoles
import StoreKitRuntime
import StoreKitSimulation
import StoreKitTestKit

/// Several transactions per `updatedTransactions` call (F-C1) and interrupted purchases (F-I1);
/// docs/storekit-fidelity.md.
@Suite struct FidelityCallbackTests {
    /// Buys each product, finishing it, and returns the purchases as originals a restore brings back.
    private func purchased(_ products: [String], on device: LoopbackDevice, observer: RecordingObserver) throws -> [OriginalTransaction] {
        var originals: [OriginalTransaction] = []
        for product in products {
            try device.buy(product)
            let key = try #require(device.paymentQueue.transactions.last?.key)
            device.send(.decidePurchase(key, .purchased(charged: true)))
            let bought = try #require(observer.updated.last { $0.key == key && $0.transactionState == .purchased })
            originals.append(try #require(StoreTestSession.original(of: bought)))
        }
        return originals
    }

    @Test("F-C1: a restore's transactions reach each observer together, in one updatedTransactions call, before restoreCompletedTransactionsFinished")
    func restoreInOneCall() throws {
        let device = LoopbackDevice()
        let observer = device.launchWithObserver(finishOnCompletion: true)
        let originals = try purchased([SampleProducts.removeAds, SampleProducts.forest, SampleProducts.desert], on: device, observer: observer)
        observer.calls.removeAll()
        device.paymentQueue.restoreCompletedTransactions(applicationUsername: "a1")
        device.pump()
        device.send(.completeRestore(device: "d1", restore: 1, firstIndex: 0, originals: originals, isLast: true))
        #expect(observer.calls.prefix(2) == ["updated:4=restored,5=restored,6=restored", "restoreFinished"])
        #expect(observer.calls.filter { $0.hasPrefix("updated:") }.count == 1)
    }

    @Test("F-C1: each piece of a long restore is one call, told once the piece's command has ended")
    func restorePiecesEachOneCall() throws {
        let device = LoopbackDevice()
        let observer = device.launchWithObserver()
        let originals = try purchased([SampleProducts.removeAds, SampleProducts.forest, SampleProducts.desert], on: device, observer: observer)
        observer.calls.removeAll()
        device.paymentQueue.restoreCompletedTransactions(applicationUsername: "a1")
        device.pump()
        device.send(.completeRestore(device: "d1", restore: 1, firstIndex: 0, originals: Array(originals[0..<2]), isLast: false))
        // The piece's last event gives no sign that the command ended; the next event of the device does.
        #expect(observer.calls.isEmpty)
        device.send(.completeRestore(device: "d1", restore: 1, firstIndex: 2, originals: [originals[2]], isLast: true))
        #expect(observer.calls == ["updated:4=restored,5=restored", "updated:6=restored", "restoreFinished"])
    }

    @Test("F-C1: a transaction alone in its command is still told at once, in a call of its own (R-O1)")
    func singleUpdateAtOnce() throws {
        let device = LoopbackDevice()
        let observer = device.launchWithObserver()
        try device.buy(SampleProducts.coins)
        #expect(observer.calls == ["updated:1=purchasing"])
        device.send(.decidePurchase(TransactionKey(device: "d1", number: 1), .purchased(charged: true)))
        #expect(observer.calls == ["updated:1=purchasing", "updated:1=purchased"])
    }

    @Test("F-C1: in a whole run, restores reach the observers several transactions per call, and the run stays valid")
    func wholeRunBatchesRestores() throws {
        final class Sizes: @unchecked Sendable { var restoredPerCall: [Int] = [] }
        let sizes = Sizes()
        /// The app's disk: what it credited, by the purchase each credit is for.
        final class Credits: @unchecked Sendable {
            var granted: Set<String> = []
            var credits: [String: Int] = [:]
        }
        final class Counting: NSObject, SKPaymentTransactionObserver {
            let sizes: Sizes
            let store: Credits
            init(_ sizes: Sizes, _ store: Credits) {
                self.sizes = sizes
                self.store = store
                super.init()
                SKPaymentQueue.default().add(self)
            }
            func paymentQueue(_ queue: SKPaymentQueue, updatedTransactions transactions: [SKPaymentTransaction]) {
                let restored = transactions.filter { $0.transactionState == .restored }
                if !restored.isEmpty { sizes.restoredPerCall.append(restored.count) }
                for transaction in transactions where [.purchased, .restored, .failed].contains(transaction.transactionState) {
                    if let identifier = transaction.transactionIdentifier, store.granted.insert(identifier).inserted {
                        store.credits[transaction.original?.transactionIdentifier ?? identifier, default: 0] += 1
                    }
                    queue.finishTransaction(transaction)
                }
            }
        }
        var scenario = Scenario(seed: 5, devices: 4)
        scenario.apps.purchasesPerDevice = 8
        let app = SimulatedApp(storage: { Credits() }, belief: { AppBelief(credits: $0.credits) }, launch: { Counting(sizes, $0) })
        scenario.hooks = AppHooks(appLaunch: app.launch)
        let report = try DeterministicRuntime(scenario: scenario, environment: .inMemory(seed: scenario.seed)).run()
        #expect(report.violations.isEmpty)
        #expect(sizes.restoredPerCall.contains { $0 > 1 }, "\(sizes.restoredPerCall)")
        #expect(sizes.restoredPerCall.reduce(0, +) == report.totals.restored)
    }

    // MARK: Interrupted purchases (F-I1)

    @Test("F-I1: an interrupted purchase fails with paymentCancelled; once resumed, a new transaction arrives purchased, with no purchasing callback")
    func interruptedThenPurchased() throws {
        let device = LoopbackDevice()
        let observer = device.launchWithObserver()
        try device.buy(SampleProducts.removeAds)
        let key = TransactionKey(device: "d1", number: 1)
        device.send(StoreTestSession.interrupt(key))
        let failed = try #require(observer.updated.first { $0.transactionState == .failed })
        #expect(failed.error?.code == .paymentCancelled)
        device.send(StoreTestSession.resolveIssue(failed))
        #expect(observer.calls == ["updated:1=purchasing", "updated:1=failed", "updated:2=purchased"])
        let resumed = try #require(observer.updated.last)
        #expect(resumed.payment.productIdentifier == SampleProducts.removeAds)
        #expect(resumed.transactionIdentifier == "d1.2")
        #expect(device.events.suffix(3).map(\.event.name) == ["interruptedPurchaseResumed", "transactionAdded", "transactionPurchased"])
    }

    @Test("F-I1: only a failed purchase of the device resumes, and only once")
    func resumeRules() throws {
        var harness = QueueHarness()
        harness.ready()
        let key = harness.buy(SampleProducts.removeAds)
        let payment = try #require(harness.transaction(key)?.payment)
        let resume = CommandBody.resumeInterruptedPurchase(device: "d1", interrupted: key, payment: payment, charged: true)
        #expect(harness.rejection(harness.send(resume)) == .transactionNotAwaitingStore)  // still purchasing
        harness.send(StoreTestSession.interrupt(key))
        harness.send(.finishTransaction(key))  // apps finish failed transactions; it resumes all the same
        guard case .accept(let events) = harness.send(resume) else { Issue.record("resume refused"); return }
        #expect(events.map(\.name) == ["interruptedPurchaseResumed", "transactionAdded", "transactionPurchased"])
        #expect(harness.rejection(harness.send(resume)) == .invalidArgument)  // once
        let unknown = TransactionKey(device: "d1", number: 99)
        #expect(harness.rejection(harness.send(.resumeInterruptedPurchase(device: "d1", interrupted: unknown, payment: payment, charged: true)))
                == .transactionNotFound)
        #expect(harness.projection.device("d1")?.paymentsAdded == 1)  // the user added one payment
    }

    @Test("F-I1: store.interruptedPurchaseProbability interrupts purchases in a whole run; resolved ones are bought after all")
    func wholeRunInterrupts() throws {
        var scenario = Scenario(seed: 9, devices: 4)
        scenario.store.interruptedPurchaseProbability = 0.5
        scenario.store.interruptionResolvedProbability = 0.5
        let environment = DeterministicEnvironment.inMemory(seed: scenario.seed)
        let report = try DeterministicRuntime(scenario: scenario, environment: environment).run()
        #expect(report.violations.isEmpty)
        var interrupted = 0
        var resumed = 0
        try environment.storage.forEachRecord(from: 1) { _, _, payload in
            switch try EventCodec.decodeEvent(payload).event {
            case .transactionFailed(_, let error) where error.message.contains("interrupted"): interrupted += 1
            case .interruptedPurchaseResumed: resumed += 1
            default: break
            }
        }
        #expect(interrupted > 0)
        #expect(resumed > 0 && resumed < interrupted)
        #expect(report.totals.failuresByCode[.paymentCancelled] ?? 0 >= interrupted)
    }

    @Test("F-I1: a .storekit file's _interruptedPurchasesEnabled interrupts every purchase")
    func fileSettingInterruptsEvery() throws {
        var catalog = Catalog.sample
        catalog.testSettings.interruptedPurchasesEnabled = true
        var scenario = Scenario(seed: 2, devices: 2, catalog: catalog)
        scenario.store.interruptionResolvedProbability = 0
        scenario.store.deferralProbability = 0
        let report = try DeterministicRuntime(scenario: scenario, environment: .inMemory(seed: scenario.seed)).run()
        #expect(report.violations.isEmpty)
        #expect(report.totals.purchased == 0)
        #expect(report.totals.failed > 0)
        #expect(report.totals.failuresByCode[.paymentCancelled] == report.totals.failed)
    }

    @Test("F-I1: an out-of-range interruption probability is refused with its key")
    func validation() {
        var behavior = StoreBehavior()
        behavior.interruptedPurchaseProbability = 1.5
        let error = #expect(throws: ConfigurationError.self) { try behavior.validate() }
        #expect(error?.code == .outOfRange && error?.message.hasPrefix("store.interruptedPurchaseProbability ") == true)
    }
}
