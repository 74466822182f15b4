import Foundation
import StoreKitModel
import StoreKitRoles
import StoreKitRuntime
import StoreKitSimulation
import StoreKitTestKit
import StoreKitTestSupport
import Testing

/// Auto-renewable subscriptions over simulated time (F-U1 … F-U3) and SKTestSession's store
/// controls (F-T1, F-K1); docs/storekit-fidelity.md.
@Suite struct SubscriptionTests {
    static let monthly = SampleProducts.monthly
    static let yearly = "com.example.sksim.premium.yearly"

    @Test("F-U1: a period renews in simulated time as _timeRate speeds it up (P1M at rate 15 every 30 s)")
    func renewalPeriods() {
        #expect(SubscriptionPeriod.renewalNanoseconds("P1M", timeRate: 15) == 30_000_000_000)
        #expect(SubscriptionPeriod.renewalNanoseconds("P1Y", timeRate: 15) == 365_000_000_000)
        #expect(SubscriptionPeriod.renewalNanoseconds("P1W", timeRate: 6) == 7_000_000_000)  // one second is one day
        let realTime = SubscriptionPeriod.renewalNanoseconds("P1M", timeRate: 0)
        #expect(realTime == 2_592_000_000_000_000, "\(String(describing: realTime))")  // real time: 30 days
        #expect(SubscriptionPeriod.renewalNanoseconds("P1M", timeRate: 7) == nil)
        #expect(SubscriptionPeriod.renewalNanoseconds("1 month", timeRate: 15) == nil)
    }

    @Test("F-U1: a renewal is a new purchased transaction, delivered to the observers, whose originalTransaction is the first purchase")
    func renewalIsNewPurchasedTransaction() throws {
        let device = LoopbackDevice()
        let observer = device.launchWithObserver(finishOnCompletion: true)
        try device.buy(Self.monthly)
        let first = try #require(device.harness.projection.device("d1")?.pending.values.first)
        device.send(.decidePurchase(first.key, .purchased(charged: true)))
        let purchased = try #require(observer.updated.last)
        let original = try #require(StoreTestSession.original(of: purchased))
        device.send(.renewSubscription(device: "d1", original: original))

        let renewal = try #require(observer.updated.last)
        #expect(renewal.key != first.key)
        #expect(renewal.transactionState == .purchased)
        #expect(renewal.originalTransaction == original)
        #expect(renewal.transactionIdentifier != original.transactionIdentifier)
        #expect(renewal.payment.productIdentifier == Self.monthly)
        #expect(observer.removed.map(\.key).contains(renewal.key))  // delivered, then finished like any purchase
        #expect(device.harness.projection.totals.renewed == 1)
    }

    @Test("F-U1, R-Q4: a renewal that comes while the app is not running is delivered at the next launch")
    func renewalDeliveredAtLaunch() throws {
        var harness = QueueHarness()
        harness.ready()
        let key = harness.purchase(Self.monthly)
        let purchase = try #require(harness.transaction(key))
        harness.send(.finishTransaction(key))
        harness.send(.terminateApp(device: "d1"))
        let original = try #require(StoreTestSession.original(of: purchase))
        let decision = harness.send(.renewSubscription(device: "d1", original: original))
        guard case .accept(let events) = decision, case .subscriptionRenewed(let renewal, _, _, _) = events.first else {
            Issue.record("renewal refused: \(decision)")
            return
        }
        harness.send(.launchApp(device: "d1"))
        harness.send(.attachObserver(device: "d1", observer: "o1"))
        #expect(harness.projection.device("d1")?.pendingTransactions.map(\.key) == [renewal])
    }

    @Test("F-U2: an expired subscription renews no more; expiring twice is harmless; only auto-renewables renew")
    func expiryRules() throws {
        var harness = QueueHarness()
        harness.ready()
        let key = harness.purchase(Self.monthly)
        let purchase = try #require(harness.transaction(key))
        let original = try #require(StoreTestSession.original(of: purchase))
        guard case .accept(let expired) = harness.send(.expireSubscription(device: "d1", original: original)) else {
            Issue.record("expiry refused")
            return
        }
        #expect(expired == [.subscriptionExpired(device: "d1", original: original)])
        #expect(harness.send(.expireSubscription(device: "d1", original: original)) == .accept([]))
        let renewal = harness.send(.renewSubscription(device: "d1", original: original))
        #expect(harness.rejection(renewal) == .invalidArgument)
        let coins = harness.purchase(SampleProducts.coins)
        let coinsPurchase = try #require(harness.transaction(coins))
        let coinsOriginal = try #require(StoreTestSession.original(of: coinsPurchase))
        #expect(harness.rejection(harness.send(.renewSubscription(device: "d1", original: coinsOriginal))) == .invalidArgument)
        #expect(harness.projection.totals.expired == 1)
        #expect(harness.engine.checker.violations.isEmpty)
    }

