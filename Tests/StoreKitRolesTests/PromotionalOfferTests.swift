import Foundation
import StoreKitModel
import StoreKitRoles
import StoreKitRuntime
import StoreKitSimulation
import StoreKitTestSupport
import Testing

/// Promotional offers bought with a signed discount (F-O5, F-O6, F-O7): the store's refusals with
/// Apple's codes, the offer's periods, the receipt's `promotional_offer_id`, and whole runs;
/// docs/storekit-fidelity.md.
@Suite struct PromotionalOfferTests {
    /// At the default time rate (15) a day is one simulated second.
    static let second: Int64 = 1_000_000_000

    /// One group: a weekly subscription with a free week, a monthly one with two months paid up front
    /// and three weeks at 0.99 (pay as you go); another group's subscription with an offer; coins.
    static func catalog() throws -> Catalog {
        try Catalog(products: [
            Product(identifier: "plus.weekly", kind: .autoRenewableSubscription, displayPrice: "1.99", subscriptionGroup: "Plus",
                    subscriptionPeriod: "P1W", subscriptionLevel: 1,
                    promotionalOffers: [PromotionalOffer(identifier: "freeweek", terms: IntroductoryOffer(paymentMode: .free, subscriptionPeriod: "P1W"))]),
            Product(identifier: "plus.monthly", kind: .autoRenewableSubscription, displayPrice: "4.99", subscriptionGroup: "Plus",
                    subscriptionPeriod: "P1M", subscriptionLevel: 1,
                    promotionalOffers: [
                        PromotionalOffer(identifier: "halfprice", terms: IntroductoryOffer(paymentMode: .payUpFront, subscriptionPeriod: "P2M", displayPrice: "4.99")),
                        PromotionalOffer(identifier: "weeks", terms: IntroductoryOffer(paymentMode: .payAsYouGo, subscriptionPeriod: "P1W",
                                                                                        numberOfPeriods: 3, displayPrice: "0.99")),
                    ]),
            Product(identifier: "news.monthly", kind: .autoRenewableSubscription, displayPrice: "2.99", subscriptionGroup: "News",
                    subscriptionPeriod: "P1M",
                    promotionalOffers: [PromotionalOffer(identifier: "news", terms: IntroductoryOffer(paymentMode: .free, subscriptionPeriod: "P1W"))]),
            Product(identifier: "coins", kind: .consumable, displayPrice: "0.99"),
        ])
    }

    /// A store that always sells (no failure, deferral or cancellation drawn), with devices "d" of
    /// account "a" and "e" of account "b", each with an observer attached.
    final class Feed {
        let store: StoreRole
        let feeder: RoleFeeder
        let choices = SeededChoices(seed: 1)
        var numbers: [String: UInt64] = [:]
        init(key: PromotionalOfferKey? = nil) throws {
            var behavior = StoreBehavior()
            behavior.failureProbability = 0
            behavior.deferralProbability = 0
            behavior.cancellationProbability = 0
            behavior.cancellationAtRenewalProbability = 0
            behavior.maximumRenewals = 10
            behavior.promotionalOfferKey = key
            store = StoreRole(catalog: try PromotionalOfferTests.catalog(), behavior: behavior, choices: choices)
            feeder = RoleFeeder(store)
            for (device, account) in [("d", "a"), ("e", "b")] {
                feeder.feed(.deviceRegistered(device: device, account: account), at: 0)
                feeder.feed(.observerAttached(device: device, observer: "o"), at: 0)
            }
        }

        func nextKey(_ device: String) -> TransactionKey {
            numbers[device, default: 0] += 1
            return TransactionKey(device: device, number: numbers[device]!)
        }

        /// The store's decision on `payment` added on `device`, and how many choices it drew deciding.
        func decide(_ payment: Payment, device: String = "d", at time: Int64 = 0) -> (decision: StoreDecision?, draws: Int) {
            let key = nextKey(device)
            feeder.feed(.transactionAdded(key, payment), at: time)
            let before = choices.count
            let effects = store.timerFired(.decidePurchase(key), now: time)
            let decisions = effects.compactMap { effect -> StoreDecision? in
                guard case .send(.decidePurchase(key, let decision)) = effect else { return nil }
                return decision
            }
            return (decisions.first, choices.count - before)
        }

        /// A charged purchase of `payment` on `device` at `time` (decided elsewhere): the store's reaction.
        func buy(_ payment: Payment, device: String = "d", at time: Int64) -> ([Effect], OriginalTransaction) {
            let key = nextKey(device)
            feeder.feed(.transactionAdded(key, payment), at: time)
            let identifier = "\(device).\(key.number)"
            let effects = feeder.feed(.transactionPurchased(key, identifier: identifier, downloads: [], charged: true), at: time)
            return (effects, OriginalTransaction(transactionIdentifier: identifier, payment: payment.withoutDiscount, transactionDate: time))
        }

