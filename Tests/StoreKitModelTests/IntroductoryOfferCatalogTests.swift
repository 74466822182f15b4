import Foundation
import Testing
@testable import StoreKitModel

/// Introductory offers read from `.storekit` files and native catalogs (F-O1, docs/catalog-format.md).
@Suite struct IntroductoryOfferCatalogTests {
    /// A format `major`.0 file with one subscription whose offer keys are `offerKeys` (JSON members).
    static func storeKit(offerKeys: String, major: Int = 4) -> Data {
        Data("""
        {"version": {"major": \(major), "minor": 0}, "products": [],
         "subscriptionGroups": [{"id": "1", "name": "Plus", "subscriptions": [
           {"productID": "plus.monthly", "type": "RecurringSubscription", "displayPrice": "4.99",
            "recurringSubscriptionPeriod": "P1M", "groupNumber": 1, \(offerKeys)}
         ]}]}
        """.utf8)
    }

    static func offer(_ offerKeys: String, major: Int = 4) throws -> IntroductoryOffer? {
        try Catalog.importStoreKitConfiguration(storeKit(offerKeys: offerKeys, major: major), source: "t.storekit")
            .product("plus.monthly")?.introductoryOffer
    }

    static func error(_ offerKeys: String) throws -> CatalogError {
        try CatalogTestFixtures.catalogError {
            try Catalog.importStoreKitConfiguration(storeKit(offerKeys: offerKeys), source: "t.storekit")
        }
    }

