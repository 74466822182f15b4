import AppStoreServer
import Foundation
import JWTKit
import StoreKitModel
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
        #expect(payload.purchaseDate >= AppStoreLedger.deterministicStartMilliseconds)
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
}