        /// Account a subscribed weekly at 0 and lapsed at 7 s; then `payment` is bought at `time`.
        func buyAsLapsedSubscriber(_ payment: Payment, at time: Int64) -> ([Effect], OriginalTransaction) {
            let (_, weekly) = buy(PromotionalOfferTests.payment("plus.weekly"), at: 0)
            feeder.feed(.subscriptionExpired(device: "d", original: weekly), at: 7 * PromotionalOfferTests.second)
            return buy(payment, at: time)
        }

        func renew(_ original: OriginalTransaction, at time: Int64) -> [Effect] {
            let key = nextKey("d")
            return feeder.feed(.subscriptionRenewed(key, identifier: "d.\(key.number)", original: original, downloads: []), at: time)
        }
    }

    static func payment(_ product: String, account: String = "a", offer: String? = nil,
                        key: PromotionalOfferKey = .simulator, nonce: String = "6f1d2c9e-0b4a-4c1e-9a7d-2f3e4b5c6d7e") -> Payment {
        var payment = Payment(productIdentifier: product, applicationUsername: account)
        if let offer { payment.discount = key.discount(for: payment, offerIdentifier: offer, nonce: nonce, timestamp: 1_700_000_000_000) }
        return payment
    }

    static func refusal(_ decided: (decision: StoreDecision?, draws: Int)) -> StoreError.Code? {
        guard case .failed(let error) = decided.decision else { return nil }
        return error.code
    }

    @Test("F-O6: a subscriber's valid discount is accepted, and each kind of bad one is refused with Apple's code, drawing no choice")
    func refusals() throws {
        let feed = try Feed()
        _ = feed.buy(Self.payment("plus.weekly"), at: 0)
        let valid = feed.decide(Self.payment("plus.monthly", offer: "halfprice"))
        #expect(valid.decision == .purchased(charged: true))
        #expect(valid.draws == 1, "the plain purchase's outcome draw, as without a discount")

        // invalidOfferIdentifier (11): no such offer, another product's offer, a product without offers.
        for payment in [Self.payment("plus.monthly", offer: "nope"), Self.payment("plus.monthly", offer: "freeweek"), Self.payment("coins", offer: "freeweek")] {
            let decided = feed.decide(payment)
            #expect(Self.refusal(decided) == .invalidOfferIdentifier, "\(payment)")
            #expect(decided.draws == 0)
        }
        // missingOfferParams (13): an empty key identifier, nonce or signature.
        for field in 0..<3 {
            var payment = Self.payment("plus.monthly", offer: "halfprice")
            switch field {
            case 0: payment.discount?.keyIdentifier = ""
            case 1: payment.discount?.nonce = ""
            default: payment.discount?.signature = ""
            }
            let decided = feed.decide(payment)
            #expect(Self.refusal(decided) == .missingOfferParams, "field \(field)")
            #expect(decided.draws == 0)
        }
        // invalidSignature (12): another secret, another key identifier, a signed field changed.
        var tampered = Self.payment("plus.monthly", offer: "halfprice")
        tampered.discount?.timestamp += 1
        for payment in [Self.payment("plus.monthly", offer: "halfprice", key: PromotionalOfferKey(identifier: "SKSIMKEY01", secret: "guess")),
                        Self.payment("plus.monthly", offer: "halfprice", key: PromotionalOfferKey(identifier: "OTHER", secret: "sksim-promotional-offers")),
                        tampered] {
            let decided = feed.decide(payment)
            #expect(Self.refusal(decided) == .invalidSignature, "\(payment)")
            #expect(decided.draws == 0)
        }
        // ineligibleForOffer (18): account b never subscribed in Plus; account a never in News.
        let newcomer = feed.decide(Self.payment("plus.weekly", account: "b", offer: "freeweek"), device: "e")
        #expect(Self.refusal(newcomer) == .ineligibleForOffer)
        #expect(Self.refusal(feed.decide(Self.payment("news.monthly", offer: "news"))) == .ineligibleForOffer)
        #expect(newcomer.draws == 0)
    }

    @Test("F-O6: the scenario's key (topology store.promotionalOfferKey) is the one signatures are checked with")
    func scenarioKey() throws {
        let key = PromotionalOfferKey(identifier: "KEY2", secret: "s3cret")
        let feed = try Feed(key: key)
        _ = feed.buy(Self.payment("plus.weekly"), at: 0)
        #expect(Self.refusal(feed.decide(Self.payment("plus.monthly", offer: "halfprice"))) == .invalidSignature)
        #expect(feed.decide(Self.payment("plus.monthly", offer: "halfprice", key: key)).decision == .purchased(charged: true))
    }

