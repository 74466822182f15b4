import Foundation
import Testing
import StoreKitModel
@testable import StoreKitRoles
import StoreKitRuntime
import StoreKitSimulation
import StoreKitTestKit
import StoreKitTestSupport

/// A renewal reaches every device of the account (F-U4), so a device that restored an
/// auto-renewable subscription hears its renewals too; docs/storekit-fidelity.md.
@Suite struct RenewalDeliveryTests {
    @Test("F-U4: the store copies each renewal to the account's other devices; a copy renews nothing itself")
    func storeCopiesRenewals() {
        let store = StoreRole(catalog: .sample, behavior: StoreBehavior(), choices: SeededChoices(seed: 1))
        let feeder = RoleFeeder(store)
        @discardableResult func feed(_ event: Event) -> [Effect] { feeder.feed(event) }
        _ = feed(.deviceRegistered(device: "d1", account: "a"))
        _ = feed(.deviceRegistered(device: "d2", account: "a"))
        _ = feed(.deviceRegistered(device: "d3", account: "b"))
        let bought = TransactionKey(device: "d1", number: 1)
        _ = feed(.transactionAdded(bought, Payment(productIdentifier: SampleProducts.monthly)))
        _ = feed(.transactionPurchased(bought, identifier: "d1.1", downloads: [], charged: true))
        let original = try! #require(store.projection.subscriptions["d1.1"]).original
        let effects = feed(.subscriptionRenewed(TransactionKey(device: "d1", number: 2), identifier: "d1.2", original: original, downloads: []))
        let sent = effects.compactMap { if case .send(let body) = $0 { body } else { nil } }
        #expect(sent == [.renewSubscription(device: "d2", original: original)])
        #expect(effects.contains { if case .timer(_, .subscriptionPeriodEnd("d1.1", 1)) = $0 { true } else { false } })
        // The copy on d2: no further copies, no new period, the count stays one renewal.
        #expect(feed(.subscriptionRenewed(TransactionKey(device: "d2", number: 5), identifier: "d2.5", original: original, downloads: [])) == [])
        #expect(store.projection.subscriptions["d1.1"]?.renewals == 1)
        #expect(store.projection.history(of: "a").purchases.map(\.transactionIdentifier) == ["d1.1", "d1.2"])
    }

    @Test("F-U4: a restarted store sends the copies of the latest renewal the log lacks, not to a device registered after it")
    func restartSendsMissingCopies() throws {
        let monthly = Payment(productIdentifier: SampleProducts.monthly)
        let original = OriginalTransaction(transactionIdentifier: "d1.1", payment: monthly, transactionDate: 2)
        let events: [Event] = [
            .deviceRegistered(device: "d1", account: "a"), .deviceRegistered(device: "d2", account: "a"),
            .deviceRegistered(device: "d3", account: "a"),
            .transactionAdded(TransactionKey(device: "d1", number: 1), monthly),
            .transactionPurchased(TransactionKey(device: "d1", number: 1), identifier: "d1.1", downloads: [], charged: true),
            .subscriptionRenewed(TransactionKey(device: "d1", number: 2), identifier: "d1.2", original: original, downloads: []),
            .subscriptionRenewed(TransactionKey(device: "d2", number: 1), identifier: "d2.1", original: original, downloads: []),
            .deviceRegistered(device: "d4", account: "a"),
        ]
        let store = StoreRole(name: "store", catalog: .sample, behavior: StoreBehavior(), choices: SeededChoices(seed: 1))
        for (index, event) in events.enumerated() {
            // The renewals are the earlier store's commands: this start is a restart.
            let origin = if case .subscriptionRenewed = event { "store.9" } else { "apps.1" }
            store.catchUp(RecordedEvent(sequence: UInt64(index + 1), timestamp: Int64(index + 1) * 1_000, commandID: CommandID(origin: origin, number: UInt64(index + 1)), event: event))
        }
        let sent = store.resume(now: 0).compactMap { if case .send(let body) = $0 { body } else { nil } }
        #expect(sent == [.renewSubscription(device: "d3", original: try #require(store.projection.subscriptions["d1.1"]).original)])
    }

