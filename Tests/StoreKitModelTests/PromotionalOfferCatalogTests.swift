import Foundation
import Testing
@testable import StoreKitModel

/// Promotional offers read from `.storekit` files (`adHocOffers`) and native catalogs (F-O4,
/// docs/catalog-format.md).
@Suite struct PromotionalOfferCatalogTests {
    /// A format 4.0 file with one subscription whose promotional offers are `offers` (a JSON array).
    static func storeKit(_ offers: String) -> Data {
        Data("""
        {"version": {"major": 4, "minor": 0}, "products": [],
         "subscriptionGroups": [{"id": "1", "name": "Plus", "subscriptions": [
           {"productID": "plus.weekly", "type": "RecurringSubscription", "displayPrice": "1.99",
            "recurringSubscriptionPeriod": "P1W", "groupNumber": 1, "adHocOffers": \(offers)}
         ]}]}
        """.utf8)
    }

    static func offers(_ offers: String) throws -> [PromotionalOffer]? {
        try Catalog.importStoreKitConfiguration(storeKit(offers), source: "t.storekit").product("plus.weekly")?.promotionalOffers
    }

    @Test("F-O4: the fixture's adHocOffers entry is read with its offerID, reference name and terms; subscriptions without one have none")
    func fixture() throws {
        let catalog = try Catalog.load(contentsOf: CatalogTestFixtures.storeKitFile("offers-billing-plans-v5.storekit"))
        #expect(catalog.product("example.pro.yearly")?.promotionalOffers == [
            PromotionalOffer(identifier: "comeback", referenceName: "Come back",
                             terms: IntroductoryOffer(paymentMode: .payAsYouGo, subscriptionPeriod: "P1M", numberOfPeriods: 2,
                                                      displayPrice: "0.99", internalID: "7101")),
        ])
        #expect(catalog.product("example.pro.monthly")?.promotionalOffers == nil)
        #expect(catalog.product("example.lifetime")?.promotionalOffers == nil)
        #expect(catalog.product("example.pro.yearly")?.promotionalOffer("comeback")?.terms.offerPeriods == 2)
        #expect(catalog.product("example.pro.yearly")?.promotionalOffer("other") == nil)
    }

    @Test("F-O4: the shapes real files carry (formats 3 to 5): a free offer without price or numberOfPeriods, pay up front, pay as you go")
    func realShapes() throws {
        let offers = try #require(try Self.offers("""
            [{"internalID": "7AF59252", "offerID": "weekly.promo.free", "paymentMode": "free", "referenceName": "Promo", "subscriptionPeriod": "P3D"},
             {"displayPrice": "0.99", "internalID": "D8AF38DF", "numberOfPeriods": 1, "offerID": "weekly.promotional1", "paymentMode": "payAsYouGo", "referenceName": "p1", "subscriptionPeriod": "P1W"},
             {"displayPrice": "2.99", "internalID": "1", "offerID": "upfront", "paymentMode": "payUpFront", "referenceName": "u", "subscriptionPeriod": "P1M"}]
            """))
        #expect(offers.map(\.identifier) == ["weekly.promo.free", "weekly.promotional1", "upfront"])
        #expect(offers.map(\.terms.paymentMode) == [.free, .payAsYouGo, .payUpFront])
        #expect(offers.map(\.terms.displayPrice) == ["0", "0.99", "2.99"])
        #expect(offers.map(\.terms.numberOfPeriods) == [1, 1, 1])
        #expect(offers[0].summary == "weekly.promo.free: free trial P3D")
    }

    @Test("F-O4: an empty list, entries without offerID or paymentMode, an empty offerID and paymentMode none are no offer, so such files load as before")
    func notOffers() throws {
        #expect(try Self.offers("[]") == nil)
        #expect(try Self.offers(#"[{"paymentMode": "free", "subscriptionPeriod": "P1W"}]"#) == nil)
        #expect(try Self.offers(#"[{"offerID": "", "paymentMode": "free", "subscriptionPeriod": "P1W"}]"#) == nil)
        #expect(try Self.offers(#"[{"offerID": "a", "subscriptionPeriod": "P1W", "offerMode": "FREE_TRIAL"}]"#) == nil)
        #expect(try Self.offers(#"[{"offerID": "a", "paymentMode": "none", "displayPrice": "0.99"}]"#) == nil)
    }

    @Test("F-O4: format 5's billing plans: of one offerID listed per plan, the entry billed up front is kept")
    func billingPlans() throws {
        let offers = try #require(try Self.offers("""
            [{"billingPlanType": "MONTHLY", "offerID": "a", "paymentMode": "payAsYouGo", "subscriptionPeriod": "P1M", "numberOfPeriods": 3, "displayPrice": "0.49"},
             {"billingPlanType": "BILLED_UPFRONT", "offerID": "a", "paymentMode": "payUpFront", "subscriptionPeriod": "P3M", "displayPrice": "1.49"},
             {"billingPlanType": "MONTHLY", "offerID": "b", "paymentMode": "free", "subscriptionPeriod": "P1W"}]
            """))
        #expect(offers.map(\.identifier) == ["a", "b"])
        #expect(offers[0].terms.paymentMode == .payUpFront)
    }

    @Test("F-O4: a malformed promotional offer is refused in one line at its key path, saying what to do",
          arguments: [
            (#"[{"offerID": "a", "paymentMode": "freeTrial", "subscriptionPeriod": "P1W"}]"#, "adHocOffers[0].paymentMode", CatalogError.Reason.invalidValue),
            (#"[{"offerID": "a", "paymentMode": "free"}]"#, "adHocOffers[0].subscriptionPeriod", .missingValue),
            (#"[{"offerID": "a", "paymentMode": "free", "subscriptionPeriod": "one week"}]"#, "adHocOffers[0].subscriptionPeriod", .invalidValue),
            (#"[{"offerID": "a", "paymentMode": "payAsYouGo", "subscriptionPeriod": "P1M", "numberOfPeriods": 0}]"#, "adHocOffers[0].numberOfPeriods", .invalidValue),
            (#"[{"offerID": "a", "paymentMode": "payUpFront", "subscriptionPeriod": "P1M", "displayPrice": "€1"}]"#, "adHocOffers[0].displayPrice", .invalidValue),
            (#"[{"offerID": 7, "paymentMode": "free", "subscriptionPeriod": "P1W"}]"#, "adHocOffers[0].offerID", .wrongShape),
            (#"["comeback"]"#, "adHocOffers[0]", .wrongShape),
            (#"{"offerID": "a"}"#, "adHocOffers", .wrongShape),
          ])
    func malformed(offers: String, keyPath: String, reason: CatalogError.Reason) throws {
        let error = try CatalogTestFixtures.catalogError { try Catalog.importStoreKitConfiguration(Self.storeKit(offers), source: "t.storekit") }
        #expect(error.keyPath == "subscriptionGroups[0].subscriptions[0].\(keyPath)", "\(error)")
        #expect(error.reason == reason, "\(error)")
        #expect(!error.description.contains("\n"))
        #expect(!error.remedy.isEmpty)
    }

    @Test("F-O4: the native format carries promotional offers as version 3 and reads them back; catalogs without keep versions 1 and 2, byte for byte")
    func nativeRoundTrip() throws {
        let catalog = try Catalog.load(contentsOf: CatalogTestFixtures.storeKitFile("offers-billing-plans-v5.storekit"))
        let data = catalog.nativeCatalogData()
        let text = String(decoding: data, as: UTF8.self)
        #expect(text.contains(#""version" : 3"#))
        #expect(text.contains(#""identifier" : "comeback""#) && text.contains(#""referenceName" : "Come back""#))
        let reread = try Catalog.parseNativeCatalog(data, source: "log")
        #expect(reread == catalog)
        #expect(reread.nativeCatalogData() == data)
        // Without promotional offers: version 2 with an introductory offer, 1 without, and no new key.
        let tester = try Catalog.load(contentsOf: CatalogTestFixtures.storeKitFile("purchasetester-v1.1.storekit"))
        #expect(tester.nativeVersion == 2)
        #expect(!String(decoding: tester.nativeCatalogData(), as: UTF8.self).contains("promotionalOffers"))
        #expect(Catalog.sample.nativeVersion == 1)
        // The hand-written fixture reads, and writes itself back as version 3.
        let fixture = try Catalog.load(contentsOf: CatalogTestFixtures.storeKitFile("promotional-offers.json"))
        #expect(fixture.product("example.plus.weekly")?.promotionalOffers?.map(\.identifier) == ["winback", "freeweek"])
        #expect(fixture.nativeVersion == 3)
    }

    @Test("F-O4: a native catalog's promotional offers need version 3, an identifier of their own, and a subscription")
    func nativeValidation() throws {
        func error(_ version: Int, _ product: String) throws -> CatalogError {
            try CatalogTestFixtures.catalogError {
                try Catalog.parseNativeCatalog(Data(#"{"format": "sksim-catalog", "version": \#(version), "products": [\#(product)]}"#.utf8), source: "c.json")
            }
        }
        let weekly = #"{"identifier": "w", "kind": "autoRenewableSubscription", "displayPrice": "1", "subscriptionGroup": "g", "subscriptionPeriod": "P1W", "#
        let old = try error(2, weekly + #""promotionalOffers": [{"identifier": "a", "paymentMode": "free", "subscriptionPeriod": "P1W"}]}"#)
        #expect(old.keyPath == "products[0].promotionalOffers" && old.reason == .invalidValue, "\(old)")
        let duplicate = try error(3, weekly + #""promotionalOffers": [{"identifier": "a", "paymentMode": "free", "subscriptionPeriod": "P1W"}, {"identifier": "a", "paymentMode": "free", "subscriptionPeriod": "P2W"}]}"#)
        #expect(duplicate.keyPath == "products[0].promotionalOffers[1]" && duplicate.reason == .invalidValue, "\(duplicate)")
        let missing = try error(3, weekly + #""promotionalOffers": [{"paymentMode": "free", "subscriptionPeriod": "P1W"}]}"#)
        #expect(missing.keyPath == "products[0].promotionalOffers[0].identifier", "\(missing)")
        let coins = try error(3, #"{"identifier": "c", "kind": "consumable", "displayPrice": "1", "promotionalOffers": [{"identifier": "a", "paymentMode": "free", "subscriptionPeriod": "P1W"}]}"#)
        #expect(coins.keyPath == "products[0].promotionalOffers[0]" && coins.reason == .invalidValue, "\(coins)")
        let future = try error(4, weekly + "}")
        #expect(future.reason == .unsupportedVersion && future.keyPath == "version", "\(future)")
    }
}
