import Foundation
import StoreKitExplore
import StoreKitModel
import StoreKitRoles
import StoreKitTestKit
import Testing

/// Observers that misuse the queue, as users' code does, written on Apple's API and given to the
/// explorer as an app's code (`SimulatedApp`), the way Examples/ObserverExploration does. Misuse that
/// Apple's API has no way to make (forged store commands, made-up transactions, names the queue
/// refuses) reaches the device's queue below it (`SKPaymentQueue.simulatedQueue`). Each exploration must
/// end within its budget, with a violation or without one, never with a crash or a hang.
@Suite struct BuggyObserverTests {
    /// Grants and finishes like a correct observer, then does `extra` in the callback. It records its
    /// grants, failures and restores shown on the queue below Apple's API: the app has no storage the
    /// explorer reads.
    class Base: NSObject, SKPaymentTransactionObserver {
        let name: String
        init(_ name: String) { self.name = name }

        func paymentQueue(_ queue: SKPaymentQueue, updatedTransactions transactions: [SKPaymentTransaction]) {
            guard let simulated = queue.simulatedQueue else { return }
            for object in transactions where object.value.transactionState.isComplete {
                let transaction = object.value
                if transaction.transactionState.isPaid, !simulated.wasGranted(transaction) { simulated.contentGranted(transaction) }
                if transaction.transactionState == .failed { simulated.failureShown(transaction) }
                finish(queue, object)
            }
            extra(queue, transactions)
        }

        func finish(_ queue: SKPaymentQueue, _ transaction: SKPaymentTransaction) { queue.finishTransaction(transaction) }
        func extra(_ queue: SKPaymentQueue, _ transactions: [SKPaymentTransaction]) {}
        // Declared here so that subclasses override them: a subclass's own method would not be the
        // protocol's witness (the extension's empty default would be called instead).
        func paymentQueue(_ queue: SKPaymentQueue, removedTransactions transactions: [SKPaymentTransaction]) {}
        /// Shows each restore done once (restore-done-once); no restore here restores content to wait for.
        func paymentQueueRestoreCompletedTransactionsFinished(_ queue: SKPaymentQueue) { queue.simulatedQueue?.restoreShownDone() }
        func paymentQueue(_ queue: SKPaymentQueue, restoreCompletedTransactionsFailedWithError error: any Error) {}
    }

    /// The app of a test: at each launch it attaches the observers `make` gives for the device, each
    /// under its own name, and holds them for the launch.
    final class ObserversApp {
        let observers: [Base]
        init(_ make: (_ device: String) -> [Base]) {
            let queue = SKPaymentQueue.default()
            observers = make(queue.simulatedQueue?.device ?? "")
            for observer in observers { queue.add(observer, named: observer.name) }
        }
    }

    /// Finishes every complete transaction twice, and each one again when it is removed.
    final class FinishesTwice: Base {
        override func finish(_ queue: SKPaymentQueue, _ transaction: SKPaymentTransaction) {
            queue.finishTransaction(transaction)
            queue.finishTransaction(transaction)
        }
        override func paymentQueue(_ queue: SKPaymentQueue, removedTransactions transactions: [SKPaymentTransaction]) {
            for transaction in transactions { queue.finishTransaction(transaction) }
        }
    }

    /// Finishes made-up transactions: of a device that does not exist, of a number never used,
    /// and a purchasing one (StoreKit's documented exception: refused with a `Rejection`).
    final class FinishesMadeUp: Base {
        nonisolated(unsafe) static var refusals = 0
        override func extra(_ queue: SKPaymentQueue, _ transactions: [SKPaymentTransaction]) {
            guard let simulated = queue.simulatedQueue else { return }
            for device in ["ghost", simulated.device] {
                var madeUp = PaymentTransaction(key: TransactionKey(device: device, number: 9_999),
                                                payment: Payment(productIdentifier: SampleProducts.coins))
                madeUp.transactionState = .purchased
                try? simulated.finishTransaction(madeUp)
                madeUp.transactionState = .purchasing
                do { try simulated.finishTransaction(madeUp) } catch { Self.refusals += 1 }
            }
            for transaction in transactions where transaction.transactionState == .purchasing {
                do { try simulated.finishTransaction(transaction.value) } catch { Self.refusals += 1 }
            }
        }
    }

