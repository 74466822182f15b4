import StoreKitModel
import StoreKitRoles
import StoreKitRuntime
import StoreKitSimulation
import StoreKitTestKit
import StoreKitTestSupport
import Testing

/// Billing retry and the billing grace period of auto-renewable subscriptions (F-B1);
/// docs/storekit-fidelity.md.
@Suite struct BillingRetryTests {
    static let monthly = SampleProducts.monthly
    /// At the default time rate (15) a day is one simulated second: P16D and P60D.
    static let grace: Int64 = 16_000_000_000
    static let retry: Int64 = 60_000_000_000

    /// A store whose `.storekit` settings fail every renewal's billing, with or without a grace period.
    func store(gracePeriod: Bool, recovery: Double) -> (StoreRole, (Event, Int64) -> [Effect]) {
        var catalog = Catalog.sample
        catalog.testSettings.renewalBillingIssuesEnabled = true
        catalog.testSettings.billingGracePeriodEnabled = gracePeriod
        var behavior = StoreBehavior()
        behavior.cancellationAtRenewalProbability = 0
        behavior.billingRecoveryProbability = recovery
        let store = StoreRole(catalog: catalog, behavior: behavior, choices: SeededChoices(seed: 1))
        let feeder = RoleFeeder(store)
        return (store, { event, now in feeder.feed(event, at: now) })
    }

    /// Buys the monthly subscription at time 0 and returns its first purchase.
    func subscribe(_ feed: (Event, Int64) -> [Effect]) -> OriginalTransaction {
        _ = feed(.deviceRegistered(device: "d", account: "a"), 0)
        _ = feed(.observerAttached(device: "d", observer: "o"), 0)
        let key = TransactionKey(device: "d", number: 1)
        _ = feed(.transactionAdded(key, Payment(productIdentifier: Self.monthly)), 0)
        _ = feed(.transactionPurchased(key, identifier: "d.1", downloads: [], charged: true), 0)
        return OriginalTransaction(transactionIdentifier: "d.1", payment: Payment(productIdentifier: Self.monthly, applicationUsername: nil),
                                   transactionDate: 0)
    }

