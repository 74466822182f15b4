import Foundation
import StoreKitLoad
import StoreKitModel
import StoreKitTestKit
import Testing

/// A team's own catalog drives the load: real .storekit files (Xcode's format, from public
/// projects), a real queue, store and driver, the run's log read back.
@Suite(.serialized) struct CatalogLoadTests {
    static let storeKitFiles = URL(fileURLWithPath: "/work/shared/testdata/storekit", isDirectory: true)
    static var skdemo: URL { storeKitFiles.appendingPathComponent("skdemo-products-v2.storekit") }
    static var purchaseTester: URL { storeKitFiles.appendingPathComponent("purchasetester-v1.1.storekit") }

    /// The log's events of one type, as JSON objects.
    static func events(_ run: String, _ type: String) throws -> [[String: Any]] {
        try LoadRunTests.sksim(["log", "cat", run, "--type", type, "--json"]).output.split(separator: "\n").compactMap {
            try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
    }

    @Test("--catalog with a real .storekit file: the drivers buy only the --products named, by weight; an account buys a non-consumable or a subscription group again only after a refund; receipt refreshes and refund requests are timed")
    func teamCatalogDrivesTheLifecycles() throws {
        try #require(FileManager.default.fileExists(atPath: Self.skdemo.path), "the .storekit test files are missing")
        let scratch = LoadRunTests.Scratch()
        let run = scratch.path("run")
        let chosen = ["consumable.fuel.octane87": 4, "nonconsumable.car": 2, "nonconsumable.racecar": 1, "subscription.standard": 1]
        let outcome = try LoadRunTests.sksim(["load", "--catalog", Self.skdemo.path, "--products", chosen.map { "\($0.key)=\($0.value)" }.joined(separator: ","),
                                              "--mix", "purchase=80,receiptRefresh=8,refundRequest=8,restore=4",
                                              "--rate", "150", "--duration", "2s", "--devices", "16", "--out", run, "--json"])
        #expect(outcome.status == 0, "\(outcome.error)\n\(outcome.output)")
        let json = outcome.json
        #expect(json["errors"] as? Int == 0)
        #expect(json["started"] as? Int == 300)
        let stages = try #require(json["stages"] as? [String: Any])
        for stage in ["added", "purchased", "removed", "receiptRefreshed", "refunded"] {
            #expect(stages[stage] != nil, "stage \(stage) missing: \(stages.keys.sorted())")
        }

        // What was bought: only the chosen products, the consumable most of all.
        var productOfTransaction: [String: String] = [:]
        var bought: [String: Int] = [:]
        for event in try Self.events(run, "transactionAdded") {
            let product = try #require((event["payment"] as? [String: Any])?["productIdentifier"] as? String)
            productOfTransaction[try #require(event["transaction"] as? String)] = product
            bought[product, default: 0] += 1
        }
        #expect(Set(bought.keys).isSubset(of: Set(chosen.keys)), "\(bought)")
        #expect(bought["consumable.fuel.octane87", default: 0] > bought["nonconsumable.car", default: 0])

        // Per account (two devices each: driver-1-0 and driver-1-1 are account 0), purchases of what
        // can be owned never outnumber one plus the refunds of it.
        func account(_ transaction: String) -> String {
            let device = String(transaction.split(separator: "#")[0])
            return "\(Int(device.split(separator: "-").last!)! / 2)"
        }
        var purchases: [String: Int] = [:]
        for event in try Self.events(run, "transactionPurchased") {
            let transaction = try #require(event["transaction"] as? String)
            let product = try #require(productOfTransaction[transaction])
            guard product != "consumable.fuel.octane87" else { continue }
            purchases["\(account(transaction)) \(product)", default: 0] += 1
        }
        var refunds: [String: Int] = [:]
        for event in try Self.events(run, "entitlementsRevoked") {
            let device = try #require(event["device"] as? String)
            let original = try #require(event["originalTransaction"] as? [String: Any])
            let product = try #require((original["payment"] as? [String: Any])?["productIdentifier"] as? String)
            refunds["\(account(device + "#0")) \(product)", default: 0] += 1
        }
        #expect(!purchases.isEmpty)
        for (key, count) in purchases {
            #expect(count <= 1 + refunds[key, default: 0], "account and product \(key): \(count) purchases, \(refunds[key, default: 0]) refunds")
        }
    }

    @Test("load.catalog in the topology, relative to its file: the store sells the team's products and the drivers buy every one of them")
    func topologyCatalog() throws {
        try #require(FileManager.default.fileExists(atPath: Self.purchaseTester.path), "the .storekit test files are missing")
        let scratch = LoadRunTests.Scratch()
        try FileManager.default.copyItem(at: Self.purchaseTester, to: scratch.url.appendingPathComponent("Products.storekit"))
        let topology = try String(contentsOf: LoadRunTests.repositoryRoot.appendingPathComponent("topology/load.yaml"), encoding: .utf8)
            + "  catalog: Products.storekit\n"
        try topology.write(to: scratch.url.appendingPathComponent("mine.yaml"), atomically: true, encoding: .utf8)
        let run = scratch.path("run")
        let outcome = try LoadRunTests.sksim(["load", scratch.path("mine.yaml"), "--rate", "100", "--duration", "1s", "--devices", "40", "--out", run, "--json"])
        #expect(outcome.status == 0, "\(outcome.error)\n\(outcome.output)")
        #expect(outcome.json["errors"] as? Int == 0)
        let catalog = try Catalog.load(contentsOf: Self.purchaseTester)
        let bought = Set(try Self.events(run, "transactionAdded").compactMap { ($0["payment"] as? [String: Any])?["productIdentifier"] as? String })
        #expect(bought == Set(catalog.products.map(\.identifier)))
    }

    @Test("no threshold given: errors==0, violations==0 and incomplete==0 judge the run; a threshold on one replaces its default")
    func defaultThresholds() throws {
        let plain = try LoadSettings().resolve(seed: 1)
        #expect(plain.thresholds.map(\.expression) == ["errors==0", "violations==0", "incomplete==0"])
        var settings = LoadSettings()
        settings.thresholds = ["errors<5", "removed.p99<1s", "incomplete<=3"]
        #expect(try settings.resolve(seed: 1).thresholds.map(\.expression) == ["errors<5", "removed.p99<1s", "incomplete<=3", "violations==0"])
    }

    @Test("a run whose lifecycles end in errors, or are still open when the drain ends (a system that never answers), fails the default thresholds, and only the threshold of that figure",
          arguments: [(errors: 6, incomplete: 0, failing: "errors==0", errorRate: 0.6), (errors: 0, incomplete: 6, failing: "incomplete==0", errorRate: 0.0)])
    func unfinishedLifecyclesFailTheRun(errors: Int, incomplete: Int, failing: String, errorRate: Double) throws {
        let options = try LoadSettings().resolve(seed: 1)
        var figures = LoadFigures()
        figures.counters.started = 10
        figures.counters.completed = 4
        figures.counters.errors = errors
        figures.counters.incomplete = incomplete
        figures.violations = 0
        #expect(options.thresholds.filter { !$0.passes(figures) }.map(\.expression) == [failing])
        #expect(abs(figures.errorRate - errorRate) < 1e-9)
    }

    @Test("--products naming a product the catalog does not sell, and a malformed weight, are one clear line each, and nothing starts", arguments: [
        ("com.example.nothing=1", "does not sell"), ("consumable.fuel.octane87=lots", "ID=WEIGHT"),
    ])
    func badProducts(products: String, expected: String) throws {
        let scratch = LoadRunTests.Scratch()
        let outcome = try LoadRunTests.sksim(["load", "--catalog", Self.skdemo.path, "--products", products, "--out", scratch.path("run")])
        #expect(outcome.status != 0 && outcome.status != 99)
        #expect(outcome.error.split(separator: "\n").count == 1, "\(outcome.error)")
        #expect(outcome.error.contains(expected), "\(outcome.error)")
        #expect(!FileManager.default.fileExists(atPath: scratch.path("run/log")))
    }
}
