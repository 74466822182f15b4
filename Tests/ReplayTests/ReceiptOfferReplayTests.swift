import Foundation
import StoreKitModel
import Testing
@testable import StoreKitReplay

/// Receipt pieces with introductory offers (F-O3) as a user meets them: `sksim simulate` of a
/// catalog with free trials writes them, `sksim replay` reproduces them byte for byte, and
/// `sksim log cat --json` names each entry's offer.
@Suite(.serialized) struct ReceiptOfferReplayTests {
    typealias CLI = ReplayCommandLineTests

    static let catalog = CLI.repositoryRoot.appendingPathComponent("Tests/StoreKitModelTests/Fixtures/purchasetester-v1.1.storekit").path

    @Test("F-O3: a run whose receipts list free trials replays identically (same segment bytes), and log cat --json marks each trial entry")
    func replayAndJSON() throws {
        let scratch = CLI.Scratch()
        let simulate = try CLI.sksim(["simulate", "--catalog", Self.catalog, "--seed", "11", "--devices", "4", "--purchases-per-device", "2",
                                      "--receipt-refresh-probability", "1", "--out", scratch.path("rec")])
        #expect(simulate.status == 0, "\(simulate.error)")
        let replay = try CLI.sksim(["replay", scratch.path("rec"), "--json", "--out", scratch.path("again")])
        #expect(replay.status == 0, "\(replay.error)")
        #expect(replay.json["identical"] as? Bool == true)
        #expect(try CLI.segments(scratch.path("again/log")) == CLI.segments(scratch.path("rec/log")))
        let lines = try CLI.sksim(["log", "cat", scratch.path("rec"), "--type", "receiptDelivered", "--json"]).output
            .split(separator: "\n").map { try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] ?? [:] }
        let entries = lines.flatMap { $0["entries"] as? [[String: Any]] ?? [] }
        let offers = entries.compactMap { $0["introductoryOfferPeriod"] as? String }
        #expect(!offers.isEmpty)
        #expect(Set(offers) == ["freeTrial"])
        // Only trial entries have the key; the lifetime purchase never does.
        #expect(entries.allSatisfy { ($0["introductoryOfferPeriod"] == nil) || (($0["payment"] as? [String: Any])?["productIdentifier"] as? String) != "lifetime" })
        #expect(offers.count < entries.count)
    }

    @Test("F-O3: a live replay compares each receipt entry's offer: a piece whose trial the live store did not mark differs from the recorded one")
    func liveComparisonNamesOffers() {
        func piece(_ offer: IntroductoryOfferPeriod?) -> Event {
            .receiptDelivered(device: "d", request: 1, firstIndex: 0, entries: [
                OriginalTransaction(transactionIdentifier: "d.1", payment: Payment(productIdentifier: "plus.monthly"), transactionDate: 1,
                                    introductoryOfferPeriod: offer),
                OriginalTransaction(transactionIdentifier: "d.2", payment: Payment(productIdentifier: "lifetime"), transactionDate: 2),
            ], isLast: true)
        }
        let identities = TransactionIdentities()
        let trial = LiveComparison.classify(piece(.freeTrial), identities)
        let plain = LiveComparison.classify(piece(nil), identities)
        #expect(trial?.0 == plain?.0)
        #expect(trial?.1 == "entries from 0: [plus.monthly freeTrial,lifetime], last")
        // Without offers the words are as before offers, so earlier comparisons read the same.
        #expect(plain?.1 == "entries from 0: [plus.monthly,lifetime], last")
    }
}
