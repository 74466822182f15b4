import Foundation
import Testing
@testable import StoreKitModel

/// The `.storekit` test settings (docs/storekit-fidelity.md, F-S1 to F-S4).
@Suite struct StoreKitTestSettingsTests {
    static let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures")

    static func load(_ name: String) throws -> Catalog {
        try Catalog.load(contentsOf: fixtures.appendingPathComponent(name))
    }

    @Test("A format 5.0 file with every setting on is read setting by setting")
    func everySettingRead() throws {
        let settings = try Self.load("every-setting-v5.storekit").testSettings
        #expect(settings.askToBuyEnabled == true)
        #expect(settings.failTransactionsEnabled == true)
        #expect(settings.billingIssuesEnabled == true && settings.renewalBillingIssuesEnabled == true)
        #expect(settings.billingGracePeriodEnabled == true && settings.disableDialogs == true)
        #expect(settings.timeRate == 15)
        #expect(settings.storefront == "FRA" && settings.locale == "fr_FR")
        #expect(settings.storeKitErrors == [
            .init(name: "Load Products", enabled: false, current: nil),
            .init(name: "Purchase", enabled: true, current: "{index:1,type:generic}"),
        ])
        #expect(settings.purchaseFailure?.code == .unknown)
    }

    @Test("Real files: Apple's sample (2.0) keeps its time rate and Ask to Buy off; RevenueCat's (1.1) has empty settings")
    func realFiles() throws {
        let apple = try Self.load("skdemo-products-v2.storekit").testSettings
        #expect(apple.timeRate == 15 && apple.askToBuyEnabled == false && apple.purchaseFailure == nil)
        #expect(try Self.load("purchasetester-v1.1.storekit").testSettings.isEmpty)
    }

    @Test("F-S2: only an enabled Purchase entry of _storeKitErrors, or _failTransactionsEnabled, fails purchases")
    func purchaseFailureSources() {
        var settings = StoreKitTestSettings()
        #expect(settings.purchaseFailure == nil)
        settings.storeKitErrors = [.init(name: "Load Products", enabled: true, current: nil), .init(name: "Purchase", enabled: false, current: nil)]
        #expect(settings.purchaseFailure == nil)
        settings.storeKitErrors?[1].enabled = true
        #expect(settings.purchaseFailure?.code == .unknown)
        settings = StoreKitTestSettings()
        settings.failTransactionsEnabled = true
        #expect(settings.purchaseFailure?.code == .unknown)
    }

    @Test("F-S3: SKTestSession.TimeRate's raw values map to speeds; others are refused", arguments: [
        (0, 1.0), (1, 24.0), (6, 86_400.0), (10, 720.0), (15, 86_400.0),
    ] as [(Int, Double)])
    func timeRates(rate: Int, factor: Double) {
        #expect(StoreKitTestSettings.speedFactor(timeRate: rate) == factor)
    }

    @Test("A setting of the wrong type or an unknown time rate is an error naming its key path")
    func wrongSettings() {
        let wrongType = #"{"version": {"major": 3, "minor": 0}, "products": [], "settings": {"_askToBuyEnabled": "yes"}}"#
        #expect { try Catalog.importStoreKitConfiguration(Data(wrongType.utf8), source: "wrong.storekit") } throws: { error in
            (error as? CatalogError).map { $0.reason == .wrongShape && $0.keyPath == "settings._askToBuyEnabled" } == true
        }
        let wrongRate = #"{"version": {"major": 3, "minor": 0}, "products": [], "settings": {"_timeRate": 7}}"#
        #expect { try Catalog.importStoreKitConfiguration(Data(wrongRate.utf8), source: "rate.storekit") } throws: { error in
            (error as? CatalogError).map { $0.reason == .invalidValue && $0.keyPath == "settings._timeRate" } == true
        }
    }

    @Test("Settings survive the native format (the log's copy of the catalog); a catalog without settings keeps its bytes")
    func nativeRoundTrip() throws {
        let catalog = try Self.load("every-setting-v5.storekit")
        let reread = try Catalog.parseNativeCatalog(catalog.nativeCatalogData(), source: "native")
        #expect(reread == catalog)
        #expect(reread.testSettings == catalog.testSettings)
        #expect(!String(decoding: Catalog.sample.nativeCatalogData(), as: UTF8.self).contains("testSettings"))
    }
}