    @Test("F-B1: with _renewalBillingIssuesEnabled and a grace period, a renewal that cannot be billed keeps the user entitled for the grace period, then not, until billing recovers")
    func gracePeriodThenRecovery() {
        let (store, feed) = store(gracePeriod: true, recovery: 1)
        let first = subscribe(feed)
        let periodEnd: Int64 = 30_000_000_000
        #expect(store.timerFired(.subscriptionPeriodEnd(original: "d.1", renewals: 0), now: periodEnd)
            == [.send(.beginBillingRetry(device: "d", original: first, gracePeriodNanoseconds: Self.grace))])
        let retry = feed(.subscriptionBillingRetry(device: "d", original: first, gracePeriodNanoseconds: Self.grace), periodEnd)
        #expect(retry == [.timer(afterNanoseconds: Self.grace / 2, .billingRetry(original: "d.1", final: false))])
        let subscription = store.projection.subscriptions["d.1"]!
        #expect(subscription.renewalState(at: periodEnd + 1) == .inGracePeriod)
        #expect(subscription.renewalState(at: periodEnd + 1).isEntitled)
        #expect(subscription.renewalState(at: periodEnd + Self.grace) == .inBillingRetryPeriod)
        #expect(!subscription.renewalState(at: periodEnd + Self.grace).isEntitled)
        // Recovery (probability 1) within the grace period is a renewal that keeps the renewal date:
        // the next period counts from the period end that billing failed at.
        let recovered = periodEnd + Self.grace / 2
        #expect(store.timerFired(.billingRetry(original: "d.1", final: false), now: recovered)
            == [.send(.renewSubscription(device: "d", original: first))])
        let next = feed(.subscriptionRenewed(TransactionKey(device: "d", number: 2), identifier: "d.2", original: first, downloads: []), recovered)
        #expect(next == [.timer(afterNanoseconds: 30_000_000_000 - Self.grace / 2, .subscriptionPeriodEnd(original: "d.1", renewals: 1))])
        #expect(store.projection.subscriptions["d.1"]?.renewalState(at: recovered) == .subscribed)
    }

    @Test("F-B1: without recovery, billing retry ends the subscription when the retry period ends; without a grace period the user is not entitled meanwhile")
    func retryPeriodEndsInExpiry() {
        let (store, feed) = store(gracePeriod: false, recovery: 0)
        let first = subscribe(feed)
        let periodEnd: Int64 = 30_000_000_000
        #expect(store.timerFired(.subscriptionPeriodEnd(original: "d.1", renewals: 0), now: periodEnd)
            == [.send(.beginBillingRetry(device: "d", original: first, gracePeriodNanoseconds: 0))])
        let retry = feed(.subscriptionBillingRetry(device: "d", original: first, gracePeriodNanoseconds: 0), periodEnd)
        #expect(retry == [.timer(afterNanoseconds: Self.retry, .billingRetry(original: "d.1", final: true))])
        #expect(store.projection.subscriptions["d.1"]?.renewalState(at: periodEnd) == .inBillingRetryPeriod)
        // A period-end timer left over from before does nothing while billing is retried.
        #expect(store.timerFired(.subscriptionPeriodEnd(original: "d.1", renewals: 0), now: periodEnd).isEmpty)
        #expect(store.timerFired(.billingRetry(original: "d.1", final: true), now: periodEnd + Self.retry)
            == [.send(.expireSubscription(device: "d", original: first))])
    }

    @Test("F-B1: a recovery after the grace period (paid service paused) starts the next period at the recovery")
    func recoveryAfterGraceMovesRenewalDate() {
        let (_, feed) = store(gracePeriod: false, recovery: 1)
        let first = subscribe(feed)
        _ = feed(.subscriptionBillingRetry(device: "d", original: first, gracePeriodNanoseconds: 0), 30_000_000_000)
        let next = feed(.subscriptionRenewed(TransactionKey(device: "d", number: 2), identifier: "d.2", original: first, downloads: []), 90_000_000_000)
        #expect(next == [.timer(afterNanoseconds: 30_000_000_000, .subscriptionPeriodEnd(original: "d.1", renewals: 1))])
    }

    @Test("F-B1: a grace period that ends unbilled leaves billing retry running until the retry period's end")
    func graceEndsUnbilled() {
        let (store, feed) = store(gracePeriod: true, recovery: 0)
        let first = subscribe(feed)
        _ = store.timerFired(.subscriptionPeriodEnd(original: "d.1", renewals: 0), now: 30_000_000_000)
        _ = feed(.subscriptionBillingRetry(device: "d", original: first, gracePeriodNanoseconds: Self.grace), 30_000_000_000)
        #expect(store.timerFired(.billingRetry(original: "d.1", final: false), now: 38_000_000_000)
            == [.timer(afterNanoseconds: Self.retry - Self.grace / 2, .billingRetry(original: "d.1", final: true))])
    }

    @Test("F-B1: a restarted store takes billing retry up from the log")
    func restartedStoreResumesRetry() {
        let (first, feed) = store(gracePeriod: true, recovery: 0)
        let original = subscribe(feed)
        _ = feed(.subscriptionBillingRetry(device: "d", original: original, gracePeriodNanoseconds: Self.grace), 30_000_000_000)
        var catalog = Catalog.sample
        catalog.testSettings.renewalBillingIssuesEnabled = true
        catalog.testSettings.billingGracePeriodEnabled = true
        let restarted = StoreRole(catalog: catalog, behavior: first.behavior, choices: SeededChoices(seed: 2))
        var sequence: UInt64 = 0
        for (event, time) in [(Event.deviceRegistered(device: "d", account: "a"), Int64(0)),
                              (.transactionAdded(TransactionKey(device: "d", number: 1), Payment(productIdentifier: Self.monthly)), 0),
                              (.transactionPurchased(TransactionKey(device: "d", number: 1), identifier: "d.1", downloads: [], charged: true), 0),
                              (.subscriptionBillingRetry(device: "d", original: original, gracePeriodNanoseconds: Self.grace), 30_000_000_000),
                              (.appLaunched(device: "d"), 35_000_000_000)] {
            sequence += 1
            restarted.catchUp(RecordedEvent(sequence: sequence, timestamp: time, commandID: nil, event: event))
        }
        // Halfway through the grace period (38 s) is 3 s after the log's end (35 s).
        #expect(restarted.resume(now: 0) == [.timer(afterNanoseconds: 3_000_000_000, .billingRetry(original: "d.1", final: false))])
    }

    @Test("F-B1: the queue logs beginBillingRetry as subscriptionBillingRetry; not for an expired subscription or a negative grace period")
    func queueRules() throws {
        var harness = QueueHarness()
        harness.ready()
        let key = harness.purchase(Self.monthly)
        let transaction = try #require(harness.transaction(key))
        let original = try #require(StoreTestSession.original(of: transaction))
        guard case .accept(let events) = harness.send(StoreTestSession.billingIssue(original: original, device: "d1", gracePeriodNanoseconds: Self.grace)) else {
            Issue.record("billing retry refused"); return
        }
        #expect(events == [.subscriptionBillingRetry(device: "d1", original: original, gracePeriodNanoseconds: Self.grace)])
        #expect(harness.rejection(harness.send(.beginBillingRetry(device: "d1", original: original, gracePeriodNanoseconds: -1))) == .invalidArgument)
        harness.send(.expireSubscription(device: "d1", original: original))
        #expect(harness.rejection(harness.send(.beginBillingRetry(device: "d1", original: original, gracePeriodNanoseconds: 0))) == .invalidArgument)
    }

    @Test("F-B1: a whole run with store.billingIssueProbability logs billing retries that end in a renewal or an expiry, with no violation")
    func wholeRun() throws {
        var scenario = Scenario(seed: 7, devices: 6)
        scenario.apps.purchasesPerDevice = 6
        scenario.store.billingIssueProbability = 0.6
        scenario.store.billingGracePeriodEnabled = true
        let environment = DeterministicEnvironment.inMemory(seed: scenario.seed)
        let report = try DeterministicRuntime(scenario: scenario, environment: environment).run()
        #expect(report.violations.isEmpty)
        var inRetry: Set<String> = []
        var retries = 0
        var ended = 0
        try environment.storage.forEachRecord(from: 1) { _, _, payload in
            switch try EventCodec.decodeEvent(payload).event {
            case .subscriptionBillingRetry(_, let original, let grace):
                #expect(grace == Self.grace)
                #expect(inRetry.insert(original.transactionIdentifier).inserted)
                retries += 1
            case .subscriptionRenewed(_, _, let original, _), .subscriptionExpired(_, let original):
                if inRetry.remove(original.transactionIdentifier) != nil { ended += 1 }
            default:
                break
            }
        }
        #expect(retries > 0)
        #expect(ended == retries)  // every billing retry ends, recovered or expired
    }

    /// A store failing every renewal's billing, with a grace period, selling `products` at `timeRate`.
    func store(products: [Product], timeRate: Int) throws -> (StoreRole, (Event, Int64) -> [Effect]) {
        var catalog = try Catalog(products: products)
        catalog.testSettings.renewalBillingIssuesEnabled = true
        catalog.testSettings.billingGracePeriodEnabled = true
        catalog.testSettings.timeRate = timeRate
        var behavior = StoreBehavior()
        behavior.cancellationAtRenewalProbability = 0
        behavior.billingRecoveryProbability = 0
        let store = StoreRole(catalog: catalog, behavior: behavior, choices: SeededChoices(seed: 1))
        let feeder = RoleFeeder(store)
        return (store, { event, now in feeder.feed(event, at: now) })
    }

    static let weekly = Product(identifier: "club.weekly", kind: .autoRenewableSubscription, displayPrice: "0.99",
                                subscriptionGroup: "Club", subscriptionPeriod: "P1W")
    static let monthlyClub = Product(identifier: "club.monthly", kind: .autoRenewableSubscription, displayPrice: "2.99",
                                     subscriptionGroup: "Club", subscriptionPeriod: "P1M")

    /// Buys `product` on device d at time 0 and returns its first purchase.
    func subscribe(_ product: String, _ feed: (Event, Int64) -> [Effect]) -> OriginalTransaction {
        _ = feed(.deviceRegistered(device: "d", account: "a"), 0)
        let key = TransactionKey(device: "d", number: 1)
        _ = feed(.transactionAdded(key, Payment(productIdentifier: product)), 0)
        _ = feed(.transactionPurchased(key, identifier: "d.1", downloads: [], charged: true), 0)
        return OriginalTransaction(transactionIdentifier: "d.1", payment: Payment(productIdentifier: product, applicationUsername: nil), transactionDate: 0)
    }

    @Test("F-B2: the grace period of a weekly subscription is 6 days, of any other 16 (SKTestSession.TimeRate.realTime's table), sped up by the time rate",
          arguments: [("club.weekly", Int64(7), Int64(6)), ("club.monthly", 30, 16)])
    func gracePeriodByRenewalPeriod(product: String, periodDays: Int64, graceDays: Int64) throws {
        let (store, feed) = try store(products: [Self.weekly, Self.monthlyClub], timeRate: 15)
        let first = subscribe(product, feed)
        let day: Int64 = 1_000_000_000
        #expect(store.timerFired(.subscriptionPeriodEnd(original: "d.1", renewals: 0), now: periodDays * day)
            == [.send(.beginBillingRetry(device: "d", original: first, gracePeriodNanoseconds: graceDays * day))])
        #expect(StoreBehavior.billingGracePeriod(forPeriod: product == "club.weekly" ? "P1W" : "P1M") == "P\(graceDays)D")
    }

    @Test("F-B2: at a fixed time rate the grace period lasts the renewal interval and the billing retry period twice it (oneRenewalEveryTwoSeconds: 2 s and 4 s)")
    func fixedRateRetryIsTwiceTheInterval() throws {
        let (store, feed) = try store(products: [Self.weekly, Self.monthlyClub], timeRate: 1005)
        let first = subscribe("club.monthly", feed)
        let interval: Int64 = 2_000_000_000
        #expect(store.timerFired(.subscriptionPeriodEnd(original: "d.1", renewals: 0), now: interval)
            == [.send(.beginBillingRetry(device: "d", original: first, gracePeriodNanoseconds: interval))])
        _ = feed(.subscriptionBillingRetry(device: "d", original: first, gracePeriodNanoseconds: interval), interval)
        // The retry halfway through the grace period fails (recovery 0); the last one is at the retry period's end.
        #expect(store.timerFired(.billingRetry(original: "d.1", final: false), now: interval + interval / 2)
            == [.timer(afterNanoseconds: 2 * interval - interval / 2, .billingRetry(original: "d.1", final: true))])
        #expect(store.timerFired(.billingRetry(original: "d.1", final: true), now: 3 * interval)
            == [.send(.expireSubscription(device: "d", original: first))])
    }
}
