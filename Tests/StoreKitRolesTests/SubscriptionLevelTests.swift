import Foundation
import StoreKitModel
import StoreKitRoles
import StoreKitTestSupport
import Testing

/// Upgrades, downgrades and crossgrades within a subscription group (F-U3); docs/storekit-fidelity.md.
@Suite struct SubscriptionLevelTests {
    /// One group: gold (level 1) and silver (level 2) monthly, gold yearly (level 1).
    static func catalog() throws -> Catalog {
        try Catalog(products: [
            Product(identifier: "gold.monthly", kind: .autoRenewableSubscription, displayPrice: "9.99", subscriptionGroup: "Club",
                    subscriptionPeriod: "P1M", subscriptionLevel: 1),
            Product(identifier: "gold.yearly", kind: .autoRenewableSubscription, displayPrice: "99.99", subscriptionGroup: "Club",
                    subscriptionPeriod: "P1Y", subscriptionLevel: 1),
            Product(identifier: "silver.monthly", kind: .autoRenewableSubscription, displayPrice: "4.99", subscriptionGroup: "Club",
                    subscriptionPeriod: "P1M", subscriptionLevel: 2),
        ])
    }

    final class Feed {
        let store: StoreRole
        let feeder: RoleFeeder
        var number: UInt64 = 0
        init() throws {
            var behavior = StoreBehavior()
            behavior.cancellationAtRenewalProbability = 0
            store = StoreRole(catalog: try SubscriptionLevelTests.catalog(), behavior: behavior, choices: SeededChoices(seed: 1))
            feeder = RoleFeeder(store)
            _ = receive(.deviceRegistered(device: "d", account: "a"), at: 0)
        }
        func receive(_ event: Event, at time: Int64) -> [Effect] { feeder.feed(event, at: time) }
        /// A charged purchase of `product` at `time`: what the store does, and the purchase.
        func buy(_ product: String, at time: Int64) -> ([Effect], OriginalTransaction) {
            number += 1
            let key = TransactionKey(device: "d", number: number)
            _ = receive(.transactionAdded(key, Payment(productIdentifier: product)), at: time)
            let effects = receive(.transactionPurchased(key, identifier: "d.\(number)", downloads: [], charged: true), at: time)
            return (effects, OriginalTransaction(transactionIdentifier: "d.\(number)", payment: Payment(productIdentifier: product, applicationUsername: nil),
                                                 transactionDate: time))
        }
    }

    @Test("F-U3: a downgrade takes effect at the next renewal: the current subscription runs to its period end, then the lower level starts")
    func downgradeAtNextRenewal() throws {
        let feed = try Feed()
        let (_, gold) = feed.buy("gold.monthly", at: 0)
        let (effects, silver) = feed.buy("silver.monthly", at: 10_000_000_000)
        #expect(effects.isEmpty)  // nothing expires now, and silver's period does not start yet
        #expect(feed.store.projection.subscriptions["d.2"]?.startsAfter == "d.1")
        // Gold's period end: no renewal, it ends; silver's first period starts then.
        #expect(feed.store.timerFired(.subscriptionPeriodEnd(original: "d.1", renewals: 0), now: 30_000_000_000)
            == [.send(.expireSubscription(device: "d", original: gold))])
        let started = feed.receive(.subscriptionExpired(device: "d", original: gold), at: 30_000_000_000)
        #expect(started == [.timer(afterNanoseconds: 30_000_000_000, .subscriptionPeriodEnd(original: silver.transactionIdentifier, renewals: 0))])
    }

    @Test("F-U3: an upgrade takes effect at once: the lower level expires")
    func upgradeAtOnce() throws {
        let feed = try Feed()
        let (_, silver) = feed.buy("silver.monthly", at: 0)
        let (effects, _) = feed.buy("gold.monthly", at: 10_000_000_000)
        #expect(effects == [.send(.expireSubscription(device: "d", original: silver)),
                            .timer(afterNanoseconds: 30_000_000_000, .subscriptionPeriodEnd(original: "d.2", renewals: 0))])
    }

    @Test("F-U3: a crossgrade (same level) of another period waits for the renewal; one of the same period is immediate")
    func crossgrades() throws {
        let feed = try Feed()
        _ = feed.buy("gold.monthly", at: 0)
        let (toYearly, _) = feed.buy("gold.yearly", at: 5_000_000_000)
        #expect(toYearly.isEmpty)
        #expect(feed.store.projection.subscriptions["d.2"]?.startsAfter == "d.1")
    }

    @Test("F-U3: levels come from the .storekit file's groupNumber and survive the native format")
    func levelsImported() throws {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("StoreKitModelTests/Fixtures/every-setting-v5.storekit")
        let catalog = try Catalog.load(contentsOf: url)
        let subscription = try #require(catalog.products.first { $0.kind == .autoRenewableSubscription })
        #expect(subscription.subscriptionLevel == 1)
        let native = try Catalog.parseNativeCatalog(catalog.nativeCatalogData(), source: "native")
        #expect(native.products.first { $0.kind == .autoRenewableSubscription }?.subscriptionLevel == 1)
        #expect(Catalog.sample.products.allSatisfy { $0.subscriptionLevel == nil })  // the sample catalog keeps its bytes
    }
}
