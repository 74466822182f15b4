import Testing
import StoreKitModel
@testable import StoreKitRoles
import StoreKitTestKit

/// An armed `failNext` store action survives a restart of the store (F-T3): the restarted store
/// derives it from the recorded scenario's storeActions and the log; docs/storekit-fidelity.md.
@Suite struct FailNextRestartTests {
    static let action = StoreAction(atMilliseconds: 0, action: .failNext, device: "d", error: "paymentInvalid")

    /// A store restarted on a log where an earlier store (`store.77`) ran, `d` has purchase 2 waiting,
    /// and `before` happened first.
    static func restartedStore(_ before: [Event]) -> (StoreRole, [Effect]) {
        var behavior = StoreBehavior()
        behavior.failureProbability = 0
        behavior.cancellationProbability = 0
        behavior.deferralProbability = 0
        behavior.actions = [action]
        let store = StoreRole(name: "store", catalog: .sample, behavior: behavior, choices: SeededChoices(seed: 1))
        let earlier = CommandID(origin: "store.77", number: 1)
        let events: [Event] = [.deviceRegistered(device: "d", account: "a"), .appLaunched(device: "d"), .observerAttached(device: "d", observer: "o")]
            + [.transactionsCleared(device: "x")] + before + [.transactionAdded(TransactionKey(device: "d", number: 2), Payment(productIdentifier: SampleProducts.removeAds))]
        for (index, event) in events.enumerated() {
            // The earlier store's commands make this start a restart.
            let id = switch event {
            case .transactionFailed, .transactionsCleared: earlier
            default: CommandID(origin: "apps.3", number: UInt64(index + 1))
            }
            store.catchUp(RecordedEvent(sequence: UInt64(index + 1), timestamp: Int64(index + 1) * 1_000_000, commandID: id, event: event))
        }
        return (store, store.resume(now: 0))
    }

    static func decision(_ store: StoreRole, _ effects: [Effect]) -> [Effect] {
        let key = TransactionKey(device: "d", number: 2)
        #expect(effects.contains { if case .timer(_, .decidePurchase(key)) = $0 { true } else { false } })
        return store.timerFired(.decidePurchase(key), now: 0)
    }

    @Test("F-T3: a store restarted after a failNext was armed (its time passed, no purchase used it) fails the device's next purchase")
    func armedSurvivesRestart() {
        let (store, effects) = Self.restartedStore([])
        // Its time is behind the log: no timer is set again; the action is armed from the log.
        #expect(!effects.contains { if case .timer(_, .storeAction) = $0 { true } else { false } })
        #expect(Self.decision(store, effects) == [.send(.decidePurchase(TransactionKey(device: "d", number: 2), .failed(Self.action.failure)))])
    }

    @Test("F-T3: a failNext the log shows used (a failed transaction with its error) is not armed again after a restart")
    func usedStaysUsed() {
        let first = TransactionKey(device: "d", number: 1)
        let (store, effects) = Self.restartedStore([.transactionAdded(first, Payment(productIdentifier: SampleProducts.coins)),
                                                    .transactionFailed(first, Self.action.failure)])
        #expect(Self.decision(store, effects) == [.send(.decidePurchase(TransactionKey(device: "d", number: 2), .purchased(charged: true)))])
    }
}
