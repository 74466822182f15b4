import StoreKitModel
import StoreKitRoles
import StoreKitRuntime
import StoreKitSimulation
import StoreKitTestKit
import StoreKitTestSupport
import Testing

/// SKTestSession's `clearTransactions` and timed store actions in a scenario (F-T2);
/// docs/storekit-fidelity.md.
@Suite struct StoreActionTests {
    @Test("F-T2: clearTransactions makes the store forget the account's purchases: a non-consumable is charged again and nothing is restored")
    func clearTransactionsForgets() {
        var behavior = StoreBehavior()
        behavior.failureProbability = 0
        behavior.cancellationProbability = 0
        behavior.deferralProbability = 0
        let store = StoreRole(catalog: .sample, behavior: behavior, choices: SeededChoices(seed: 1))
        let feeder = RoleFeeder(store)
        @discardableResult func feed(_ event: Event) -> [Effect] { feeder.feed(event) }
        feed(.deviceRegistered(device: "d", account: "a"))
        feed(.observerAttached(device: "d", observer: "o"))
        let first = TransactionKey(device: "d", number: 1)
        feed(.transactionAdded(first, Payment(productIdentifier: SampleProducts.removeAds)))
        feed(.transactionPurchased(first, identifier: "d.1", downloads: [], charged: true))
        let monthly = TransactionKey(device: "d", number: 2)
        feed(.transactionAdded(monthly, Payment(productIdentifier: SampleProducts.monthly)))
        feed(.transactionPurchased(monthly, identifier: "d.2", downloads: [], charged: true))
        #expect(!store.projection.history(of: "a").restorable.isEmpty)
        feed(.transactionsCleared(device: "d"))
        #expect(store.projection.history(of: "a").restorable.isEmpty)
        #expect(store.projection.subscriptions.isEmpty)
        let again = TransactionKey(device: "d", number: 3)
        feed(.transactionAdded(again, Payment(productIdentifier: SampleProducts.removeAds)))
        #expect(store.timerFired(.decidePurchase(again), now: 0) == [.send(.decidePurchase(again, .purchased(charged: true)))])
    }

    @Test("F-T2: the queue logs clearTransactions as transactionsCleared; an unknown device is refused")
    func queueClears() {
        var harness = QueueHarness()
        harness.ready()
        #expect(harness.send(StoreTestSession.clearTransactions(device: "d1")) == .accept([.transactionsCleared(device: "d1")]))
        #expect(harness.rejection(harness.send(.clearTransactions(device: "nobody"))) == .unknownDevice)
    }

    @Test("F-T2: a scenario's storeActions run at their times in a whole run: failNext, clearTransactions, expire")
    func timedActionsInAWholeRun() throws {
        var scenario = Scenario(seed: 4, devices: 2)
        scenario.apps.purchasesPerDevice = 6
        scenario.store.actions = [
            StoreAction(atMilliseconds: 0, action: .failNext, device: "device-0001", error: "paymentInvalid"),
            StoreAction(atMilliseconds: 20_000, action: .clearTransactions, device: "device-0002"),
            StoreAction(atMilliseconds: 40_000, action: .expire, device: "device-0001", product: SampleProducts.monthly),
        ]
        let environment = DeterministicEnvironment.inMemory(seed: scenario.seed)
        let report = try DeterministicRuntime(scenario: scenario, environment: environment).run()
        #expect(report.violations.isEmpty)
        var firstDecision: [String: Event] = [:]
        var cleared: [(String, Int64)] = []
        try environment.storage.forEachRecord(from: 1) { _, timestamp, payload in
            let event = try EventCodec.decodeEvent(payload).event
            switch event {
            case .transactionPurchased(let key, _, _, _), .transactionFailed(let key, _), .transactionDeferred(let key):
                if firstDecision[key.device] == nil { firstDecision[key.device] = event }
            case .transactionsCleared(let device):
                cleared.append((device, timestamp))
            default:
                break
            }
        }
        guard case .transactionFailed(_, let error) = firstDecision["device-0001"] else {
            Issue.record("device-0001's first purchase was not failed: \(String(describing: firstDecision["device-0001"]))"); return
        }
        #expect(error.code == .paymentInvalid)
        #expect(cleared.count == 1 && cleared.first?.0 == "device-0002")
        #expect((cleared.first?.1 ?? 0) >= 20_000_000_000)
    }

    @Test("F-T2: a store action naming a device or product the run does not have is refused with its index")
    func validation() {
        var scenario = Scenario(seed: 1, devices: 2)
        scenario.store.actions = [StoreAction(atMilliseconds: 5, action: .refund, device: "device-0009", product: SampleProducts.removeAds)]
        let unknownDevice = #expect(throws: ConfigurationError.self) { try scenario.validate() }
        #expect(unknownDevice?.code == .unknownDevice && unknownDevice?.message.hasPrefix("storeActions[0].device ") == true)
        scenario.store.actions = [StoreAction(atMilliseconds: 5, action: .expire, device: "device-0001")]
        let missingProduct = #expect(throws: ConfigurationError.self) { try scenario.validate() }
        #expect(missingProduct?.code == .missingValue && missingProduct?.message.hasPrefix("storeActions[0].product ") == true)
    }
}

extension StoreActionTests {
    @Test("F-T2: a first start sets every action, even one the log's clock has passed; a restart only those still ahead")
    func firstStartAndRestart() {
        var behavior = StoreBehavior()
        behavior.actions = [StoreAction(atMilliseconds: 0, action: .failNext, device: "d"),
                            StoreAction(atMilliseconds: 9_000, action: .clearTransactions, device: "d")]
        let header = RecordedEvent(sequence: 1, timestamp: 5_000_000_000, commandID: CommandID(origin: "apps.41", number: 1),
                                   event: .deviceRegistered(device: "d", account: "a"))
        let first = StoreRole(name: "store", catalog: .sample, behavior: behavior, choices: SeededChoices(seed: 1))
        first.catchUp(header)
        #expect(first.resume(now: 0) == [.timer(afterNanoseconds: 0, .storeAction(index: 0)),
                                         .timer(afterNanoseconds: 4_000_000_000, .storeAction(index: 1))])
        let restarted = StoreRole(name: "store", catalog: .sample, behavior: behavior, choices: SeededChoices(seed: 1))
        restarted.catchUp(header)
        restarted.catchUp(RecordedEvent(sequence: 2, timestamp: 6_000_000_000, commandID: CommandID(origin: "store.77", number: 1),
                                        event: .transactionsCleared(device: "x")))
        #expect(restarted.resume(now: 0) == [.timer(afterNanoseconds: 3_000_000_000, .storeAction(index: 1))])
    }
}
