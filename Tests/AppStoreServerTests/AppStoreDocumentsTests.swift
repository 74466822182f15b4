import AppStoreServer
import Foundation
import JWTKit
import StoreKitModel
import StoreKitRoles
import StoreKitTestKit
import StoreKitTestSupport
import Testing

/// Signed transactions and receipts projected from a real `sksim simulate` run (docs/app-store-server.md).
/// Apple's own library checks the same documents in Tests/python/test_app_store_server.py.
@Suite(.serialized) struct AppStoreDocumentsTests {
    static let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    final class Scratch {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("sksim-documents-\(UUID().uuidString.prefix(8))")
        init() { try? FileManager.default.createDirectory(at: url, withIntermediateDirectories: true) }
        deinit { try? FileManager.default.removeItem(at: url) }
        func path(_ name: String) -> URL { url.appendingPathComponent(name) }
    }

    static func simulate(_ scratch: Scratch, seed: Int = 29) throws -> URL {
        let run = scratch.path("run")
        let outcome = try SKSimProgram.run(try SKSimProgram.executable(packageRoot: repositoryRoot), [
            "simulate", "--devices", "4", "--purchases-per-device", "6", "--seed", "\(seed)", "--out", run.path,
            "--billing-issue-probability", "0.5", "--billing-grace-period", "--json",
        ])
        #expect(outcome.status == 0, "\(outcome.error)")
        return run
    }

    struct Header: Codable { var alg: String; var x5c: [String] }

