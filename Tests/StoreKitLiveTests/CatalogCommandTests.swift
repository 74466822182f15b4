import Foundation
import Testing

/// `sksim catalog show FILE [--json]` (docs/storekit-fidelity.md), run as the real program.
@Suite struct CatalogCommandTests {
    static let fixtures = TopologyTests.repositoryRoot.appendingPathComponent("Tests/StoreKitModelTests/Fixtures")

    @Test("catalog show --json lists every product of every fixture (formats 1.1 to 5.0) with its kind, restorability and settings",
          arguments: ["purchasetester-v1.1.storekit", "skdemo-products-v2.storekit", "ask-to-buy-v4.storekit", "every-setting-v5.storekit",
                      "offers-billing-plans-v5.storekit", "legacy-settings-v2.storekit", "fixed-renewal-rate-v4.storekit", "settings-only-v3.storekit"])
    func listsEveryProduct(file: String) throws {
        let outcome = try CommandLineTests.sksim(["catalog", "show", Self.fixtures.appendingPathComponent(file).path, "--json"])
        #expect(outcome.status == 0, "\(outcome.error)")
        let listing = try #require(try JSONSerialization.jsonObject(with: Data(outcome.output.utf8)) as? [String: Any])
        let products = try #require(listing["products"] as? [[String: Any]])
        let raw = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: Self.fixtures.appendingPathComponent(file))) as? [String: Any])
        let groups = (raw["subscriptionGroups"] as? [[String: Any]] ?? []).flatMap { $0["subscriptions"] as? [[String: Any]] ?? [] }
        let expected = (raw["products"] as? [Any] ?? []).count + (raw["nonRenewingSubscriptions"] as? [Any] ?? []).count + groups.count
        #expect(products.count == expected)
        for product in products {
            let kind = try #require(product["kind"] as? String)
            #expect(product["restorable"] as? Bool == (kind == "nonConsumable" || kind == "autoRenewableSubscription"))
            #expect(product["displayPrice"] is String)
            #expect((product["subscriptionPeriod"] is String) == (kind == "autoRenewableSubscription"))
            // F-O1: every product has the field, an object only for a subscription with an offer.
            #expect(product.keys.contains("introductoryOffer"))
            if product["introductoryOffer"] is [String: Any] { #expect(kind == "autoRenewableSubscription") }
        }
        if file == "purchasetester-v1.1.storekit" {
            let trial = try #require(products[1]["introductoryOffer"] as? [String: Any])
            #expect(trial["paymentMode"] as? String == "free" && trial["subscriptionPeriod"] as? String == "P1W")
            #expect(trial["numberOfPeriods"] as? Int == 1 && trial["displayPrice"] as? String == "0")
        }
        let settings = try #require(listing["settings"] as? [String: Any])
        if file == "every-setting-v5.storekit" {
            #expect(settings["storefront"] as? String == "FRA")
            #expect(settings["timeRateName"] as? String == "monthlyRenewalEveryThirtySeconds")
            let failure = try #require(settings["purchaseFailure"] as? [String: Any])
            #expect(failure["code"] as? String == "unknown" && failure["number"] as? Int == 0)
        }
        if file == "fixed-renewal-rate-v4.storekit" {
            #expect(settings["timeRate"] as? Int == 1005)
            #expect(settings["timeRateName"] as? String == "oneRenewalEveryTwoSeconds")
        }
    }

    @Test("catalog show of a missing or malformed file says what is wrong in one line and exits 2")
    func badFile() throws {
        let missing = try CommandLineTests.sksim(["catalog", "show", "/nonexistent/x.storekit"])
        #expect(missing.status == 2)
        #expect(missing.error.hasPrefix("error: cannot use catalog /nonexistent/x.storekit"))
        #expect(missing.error.trimmingCharacters(in: .newlines).split(separator: "\n").count == 1)
        #expect(missing.error.contains("There is no file at this path."))
        // The path is said once: the catalog error names the file itself.
        #expect(missing.error.components(separatedBy: "/nonexistent/x.storekit").count == 2, "\(missing.error)")
    }

    @Test("catalog show of an empty .storekit file says it is empty, in one line, exit 2")
    func emptyFile() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("catalog-command-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let empty = directory.appendingPathComponent("Products.storekit")
        #expect(FileManager.default.createFile(atPath: empty.path, contents: Data()))
        let outcome = try CommandLineTests.sksim(["catalog", "show", empty.path])
        #expect(outcome.status == 2)
        #expect(outcome.error == "error: cannot use catalog \(empty.path): The file is empty (0 bytes, no JSON); expected an Xcode StoreKit configuration. "
            + "Pass the StoreKit configuration Xcode saved (File > New > File > StoreKit Configuration File), or another catalog.\n", "\(outcome.error)")
    }
}
