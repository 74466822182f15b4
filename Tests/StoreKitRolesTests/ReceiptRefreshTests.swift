import Testing
import StoreKitModel
@testable import StoreKitRoles
import StoreKitRuntime
import StoreKitSimulation
import StoreKitTestKit
import StoreKitTestSupport

/// Receipt refresh as the app-side request SKReceiptRefreshRequest is (R-R2); docs/storekit-fidelity.md.
@Suite struct ReceiptRefreshTests {
    static func original(_ identifier: String, _ product: String = SampleProducts.removeAds) -> OriginalTransaction {
        OriginalTransaction(transactionIdentifier: identifier, payment: Payment(productIdentifier: product), transactionDate: 1)
    }

    @Test("R-R2: the queue numbers refreshReceipt requests and logs the store's pieces in order; it creates no transactions")
    func queueRules() {
        var harness = QueueHarness()
        harness.ready()
        let key = harness.purchase(SampleProducts.removeAds)
        #expect(harness.send(StoreTestSession.refreshReceipt(device: "d1")) == .accept([.receiptRefreshStarted(device: "d1", request: 1)]))
        #expect(harness.send(StoreTestSession.refreshReceipt(device: "d1")) == .accept([.receiptRefreshStarted(device: "d1", request: 2)]))
        let entries = (1...150).map { Self.original("d1.\($0)") }
        let pieces = StoreTestSession.deliverReceipt(device: "d1", request: 1, entries: entries)
        #expect(pieces.count == 2)
        // Out of order: the second piece first is refused, with where the next piece starts.
        #expect(harness.rejection(harness.send(pieces[1])) == .invalidArgument)
        for piece in pieces { #expect(harness.rejection(harness.send(piece)) == nil) }
        #expect(StoreTestSession.receipt(in: harness.recorded.map(\.event), device: "d1", request: 1) == entries)
        // Answered: its request is over; the other one still waits.
        #expect(harness.rejection(harness.send(pieces[0])) == .invalidArgument)
        #expect(harness.projection.device("d1")?.receiptRefreshesInProgress.keys.sorted() == [2])
        #expect(harness.projection.device("d1")?.nextTransactionNumber == key.number + 1)
        #expect(harness.projection.totals.receiptsRefreshed == 1 && harness.projection.totals.receiptEntries == 150)
        // A piece over the bound, a device whose app is not running, an unknown product: refused.
        let tooBig = CommandBody.deliverReceipt(device: "d1", request: 2, firstIndex: 0,
                                                entries: (0...QueueProjection.maximumRestorePiece).map { Self.original("x\($0)") }, isLast: true)
        #expect(harness.rejection(harness.send(tooBig)) == .invalidArgument)
        #expect(harness.rejection(harness.send(.deliverReceipt(device: "d1", request: 2, firstIndex: 0,
                                                               entries: [Self.original("y", "nope")], isLast: true))) == .unknownProduct)
        harness.send(.terminateApp(device: "d1"))
        #expect(harness.rejection(harness.send(.refreshReceipt(device: "d1"))) == .appNotRunning)
    }

    @Test("R-R2: a device waits for at most 16 refreshes at once; the 17th is refused with what to do")
    func refreshesBounded() {
        var harness = QueueHarness()
        harness.ready()
        for _ in 0..<QueueProjection.maximumReceiptRefreshesInProgress { harness.send(.refreshReceipt(device: "d1")) }
        guard case .reject(let rejection) = harness.send(.refreshReceipt(device: "d1")) else { Issue.record("not refused"); return }
        #expect(rejection.code == .invalidArgument)
    }

    /// A store fed a purchase history: a consumable finished, one not, a non-consumable, on two devices of one account.
    static func storeWithHistory() -> (StoreRole, (Event) -> [Effect]) {
        let store = StoreRole(catalog: .sample, behavior: StoreBehavior(), choices: SeededChoices(seed: 1))
        let feeder = RoleFeeder(store)
        @discardableResult func feed(_ event: Event) -> [Effect] { feeder.feed(event) }
        _ = feed(.deviceRegistered(device: "d1", account: "a"))
        _ = feed(.deviceRegistered(device: "d2", account: "a"))
        for (number, product) in [(1, SampleProducts.coins), (2, SampleProducts.coins), (3, SampleProducts.removeAds)] {
            let key = TransactionKey(device: "d1", number: UInt64(number))
            _ = feed(.transactionAdded(key, Payment(productIdentifier: product, applicationUsername: "a")))
            _ = feed(.transactionPurchased(key, identifier: "d1.\(number)", downloads: [], charged: true))
        }
        _ = feed(.transactionFinished(TransactionKey(device: "d1", number: 1)))
        _ = feed(.transactionFinished(TransactionKey(device: "d1", number: 3)))
        return (store, feed)
    }

    @Test("R-R2: a finished consumable leaves the receipt; an unfinished one and every non-consumable stay; any device of the account sees it")
    func finishedConsumablesLeave() {
        let (store, _) = Self.storeWithHistory()
        #expect(store.projection.receipt(of: "a").purchases.map(\.transactionIdentifier) == ["d1.2", "d1.3"])
    }

    @Test("R-R2: the store answers a refresh with the receipt after its latency; refreshing again gives the same entries (idempotent)")
    func storeAnswers() {
        let (store, feed) = Self.storeWithHistory()
        for request: UInt64 in [1, 2] {
            let effects = feed(.receiptRefreshStarted(device: "d2", request: request))
            guard case .timer(_, let token) = effects.first, effects.count == 1 else { Issue.record("no timer: \(effects)"); return }
            #expect(token == .answerReceiptRefresh(device: "d2", request: request))
            let expected = CommandBody.deliverReceipt(device: "d2", request: request, firstIndex: 0,
                                                      entries: store.projection.receipt(of: "a").purchases, isLast: true)
            #expect(store.timerFired(token, now: 0) == [.send(expected)])
        }
        // Answering creates no transactions: nothing awaits a decision.
        #expect(store.projection.awaitingDecision.isEmpty)
    }

    @Test("R-R2: a long receipt goes in pieces of 100, the next sent once the previous landed; a restarted store takes up where it was")
    func piecesAndRestart() {
        let store = StoreRole(catalog: .sample, behavior: StoreBehavior(), choices: SeededChoices(seed: 1))
        let feeder = RoleFeeder(store)
        @discardableResult func feed(_ event: Event) -> [Effect] { feeder.feed(event) }
        _ = feed(.deviceRegistered(device: "d1", account: "a"))
        for number in 1...230 {
            let key = TransactionKey(device: "d1", number: UInt64(number))
            _ = feed(.transactionAdded(key, Payment(productIdentifier: SampleProducts.forest)))
            _ = feed(.transactionPurchased(key, identifier: "d1.\(number)", downloads: [], charged: true))
        }
        _ = feed(.receiptRefreshStarted(device: "d1", request: 1))
        guard case .send(.deliverReceipt(_, _, 0, let first, false)) = store.timerFired(.answerReceiptRefresh(device: "d1", request: 1), now: 0).first else {
            Issue.record("no first piece"); return
        }
        #expect(first.count == 100)
        let next = feed(.receiptDelivered(device: "d1", request: 1, firstIndex: 0, entries: first, isLast: false))
        guard case .send(.deliverReceipt(_, _, 100, let second, false)) = next.first else { Issue.record("no second piece: \(next)"); return }
        #expect(second.first?.transactionIdentifier == "d1.101")
        _ = feed(.receiptDelivered(device: "d1", request: 1, firstIndex: 100, entries: second, isLast: false))
        // The store goes away here; a new one reads the log and sends the third piece.
        let restarted = StoreRole(catalog: .sample, behavior: StoreBehavior(), choices: SeededChoices(seed: 1))
        for recorded in feeder.fed { restarted.catchUp(recorded) }
        let resumed = restarted.resume(now: 0).filter { if case .send(.deliverReceipt) = $0 { true } else { false } }
        guard case .send(.deliverReceipt(_, _, 200, let third, true)) = resumed.first else { Issue.record("not resumed: \(resumed)"); return }
        #expect(third.count == 30)
    }

    @Test("R-R2: the app's observers hear the whole receipt once (requestDidFinish), after its last piece; no transaction is added")
    func observersHearReceipt() throws {
        let device = LoopbackDevice()
        let observer = device.launchWithObserver()
        try device.buy(SampleProducts.removeAds)
        let key = TransactionKey(device: "d1", number: 1)
        device.send(.decidePurchase(key, .purchased(charged: true)))
        observer.calls.removeAll()
        device.paymentQueue.refreshReceipt()
        device.pump()
        let entries = (1...120).map { Self.original("d1.\($0)") }
        for piece in StoreTestSession.deliverReceipt(device: "d1", request: 1, entries: entries) { device.send(piece) }
        #expect(observer.calls == ["receipt:" + entries.map(\.transactionIdentifier).joined(separator: ",")])
        #expect(device.paymentQueue.transactions.map(\.key) == [key])
    }

    @Test("R-R2: apps refresh receipts in a whole run when the scenario asks (apps.receiptRefreshProbability); the default draws nothing")
    func wholeRun() throws {
        var scenario = Scenario(seed: 5, devices: 4)
        scenario.apps.receiptRefreshProbability = 1
        let environment = DeterministicEnvironment.inMemory(seed: scenario.seed)
        let report = try DeterministicRuntime(scenario: scenario, environment: environment).run()
        #expect(report.violations.isEmpty)
        #expect(report.totals.receiptsRefreshed == 4 * scenario.apps.purchasesPerDevice)
        var events: [Event] = []
        try environment.storage.forEachRecord(from: 1) { _, _, payload in events.append(try EventCodec.decodeEvent(payload).event) }
        // Each answer lists only purchases of the device's account and no finished consumable.
        var finished: Set<String> = []
        var consumables: Set<String> = []
        for event in events {
            switch event {
            case .transactionFinished(let key): finished.insert(QueueProjection.transactionIdentifier(key))
            case .transactionPurchased(let key, let identifier, _, _):
                if case .transactionAdded(_, let payment) = events.first(where: { if case .transactionAdded(key, _) = $0 { true } else { false } }),
                   payment.productIdentifier == SampleProducts.coins { consumables.insert(identifier) }
            case .receiptDelivered(_, _, _, let entries, _):
                #expect(entries.allSatisfy { !(consumables.contains($0.transactionIdentifier) && finished.contains($0.transactionIdentifier)) })
            default: break
            }
        }
        let plain = Scenario(seed: 5, devices: 4)
        let plainEnvironment = DeterministicEnvironment.inMemory(seed: plain.seed)
        #expect(try DeterministicRuntime(scenario: plain, environment: plainEnvironment).run().totals.receiptsRefreshed == 0)
    }
}