    @Test("F-O1: the real files' offers are read: RevenueCat's free trials (format 1.1) and Apple's pay-up-front offer (format 2.0)")
    func realFiles() throws {
        let tester = try Catalog.load(contentsOf: CatalogTestFixtures.storeKitFile("purchasetester-v1.1.storekit"))
        #expect(tester.product("com.revenuecat.monthly_4.99.1_week_intro")?.introductoryOffer
            == IntroductoryOffer(paymentMode: .free, subscriptionPeriod: "P1W", internalID: "D4FA46D0"))
        #expect(tester.product("com.revenuecat.annual_39.99.2_week_intro")?.introductoryOffer?.subscriptionPeriod == "P2W")
        #expect(tester.product("lifetime")?.introductoryOffer == nil)
        let demo = try Catalog.load(contentsOf: CatalogTestFixtures.storeKitFile("skdemo-products-v2.storekit"))
        #expect(demo.product("subscription.pro")?.introductoryOffer
            == IntroductoryOffer(paymentMode: .payUpFront, subscriptionPeriod: "P2M", displayPrice: "1.99", internalID: "D928FA2A"))
        #expect(demo.product("subscription.standard")?.introductoryOffer == nil)
    }

    @Test("F-O1: every payment mode, as the files spell it; numberOfPeriods defaults to 1 and a free trial costs 0 whatever price it carries")
    func paymentModes() throws {
        #expect(try Self.offer(#""introductoryOffer": {"paymentMode": "free", "subscriptionPeriod": "P1W", "displayPrice": "0.99"}"#)
            == IntroductoryOffer(paymentMode: .free, subscriptionPeriod: "P1W", numberOfPeriods: 1, displayPrice: "0"))
        #expect(try Self.offer(#""introductoryOffer": {"paymentMode": "payUpFront", "subscriptionPeriod": "P3M", "numberOfPeriods": 1, "displayPrice": "2.99"}"#)
            == IntroductoryOffer(paymentMode: .payUpFront, subscriptionPeriod: "P3M", displayPrice: "2.99"))
        let payAsYouGo = try #require(try Self.offer(#""introductoryOffer": {"paymentMode": "payAsYouGo", "subscriptionPeriod": "P1M", "numberOfPeriods": 3, "displayPrice": "0.99"}"#))
        #expect(payAsYouGo.numberOfPeriods == 3 && payAsYouGo.offerPeriods == 3 && payAsYouGo.periodMultiple == 1)
        #expect(payAsYouGo.summary == "payAsYouGo 0.99 per P1M x3")
    }

    @Test("F-O1: format 5's introductoryOffers list: the offer of the plan billed up front (or of no plan), else the first; an empty list and a null offer are none")
    func offerLists() throws {
        let plans = #""introductoryOffers": [{"billingPlanType": "MONTHLY", "paymentMode": "free", "subscriptionPeriod": "P2M", "internalID": "b"}, {"billingPlanType": "BILLED_UPFRONT", "paymentMode": "free", "subscriptionPeriod": "P1M", "internalID": "a"}]"#
        #expect(try Self.offer(plans, major: 5)?.internalID == "a")
        let otherPlans = #""introductoryOffers": [{"billingPlanType": "MONTHLY", "paymentMode": "free", "subscriptionPeriod": "P2M", "internalID": "b"}]"#
        #expect(try Self.offer(otherPlans, major: 5)?.internalID == "b")
        #expect(try Self.offer(#""introductoryOffers": [], "introductoryOffer": null"#, major: 5) == nil)
        // Both keys (some format 5 files keep a null introductoryOffer beside the list): the list wins.
        #expect(try Self.offer(#""introductoryOffer": null, "introductoryOffers": [{"paymentMode": "free", "subscriptionPeriod": "P3D"}]"#, major: 5)?.subscriptionPeriod == "P3D")
    }

    @Test("F-O1: paymentMode \"none\" and an entry without paymentMode (never written by Xcode) are no offer, so the files that carry them load as before")
    func notOffers() throws {
        #expect(try Self.offer(#""introductoryOffer": {"displayPrice": "0.99", "internalID": "8", "paymentMode": "none"}"#) == nil)
        #expect(try Self.offer(#""introductoryOffers": [{"duration": 1, "durationUnit": "WEEK", "numberOfPeriods": 1, "offerMode": "FREE_TRIAL", "offerID": ""}]"#) == nil)
    }

    @Test("F-O1: a malformed offer is refused at its key path, saying what to do",
          arguments: [
            (#""introductoryOffer": {"paymentMode": "freeTrial", "subscriptionPeriod": "P1W"}"#, "introductoryOffer.paymentMode", CatalogError.Reason.invalidValue),
            (#""introductoryOffer": {"paymentMode": "Free", "subscriptionPeriod": "P1W"}"#, "introductoryOffer.paymentMode", .invalidValue),
            (#""introductoryOffer": {"paymentMode": "free"}"#, "introductoryOffer.subscriptionPeriod", .missingValue),
            (#""introductoryOffer": {"paymentMode": "free", "subscriptionPeriod": "1 week"}"#, "introductoryOffer.subscriptionPeriod", .invalidValue),
            (#""introductoryOffer": {"paymentMode": "free", "subscriptionPeriod": "P0D"}"#, "introductoryOffer.subscriptionPeriod", .invalidValue),
            (#""introductoryOffer": {"paymentMode": "payAsYouGo", "subscriptionPeriod": "P1M", "numberOfPeriods": 0, "displayPrice": "0.99"}"#, "introductoryOffer.numberOfPeriods", .invalidValue),
            (#""introductoryOffer": {"paymentMode": "payAsYouGo", "subscriptionPeriod": "P1M", "numberOfPeriods": "3"}"#, "introductoryOffer.numberOfPeriods", .wrongShape),
            (#""introductoryOffer": {"paymentMode": "payUpFront", "subscriptionPeriod": "P1M", "displayPrice": "$0.99"}"#, "introductoryOffer.displayPrice", .invalidValue),
            (#""introductoryOffer": "free""#, "introductoryOffer", .wrongShape),
            (#""introductoryOffers": [7]"#, "introductoryOffers[0]", .wrongShape),
          ])
    func malformed(keys: String, keyPath: String, reason: CatalogError.Reason) throws {
        let error = try Self.error(keys)
        #expect(error.keyPath == "subscriptionGroups[0].subscriptions[0].\(keyPath)", "\(error)")
        #expect(error.reason == reason, "\(error)")
        #expect(!error.remedy.isEmpty)
    }

    @Test("F-O1: the native format carries offers as version 2 and reads them back; a catalog without offers stays version 1, byte for byte")
    func nativeRoundTrip() throws {
        let catalog = try Catalog.load(contentsOf: CatalogTestFixtures.storeKitFile("purchasetester-v1.1.storekit"))
        let data = catalog.nativeCatalogData()
        let text = String(decoding: data, as: UTF8.self)
        #expect(text.contains(#""version" : 2"#))
        #expect(text.contains(#""paymentMode" : "free""#))
        let reread = try Catalog.parseNativeCatalog(data, source: "log")
        #expect(reread == catalog)
        #expect(reread.nativeCatalogData() == data)
        #expect(Catalog.sample.nativeVersion == 1)
        #expect(String(decoding: Catalog.sample.nativeCatalogData(), as: UTF8.self).contains(#""version" : 1"#))
        #expect(!String(decoding: Catalog.sample.nativeCatalogData(), as: UTF8.self).contains("introductoryOffer"))
    }

    @Test("F-O1: a hand-written native catalog's offer is validated like a .storekit file's: only on an auto-renewable subscription, with a known mode")
    func nativeValidation() throws {
        let coins = try CatalogTestFixtures.catalogError {
            try Catalog.parseNativeCatalog(Data(#"""
            {"format": "sksim-catalog", "version": 2, "products": [{"identifier": "coins", "kind": "consumable", "displayPrice": "0.99",
              "introductoryOffer": {"paymentMode": "free", "subscriptionPeriod": "P1W"}}]}
            """#.utf8), source: "c.json")
        }
        #expect(coins.keyPath == "products[0].introductoryOffer", "\(coins)")
        #expect(coins.reason == .invalidValue)
        let mode = try CatalogTestFixtures.catalogError {
            try Catalog.parseNativeCatalog(Data(#"""
            {"format": "sksim-catalog", "version": 2, "products": [{"identifier": "p", "kind": "autoRenewableSubscription", "displayPrice": "1",
              "subscriptionGroup": "G", "subscriptionPeriod": "P1M", "introductoryOffer": {"paymentMode": "gratis", "subscriptionPeriod": "P1W"}}]}
            """#.utf8), source: "m.json")
        }
        #expect(mode.keyPath == "products[0].introductoryOffer.paymentMode", "\(mode)")
        let period = try CatalogTestFixtures.catalogError {
            try Catalog.parseNativeCatalog(Data(#"""
            {"format": "sksim-catalog", "version": 2, "products": [{"identifier": "p", "kind": "autoRenewableSubscription", "displayPrice": "1",
              "subscriptionGroup": "G", "subscriptionPeriod": "P1M", "introductoryOffer": {"paymentMode": "free", "subscriptionPeriod": "P1X"}}]}
            """#.utf8), source: "p.json")
        }
        #expect(period.keyPath == "products[0].introductoryOffer.subscriptionPeriod", "\(period)")
    }
}
