import Foundation
#if canImport(Glibc)
import Glibc
#endif
import StoreKitRoles
import Testing
@testable import StoreKitModel

/// Shapes found by loading 157, then 244 more, public `.storekit` files (formats 1.0 to 6.3) and malformed
/// variants of them (docs/catalog-format.md, "Which files load"). Every fixture here is written
/// for the test, small, with the keys those files use.
@Suite struct StoreKitCorpusShapeTests {
    @Test("every .storekit fixture and every file of shared/testdata loads with each product of the file, kind for kind")
    func everyFileLoads() throws {
        var directories = [CatalogTestFixtures.storeKitDirectory()]
        // The shared real files, when this checkout sits beside them (`../shared`, as CI has it; the
        // fixtures hold copies): Tests/StoreKitModelTests/Fixtures → the checkout → its folder.
        let shared = CatalogTestFixtures.storeKitDirectory().deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("shared/testdata/storekit", isDirectory: true)
        let besideShared = FileManager.default.fileExists(atPath: shared.path)
        if besideShared { directories.append(shared) }
        var loaded = 0
        for directory in directories {
            let files = try FileManager.default.contentsOfDirectory(at: directory, includingPropertiesForKeys: nil)
                .filter { $0.pathExtension == "storekit" }
            for file in files {
                let catalog = try Catalog.load(contentsOf: file)
                let raw = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: file)) as? [String: Any])
                let kinds = ["Consumable": ProductKind.consumable, "NonConsumable": .nonConsumable,
                             "NonRenewingSubscription": .nonRenewingSubscription, "RecurringSubscription": .autoRenewableSubscription]
                let groups = raw["subscriptionGroups"] as? [[String: Any]] ?? []
                let declared = (raw["products"] as? [[String: Any]] ?? []) + (raw["nonRenewingSubscriptions"] as? [[String: Any]] ?? [])
                    + groups.flatMap { $0["subscriptions"] as? [[String: Any]] ?? [] }
                #expect(catalog.products.map(\.identifier) == declared.map { $0["productID"] as? String ?? "" }, "\(file.lastPathComponent)")
                #expect(catalog.products.map(\.kind) == declared.map { kinds[$0["type"] as? String ?? ""] }, "\(file.lastPathComponent)")
                #expect(catalog.products.map(\.displayPrice) == declared.map { $0["displayPrice"] as? String ?? "0" }, "\(file.lastPathComponent)")
                loaded += 1
            }
        }
        #expect(loaded >= 8 + (besideShared ? 1 : 0), "the fixtures, and at least one file of ../shared when it is there")
    }

    @Test("format 5.0 with every kind of offer, billing plans, family sharing and localizations: products, prices, periods and levels; introductory offers read (F-O1), the others ignored")
    func offersAndBillingPlans() throws {
        let catalog = try Catalog.load(contentsOf: CatalogTestFixtures.storeKitFile("offers-billing-plans-v5.storekit"))
        #expect(catalog.products.map(\.identifier) == ["example.lifetime", "example.season", "example.pro.yearly", "example.pro.monthly"])
        #expect(catalog.products.map(\.kind) == [.nonConsumable, .nonRenewingSubscription, .autoRenewableSubscription, .autoRenewableSubscription])
        // The price is the product's own, never an offer's or a billing plan's.
        #expect(catalog.products.map(\.displayPrice) == ["199.99", "79", "39.99", "4.99"])
        #expect(catalog.products.map(\.subscriptionPeriod) == [nil, nil, "P1Y", "P1M"])
        #expect(catalog.products.map(\.subscriptionGroup) == [nil, nil, "Pro", "Pro"])
        #expect(catalog.products.map(\.subscriptionLevel) == [nil, nil, 1, 2])
        #expect(catalog.product("example.lifetime")?.referenceName == "Lifetime")
        #expect(catalog.product("example.pro.yearly")?.introductoryOffer
            == IntroductoryOffer(paymentMode: .free, subscriptionPeriod: "P2W", internalID: "7104"))
        #expect(catalog.product("example.pro.monthly")?.introductoryOffer
            == IntroductoryOffer(paymentMode: .payUpFront, subscriptionPeriod: "P1M", displayPrice: "0.49", internalID: "7106"))
        let settings = catalog.testSettings
        // _timeRate wins; _compatibilityTimeRate is Xcode's fallback for older test runtimes.
        #expect(settings.timeRate == 15)
        #expect(settings.storefront == "FRA" && settings.locale == "fr_FR")
        #expect(settings.storeKitErrors?.first?.current == "{index:1,type:generic}")
        #expect(settings.purchaseFailure == nil)
    }

    @Test("format 2.0 settings of Xcode 12 (_storeKitError, a plain _compatibilityTimeRate, a null introductoryOffer) load")
    func legacySettings() throws {
        let catalog = try Catalog.load(contentsOf: CatalogTestFixtures.storeKitFile("legacy-settings-v2.storekit"))
        #expect(catalog.products.map(\.identifier) == ["example.hints", "example.plus.weekly"])
        #expect(catalog.product("example.plus.weekly")?.subscriptionPeriod == "P1W")
        #expect(catalog.testSettings.timeRate == 13)
        #expect(catalog.testSettings.failTransactionsEnabled == false)
        #expect(catalog.testSettings.purchaseFailure == nil)
    }

    @Test("the fixed renewal rates (_timeRate 1000 to 1005) load, and every period then lasts the fixed interval", arguments: [
        (1000, 900.0, "oneRenewalEveryFifteenMinutes"), (1001, 300.0, "oneRenewalEveryFiveMinutes"),
        (1002, 60.0, "oneRenewalEveryMinute"), (1003, 30.0, "oneRenewalEveryThirtySeconds"),
        (1004, 10.0, "oneRenewalEveryTenSeconds"), (1005, 2.0, "oneRenewalEveryTwoSeconds"),
    ] as [(Int, Double, String)])
    func fixedRenewalRates(rate: Int, seconds: Double, name: String) throws {
        #expect(StoreKitTestSettings.isTimeRate(rate))
        #expect(StoreKitTestSettings.timeRateName(rate) == name)
        let nanoseconds = Int64(seconds * 1e9)
        for period in ["P1W", "P1M", "P1Y", "P16D"] {
            #expect(SubscriptionPeriod.renewalNanoseconds(period, timeRate: rate) == nanoseconds)
        }
        #expect(SubscriptionPeriod.renewalNanoseconds("1 month", timeRate: rate) == nil)
    }

    @Test("a file with _timeRate 1005 (one renewal every two seconds) imports with that rate")
    func fixedRateFile() throws {
        let catalog = try Catalog.load(contentsOf: CatalogTestFixtures.storeKitFile("fixed-renewal-rate-v4.storekit"))
        #expect(catalog.testSettings.timeRate == 1005)
        #expect(catalog.products.map(\.subscriptionPeriod) == ["P1M", "P1Y"])
        for rate in [7, 14, 999, 1006] {
            #expect(!StoreKitTestSettings.isTimeRate(rate))
        }
    }

    @Test("a native catalog's testSettings.timeRate is checked as a .storekit file's _timeRate is; 1005 round-trips")
    func nativeTimeRate() throws {
        func native(_ rate: Int) -> Data {
            Data(#"{"format": "sksim-catalog", "version": 1, "products": [], "testSettings": {"timeRate": \#(rate)}}"#.utf8)
        }
        let error = try CatalogTestFixtures.catalogError { try Catalog.parseNativeCatalog(native(7), source: "native.json") }
        #expect(error.keyPath == "testSettings.timeRate" && error.reason == .invalidValue, "\(error)")
        let fixed = try Catalog.parseNativeCatalog(native(1005), source: "native.json")
        #expect(fixed.testSettings.timeRate == 1005)
        let imported = try Catalog.load(contentsOf: CatalogTestFixtures.storeKitFile("fixed-renewal-rate-v4.storekit"))
        #expect(try Catalog.parseNativeCatalog(imported.nativeCatalogData(), source: "log") == imported)
    }

    @Test("a file with only settings (no product lists at all) is an empty catalog with its settings")
    func settingsOnly() throws {
        let catalog = try Catalog.load(contentsOf: CatalogTestFixtures.storeKitFile("settings-only-v3.storekit"))
        #expect(catalog.products.isEmpty)
        #expect(catalog.testSettings.storefront == "JPN" && catalog.testSettings.locale == "ja_JP")
    }

    @Test("format 6.3 (Xcode of 2026) with empty subscriptionBundleGroups and subscriptionSuiteGroups, billing plans and code offers loads")
    func formatSix() throws {
        let catalog = try Catalog.load(contentsOf: CatalogTestFixtures.storeKitFile("format6-v6.storekit"))
        #expect(catalog.products.map(\.identifier) == ["example.forever", "example.plus.monthly", "example.plus.yearly"])
        #expect(catalog.products.map(\.kind) == [.nonConsumable, .autoRenewableSubscription, .autoRenewableSubscription])
        // The product's own price, never its billing plan's or an offer's; the level is groupNumber.
        #expect(catalog.products.map(\.displayPrice) == ["24.99", "2.49", "19.99"])
        #expect(catalog.products.map(\.subscriptionPeriod) == [nil, "P1M", "P1Y"])
        #expect(catalog.products.map(\.subscriptionGroup) == [nil, "Plus", "Plus"])
        #expect(catalog.products.map(\.subscriptionLevel) == [nil, 2, 1])
        #expect(catalog.testSettings.storefront == "DEU" && catalog.testSettings.timeRate == 0)
    }

    @Test("a format 6 file that fills subscriptionBundleGroups or subscriptionSuiteGroups is refused at that key, not read with subscriptions missing",
          arguments: ["subscriptionBundleGroups", "subscriptionSuiteGroups"])
    func filledBundleOrSuiteGroup(key: String) throws {
        let text = #"{"version": {"major": 6, "minor": 3}, "products": [], "\#(key)": [{"name": "All", "subscriptions": []}]}"#
        let error = try Self.importError(Array(text.utf8))
        #expect(error.reason == .invalidValue)
        #expect(error.keyPath == "\(key)[0]", "\(error)")
        #expect(error.problem.contains("does not read") && error.remedy.contains("subscriptionGroups"), "\(error)")
        let empty = #"{"version": {"major": 6, "minor": 3}, "products": [], "\#(key)": []}"#
        #expect(try Catalog.importStoreKitConfiguration(Data(empty.utf8), source: "empty.storekit").products.isEmpty)
    }

    @Test("a renewal period of no length (P0D, P0Y0M) is refused: such a subscription would never renew or expire", arguments: ["P0D", "P0Y0M"])
    func zeroPeriod(period: String) throws {
        let text = #"{"version": {"major": 4, "minor": 0}, "subscriptionGroups": [{"name": "G", "subscriptions": [{"productID": "s", "type": "RecurringSubscription", "displayPrice": "1", "recurringSubscriptionPeriod": "\#(period)"}]}]}"#
        let error = try Self.importError(Array(text.utf8))
        #expect(error.reason == .invalidValue)
        #expect(error.keyPath == "subscriptionGroups[0].subscriptions[0].recurringSubscriptionPeriod")
        #expect(error.problem.contains("has no length"), "\(error)")
        let native = #"{"format": "sksim-catalog", "version": 1, "products": [{"identifier": "s", "kind": "autoRenewableSubscription", "displayPrice": "1", "subscriptionGroup": "G", "subscriptionPeriod": "\#(period)"}]}"#
        let nativeError = try CatalogTestFixtures.catalogError { try Catalog.parseNativeCatalog(Data(native.utf8), source: "native.json") }
        #expect(nativeError.keyPath == "products[0].subscriptionPeriod")
    }

    @Test("a catalog too big for a run's first log record is refused when read, in products; one at the bound fits that record")
    func catalogTooBigToRecord() throws {
        let directory = try CatalogTestFixtures.scratchDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        // 10,000 products (Apple's most for one app) took 1,770,563 bytes in the header: `run` failed
        // with "payloadTooLarge ... raise maximumPayloadBytes".
        // Few products with long names keep the test quick; the bound is on bytes.
        let name = String(repeating: "n", count: 2_000)
        let products = (0..<600).map { #"{"productID": "com.example.bulk.item\#($0)", "referenceName": "\#(name)", "type": "Consumable", "displayPrice": "0.99"}"# }
        let file = directory.appendingPathComponent("Bulk.storekit")
        try Data(#"{"version": {"major": 4, "minor": 0}, "products": [\#(products.joined(separator: ","))]}"#.utf8).write(to: file)
        let error = try CatalogTestFixtures.catalogError { try Catalog.load(contentsOf: file) }
        #expect(error.reason == .invalidValue && error.source == file.path)
        #expect(error.problem.contains("600 products take") && error.remedy.contains("fewer products"), "\(error)")

        // Padded to the bound exactly, the catalog and a scenario encode within the log's 1 MiB record.
        var items = (0..<400).map { Product(identifier: "com.example.bulk.item\($0)", kind: .consumable, referenceName: name, displayPrice: "0.99") }
        let size = try Catalog(products: items).nativeCatalogData().count
        #expect(size < Catalog.maximumRecordedBytes)
        items[0].referenceName += String(repeating: "x", count: Catalog.maximumRecordedBytes - size)
        let atBound = try Catalog(products: items)
        #expect(atBound.nativeCatalogData().count == Catalog.maximumRecordedBytes)
        let header = Scenario(seed: 1, devices: 100_000, catalog: atBound).header(runtime: "deterministic", startedAtUnixNanoseconds: 0)
        #expect(EventCodec.encode(.runStarted(header), commandID: nil).count <= 1 << 20)
    }

    @Test("a hand-written product type that is a known one in another case, or a subscription by another name, gets a hint", arguments: [
        ("consumable", "case-sensitive: \"Consumable\""),
        ("SUBSCRIPTION", "\"RecurringSubscription\" in \"subscriptionGroups[].subscriptions\""),
        ("Lifetime", "Correct the type, or"),
    ])
    func productTypeHints(type: String, hint: String) throws {
        let text = #"{"version": {"major": 3, "minor": 0}, "products": [{"productID": "p", "type": "\#(type)", "displayPrice": "1.99"}]}"#
        let error = try Self.importError(Array(text.utf8))
        #expect(error.reason == .unknownProductType && error.keyPath == "products[0].type")
        #expect(error.remedy.contains(hint), "\(error)")
    }

    @Test("two subscription groups of one name are refused at the second's name, not merged into one group")
    func duplicateGroupNames() throws {
        let subscription = #"{"type": "RecurringSubscription", "displayPrice": "1", "recurringSubscriptionPeriod": "P1M", "productID": "#
        let text = #"{"version": {"major": 4, "minor": 0}, "subscriptionGroups": [{"id": "1", "name": "Pro", "subscriptions": [\#(subscription)"a"}]}, {"id": "2", "name": "Pro", "subscriptions": [\#(subscription)"b"}]}]}"#
        let error = try Self.importError(Array(text.utf8))
        #expect(error.reason == .invalidValue && error.keyPath == "subscriptionGroups[1].name", "\(error)")
        #expect(error.problem.contains("subscriptionGroups[0].name"), "\(error)")
        let distinct = text.replacingOccurrences(of: #""id": "2", "name": "Pro""#, with: #""id": "2", "name": "Team""#)
        let catalog = try Catalog.importStoreKitConfiguration(Data(distinct.utf8), source: "groups.storekit")
        #expect(catalog.products.map(\.subscriptionGroup) == ["Pro", "Team"])
    }

    // MARK: files that are not StoreKit configurations: one sentence on what is wrong and where

    @Test("a macOS AppleDouble file (._Products.storekit), a binary property list, a zip or a gzip file is named as such", arguments: [
        ([0x00, 0x05, 0x16, 0x07, 0x00, 0x02, 0x00, 0x00] + Array("Mac OS X        ".utf8) + [0x00, 0xB0], "AppleDouble", "without the leading \"._\""),
        (Array("bplist00".utf8) + [0xD1, 0x01, 0x02], "binary property list", "JSON"),
        ([0x50, 0x4B, 0x03, 0x04, 0x14, 0x00], "zip archive", "Unzip"),
        ([0x1F, 0x8B, 0x08, 0x00], "gzip", "gunzip"),
    ] as [([UInt8], String, String)])
    func binaryFiles(bytes: [UInt8], kind: String, remedy: String) throws {
        let error = try Self.importError(bytes)
        #expect(error.reason == .notJSON)
        #expect(error.problem.contains(kind) && !error.problem.contains("UTF-8"), "\(error)")
        #expect(error.remedy.contains(remedy), "\(error)")
    }

    static func importError(_ text: [UInt8]) throws -> CatalogError {
        try CatalogTestFixtures.catalogError { try Catalog.importStoreKitConfiguration(Data(text), source: "bad.storekit") }
    }

    static let good = Array(#"{"version": {"major": 3, "minor": 0}, "products": []}"#.utf8)

    @Test("an empty or blank file says it is empty")
    func emptyFile() throws {
        for text in ["", "  \n\t\n"] {
            let error = try Self.importError(Array(text.utf8))
            #expect(error.reason == .notJSON)
            #expect(error.problem.hasPrefix("The file is empty (\(text.utf8.count) bytes, no JSON)"))
        }
    }

    @Test("a merge conflict left in the file is named with its line")
    func mergeConflict() throws {
        let text = "{\n  \"version\": {\"major\": 3, \"minor\": 0},\n<<<<<<< HEAD\n  \"products\": []\n=======\n  \"products\": [ ]\n>>>>>>> other\n}\n"
        let error = try Self.importError(Array(text.utf8))
        #expect(error.problem.contains("merge conflict marker at line 3"))
        #expect(error.remedy.contains("Resolve the merge conflict"))
    }

    @Test("text that is not UTF-8 is named with the byte, line and column")
    func notUTF8() throws {
        var bytes = Array("{\n  \"identifier\": \"caf".utf8)
        bytes.append(0xE9)  // é in Latin-1
        bytes += Array("\"}".utf8)
        let error = try Self.importError(bytes)
        #expect(error.problem.contains("byte 0xE9 at line 2, column 21 is not valid UTF-8"))
    }

    @Test("XML or HTML (a plist, a saved web page) is named as such")
    func markup() throws {
        let error = try Self.importError(Array("\n<!DOCTYPE html><html></html>".utf8))
        #expect(error.problem.contains("XML or HTML"))
        #expect(error.remedy.contains("Raw"))
    }

    @Test("malformed JSON is located by line and column; a cut-off file says it ends early")
    func malformedJSON() throws {
        let missingComma = try Self.importError(Array("{\n  \"version\": {\"major\": 3 \"minor\": 0}\n}".utf8))
        #expect(missingComma.problem.contains("malformed at line 2, column "), "\(missingComma)")
        let cut = try Self.importError(Array(Self.good.prefix(30)))
        #expect(cut.problem.contains("ends early, at line 1"), "\(cut)")
        let deep = try Self.importError(Array(String(repeating: "[", count: 10_000).utf8))
        #expect(deep.reason == .notJSON)
        #expect(deep.problem.contains("too many nested"), "\(deep)")
    }

    @Test("a named pipe is read to its end when a program writes the catalog into it; one nobody writes to is refused after its silence, not waited on forever")
    func namedPipes() throws {
        let directory = try CatalogTestFixtures.scratchDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let pipe = directory.appendingPathComponent("Products.storekit")
        #expect(mkfifo(pipe.path, 0o600) == 0)
        // Nobody writes: `sksim catalog show` of such a pipe used to block in open() forever.
        let silent = try CatalogTestFixtures.catalogError { try Catalog.importStoreKitConfiguration(Catalog.readFile(pipe, pipeSilenceMilliseconds: 50), source: pipe.path) }
        #expect(silent.reason == .unreadableFile && silent.problem.hasPrefix("This is a named pipe, and nothing came through it"), "\(silent)")
        // A writer (as `sksim catalog show <(curl …)` has): opening the pipe to write waits for the reader.
        let writer = Thread {
            guard let handle = FileHandle(forWritingAtPath: pipe.path) else { return }
            handle.write(Data(Self.good))
            try? handle.close()
        }
        writer.start()
        let catalog = try Catalog.importStoreKitConfiguration(Catalog.readFile(pipe), source: pipe.path)
        #expect(catalog.products.isEmpty)
    }

    @Test("a path to nothing, to a directory, to a file over the size bound or to an endless device says which")
    func unreadablePaths() throws {
        let directory = try CatalogTestFixtures.scratchDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let missing = try CatalogTestFixtures.catalogError { try Catalog.load(contentsOf: directory.appendingPathComponent("none.storekit")) }
        #expect(missing.reason == .unreadableFile && missing.problem == "There is no file at this path.")
        let folder = try CatalogTestFixtures.catalogError { try Catalog.load(contentsOf: directory) }
        #expect(folder.problem == "This is a directory, not a catalog file.")
        let big = directory.appendingPathComponent("big.storekit")
        #expect(FileManager.default.createFile(atPath: big.path, contents: Data(Self.good)))
        let handle = try FileHandle(forWritingTo: big)
        try handle.truncate(atOffset: UInt64(Catalog.maximumFileBytes + 1))  // sparse: no 16 MiB written
        try handle.close()
        let tooBig = try CatalogTestFixtures.catalogError { try Catalog.load(contentsOf: big) }
        #expect(tooBig.problem.hasPrefix("The file is \(Catalog.maximumFileBytes + 1) bytes"))
        // A device has no size to check first; reading stops at the bound.
        let endless = try CatalogTestFixtures.catalogError { try Catalog.load(contentsOf: URL(fileURLWithPath: "/dev/zero")) }
        #expect(endless.problem.hasPrefix("The file holds more than \(Catalog.maximumFileBytes) bytes"))
    }
}