    /// Adds another payment from inside every callback: a purchase loop with no end of its own.
    final class AddsInLoop: Base {
        override func extra(_ queue: SKPaymentQueue, _ transactions: [SKPaymentTransaction]) {
            let payment = SKMutablePayment()
            payment.productIdentifier = SampleProducts.coins
            queue.add(payment)
        }
    }

    /// Restores at its first callback, then again whenever a restore ends, finished or failed.
    final class RestoresInLoop: Base {
        var started = false
        override func extra(_ queue: SKPaymentQueue, _ transactions: [SKPaymentTransaction]) {
            guard !started else { return }
            started = true
            queue.restoreCompletedTransactions()
        }
        override func paymentQueueRestoreCompletedTransactionsFinished(_ queue: SKPaymentQueue) { queue.restoreCompletedTransactions() }
        override func paymentQueue(_ queue: SKPaymentQueue, restoreCompletedTransactionsFailedWithError error: any Error) {
            queue.restoreCompletedTransactions()
        }
    }

    /// Handles only the first transaction of each call and throws the others away (a restore
    /// tells several in one call, F-C1).
    final class HandlesFirstOnly: Base {
        override func paymentQueue(_ queue: SKPaymentQueue, updatedTransactions transactions: [SKPaymentTransaction]) {
            super.paymentQueue(queue, updatedTransactions: Array(transactions.prefix(1)))
        }
    }

    /// Takes its time over every callback (5 ms of wall-clock time).
    final class Slow: Base {
        override func extra(_ queue: SKPaymentQueue, _ transactions: [SKPaymentTransaction]) { Thread.sleep(forTimeInterval: 0.005) }
    }

    /// Never finishes, never grants.
    final class NeverFinishes: Base {
        init() { super.init("lazy") }
        override func paymentQueue(_ queue: SKPaymentQueue, updatedTransactions transactions: [SKPaymentTransaction]) {}
        override func paymentQueueRestoreCompletedTransactionsFinished(_ queue: SKPaymentQueue) {}
    }

    /// Detaches itself and attaches again inside its callback.
    final class Reattaches: Base {
        override func extra(_ queue: SKPaymentQueue, _ transactions: [SKPaymentTransaction]) {
            queue.remove(self)
            queue.add(self, named: name)
        }
    }

    /// Adds a second observer of its own name inside its callback.
    final class AddsNamesake: Base {
        override func extra(_ queue: SKPaymentQueue, _ transactions: [SKPaymentTransaction]) { queue.add(Base(name), named: name) }
    }

    /// Plays the other roles from inside its callbacks through the queue's `enqueue`: approves its own
    /// purchases and fails its own restores as the store would, finishes its downloads as the
    /// downloader would, launches the app again and registers the device again.
    final class Meddler: Base {
        var meddled = 0
        override func extra(_ queue: SKPaymentQueue, _ transactions: [SKPaymentTransaction]) {
            guard meddled < 20, let simulated = queue.simulatedQueue else { return }
            meddled += 1
            for transaction in transactions.map(\.value) {
                if transaction.transactionState == .purchasing { simulated.enqueue(.decidePurchase(transaction.key, .purchased(charged: false))) }
                for download in transaction.downloads { simulated.enqueue(.completeDownload(download.key, contentURL: "content/forged")) }
            }
            simulated.enqueue(.launchApp(device: simulated.device))
            simulated.enqueue(.registerDevice(device: simulated.device, account: "someone-else"))
            simulated.enqueue(.failRestore(device: simulated.device, restore: 1, error: StoreError(.unknown, "forged")))
        }
    }

    /// Quits the app from inside its callback (the OS's call, on the queue below Apple's API).
    final class Quits: Base {
        var quits = 0
        override func extra(_ queue: SKPaymentQueue, _ transactions: [SKPaymentTransaction]) {
            guard quits < 3 else { return }
            quits += 1
            queue.simulatedQueue?.terminateApp()
        }
    }