    /// A store over the sample catalog that always purchases, and feeds it events at `now`.
    func store(cancellation: Double = 0, maximumRenewals: Int? = nil) -> (StoreRole, (Event, Int64) -> [Effect]) {
        var behavior = StoreBehavior()
        behavior.failureProbability = 0
        behavior.cancellationProbability = 0
        behavior.deferralProbability = 0
        behavior.cancellationAtRenewalProbability = cancellation
        behavior.maximumRenewals = maximumRenewals
        let store = StoreRole(catalog: .sample, behavior: behavior, choices: SeededChoices(seed: 1))
        let feeder = RoleFeeder(store)
        return (store, { event, now in feeder.feed(event, at: now) })
    }

    func original(_ number: UInt64, _ product: String, at time: Int64 = 0) -> OriginalTransaction {
        OriginalTransaction(transactionIdentifier: "d.\(number)", payment: Payment(productIdentifier: product, applicationUsername: nil),
                            transactionDate: time)
    }

    @Test("F-U1, F-U2: the store renews at each period end, up to store.maximumRenewals, then lets the subscription expire")
    func storeRenewsThenExpires() {
        let (store, feed) = store(maximumRenewals: 2)
        _ = feed(.deviceRegistered(device: "d", account: "a"), 0)
        _ = feed(.observerAttached(device: "d", observer: "o"), 0)
        let key = TransactionKey(device: "d", number: 1)
        _ = feed(.transactionAdded(key, Payment(productIdentifier: Self.monthly)), 0)
        let started = feed(.transactionPurchased(key, identifier: "d.1", downloads: [], charged: true), 5_000)
        #expect(started == [.timer(afterNanoseconds: 30_000_000_000, .subscriptionPeriodEnd(original: "d.1", renewals: 0))])
        let first = original(1, Self.monthly, at: 5_000)
        #expect(store.timerFired(.subscriptionPeriodEnd(original: "d.1", renewals: 0), now: 30_000_005_000)
            == [.send(.renewSubscription(device: "d", original: first))])
        // The same timer again (a duplicate) sends nothing while the renewal is on its way.
        #expect(store.timerFired(.subscriptionPeriodEnd(original: "d.1", renewals: 0), now: 30_000_005_000).isEmpty)
        let next = feed(.subscriptionRenewed(TransactionKey(device: "d", number: 2), identifier: "d.2", original: first, downloads: []), 30_000_006_000)
        #expect(next == [.timer(afterNanoseconds: 30_000_000_000, .subscriptionPeriodEnd(original: "d.1", renewals: 1))])
        _ = store.timerFired(.subscriptionPeriodEnd(original: "d.1", renewals: 1), now: 60_000_006_000)
        _ = feed(.subscriptionRenewed(TransactionKey(device: "d", number: 3), identifier: "d.3", original: first, downloads: []), 60_000_007_000)
        #expect(store.timerFired(.subscriptionPeriodEnd(original: "d.1", renewals: 2), now: 90_000_007_000)
            == [.send(.expireSubscription(device: "d", original: first))])
        _ = feed(.subscriptionExpired(device: "d", original: first), 90_000_008_000)
        #expect(store.projection.subscriptions.isEmpty)
        // Not active any more, so buying it again is charged (R-R4) and starts a new subscription.
        let again = TransactionKey(device: "d", number: 4)
        _ = feed(.transactionAdded(again, Payment(productIdentifier: Self.monthly)), 90_000_009_000)
        #expect(store.timerFired(.decidePurchase(again), now: 90_000_009_000) == [.send(.decidePurchase(again, .purchased(charged: true)))])
    }

    @Test("F-U2: a user who cancelled (store.cancellationAtRenewalProbability 1) sees the subscription expire at its first period end")
    func cancellationExpires() {
        let (store, feed) = store(cancellation: 1)
        _ = feed(.deviceRegistered(device: "d", account: "a"), 0)
        let key = TransactionKey(device: "d", number: 1)
        _ = feed(.transactionAdded(key, Payment(productIdentifier: Self.monthly)), 0)
        _ = feed(.transactionPurchased(key, identifier: "d.1", downloads: [], charged: true), 0)
        #expect(store.timerFired(.subscriptionPeriodEnd(original: "d.1", renewals: 0), now: 30_000_000_000)
            == [.send(.expireSubscription(device: "d", original: original(1, Self.monthly)))])
    }

    @Test("F-U3: one active subscription per group: buying another level replaces the one the account has at once")
    func oneSubscriptionPerGroup() {
        let (_, feed) = store()
        _ = feed(.deviceRegistered(device: "d", account: "a"), 0)
        _ = feed(.transactionAdded(TransactionKey(device: "d", number: 1), Payment(productIdentifier: Self.monthly)), 0)
        _ = feed(.transactionPurchased(TransactionKey(device: "d", number: 1), identifier: "d.1", downloads: [], charged: true), 0)
        _ = feed(.transactionAdded(TransactionKey(device: "d", number: 2), Payment(productIdentifier: Self.yearly)), 1_000)
        let effects = feed(.transactionPurchased(TransactionKey(device: "d", number: 2), identifier: "d.2", downloads: [], charged: true), 1_000)
        #expect(effects.first == .send(.expireSubscription(device: "d", original: original(1, Self.monthly))))
        #expect(effects.dropFirst().first == .timer(afterNanoseconds: 365_000_000_000, .subscriptionPeriodEnd(original: "d.2", renewals: 0)))
    }

    @Test("F-U1: a restarted store takes up every subscription's next period end from the log")
    func restartedStoreResumes() {
        let (store, feed) = store()
        _ = feed(.deviceRegistered(device: "d", account: "a"), 0)
        _ = feed(.transactionAdded(TransactionKey(device: "d", number: 1), Payment(productIdentifier: Self.monthly)), 0)
        _ = feed(.transactionPurchased(TransactionKey(device: "d", number: 1), identifier: "d.1", downloads: [], charged: true), 0)
        _ = feed(.appLaunched(device: "d"), 10_000_000_000)
        // Timed by the log's clock: a live role's `now` is its own monotonic clock, unrelated to it.
        #expect(store.resume(now: 987_654_321_000_000) == [.timer(afterNanoseconds: 20_000_000_000, .subscriptionPeriodEnd(original: "d.1", renewals: 0))])
    }

    @Test("F-K1: a refund makes the observers hear didRevokeEntitlementsForProductIdentifiers; a purchase is refunded once")
    func refundRevokes() throws {
        let device = LoopbackDevice()
        let observer = RevocationObserver()
        device.launch(with: observer)
        try device.buy(SampleProducts.removeAds)
        let key = try #require(device.harness.projection.device("d1")?.pending.keys.first)
        device.send(.decidePurchase(TransactionKey(device: "d1", number: key), .purchased(charged: true)))
        let purchase = try #require(device.harness.projection.transaction(TransactionKey(device: "d1", number: key)))
        let refund = try #require(StoreTestSession.refund(purchase))
        device.send(refund)
        #expect(observer.revoked == [[SampleProducts.removeAds]])
        var harness = device.harness
        #expect(harness.rejection(harness.send(refund)) == .invalidArgument)
    }

    @Test("F-K1: after a refund the store charges the non-consumable again and no longer restores it")
    func refundTakesOwnershipBack() {
        let (store, feed) = store()
        _ = feed(.deviceRegistered(device: "d", account: "a"), 0)
        _ = feed(.observerAttached(device: "d", observer: "o"), 0)
        let key = TransactionKey(device: "d", number: 1)
        _ = feed(.transactionAdded(key, Payment(productIdentifier: SampleProducts.removeAds)), 0)
        _ = feed(.transactionPurchased(key, identifier: "d.1", downloads: [], charged: true), 0)
        #expect(store.projection.history(of: "a").restorable.count == 1)
        _ = feed(.entitlementsRevoked(device: "d", original: original(1, SampleProducts.removeAds)), 0)
        #expect(store.projection.history(of: "a").restorable.isEmpty)
        let again = TransactionKey(device: "d", number: 2)
        _ = feed(.transactionAdded(again, Payment(productIdentifier: SampleProducts.removeAds)), 0)
        #expect(store.timerFired(.decidePurchase(again), now: 0) == [.send(.decidePurchase(again, .purchased(charged: true)))])
    }

    @Test("F-T1: SKTestSession's controls are store commands: approve and decline Ask to Buy, fail, force renewal, expire")
    func testSessionControls() throws {
        var harness = QueueHarness()
        harness.ready()
        let deferred = harness.buy(Self.monthly)
        harness.send(.decidePurchase(deferred, .deferred))
        harness.send(StoreTestSession.approveAskToBuy(deferred))
        #expect(harness.transaction(deferred)?.transactionState == .purchased)
        let declined = harness.buy(SampleProducts.coins)
        harness.send(.decidePurchase(declined, .deferred))
        harness.send(StoreTestSession.declineAskToBuy(declined))
        #expect(harness.projection.device("d1")?.declined.contains(declined.number) == true)
        let failed = harness.buy(SampleProducts.coins)
        harness.send(StoreTestSession.fail(failed, with: .paymentInvalid))
        #expect(harness.transaction(failed)?.error?.code == .paymentInvalid)
        let subscription = try #require(harness.transaction(deferred))
        harness.send(try #require(StoreTestSession.forceRenewal(subscription)))
        harness.send(try #require(StoreTestSession.expire(subscription)))
        #expect(harness.projection.totals.renewed == 1)
        #expect(harness.projection.totals.expired == 1)
        #expect(harness.engine.checker.violations.isEmpty)
    }

    @Test("F-U1, F-U2: a whole run renews and ends every subscription it starts, at most store.maximumRenewals times each")
    func wholeRun() throws {
        var scenario = Scenario(seed: 7, devices: 6)
        scenario.apps.purchasesPerDevice = 6
        let environment = DeterministicEnvironment.inMemory(seed: scenario.seed)
        let report = try DeterministicRuntime(scenario: scenario, environment: environment).run()
        var products: [TransactionKey: String] = [:]
        var started: Set<String> = []
        var renewalsOf: [String: Int] = [:]
        var expired: Set<String> = []
        try environment.storage.forEachRecord(from: 1) { _, _, payload in
            switch try EventCodec.decodeEvent(payload).event {
            case .transactionAdded(let key, let payment):
                products[key] = payment.productIdentifier
            case .transactionPurchased(let key, let identifier, _, let charged):
                if charged, products[key].map({ scenario.catalog.product($0)?.kind == .autoRenewableSubscription }) == true {
                    started.insert(identifier)
                }
            case .subscriptionRenewed(let key, _, let original, _):
                #expect(started.contains(original.transactionIdentifier))
                // Counted per device: each renewal also reaches the account's other devices (F-U4).
                renewalsOf[original.transactionIdentifier + " on " + key.device, default: 0] += 1
            case .subscriptionExpired(_, let original):
                #expect(expired.insert(original.transactionIdentifier).inserted)
            default:
                break
            }
        }
        #expect(!started.isEmpty)
        #expect(expired == started)
        #expect(report.totals.renewed > 0)
        #expect(report.totals.expired == started.count)
        #expect(renewalsOf.values.allSatisfy { $0 <= StoreBehavior.defaultMaximumRenewals })
        #expect(report.totals.renewed == renewalsOf.values.reduce(0, +))
        #expect(report.violations.isEmpty)
        #expect(!report.stoppedAtTimeLimit)
        // Every renewal was delivered and finished: only declined Ask to Buy requests stay.
        #expect(report.pending == report.totals.declined)
    }
}

/// Records the revocations it hears (F-K1).
final class RevocationObserver: NSObject, SKPaymentTransactionObserver {
    var revoked: [[String]] = []
    func paymentQueue(_ queue: SKPaymentQueue, updatedTransactions transactions: [SKPaymentTransaction]) {}
    func paymentQueue(_ queue: SKPaymentQueue, didRevokeEntitlementsForProductIdentifiers productIdentifiers: [String]) {
        revoked.append(productIdentifiers)
    }
}