    @Test("F-U4: in a whole run every renewal reaches both devices of the account (the second one restored the subscription) and each finishes it")
    func wholeRunReachesEveryDevice() throws {
        var scenario = Scenario(seed: 7, devices: 6)
        scenario.apps.purchasesPerDevice = 6
        let environment = DeterministicEnvironment.inMemory(seed: scenario.seed)
        let report = try DeterministicRuntime(scenario: scenario, environment: environment).run()
        #expect(report.violations.isEmpty)
        var renewalsOn: [String: [String]] = [:]  // original identifier → devices its renewals reached, in order
        var restoredOn: [String: Set<String>] = [:]
        var renewals: Set<TransactionKey> = []
        var finished: Set<TransactionKey> = []
        try environment.storage.forEachRecord(from: 1) { _, _, payload in
            switch try EventCodec.decodeEvent(payload).event {
            case .subscriptionRenewed(let key, _, let original, _):
                renewalsOn[original.transactionIdentifier, default: []].append(key.device)
                renewals.insert(key)
            case .transactionRestored(let key, _, _, let original, _):
                restoredOn[original.transactionIdentifier, default: []].insert(key.device)
            case .transactionFinished(let key):
                finished.insert(key)
            default:
                break
            }
        }
        #expect(!renewalsOn.isEmpty)
        for (original, devices) in renewalsOn {
            // Devices pair up on accounts: device-0001 and -0002, -0003 and -0004, …
            let buyer = String(original.split(separator: ".")[0])
            let number = Int(buyer.dropFirst("device-".count))!
            let partner = "device-" + String(format: "%04d", number % 2 == 1 ? number + 1 : number - 1)
            #expect(devices.filter { $0 == buyer }.count == devices.filter { $0 == partner }.count, "\(original): \(devices)")
            #expect(Set(devices) == [buyer, partner])
        }
        #expect(renewalsOn.keys.contains { restoredOn[$0] != nil }, "no renewed subscription was restored on another device")
        #expect(renewals.isSubset(of: finished))
    }
}

/// Hosted content belongs to non-consumable products only (F-H2): renewals, like consumables, never
/// list downloads, so the downloader, observers and invariants treat every listed download alike.
@Suite struct HostedContentKindTests {
    @Test("F-H2: a catalog giving hosted content to an auto-renewable subscription or a consumable is refused with its key path")
    func onlyNonConsumablesHostContent() throws {
        for kind in ["autoRenewableSubscription", "consumable", "nonRenewingSubscription"] {
            let period = kind == "autoRenewableSubscription" ? #", "subscriptionGroup": "G", "subscriptionPeriod": "P1M""# : ""
            let document = #"""
            {"format": "sksim-catalog", "version": 1, "products": [{"identifier": "plus", "kind": "\#(kind)", "displayPrice": "1"\#(period),
             "hostedContent": [{"contentIdentifier": "plus.data", "contentLength": 10, "contentVersion": "1.0"}]}]}
            """#
            let result = Result { () throws(CatalogError) in try Catalog.parseNativeCatalog(Data(document.utf8), source: "shop.json") }
            guard case .failure(let error) = result else { Issue.record("\(kind) with hosted content was accepted"); continue }
            #expect(error.keyPath == "products[0].hostedContent[0]")
            #expect(error.reason == .invalidValue)
        }
    }

    @Test("F-H2: in a whole run no renewal lists downloads, and every listed download of a purchase or restore is started")
    func renewalsListNoDownloads() throws {
        var scenario = Scenario(seed: 7, devices: 6)
        scenario.apps.purchasesPerDevice = 6
        let environment = DeterministicEnvironment.inMemory(seed: scenario.seed)
        let report = try DeterministicRuntime(scenario: scenario, environment: environment).run()
        #expect(report.violations.isEmpty)
        var listed: Set<DownloadKey> = []
        var started: Set<DownloadKey> = []
        var renewals = 0
        try environment.storage.forEachRecord(from: 1) { _, _, payload in
            switch try EventCodec.decodeEvent(payload).event {
            case .subscriptionRenewed(_, _, _, let downloads):
                renewals += 1
                #expect(downloads.isEmpty)
            case .transactionPurchased(let key, _, let downloads, _), .transactionRestored(let key, _, _, _, let downloads):
                for index in downloads.indices { listed.insert(DownloadKey(transaction: key, index: index)) }
            case .downloadStarted(let key):
                started.insert(key)
            default:
                break
            }
        }
        #expect(renewals > 0 && !listed.isEmpty)
        #expect(started.isSubset(of: listed))
    }
}
