import Foundation
import Testing
@testable import StoreKitModel

@Suite struct NativeCatalogFormatTests {
    @Test("writes the native format and reads it back to an equal catalog")
    func roundTrips() throws {
        let data = Catalog.sample.nativeCatalogData()
        let reread = try Catalog.parseNativeCatalog(data, source: "sample.json")
        #expect(reread == Catalog.sample)
        #expect(reread.nativeCatalogData() == data)
        let text = String(decoding: data, as: UTF8.self)
        #expect(text.contains(#""format" : "sksim-catalog""#))
        #expect(text.contains(#""contentLength" : 327680"#))
    }

    @Test("reads a hand-written native catalog and ignores unknown keys")
    func readsHandWrittenCatalog() throws {
        let document = #"""
        {"format": "sksim-catalog", "version": 1, "comment": "ignored",
         "products": [
           {"identifier": "gems", "kind": "consumable", "displayPrice": "0.99", "color": "red"},
           {"identifier": "maps", "kind": "nonConsumable", "displayPrice": "2.99", "referenceName": "Maps",
            "hostedContent": [{"contentIdentifier": "maps.data", "contentLength": 123456, "contentVersion": "1.0.2", "checksum": "x"}]},
           {"identifier": "gold", "kind": "autoRenewableSubscription", "displayPrice": "4.99",
            "subscriptionGroup": "Gold", "subscriptionPeriod": "P3M"}
         ]}
        """#
        let catalog = try Catalog.parseNativeCatalog(Data(document.utf8), source: "shop.json")
        #expect(catalog.products.map(\.identifier) == ["gems", "maps", "gold"])
        #expect(catalog.product("gems")?.referenceName == "gems")
        #expect(catalog.product("maps")?.hostedContent == [
            HostedContent(contentIdentifier: "maps.data", contentLength: 123_456, contentVersion: "1.0.2"),
        ])
        #expect(catalog.product("gold")?.subscriptionPeriod == "P3M")
    }

    @Test("imports a referenced .storekit file relative to the catalog and attaches hosted content")
    func importsReferencedConfiguration() throws {
        let directory = try CatalogTestFixtures.scratchDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let configurations = directory.appendingPathComponent("configs", isDirectory: true)
        try FileManager.default.createDirectory(at: configurations, withIntermediateDirectories: true)
        try FileManager.default.copyItem(
            at: CatalogTestFixtures.storeKitFile("skdemo-products-v2.storekit"),
            to: configurations.appendingPathComponent("Products.storekit"))
        let document = #"""
        {"format": "sksim-catalog", "version": 1,
         "storekitConfiguration": "configs/Products.storekit",
         "hostedContent": {
           "nonconsumable.racecar": [{"contentIdentifier": "racecar.model", "contentLength": 40960, "contentVersion": "2.1"}]
         },
         "products": [{"identifier": "extra.tip", "kind": "consumable", "displayPrice": "0.99"}]}
        """#
        let catalogURL = directory.appendingPathComponent("shop.sksim.json")
        try Data(document.utf8).write(to: catalogURL)

        let catalog = try Catalog.load(contentsOf: catalogURL)
        #expect(catalog.products.count == 11)
        #expect(catalog.products.first?.identifier == "nonconsumable.car")
        #expect(catalog.products.last?.identifier == "extra.tip")
        #expect(catalog.product("nonconsumable.racecar")?.hostedContent.map(\.contentIdentifier) == ["racecar.model"])
        #expect(catalog.product("subscription.pro")?.subscriptionGroup == "Software Services")
    }

    @Test("rejects hosted content for a product that does not exist, naming it")
    func rejectsContentForUnknownProduct() throws {
        let document = #"""
        {"format": "sksim-catalog", "version": 1,
         "products": [{"identifier": "maps", "kind": "nonConsumable", "displayPrice": "2.99"}],
         "hostedContent": {"com.example.mapz": [{"contentIdentifier": "m", "contentLength": 1, "contentVersion": "1"}]}}
        """#
        let error = try CatalogTestFixtures.catalogError {
            try Catalog.parseNativeCatalog(Data(document.utf8), source: "shop.json")
        }
        #expect(error.reason == .unknownProduct)
        #expect(error.keyPath == #"hostedContent["com.example.mapz"]"#)
        #expect(error.source == "shop.json")
    }

    @Test("rejects an unknown kind, listing the valid ones")
    func rejectsUnknownKind() throws {
        let document = #"{"format": "sksim-catalog", "version": 1, "products": [{"identifier": "x", "kind": "subscription", "displayPrice": "1"}]}"#
        let error = try CatalogTestFixtures.catalogError {
            try Catalog.parseNativeCatalog(Data(document.utf8), source: "kinds.json")
        }
        #expect(error.reason == .invalidValue)
        #expect(error.keyPath == "products[0].kind")
    }

    @Test("rejects content lengths that are not positive and malformed content versions", arguments: [
        (#""contentLength": 0, "contentVersion": "1.0""#, "products[0].hostedContent[0].contentLength"),
        (#""contentLength": -5, "contentVersion": "1.0""#, "products[0].hostedContent[0].contentLength"),
        (#""contentLength": 1.5, "contentVersion": "1.0""#, "products[0].hostedContent[0].contentLength"),
        (#""contentLength": 10, "contentVersion": "1..0""#, "products[0].hostedContent[0].contentVersion"),
        (#""contentLength": 10, "contentVersion": "v1.0""#, "products[0].hostedContent[0].contentVersion"),
        (#""contentLength": 10, "contentVersion": """#, "products[0].hostedContent[0].contentVersion"),
    ])
    func rejectsBadContent(fields: String, keyPath: String) throws {
        let document = #"""
        {"format": "sksim-catalog", "version": 1, "products": [{"identifier": "maps", "kind": "nonConsumable",
         "displayPrice": "1", "hostedContent": [{"contentIdentifier": "maps.data", \#(fields)}]}]}
        """#
        let error = try CatalogTestFixtures.catalogError {
            try Catalog.parseNativeCatalog(Data(document.utf8), source: "content.json")
        }
        #expect(error.keyPath == keyPath)
        #expect(error.source == "content.json")
    }

    @Test("rejects a different format name and an unsupported version")
    func rejectsFormatAndVersion() throws {
        let wrongFormat = try CatalogTestFixtures.catalogError {
            try Catalog.parseNativeCatalog(Data(#"{"format": "other", "version": 1}"#.utf8), source: "a.json")
        }
        #expect(wrongFormat.reason == .unrecognizedFormat)
        #expect(wrongFormat.keyPath == "format")
        let wrongVersion = try CatalogTestFixtures.catalogError {
            try Catalog.parseNativeCatalog(Data(#"{"format": "sksim-catalog", "version": 4}"#.utf8), source: "b.json")
        }
        #expect(wrongVersion.reason == .unsupportedVersion)
        #expect(wrongVersion.keyPath == "version")
    }

    @Test("rejects a referenced .storekit file that does not exist, naming the path")
    func rejectsMissingReferencedConfiguration() throws {
        let directory = try CatalogTestFixtures.scratchDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let document = #"{"format": "sksim-catalog", "version": 1, "storekitConfiguration": "missing.storekit"}"#
        let error = try CatalogTestFixtures.catalogError {
            try Catalog.parseNativeCatalog(Data(document.utf8), source: "c.json", baseDirectory: directory)
        }
        #expect(error.reason == .unreadableFile)
        #expect(error.keyPath == "storekitConfiguration")
        #expect(error.source == "c.json")
    }

    @Test("load picks the format by extension and content")
    func loadChoosesFormat() throws {
        let directory = try CatalogTestFixtures.scratchDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let storeKitAsJSON = directory.appendingPathComponent("products.json")
        try FileManager.default.copyItem(
            at: CatalogTestFixtures.storeKitFile("purchasetester-v1.1.storekit"), to: storeKitAsJSON)
        #expect(try Catalog.load(contentsOf: storeKitAsJSON).products.count == 3)

        let native = directory.appendingPathComponent("catalog.json")
        try Catalog.sample.nativeCatalogData().write(to: native)
        #expect(try Catalog.load(contentsOf: native) == Catalog.sample)

        let unknown = directory.appendingPathComponent("other.json")
        try Data(#"{"name": "not a catalog"}"#.utf8).write(to: unknown)
        let unrecognized = try CatalogTestFixtures.catalogError { try Catalog.load(contentsOf: unknown) }
        #expect(unrecognized.reason == .unrecognizedFormat)
        #expect(unrecognized.source == unknown.path)

        let missing = try CatalogTestFixtures.catalogError {
            try Catalog.load(contentsOf: directory.appendingPathComponent("absent.storekit"))
        }
        #expect(missing.reason == .unreadableFile)
        #expect(missing.source.hasSuffix("/absent.storekit"))
    }
}