    /// All devices share one store of transactions: each observer finishes what it saw on
    /// other devices through their queues.
    final class Shared: @unchecked Sendable {
        let lock = NSLock()
        var queues: [PaymentQueue] = []
        var seen: [PaymentTransaction] = []
    }
    final class CrossDevice: Base {
        let shared: Shared
        init(_ shared: Shared) {
            self.shared = shared
            super.init("cross")
        }
        override func extra(_ queue: SKPaymentQueue, _ transactions: [SKPaymentTransaction]) {
            guard let simulated = queue.simulatedQueue else { return }
            shared.lock.lock()
            defer { shared.lock.unlock() }
            if !shared.queues.contains(where: { $0 === simulated }) { shared.queues.append(simulated) }
            for other in shared.queues where other !== simulated {
                for transaction in shared.seen { try? other.finishTransaction(transaction) }
                if other.transactions.isEmpty { other.restoreCompletedTransactions() }
            }
            for transaction in transactions { queue.finishTransaction(transaction) }
            shared.seen = Array((shared.seen + transactions.map(\.value)).suffix(8))
        }
    }

    static func explorer(devices: Int = 2, purchasesPerDevice: Int = 2, _ make: @escaping @Sendable (String) -> [Base]) -> Explorer {
        Explorer(scenario: .exploration(devices: devices, purchasesPerDevice: purchasesPerDevice),
                 appLaunch: SimulatedApp { ObserversApp(make) }.launch)
    }

    static func explore(_ make: @escaping @Sendable (String) -> [Base], schedules: Int = 40,
                        seconds: Double = 60) throws -> ExplorationReport {
        var explorer = explorer(make)
        explorer.shrinkStepLimit = 20_000
        let report = try explorer.explore(strategy: .random, budget: ExplorationBudget(schedules: schedules, seconds: seconds), seed: 1)
        print(report.summary)
        return report
    }

    @Test("Finishing twice, and again in removedTransactions, is harmless (R-Q8): no violation")
    func finishesTwice() throws {
        let report = try Self.explore { _ in [FinishesTwice("twice")] }
        #expect(report.schedules == 40 && report.violations.isEmpty, "\(report.summary)")
    }

    @Test("Finishing made-up transactions changes nothing; finishing a purchasing one is refused (StoreKit's exception, R-Q8)")
    func finishesMadeUp() throws {
        FinishesMadeUp.refusals = 0
        let report = try Self.explore { _ in [FinishesMadeUp("madeUp")] }
        #expect(report.schedules == 40 && report.violations.isEmpty, "\(report.summary)")
        #expect(FinishesMadeUp.refusals > 0)
    }

    @Test("An observer that adds a payment from every callback: each schedule is bounded and refused with a clear error")
    func addsInLoop() throws {
        do {
            let report = try Self.explore({ _ in [AddsInLoop("adder")] }, schedules: 3)
            Issue.record("a purchase loop explored without end: \(report.summary)")
        } catch let error as ExplorationError {
            print(error)
            guard case .scheduleDidNotEnd(_, let steps, let limit, let lastEvents) = error else { return }
            #expect(limit == 14_000 && steps > limit && steps < limit + 100)  // 10,000 + 1,000 per purchase (2 devices, 2 each)
            #expect((lastEvents["transactionAdded"] ?? 0) > 100, "\(error)")
            #expect("\(error)".contains("did not end within"))
        }
    }

    @Test("An observer that restores again whenever a restore ends: bounded and refused with a clear error, on 2 jobs too")
    func restoresInLoop() throws {
        #expect(throws: ExplorationError.self) { try Self.explore({ _ in [RestoresInLoop("restorer")] }, schedules: 3) }
        var explorer = Self.explorer(devices: 1, purchasesPerDevice: 1) { _ in [RestoresInLoop("restorer")] }
        explorer.maximumSteps = 2_000
        #expect(throws: ExplorationError.self) { try explorer.explore(strategy: .random, budget: ExplorationBudget(schedules: 40), jobs: 2) }
    }