    @Test func aSignedTransactionIsES256WithTheChainAndVerifiesWithTheLeafKey() async throws {
        let scratch = Scratch()
        let run = try Self.simulate(scratch)
        let ledger = try AppStoreLedger.build(logDirectory: run.appendingPathComponent("log"))
        let chain = try SigningChain.loadOrCreate(directory: scratch.path("app-store"))
        let documents = try await AppStoreDocuments(chain: chain, settings: AppStoreSettings())
        let first = try #require(ledger.transactions.first)
        let signed = try #require(try await documents.signedTransaction(logIdentifier: first.logIdentifier, in: ledger))
        let parts = signed.split(separator: ".")
        #expect(parts.count == 3)
        var headerText = String(parts[0]).replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while headerText.count % 4 != 0 { headerText += "=" }
        let header = try JSONDecoder().decode(Header.self, from: try #require(Data(base64Encoded: headerText)))
        #expect(header.alg == "ES256")
        #expect(header.x5c == chain.x5c)
        let keys = JWTKeyCollection()
        await keys.add(ecdsa: try ES256PublicKey(backing: chain.leafKey.publicKey))
        let payload = try await keys.verify(signed, as: TransactionPayload.self)
        #expect(payload.transactionId == AppStoreIdentifier.transactionIdentifier(first.logIdentifier))
        #expect(payload.transactionId.allSatisfy(\.isNumber) && payload.transactionId.count == 19)
        #expect(payload.environment == "Sandbox")
        #expect(payload.bundleId == "com.example.sksim")
        // A deterministic run's dates count from 2026-01-01.
        #expect(payload.purchaseDate >= Int64(Scenario.defaultStartDate.timeIntervalSince1970 * 1000))
        #expect(try await documents.signedTransaction(logIdentifier: "no-such-device.1", in: ledger) == nil)
    }

    @Test func subscriptionsRenewOnceEachAndProduceTheirNotifications() throws {
        let scratch = Scratch()
        let run = try Self.simulate(scratch)
        let ledger = try AppStoreLedger.build(logDirectory: run.appendingPathComponent("log"))
        let renewals = ledger.transactions.filter(\.isRenewal)
        #expect(!renewals.isEmpty)
        // One DID_RENEW per renewal (the buying device's), each naming its renewal.
        let didRenew = ledger.notifications.filter { $0.notificationType == "DID_RENEW" }
        #expect(didRenew.count == renewals.count)
        #expect(Set(didRenew.map { ledger.transactions[$0.transactionIndex].logIdentifier }) == Set(renewals.map(\.logIdentifier)))
        for renewal in renewals {
            let first = try #require(ledger.transaction(logIdentifier: renewal.originalLogIdentifier))
            #expect(renewal.originalTransactionId == first.transactionId)
            #expect(try #require(renewal.expiresTime) > renewal.purchaseTime)
        }
        #expect(Set(ledger.notifications.map(\.notificationUUID)).count == ledger.notifications.count)
        // Built again, the same notifications with the same UUIDs: a restarted sender resends the same.
        let again = try AppStoreLedger.build(logDirectory: run.appendingPathComponent("log"))
        #expect(again.notifications == ledger.notifications)
    }

    @Test func aReceiptListsTheAccountsPurchasesInOrderAndVerifies() async throws {
        let scratch = Scratch()
        let run = try Self.simulate(scratch)
        let ledger = try AppStoreLedger.build(logDirectory: run.appendingPathComponent("log"))
        let chain = try SigningChain.loadOrCreate(directory: scratch.path("app-store"))
        let documents = try await AppStoreDocuments(chain: chain, settings: AppStoreSettings())
        let receipt = try #require(try documents.appReceipt(device: "device-0001", in: ledger))
        let payload = try #require(await AppReceipt.verifiedPayload(receipt, chain: chain))
        let fields = try AppReceipt.fields(ofPayload: payload)
        #expect(fields["bundle_id"] as? String == "com.example.sksim")
        let entries = try #require(fields["in_app"] as? [[String: Any]])
        let expected = try #require(documents.receiptEntries(device: "device-0001", in: ledger))
        #expect(entries.map { $0["transaction_id"] as? String } == expected.map(\.transactionId))
        #expect(expected.map(\.purchaseDate) == expected.map(\.purchaseDate).sorted())
        // Another chain's receipt is not accepted.
        let other = try SigningChain.generate().chain
        #expect(await AppReceipt.verifiedPayload(receipt, chain: other) == nil)
        #expect(try documents.appReceipt(device: "no-such-device", in: ledger) == nil)
    }

    /// `--at SEQUENCE`: the ledger as of a record knows only what happened up to it.
    @Test func aLedgerAsOfASequenceKnowsOnlyWhatCameBefore() throws {
        let scratch = Scratch()
        let run = try Self.simulate(scratch)
        let log = run.appendingPathComponent("log")
        let whole = try AppStoreLedger.build(logDirectory: log)
        let first = try #require(whole.transactions.first)
        let early = try AppStoreLedger.build(logDirectory: log, through: first.sequence)
        #expect(early.transactions == [first])
        #expect(early.receiptEntries(device: first.device)?.map(\.transactionIdentifier) == [first.logIdentifier])
        #expect(try AppStoreLedger.build(logDirectory: log, through: first.sequence - 1).transactions.isEmpty)
    }

    /// Keys never enter the log: two runs of one seed, one of them signed for with its own new chain,
    /// hold the same log bytes.
    @Test func theLogIsByteIdenticalWhateverTheKeys() throws {
        let first = Scratch()
        let second = Scratch()
        let signedRun = try Self.simulate(first, seed: 41)
        let plainRun = try Self.simulate(second, seed: 41)
        let executable = try SKSimProgram.executable(packageRoot: Self.repositoryRoot)
        #expect(try SKSimProgram.run(executable, ["log", "signed", signedRun.path]).status == 0)
        #expect(try SKSimProgram.run(executable, ["log", "receipt", signedRun.path, "--device", "device-0001"]).status == 0)
        #expect(FileManager.default.fileExists(atPath: signedRun.appendingPathComponent("app-store/root.cer").path))
        func files(_ run: URL) throws -> [String: Data] {
            let log = run.appendingPathComponent("log")
            var result: [String: Data] = [:]
            for case let path as String in FileManager.default.enumerator(atPath: log.path)! {
                var isDirectory: ObjCBool = false
                let url = log.appendingPathComponent(path)
                if FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory), !isDirectory.boolValue {
                    result[path] = try Data(contentsOf: url)
                }
            }
            return result
        }
        let signedFiles = try files(signedRun)
        #expect(!signedFiles.isEmpty)
        #expect(signedFiles == (try files(plainRun)))
    }

