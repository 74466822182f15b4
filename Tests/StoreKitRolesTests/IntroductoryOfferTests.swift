import Foundation
import StoreKitModel
import StoreKitRoles
import StoreKitRuntime
import StoreKitSimulation
import StoreKitTestSupport
import Testing

/// Introductory offers applied by the store (F-O2): who gets one, and how long its periods last;
/// docs/storekit-fidelity.md.
@Suite struct IntroductoryOfferTests {
    /// At the default time rate (15) a day is one simulated second.
    static let second: Int64 = 1_000_000_000

    /// One group: a monthly subscription with a one-week free trial, a yearly one with three monthly
    /// periods at 0.99 (pay as you go), a weekly one with two months paid up front; and another
    /// group's monthly subscription without an offer.
    static func catalog() throws -> Catalog {
        try Catalog(products: [
            Product(identifier: "plus.monthly", kind: .autoRenewableSubscription, displayPrice: "4.99", subscriptionGroup: "Plus",
                    subscriptionPeriod: "P1M", subscriptionLevel: 1,
                    introductoryOffer: IntroductoryOffer(paymentMode: .free, subscriptionPeriod: "P1W")),
            Product(identifier: "plus.yearly", kind: .autoRenewableSubscription, displayPrice: "39.99", subscriptionGroup: "Plus",
                    subscriptionPeriod: "P1Y", subscriptionLevel: 1,
                    introductoryOffer: IntroductoryOffer(paymentMode: .payAsYouGo, subscriptionPeriod: "P1M", numberOfPeriods: 3, displayPrice: "0.99")),
            Product(identifier: "plus.weekly", kind: .autoRenewableSubscription, displayPrice: "1.99", subscriptionGroup: "Plus",
                    subscriptionPeriod: "P1W", subscriptionLevel: 1,
                    introductoryOffer: IntroductoryOffer(paymentMode: .payUpFront, subscriptionPeriod: "P1M", numberOfPeriods: 2, displayPrice: "2.99")),
            Product(identifier: "news.monthly", kind: .autoRenewableSubscription, displayPrice: "2.99", subscriptionGroup: "News",
                    subscriptionPeriod: "P1M"),
        ])
    }

    final class Feed {
        let store: StoreRole
        let feeder: RoleFeeder
        var numbers: [String: UInt64] = [:]
        init(catalog: Catalog? = nil) throws {
            var behavior = StoreBehavior()
            behavior.cancellationAtRenewalProbability = 0
            behavior.maximumRenewals = 10
            store = StoreRole(catalog: try catalog ?? IntroductoryOfferTests.catalog(), behavior: behavior, choices: SeededChoices(seed: 1))
            feeder = RoleFeeder(store)
            _ = receive(.deviceRegistered(device: "d", account: "a"), at: 0)
            _ = receive(.deviceRegistered(device: "e", account: "b"), at: 0)
        }
        func receive(_ event: Event, at time: Int64) -> [Effect] { feeder.feed(event, at: time) }
        /// A charged purchase of `product` on `device` at `time`: what the store does, and the purchase.
        func buy(_ product: String, device: String = "d", at time: Int64) -> ([Effect], OriginalTransaction) {
            numbers[device, default: 0] += 1
            let number = numbers[device]!
            let key = TransactionKey(device: device, number: number)
            _ = receive(.transactionAdded(key, Payment(productIdentifier: product)), at: time)
            let effects = receive(.transactionPurchased(key, identifier: "\(device).\(number)", downloads: [], charged: true), at: time)
            return (effects, OriginalTransaction(transactionIdentifier: "\(device).\(number)",
                                                 payment: Payment(productIdentifier: product, applicationUsername: nil), transactionDate: time))
        }
        /// The store renews `original` at `time` (its period end): the timer it sets for the next one.
        func renew(_ original: OriginalTransaction, at time: Int64) -> [Effect] {
            let device = original.transactionIdentifier.split(separator: ".").first.map(String.init) ?? "d"
            numbers[device, default: 0] += 1
            let key = TransactionKey(device: device, number: numbers[device]!)
            return receive(.subscriptionRenewed(key, identifier: "\(device).\(numbers[device]!)", original: original, downloads: []), at: time)
        }
    }

    static func periodEnd(_ original: OriginalTransaction, after nanoseconds: Int64, renewals: Int) -> Effect {
        .timer(afterNanoseconds: nanoseconds, .subscriptionPeriodEnd(original: original.transactionIdentifier, renewals: renewals))
    }