    @Test("Never finishing is reported (queue-drains or no-purchase-lost), shrunk")
    func neverFinishes() throws {
        let found = try #require(try Self.explore { _ in [NeverFinishes()] }.violations.first)
        #expect([.queueDrains, .noPurchaseLost].contains(found.invariant))
    }

    @Test("Throwing away all but the first transaction of a call is reported")
    func handlesFirstOnly() throws {
        let report = try Self.explore({ _ in [HandlesFirstOnly("first")] }, schedules: 500)
        #expect(!report.violations.isEmpty, "\(report.summary)")
    }

    @Test("Two observers of one name on a device: refused with a clear error (before: whatever both did, unexplained)")
    func namesake() throws {
        let error = try #require(throws: ExplorationError.self) { try Self.explore({ _ in [AddsNamesake("twin")] }, schedules: 5) }
        #expect("\(error)".contains("observer 'twin' is already attached"), "\(error)")
    }

    @Test("Detaching and attaching itself inside a callback: explored and reported")
    func reattaches() throws {
        let report = try Self.explore { _ in [Reattaches("again")] }
        #expect(report.schedules <= 40)
    }

    @Test("Observers sharing state across devices and finishing each other's transactions: the exploration ends")
    func crossDevice() throws {
        let shared = Shared()
        let report = try Self.explore({ _ in [CrossDevice(shared)] }, schedules: 10)
        #expect(report.schedules <= 10)
    }

    @Test("Observers playing the store and downloader, or quitting the app, inside callbacks: the explorer ends, deterministically")
    func meddlesAndQuits() throws {
        for make in [{ @Sendable (_: String) -> [Base] in [Meddler("meddler")] },
                     { @Sendable (_: String) -> [Base] in [Quits("quits")] }] {
            let report = try Self.explore(make, schedules: 40)
            #expect(report.schedules <= 40)
            // Same seed, same log, with the observer calling back into the queue.
            let explorer = Self.explorer(make)
            let first = try explorer.run(choices: SeededChoices(seed: 7))
            let second = try explorer.run(choices: SeededChoices(seed: 7))
            #expect(first.logDigest == second.logDigest && first.steps == second.steps)
        }
    }

    @Test("A slow observer: the exploration stops at its time budget")
    func slow() throws {
        let report = try Self.explore({ _ in [Slow("slow")] }, schedules: 100_000, seconds: 0.5)
        #expect(report.schedules < 100_000 && report.schedules >= 1)
    }

    /// Named oddly, and buying with a huge applicationUsername and requestData.
    final class Odd: Base {
        override func extra(_ queue: SKPaymentQueue, _ transactions: [SKPaymentTransaction]) {
            guard transactions.contains(where: { $0.transactionState == .purchased }) else { return }
            let payment = SKMutablePayment()
            payment.productIdentifier = SampleProducts.removeAds
            payment.applicationUsername = String(repeating: "u", count: 200_000)
            payment.requestData = Data(repeating: 7, count: 2_000_000)
            queue.add(payment)
        }
    }

    @Test("Observers named \"\", with a slash and a newline, or 300 KB long, buying with 2 MB of requestData: no crash",
          arguments: ["", "a/b\nc", String(repeating: "n", count: 300_000)])
    func oddNames(name: String) throws {
        guard (1...128).contains(name.utf8.count) else {
            // Refused by the queue: once reported as queue-drains ("still purchasing"), the cause unsaid.
            let error = try #require(throws: ExplorationError.self) { try Self.explore({ _ in [Odd(name)] }, schedules: 5) }
            print(error)
            #expect("\(error)".contains("the queue refused to attach observer") && "\(error)".contains("must have 1 to 128 bytes"), "\(error)")
            return
        }
        let report = try Self.explore({ _ in [Odd(name)] }, schedules: 5)
        #expect(report.schedules <= 5)
    }