    /// The log files of a run, by path.
    static func logFiles(_ run: URL) throws -> [String: Data] {
        let log = run.appendingPathComponent("log")
        var result: [String: Data] = [:]
        for case let path as String in FileManager.default.enumerator(atPath: log.path)! {
            var isDirectory: ObjCBool = false
            let url = log.appendingPathComponent(path)
            if FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory), !isDirectory.boolValue {
                result[path] = try Data(contentsOf: url)
            }
        }
        return result
    }

    /// A scenario's `startDate`: a deterministic run's dates (signed transactions, receipts) count from
    /// it, and two runs of it hold the same log bytes; a scenario without one starts at 2026-01-01.
    @Test func aScenarioStartDateDatesTheRunAndKeepsItsLogDeterministic() async throws {
        let scratch = Scratch()
        func topology(startDate: String?) throws -> URL {
            let file = scratch.path("topology-\(startDate ?? "default").yaml")
            try """
            name: dated
            seed: 29
            scenario:
              devices: 2
              purchasesPerDevice: 4
            \(startDate.map { "  startDate: \($0)\n" } ?? "")processes:
              - {name: queue, role: queue, events: "ipc://{run}/e.ipc", requests: "ipc://{run}/r.ipc"}
              - {name: store, role: store}
              - {name: downloader, role: downloader}
              - {name: observer, role: observer, devices: all}
            """.write(to: file, atomically: true, encoding: .utf8)
            return file
        }
        let executable = try SKSimProgram.executable(packageRoot: Self.repositoryRoot)
        func simulate(_ topology: URL, _ name: String) throws -> AppStoreLedger {
            let outcome = try SKSimProgram.run(executable, ["simulate", topology.path, "--out", scratch.path(name).path])
            #expect(outcome.status == 0, "\(outcome.error)")
            return try AppStoreLedger.build(logDirectory: scratch.path(name).appendingPathComponent("log"))
        }
        let dated = try topology(startDate: "2031-06-15T12:00:00Z")
        let first = try simulate(dated, "first")
        _ = try simulate(dated, "second")
        let plain = try simulate(try topology(startDate: nil), "plain")
        #expect(try Self.logFiles(scratch.path("first")) == (try Self.logFiles(scratch.path("second"))))
        // Only the dates differ: the scenario without a start date records none, as logs always did.
        #expect(try #require(plain.header).scenario.contains("startDate") == false)
        #expect(try #require(first.header).scenario.contains("\"startDate\":\"2031-06-15T12:00:00Z\""))
        let start: Int64 = 1_939_291_200_000  // 2031-06-15T12:00:00Z
        let transaction = try #require(first.transactions.first)
        #expect(first.date(transaction.purchaseTime) == start + transaction.purchaseTime / 1_000_000)
        #expect(plain.date(0) == Int64(Scenario.defaultStartDate.timeIntervalSince1970 * 1000))
        // The signed transaction's and the receipt's dates are those dates.
        let documents = try await AppStoreDocuments(chain: try SigningChain.generate().chain, settings: AppStoreSettings())
        #expect(documents.transactionPayload(transaction, in: first, signedDate: 0).purchaseDate == start + transaction.purchaseTime / 1_000_000)
        let entries = try #require(documents.receiptEntries(device: transaction.device, in: first))
        #expect(entries.allSatisfy { $0.purchaseDate >= start && $0.purchaseDate < start + 86_400_000 })
    }

    @Test(arguments: ["1969-12-31T00:00:00Z", "2026-13-01T00:00:00Z", "tomorrow"])
    func aStartDateOutsideTheCertificatesOrUnreadableIsRefused(_ startDate: String) throws {
        let scratch = Scratch()
        let file = scratch.path("topology.yaml")
        try """
        name: dated
        scenario: {devices: 1, startDate: "\(startDate)"}
        processes:
          - {name: queue, role: queue, events: "ipc://{run}/e.ipc", requests: "ipc://{run}/r.ipc"}
          - {name: store, role: store}
          - {name: downloader, role: downloader}
          - {name: observer, role: observer, devices: all}
        """.write(to: file, atomically: true, encoding: .utf8)
        let outcome = try SKSimProgram.run(try SKSimProgram.executable(packageRoot: Self.repositoryRoot),
                                           ["simulate", file.path, "--out", scratch.path("run").path])
        #expect(outcome.status == 2, "\(outcome.output)")
        #expect(outcome.error.contains("startDate"), "\(outcome.error)")
    }
}