    @Test("F-O5: a lapsed subscriber's pay-up-front offer: one first period of the offer's whole length (two months), then the product's")
    func payUpFront() throws {
        let feed = try Feed()
        let (effects, second) = feed.buyAsLapsedSubscriber(Self.payment("plus.monthly", offer: "halfprice"), at: 10 * Self.second)
        #expect(effects == [.timer(afterNanoseconds: 60 * Self.second, .subscriptionPeriodEnd(original: second.transactionIdentifier, renewals: 0))])
        let subscription = try #require(feed.store.projection.subscriptions[second.transactionIdentifier])
        #expect(subscription.promotionalOffer?.identifier == "halfprice" && subscription.introductoryOffer == nil)
        #expect(feed.renew(second, at: 70 * Self.second)
            == [.timer(afterNanoseconds: 30 * Self.second, .subscriptionPeriodEnd(original: second.transactionIdentifier, renewals: 1))])
    }

    @Test("F-O5, F-O7: pay as you go: three offer periods of a week, then the product's month; the receipt marks the purchase and the two renewals at the offer price")
    func payAsYouGoAndReceipt() throws {
        let feed = try Feed()
        // A lapsed subscriber: the offer applies from the purchase.
        let (effects, monthly) = feed.buyAsLapsedSubscriber(Self.payment("plus.monthly", offer: "weeks"), at: 8 * Self.second)
        func periodEnd(_ seconds: Int64, _ renewals: Int) -> Effect {
            .timer(afterNanoseconds: seconds * Self.second, .subscriptionPeriodEnd(original: monthly.transactionIdentifier, renewals: renewals))
        }
        #expect(effects == [periodEnd(7, 0)])
        #expect(feed.renew(monthly, at: 15 * Self.second) == [periodEnd(7, 1)])
        #expect(feed.renew(monthly, at: 22 * Self.second) == [periodEnd(7, 2)])
        #expect(feed.renew(monthly, at: 29 * Self.second) == [periodEnd(30, 3)])
        let receipt = feed.store.projection.receipt(of: "a")
        #expect(receipt.purchases.map(\.transactionIdentifier) == ["d.1", "d.2", "d.3", "d.4", "d.5"])
        #expect(receipt.purchases.map(\.promotionalOfferIdentifier) == [nil, "weeks", "weeks", "weeks", nil])
        #expect(receipt.purchases.allSatisfy { $0.introductoryOfferPeriod == nil && $0.payment.discount == nil })
        // The original a renewal or restore carries is the payment without its discount.
        #expect(feed.store.projection.subscriptions[monthly.transactionIdentifier]?.original.payment.discount == nil)
    }

    @Test("F-O5: a purchase that is not charged (the account already pays for the product) gets no offer; nor does one without a discount")
    func noOfferWithoutCharge() throws {
        let feed = try Feed()
        _ = feed.buy(Self.payment("plus.weekly"), at: 0)
        let key = feed.nextKey("d")
        feed.feeder.feed(.transactionAdded(key, Self.payment("plus.weekly", offer: "freeweek")), at: Self.second)
        feed.feeder.feed(.transactionPurchased(key, identifier: "d.2", downloads: [], charged: false), at: Self.second)
        #expect(feed.store.projection.subscriptions["d.2"] == nil)
        #expect(feed.store.projection.history(of: "a").promotionalOfferIdentifiers.isEmpty)
        let (_, plain) = feed.buy(Self.payment("plus.monthly"), at: 2 * Self.second)
        #expect(feed.store.projection.subscriptions[plain.transactionIdentifier]?.promotionalOffer == nil)
    }

    @Test("F-O5: an interrupted purchase with a discount is bought after all at the regular price (the resumed payment has no discount)")
    func interruptedPurchase() throws {
        var behavior = StoreBehavior()
        behavior.interruptedPurchaseProbability = 1
        behavior.interruptionResolvedProbability = 1
        let store = StoreRole(catalog: try Self.catalog(), behavior: behavior, choices: SeededChoices(seed: 2))
        let feeder = RoleFeeder(store)
        feeder.feed(.deviceRegistered(device: "d", account: "a"), at: 0)
        feeder.feed(.observerAttached(device: "d", observer: "o"), at: 0)
        let key = TransactionKey(device: "d", number: 1)
        feeder.feed(.transactionAdded(key, Self.payment("plus.monthly", offer: "halfprice")), at: 0)
        let effects = store.timerFired(.decidePurchase(key), now: 0)
        // Account a never subscribed: the discount is refused first, so nothing is interrupted.
        #expect(effects.count == 1)
        let subscriber = TransactionKey(device: "d", number: 2)
        feeder.feed(.transactionAdded(subscriber, Self.payment("plus.weekly")), at: 0)
        feeder.feed(.transactionPurchased(subscriber, identifier: "d.2", downloads: [], charged: true), at: 0)
        let third = TransactionKey(device: "d", number: 3)
        feeder.feed(.transactionAdded(third, Self.payment("plus.monthly", offer: "halfprice")), at: 0)
        let resumed = store.timerFired(.decidePurchase(third), now: 0).compactMap { effect -> Payment? in
            guard case .send(.resumeInterruptedPurchase(_, _, let payment, _)) = effect else { return nil }
            return payment
        }
        #expect(resumed == [Self.payment("plus.monthly")])
    }

    static func fixtureCatalog() throws -> Catalog {
        try Catalog.load(contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("StoreKitModelTests/Fixtures/promotional-offers.json"))
    }

    @Test("F-O5: a whole run whose users buy at promotional offers (apps.promotionalOfferProbability): no violation, the same bytes for the same seed, every discount validly signed, and the receipts mark the purchases that got one")
    func wholeRun() throws {
        let catalog = try Self.fixtureCatalog()
        var scenario = Scenario(seed: 3, devices: 6, catalog: catalog, catalogSource: "promotional-offers.json")
        scenario.apps.purchasesPerDevice = 8
        scenario.apps.promotionalOfferProbability = 0.8
        scenario.apps.receiptRefreshProbability = 0.5
        scenario.store.maximumRenewals = 1
        let (report, events) = try runInMemory(scenario)
        #expect(report.violations.isEmpty)
        #expect(try runInMemory(scenario).1 == events)
        var accountOfDevice: [String: String] = [:]
        var discounted: [TransactionKey: Payment] = [:]
        var offerOfPurchase: [String: String] = [:]
        var refused: [StoreError.Code] = []
        var marked: [String: String] = [:]
        for recorded in events {
            switch recorded.event {
            case .deviceRegistered(let device, let account):
                accountOfDevice[device] = account
            case .transactionAdded(let key, let payment):
                guard let discount = payment.discount else { continue }
                #expect(PromotionalOfferKey.simulator.isValid(discount, on: payment))
                #expect(catalog.product(payment.productIdentifier)?.promotionalOffer(discount.identifier) != nil)
                discounted[key] = payment
            case .transactionPurchased(let key, let identifier, _, let charged):
                if charged, let payment = discounted[key] { offerOfPurchase[identifier] = payment.discount?.identifier }
            case .transactionFailed(let key, let error):
                if discounted[key] != nil, [.invalidOfferIdentifier, .invalidSignature, .missingOfferParams, .ineligibleForOffer].contains(error.code) {
                    refused.append(error.code)
                }
            case .receiptDelivered(_, _, _, let entries, _):
                for entry in entries { if let offer = entry.promotionalOfferIdentifier { marked[entry.transactionIdentifier] = offer } }
            default:
                break
            }
        }
        #expect(discounted.count >= 10, "the users bought at offers")
        #expect(!offerOfPurchase.isEmpty)
        // The apps sign with the store's key and name the product's own offers: only eligibility can fail.
        #expect(refused.allSatisfy { $0 == .ineligibleForOffer })
        // Every receipt entry marked as a purchase at an offer is one, with that offer; renewals aside.
        #expect(!marked.isEmpty)
        for (identifier, offer) in marked where offerOfPurchase[identifier] != nil { #expect(offerOfPurchase[identifier] == offer) }
        #expect(marked.keys.contains { offerOfPurchase[$0] != nil })
    }

    @Test("F-O5: without the knob (or with it on a catalog without promotional offers) no choice is drawn: the run logs the same bytes as before")
    func knobDrawsNothingByDefault() throws {
        var scenario = Scenario(seed: 42, devices: 6)
        scenario.apps.purchasesPerDevice = 6
        let (_, plain) = try runInMemory(scenario)
        scenario.apps.promotionalOfferProbability = 0.9
        let (_, withKnob) = try runInMemory(scenario)
        // The first record holds the scenario (with the knob); everything after it is the same.
        #expect(Array(plain.dropFirst()) == Array(withKnob.dropFirst()))
        #expect(!plain.contains { if case .transactionAdded(_, let payment) = $0.event { payment.discount != nil } else { false } })
    }
}
