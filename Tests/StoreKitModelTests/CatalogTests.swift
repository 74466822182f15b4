import Foundation
import Testing
@testable import StoreKitModel

@Suite struct CatalogTests {
    @Test("consumables (R-Q9) and non-renewing subscriptions (F-R1) are not restorable; every other kind is")
    func consumablesAreNotRestorable() {
        #expect(!ProductKind.consumable.isRestorable)
        #expect(ProductKind.nonConsumable.isRestorable)
        #expect(!ProductKind.nonRenewingSubscription.isRestorable)
        #expect(ProductKind.autoRenewableSubscription.isRestorable)
        #expect(!Product(identifier: "coins", kind: .consumable, displayPrice: "0.99").isRestorable)
    }

    @Test("the sample catalog is valid, covers every kind and has small hosted content")
    func sampleIsValid() throws {
        let sample = Catalog.sample
        #expect(try Catalog(products: sample.products) == sample)
        let countsByKind = Dictionary(grouping: sample.products, by: \.kind).mapValues(\.count)
        #expect(countsByKind[.consumable, default: 0] >= 2)
        #expect(countsByKind[.nonConsumable, default: 0] >= 2)
        #expect(countsByKind[.nonRenewingSubscription] == 1)
        #expect(countsByKind[.autoRenewableSubscription] == 2)
        let content = sample.products.flatMap(\.hostedContent)
        #expect(!content.isEmpty)
        #expect(content.allSatisfy { $0.contentLength >= 1_024 && $0.contentLength <= 512 * 1_024 })
        #expect(sample.products.filter { !$0.hostedContent.isEmpty }.allSatisfy { $0.kind == .nonConsumable })
        #expect(sample.products.filter { $0.kind == .autoRenewableSubscription }.allSatisfy {
            $0.subscriptionGroup != nil && $0.subscriptionPeriod != nil
        })
    }

    @Test("looks products up by identifier and keeps declaration order")
    func looksUpProducts() throws {
        let catalog = try Catalog(products: [
            Product(identifier: "b", kind: .nonConsumable, displayPrice: "1.00"),
            Product(identifier: "a", kind: .consumable, displayPrice: "2"),
        ])
        #expect(catalog.products.map(\.identifier) == ["b", "a"])
        #expect(catalog.product("a")?.kind == .consumable)
        #expect(catalog.product("missing") == nil)
    }

    @Test("rejects duplicate and empty identifiers given in code")
    func rejectsInvalidProductsInCode() throws {
        let duplicate = try CatalogTestFixtures.catalogError {
            try Catalog(products: [
                Product(identifier: "a", kind: .consumable, displayPrice: "1"),
                Product(identifier: "a", kind: .nonConsumable, displayPrice: "1"),
            ])
        }
        #expect(duplicate.reason == .duplicateProduct)
        #expect(duplicate.keyPath == "products[1].identifier")

        let empty = try CatalogTestFixtures.catalogError {
            try Catalog(products: [Product(identifier: " ", kind: .consumable, displayPrice: "1")])
        }
        #expect(empty.reason == .missingValue)
    }

    @Test("A content identifier that is not one folder name is refused: downloads are stored under it",
          arguments: ["../../../../tmp/x", "a/b", "..", "."])
    func contentIdentifierIsOneFolderName(identifier: String) throws {
        let error = try CatalogTestFixtures.catalogError {
            try Catalog(products: [Product(identifier: "p", kind: .nonConsumable, displayPrice: "1",
                                           hostedContent: [HostedContent(contentIdentifier: identifier, contentLength: 10, contentVersion: "1")])])
        }
        #expect(error.reason == .invalidValue)
        #expect(error.keyPath == "products[0].hostedContent[0].contentIdentifier")
    }

    @Test("rejects duplicate content identifiers, malformed prices and periods")
    func rejectsInvalidFields() throws {
        let content = HostedContent(contentIdentifier: "shared", contentLength: 10, contentVersion: "1")
        let duplicateContent = try CatalogTestFixtures.catalogError {
            try Catalog(products: [
                Product(identifier: "a", kind: .nonConsumable, displayPrice: "1", hostedContent: [content]),
                Product(identifier: "b", kind: .nonConsumable, displayPrice: "1", hostedContent: [content]),
            ])
        }
        #expect(duplicateContent.reason == .duplicateContent)
        #expect(duplicateContent.keyPath == "products[1].hostedContent[0].contentIdentifier")

        let price = try CatalogTestFixtures.catalogError {
            try Catalog(products: [Product(identifier: "a", kind: .consumable, displayPrice: "$0.99")])
        }
        #expect(price.keyPath == "products[0].displayPrice")

        let period = try CatalogTestFixtures.catalogError {
            try Catalog(products: [Product(identifier: "a", kind: .autoRenewableSubscription, displayPrice: "1",
                                           subscriptionGroup: "G", subscriptionPeriod: "1 month")])
        }
        #expect(period.keyPath == "products[0].subscriptionPeriod")
    }

    @Test("content versions are integers separated by dots")
    func validatesContentVersions() {
        for valid in ["1", "1.0", "1.0.2", "10.20.30"] {
            #expect(HostedContent.isValidContentVersion(valid), "\(valid)")
        }
        for invalid in ["", ".", "1.", ".1", "1..2", "1.a", "v1", "1.0-beta", "١"] {
            #expect(!HostedContent.isValidContentVersion(invalid), "\(invalid)")
        }
    }

    @Test("subscription periods are the ISO 8601 durations subscriptions use")
    func validatesSubscriptionPeriods() {
        for valid in ["P1W", "P1M", "P2M", "P3M", "P6M", "P1Y", "P3D", "P1Y6M"] {
            #expect(Catalog.isSubscriptionPeriod(valid), "\(valid)")
        }
        for invalid in ["", "P", "1M", "PM", "P1X", "P1M1Y", "PT1H", "P1M1M"] {
            #expect(!Catalog.isSubscriptionPeriod(invalid), "\(invalid)")
        }
    }
}