    @Test("F-O2: a free trial's period is the offer's (one week), then the product's own (a month); the store renews at the trial's end")
    func freeTrialThenRegular() throws {
        let feed = try Feed()
        let (effects, first) = feed.buy("plus.monthly", at: 0)
        #expect(effects == [Self.periodEnd(first, after: 7 * Self.second, renewals: 0)])
        let subscription = try #require(feed.store.projection.subscriptions["d.1"])
        #expect(subscription.isInIntroductoryOfferPeriod)
        #expect(feed.store.projection.history(of: "a").introductoryOfferTransactions == ["d.1"])
        #expect(feed.store.timerFired(.subscriptionPeriodEnd(original: "d.1", renewals: 0), now: 7 * Self.second)
            == [.send(.renewSubscription(device: "d", original: first))])
        #expect(feed.renew(first, at: 7 * Self.second) == [Self.periodEnd(first, after: 30 * Self.second, renewals: 1)])
        #expect(feed.store.projection.subscriptions["d.1"]?.isInIntroductoryOfferPeriod == false)
        // The renewal after the trial is at the regular price: not an offer transaction.
        #expect(feed.store.projection.history(of: "a").introductoryOfferTransactions == ["d.1"])
    }

    @Test("F-O2: pay as you go: numberOfPeriods periods of the offer's length (renewals at the offer price), then the product's")
    func payAsYouGo() throws {
        let feed = try Feed()
        let (effects, first) = feed.buy("plus.yearly", at: 0)
        #expect(effects == [Self.periodEnd(first, after: 30 * Self.second, renewals: 0)])
        #expect(feed.renew(first, at: 30 * Self.second) == [Self.periodEnd(first, after: 30 * Self.second, renewals: 1)])
        #expect(feed.renew(first, at: 60 * Self.second) == [Self.periodEnd(first, after: 30 * Self.second, renewals: 2)])
        #expect(feed.renew(first, at: 90 * Self.second) == [Self.periodEnd(first, after: 365 * Self.second, renewals: 3)])
        // The purchase and the first two renewals were at the offer price; the third at the regular one.
        #expect(feed.store.projection.history(of: "a").introductoryOfferTransactions == ["d.1", "d.2", "d.3"])
        // F-O3: the receipt lists all four, three of them in the introductory offer period.
        let receipt = feed.store.projection.receipt(of: "a")
        #expect(receipt.purchases.map(\.transactionIdentifier) == ["d.1", "d.2", "d.3", "d.4"])
        #expect(receipt.introductoryOfferTransactions == ["d.1", "d.2", "d.3"])
    }

    @Test("F-O2: pay up front: one first period of numberOfPeriods x the offer's period, then the product's (here a week)")
    func payUpFront() throws {
        let feed = try Feed()
        let (effects, first) = feed.buy("plus.weekly", at: 0)
        #expect(effects == [Self.periodEnd(first, after: 60 * Self.second, renewals: 0)])
        #expect(feed.renew(first, at: 60 * Self.second) == [Self.periodEnd(first, after: 7 * Self.second, renewals: 1)])
    }

    @Test("F-O2: eligibility is per account and subscription group: an account that ever had a subscription in the group gets no offer, another account or another group does")
    func eligibilityPerGroup() throws {
        let feed = try Feed()
        let (_, first) = feed.buy("plus.monthly", at: 0)
        _ = feed.receive(.subscriptionExpired(device: "d", original: first), at: 7 * Self.second)
        // The same account, the same group, another product: the regular period at once.
        let (again, second) = feed.buy("plus.yearly", at: 10 * Self.second)
        #expect(again == [Self.periodEnd(second, after: 365 * Self.second, renewals: 0)])
        #expect(feed.store.projection.subscriptions[second.transactionIdentifier]?.introductoryOffer == nil)
        // Another account is new to the group.
        let (other, third) = feed.buy("plus.monthly", device: "e", at: 10 * Self.second)
        #expect(other == [Self.periodEnd(third, after: 7 * Self.second, renewals: 0)])
        // A group without an offer: the product's period.
        let (news, fourth) = feed.buy("news.monthly", at: 11 * Self.second)
        #expect(news == [Self.periodEnd(fourth, after: 30 * Self.second, renewals: 0)])
    }

    @Test("F-O2: SKTestSession's clearTransactions forgets the account's history, so it is eligible again")
    func clearedAccountEligibleAgain() throws {
        let feed = try Feed()
        _ = feed.buy("plus.monthly", at: 0)
        _ = feed.receive(.transactionsCleared(device: "d"), at: Self.second)
        let (effects, again) = feed.buy("plus.monthly", at: 2 * Self.second)
        #expect(effects == [Self.periodEnd(again, after: 7 * Self.second, renewals: 0)])
    }

    @Test("F-O2: a restarted store reads the offer from the log and times the trial's end as the first store did, with no choice drawn")
    func restartedStoreKeepsTrial() throws {
        let feed = try Feed()
        _ = feed.buy("plus.monthly", at: 0)
        var behavior = StoreBehavior()
        behavior.cancellationAtRenewalProbability = 0
        let restarted = StoreRole(catalog: try Self.catalog(), behavior: behavior, choices: SeededChoices(seed: 9))
        var sequence: UInt64 = 0
        for (event, time) in [(Event.deviceRegistered(device: "d", account: "a"), Int64(0)),
                              (.transactionAdded(TransactionKey(device: "d", number: 1), Payment(productIdentifier: "plus.monthly")), 0),
                              (.transactionPurchased(TransactionKey(device: "d", number: 1), identifier: "d.1", downloads: [], charged: true), 0),
                              (.appLaunched(device: "d"), 3 * Self.second)] {
            sequence += 1
            restarted.catchUp(RecordedEvent(sequence: sequence, timestamp: time, commandID: nil, event: event))
        }
        #expect(restarted.resume(now: 0) == [.timer(afterNanoseconds: 4 * Self.second, .subscriptionPeriodEnd(original: "d.1", renewals: 0))])
        #expect(restarted.projection.subscriptions["d.1"]?.introductoryOffer == feed.store.projection.subscriptions["d.1"]?.introductoryOffer)
    }

    @Test("F-O2: a whole run of RevenueCat's catalog (free trials of one and two weeks): a first purchase in the group renews or expires after its trial, later ones after their period; no violation, and the same seed logs the same bytes")
    func wholeRunWithTrials() throws {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("StoreKitModelTests/Fixtures/purchasetester-v1.1.storekit")
        let catalog = try Catalog.load(contentsOf: url)
        func run() throws -> (RunReport, [RecordedEvent]) {
            // Few purchases per device: in this catalog's group (no levels) every purchase replaces the
            // account's subscription at once (F-U3), so a trial ends unreplaced only in a quiet account.
            var scenario = Scenario(seed: 11, devices: 12, catalog: catalog, catalogSource: "purchasetester-v1.1.storekit")
            scenario.apps.purchasesPerDevice = 2
            return try runInMemory(scenario)
        }
        let (report, events) = try run()
        #expect(report.violations.isEmpty)
        #expect(try run().1 == events)
        // An independent reading of the log: which purchases were an account's first in the group.
        var accountOfDevice: [String: String] = [:]
        var payments: [TransactionKey: Payment] = [:]
        var subscribedAccounts: Set<String> = []
        var trials: [String: (start: Int64, length: Int64)] = [:]
        var regular: [String: (start: Int64, length: Int64)] = [:]
        var ended: Set<String> = []
        var checkedTrials = 0
        var checkedRegular = 0
        for recorded in events {
            switch recorded.event {
            case .deviceRegistered(let device, let account):
                accountOfDevice[device] = account
            case .transactionAdded(let key, let payment):
                payments[key] = payment
            case .transactionPurchased(let key, let identifier, _, let charged):
                guard charged, let payment = payments[key], let product = catalog.product(payment.productIdentifier),
                      product.kind == .autoRenewableSubscription,
                      let account = payment.applicationUsername ?? accountOfDevice[key.device] else { continue }
                let trialDays: Int64 = product.introductoryOffer?.subscriptionPeriod == "P1W" ? 7 : 14
                let periodDays: Int64 = product.subscriptionPeriod == "P1M" ? 30 : 365
                if subscribedAccounts.insert(account).inserted {
                    trials[identifier] = (recorded.timestamp, trialDays * Self.second)
                } else {
                    regular[identifier] = (recorded.timestamp, periodDays * Self.second)
                }
            case .subscriptionRenewed(let key, _, let original, _):
                // The first period end of the subscription, on the buying device (F-U4 copies aside).
                guard key.device == original.transactionIdentifier.split(separator: ".").first.map(String.init),
                      ended.insert(original.transactionIdentifier).inserted else { continue }
                if let trial = trials[original.transactionIdentifier] {
                    // The store's command reaches the log a little after the timer fires.
                    #expect(recorded.timestamp - trial.start >= trial.length && recorded.timestamp - trial.start < trial.length + Self.second)
                    checkedTrials += 1
                } else if let period = regular[original.transactionIdentifier] {
                    #expect(recorded.timestamp - period.start >= period.length)
                    checkedRegular += 1
                }
            default:
                break
            }
        }
        #expect(checkedTrials > 0)
        #expect(checkedTrials + checkedRegular == ended.count)
        #expect(report.totals.renewed > 0)
    }
}