    @Test("A factory that makes no observer: queue-drains, the purchase still purchasing (R-Q3: no observer, no sync with the store)")
    func noObservers() throws {
        let found = try #require(try Self.explore({ _ in [] }, schedules: 20).violations.first)
        #expect(found.invariant == .queueDrains && found.message.contains("still purchasing"), "\(found.message)")
    }

    @Test("One observer instance given to every device and launch (shared, not fresh): explored, nothing broken")
    func oneInstanceEverywhere() throws {
        nonisolated(unsafe) let shared = Base("shared")
        let report = try Self.explore({ _ in [shared] }, schedules: 20)
        #expect(report.schedules == 20 && report.violations.isEmpty, "\(report.summary)")
    }

    // MARK: The same observers through the test kit

    @Test("LoopbackDevice: an observer adding a payment from every callback stops the pump, it does not crash the tests")
    func loopbackAddsInLoop() throws {
        let device = LoopbackDevice()
        device.launch(with: AddsInLoop("adder"), named: "adder")
        try device.paymentQueue.add(Payment(productIdentifier: SampleProducts.coins))
        #expect(device.pump() == false)
        let unsettled = try #require(device.unsettled)
        #expect(unsettled.contains("never lets the queue settle"))
        #expect(device.paymentQueue.pendingCommandCount > 0)
        // The next pump goes on from where it stopped.
        let before = device.events.count
        #expect(device.pump() == false)
        #expect(device.events.count > before)
    }

    /// Holds the test's LoopbackDevice and pumps it from inside its callbacks.
    final class Pumper: Base {
        weak var device: LoopbackDevice?
        var buys: Int
        init(_ name: String, buys: Int) {
            self.buys = buys
            super.init(name)
        }
        override func extra(_ queue: SKPaymentQueue, _ transactions: [SKPaymentTransaction]) {
            if buys > 0, transactions.contains(where: { $0.transactionState == .purchasing }) {
                buys -= 1
                try? queue.simulatedQueue?.add(Payment(productIdentifier: SampleProducts.coins))
            }
            device?.pump()
            if let first = transactions.first, first.transactionState == .purchasing { device?.send(StoreTestSession.approveAskToBuy(first.value.key)) }
        }
    }

    @Test("LoopbackDevice: pump and send called from inside a callback are carried out after the events being delivered (they overflowed the stack)",
          arguments: [5, 100_000])
    func loopbackReentrantPump(buys: Int) throws {
        let device = LoopbackDevice()
        let observer = Pumper("pumper", buys: buys)
        observer.device = device
        device.launch(with: observer, named: "pumper")
        try device.paymentQueue.add(Payment(productIdentifier: SampleProducts.coins))
        let settled = device.pump()
        // Delivered in log order, each once.
        let sequences = device.events.map(\.sequence)
        #expect(sequences == Array(sequences.indices.map { UInt64($0) + 1 }))
        if buys == 5 {
            #expect(settled && device.unsettled == nil)
            #expect(device.events.filter { if case .transactionFinished = $0.event { true } else { false } }.count == 6)
            #expect(device.paymentQueue.transactions.isEmpty)
        } else {
            #expect(!settled && device.unsettled != nil)
        }
    }

    @Test("LoopbackDevice: finishing twice, made-up and purchasing transactions; detaching inside a callback")
    func loopbackMisuse() throws {
        FinishesMadeUp.refusals = 0
        let device = LoopbackDevice()
        let observer = FinishesMadeUp("madeUp")
        device.launch(with: observer, named: "madeUp")
        try device.buy(SampleProducts.coins)
        let key = try #require(device.events.lazy.compactMap { if case .transactionAdded(let key, _) = $0.event { key } else { nil } }.first)
        #expect(device.send(StoreTestSession.approveAskToBuy(key)))
        #expect(device.events.contains { if case .transactionFinished(key) = $0.event { true } else { false } })
        #expect(!device.events.contains { $0.event.device == "ghost" })
        #expect(!device.events.contains { if case .commandRejected = $0.event { true } else { false } })
        #expect(FinishesMadeUp.refusals > 0)
        #expect(device.paymentQueue.transactions.isEmpty)
    }
}



