import Foundation
import Testing
@testable import StoreKitModel

@Suite struct StoreKitConfigurationImportTests {
    @Test("imports Apple's sample catalog (format 2.0) with every product kind, group and period")
    func importsAppleSampleCatalog() throws {
        let catalog = try Catalog.load(contentsOf: CatalogTestFixtures.storeKitFile("skdemo-products-v2.storekit"))
        #expect(catalog.products.map(\.identifier) == [
            "nonconsumable.car", "nonconsumable.utilityvehicle", "nonconsumable.racecar",
            "consumable.fuel.octane87", "consumable.fuel.octane89", "consumable.fuel.octane91",
            "nonRenewing.standard",
            "subscription.standard", "subscription.premium", "subscription.pro",
        ])
        #expect(catalog.products.map(\.kind) == [
            .nonConsumable, .nonConsumable, .nonConsumable,
            .consumable, .consumable, .consumable,
            .nonRenewingSubscription,
            .autoRenewableSubscription, .autoRenewableSubscription, .autoRenewableSubscription,
        ])
        // R-Q9, F-R1: the consumables and the non-renewing subscription are not restorable.
        #expect(catalog.products.filter { !$0.isRestorable }.map(\.identifier) == [
            "consumable.fuel.octane87", "consumable.fuel.octane89", "consumable.fuel.octane91", "nonRenewing.standard",
        ])
        let pro = try #require(catalog.product("subscription.pro"))
        #expect(pro.subscriptionGroup == "Software Services")
        #expect(pro.subscriptionPeriod == "P1M")
        #expect(pro.displayPrice == "4.99")
        #expect(pro.referenceName == "Pro")
        let standard = try #require(catalog.product("nonRenewing.standard"))
        #expect(standard.subscriptionGroup == nil)
        #expect(standard.subscriptionPeriod == nil)
        #expect(catalog.product("consumable.fuel.octane87")?.displayPrice == "0.99")
        #expect(catalog.products.allSatisfy { $0.hostedContent.isEmpty })
    }

    @Test("imports RevenueCat's purchase tester catalog (format 1.1) with free-trial subscriptions")
    func importsPurchaseTesterCatalog() throws {
        let catalog = try Catalog.load(contentsOf: CatalogTestFixtures.storeKitFile("purchasetester-v1.1.storekit"))
        #expect(catalog.products.map(\.identifier) == [
            "lifetime",
            "com.revenuecat.monthly_4.99.1_week_intro",
            "com.revenuecat.annual_39.99.2_week_intro",
        ])
        #expect(catalog.products.map(\.kind) == [.nonConsumable, .autoRenewableSubscription, .autoRenewableSubscription])
        #expect(catalog.products.allSatisfy { $0.isRestorable })
        #expect(catalog.products.map(\.subscriptionGroup) == [nil, "subscription_group", "subscription_group"])
        #expect(catalog.products.map(\.subscriptionPeriod) == [nil, "P1M", "P1Y"])
        #expect(catalog.product("lifetime")?.displayPrice == "199.99")
    }

    @Test("accepts every format version from 1.0 to 6.3 and ignores keys it does not know", arguments: [
        (1, 0), (1, 1), (2, 0), (3, 0), (4, 0), (5, 0), (6, 0), (6, 3),
    ])
    func acceptsEveryFormatVersion(major: Int, minor: Int) throws {
        let data = Data(Self.minimalDocument(major: major, minor: minor).utf8)
        let catalog = try Catalog.importStoreKitConfiguration(data, source: "v\(major).storekit")
        #expect(catalog.products.map(\.identifier) == ["coins", "unlock", "pass", "monthly"])
        #expect(catalog.products.map(\.kind) == ProductKind.allCases)
        #expect(catalog.product("monthly")?.subscriptionGroup == "Plus")
        #expect(catalog.product("monthly")?.subscriptionPeriod == "P1W")
    }

    /// A small configuration with the keys newer Xcode versions add, plus keys no version has.
    static func minimalDocument(major: Int, minor: Int) -> String {
        """
        {
          "identifier": "ABCD1234",
          "futureTopLevelKey": {"nested": [1, 2.5, null, true]},
          "settings": {
            "_storefront": "USA", "_locale": "en_US", "_applicationInternalID": "1234567890",
            "_developerTeamID": "TEAMID1234", "_failTransactionsEnabled": false,
            "_lastSynchronizedDate": 726000000.5, "_timeRate": 0, "_askToBuyEnabled": false
          },
          "appPolicies": {"eula": "", "policies": [{"locale": "en_US", "policyText": "", "policyURL": ""}]},
          "products": [
            {"productID": "coins", "type": "Consumable", "displayPrice": "0.99", "referenceName": "Coins",
             "familyShareable": false, "internalID": "1", "localizations": [{"locale": "en_US", "displayName": "Coins", "description": ""}],
             "someNewProductKey": 42},
            {"productID": "unlock", "type": "NonConsumable", "displayPrice": "4.99", "referenceName": "Unlock"}
          ],
          "nonRenewingSubscriptions": [
            {"productID": "pass", "type": "NonRenewingSubscription", "displayPrice": "9.99", "referenceName": "Pass"}
          ],
          "subscriptionGroups": [
            {"id": "G1", "name": "Plus", "localizations": [], "subscriptions": [
              {"productID": "monthly", "type": "RecurringSubscription", "displayPrice": "2.99",
               "referenceName": "Monthly", "recurringSubscriptionPeriod": "P1W", "groupNumber": 1,
               "subscriptionGroupID": "G1", "familyShareable": true,
               "introductoryOffer": {"paymentMode": "free", "subscriptionPeriod": "P3D", "internalID": "I"},
               "codeOffers": [{"paymentMode": "payAsYouGo", "numberOfPeriods": 2, "displayPrice": "0.99"}],
               "promotionalOffers": [], "winbackOffers": [{"offerID": "back", "eligibility": {}}],
               "adHocOffers": [], "localizations": []}
            ]}
          ],
          "version": {"major": \(major), "minor": \(minor)}
        }
        """
    }

    @Test("rejects data that is not JSON, naming the file")
    func rejectsNonJSON() throws {
        let error = try CatalogTestFixtures.catalogError {
            try Catalog.importStoreKitConfiguration(Data("products: [coins]".utf8), source: "Broken.storekit")
        }
        #expect(error.reason == .notJSON)
        #expect(error.source == "Broken.storekit")
    }

    @Test("rejects a top level that is not an object")
    func rejectsWrongTopLevelShape() throws {
        let error = try CatalogTestFixtures.catalogError {
            try Catalog.importStoreKitConfiguration(Data("[1, 2]".utf8), source: "Array.storekit")
        }
        #expect(error.reason == .wrongShape)
        #expect(error.source == "Array.storekit" && error.keyPath == "top level", "\(error)")
    }

    @Test("rejects a products member that is not an array, naming the key")
    func rejectsProductsThatAreNotAnArray() throws {
        let error = try CatalogTestFixtures.catalogError {
            try Catalog.importStoreKitConfiguration(
                Data(#"{"version": {"major": 2, "minor": 0}, "products": {"productID": "x"}}"#.utf8), source: "Shape.storekit")
        }
        #expect(error.reason == .wrongShape)
        #expect(error.keyPath == "products")
        #expect(error.source == "Shape.storekit")
    }

    @Test("rejects an unknown product type, naming the key path and the known types")
    func rejectsUnknownType() throws {
        let document = #"""
        {"version": {"major": 3, "minor": 0},
         "subscriptionGroups": [{"name": "G", "subscriptions": [
           {"productID": "a", "type": "RecurringSubscription", "recurringSubscriptionPeriod": "P1M", "displayPrice": "1.99"},
           {"productID": "b", "type": "LifetimeThing", "displayPrice": "1.99"}]}]}
        """#
        let error = try CatalogTestFixtures.catalogError {
            try Catalog.importStoreKitConfiguration(Data(document.utf8), source: "Types.storekit")
        }
        #expect(error.reason == .unknownProductType)
        #expect(error.keyPath == "subscriptionGroups[0].subscriptions[1].type")
        #expect(error.source == "Types.storekit")
    }

    @Test("rejects a product without productID, naming the full key path")
    func rejectsMissingProductIdentifier() throws {
        let document = #"""
        {"version": {"major": 4, "minor": 0},
         "subscriptionGroups": [{"name": "G", "subscriptions": [
           {"productID": "a", "type": "RecurringSubscription", "recurringSubscriptionPeriod": "P1M", "displayPrice": "1.99"},
           {"type": "RecurringSubscription", "recurringSubscriptionPeriod": "P1M", "displayPrice": "1.99"}]}]}
        """#
        let error = try CatalogTestFixtures.catalogError {
            try Catalog.importStoreKitConfiguration(Data(document.utf8), source: "Missing.storekit")
        }
        #expect(error.reason == .missingValue)
        #expect(error.keyPath == "subscriptionGroups[0].subscriptions[1].productID")
        #expect(error.description.hasPrefix("Missing.storekit: subscriptionGroups[0].subscriptions[1].productID: "))
    }

    @Test("rejects an empty productID")
    func rejectsEmptyProductIdentifier() throws {
        let document = #"{"version": {"major": 1, "minor": 0}, "products": [{"productID": "", "type": "Consumable", "displayPrice": "1"}]}"#
        let error = try CatalogTestFixtures.catalogError {
            try Catalog.importStoreKitConfiguration(Data(document.utf8), source: "Empty.storekit")
        }
        #expect(error.reason == .missingValue)
        #expect(error.keyPath == "products[0].productID")
    }

    @Test("rejects duplicate product ids, naming both places")
    func rejectsDuplicateIdentifiers() throws {
        let document = #"""
        {"version": {"major": 2, "minor": 0},
         "products": [{"productID": "coins", "type": "Consumable", "displayPrice": "0.99"}],
         "nonRenewingSubscriptions": [{"productID": "coins", "type": "NonRenewingSubscription", "displayPrice": "9.99"}]}
        """#
        let error = try CatalogTestFixtures.catalogError {
            try Catalog.importStoreKitConfiguration(Data(document.utf8), source: "Duplicates.storekit")
        }
        #expect(error.reason == .duplicateProduct)
        #expect(error.keyPath == "nonRenewingSubscriptions[0].productID")
        #expect(error.source == "Duplicates.storekit")
    }

    @Test("rejects format versions outside 1...6 and says which are supported", arguments: [0, 7, 17])
    func rejectsUnsupportedVersions(major: Int) throws {
        let document = #"{"version": {"major": \#(major), "minor": 0}, "products": []}"#
        let error = try CatalogTestFixtures.catalogError {
            try Catalog.importStoreKitConfiguration(Data(document.utf8), source: "Future.storekit")
        }
        #expect(error.reason == .unsupportedVersion)
        #expect(error.keyPath == "version.major")
        #expect(error.source == "Future.storekit")
    }

    @Test("rejects a configuration without a version")
    func rejectsMissingVersion() throws {
        let error = try CatalogTestFixtures.catalogError {
            try Catalog.importStoreKitConfiguration(Data(#"{"products": []}"#.utf8), source: "NoVersion.storekit")
        }
        #expect(error.reason == .missingValue)
        #expect(error.keyPath == "version")
    }

    @Test("rejects a product type in the wrong list")
    func rejectsMisplacedType() throws {
        let document = #"{"version": {"major": 2, "minor": 0}, "products": [{"productID": "sub", "type": "RecurringSubscription", "displayPrice": "1"}]}"#
        let error = try CatalogTestFixtures.catalogError {
            try Catalog.importStoreKitConfiguration(Data(document.utf8), source: "Misplaced.storekit")
        }
        #expect(error.reason == .invalidValue)
        #expect(error.keyPath == "products[0].type")
    }

    @Test("rejects an auto-renewable subscription without a period")
    func rejectsSubscriptionWithoutPeriod() throws {
        let document = #"{"version": {"major": 5, "minor": 0}, "subscriptionGroups": [{"name": "G", "subscriptions": [{"productID": "s", "type": "RecurringSubscription", "displayPrice": "1"}]}]}"#
        let error = try CatalogTestFixtures.catalogError {
            try Catalog.importStoreKitConfiguration(Data(document.utf8), source: "Period.storekit")
        }
        #expect(error.reason == .missingValue)
        #expect(error.keyPath == "subscriptionGroups[0].subscriptions[0].recurringSubscriptionPeriod")
    }
}
