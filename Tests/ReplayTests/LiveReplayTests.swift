import Foundation
import StoreKitReplay
import StoreKitTestSupport
import Testing

/// `sksim replay --live`: the topology's real processes over ZeroMQ, a real log on disk.
@Suite(.serialized) struct LiveReplayTests {
    typealias CLI = ReplayCommandLineTests

    /// With relaunches: a live replay keeps the recording's order between a device's launches and
    /// quits and the world's replies about it (docs/replay.md).
    static let topology = ReplayTopology(seed: 11, purchasesPerDevice: 4, relaunchProbability: 0.2).text

    @Test("A live recording replays live with 0 divergences; with one observer fewer it diverges at the missing attachment, exit 1; the recording is untouched")
    func liveReplay() throws {
        let scratch = CLI.Scratch()
        try Self.topology.write(toFile: scratch.path("live.yaml"), atomically: true, encoding: .utf8)
        let (same, report, before) = try CLI.recordAndReplayLive(scratch, topology: "live.yaml")
        #expect(same.status == 0, "\(report)")
        #expect(same.json["divergences"] as? Int == 0, "\(report)")
        #expect(same.json["firstDivergence"] is NSNull)
        // The store's later decisions (renewals, expiries, refunds) are replayed live from the recording too, and compared.
        func subscriptionEvents(_ run: String) throws -> [String] {
            try CLI.sksim(["log", "cat", scratch.path(run), "--type", "subscriptionRenewed,subscriptionExpired,entitlementsRevoked", "--json"])
                .output.split(separator: "\n").map { line in
                    let event = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
                    return "\(event?["type"] ?? "") \(event?["device"] ?? "")"
                }
        }
        let recordedSubscriptionEvents = try subscriptionEvents("rec")
        // (Whether a live recording has any depends on its timing: a subscription period may outlast the run.)
        #expect(try subscriptionEvents("same").sorted() == recordedSubscriptionEvents.sorted())
        #expect(same.json["events"] as? Int == same.json["comparedEvents"] as? Int)
        let live = try #require(same.json["live"] as? [String: Any])
        #expect((live["tracks"] as? Int ?? 0) > 20)
        #expect(live["settled"] as? Bool == true)
        #expect(live["processes"] as? Int == 5)
        #expect(FileManager.default.fileExists(atPath: scratch.path("same/log/queue")))
        #expect(FileManager.default.fileExists(atPath: scratch.path("same/observer-1.log")))

        let changed = try CLI.sksim(["replay", scratch.path("rec"), "--live", scratch.path("live.yaml"), "--observers", "deliverThenFinish",
                                     "--out", scratch.path("changed"), "--json"])
        #expect(changed.status == 1, "\(changed.output) \(changed.error)")
        #expect((changed.json["divergences"] as? Int ?? 0) > 0)
        let first = try #require(changed.json["firstDivergence"] as? [String: Any])
        #expect((first["track"] as? String)?.hasSuffix("app-side events") == true, "\(first)")
        // An observer's new name is not a divergence; one observer fewer is: the recorded second attachment.
        #expect((first["recorded"] as? [String: Any])?["observer"] as? String == "audit-2", "\(first)")
        #expect(try CLI.snapshot(scratch.path("rec/log")) == before)
    }

    @Test("Interrupted purchases the user resumed (the store's recorded decisions) are sent by a live replay and compared: 0 divergences")
    func resumedInterruptions() throws {
        let scratch = CLI.Scratch()
        var topology = ReplayTopology(seed: 11, purchasesPerDevice: 8, relaunchProbability: 0)
        topology.interruptedPurchaseProbability = 0.3
        try topology.text.write(toFile: scratch.path("live.yaml"), atomically: true, encoding: .utf8)
        let run = try CLI.sksim(["run", scratch.path("live.yaml"), "--out", scratch.path("rec"), "--duration", "60"])
        #expect(run.status == 0, "\(run.output) \(run.error)")
        let resumed = try CLI.sksim(["log", "cat", scratch.path("rec"), "--type", "interruptedPurchaseResumed"]).output
        #expect(!resumed.isEmpty, "the recording has no resumed interruption; pick another seed")

        let (same, report) = try CLI.liveReplay(scratch.path("rec"), topology: scratch.path("live.yaml"), out: scratch.path("same"))
        #expect(same.status == 0, "\(report)")
        #expect(same.json["divergences"] as? Int == 0, "\(report)")
        let replayedResumed = try CLI.sksim(["log", "cat", scratch.path("same"), "--type", "interruptedPurchaseResumed"]).output
        #expect(replayedResumed.split(separator: "\n").count == resumed.split(separator: "\n").count)
    }

    @Test("Receipt refreshes are answered live as recorded (the same pieces, listing the live run's purchases) and compared: 0 divergences")
    func receiptRefreshes() throws {
        let scratch = CLI.Scratch()
        /// Each device's refreshes, and each refresh's pieces, by what they say (identifiers and dates
        /// are each run's own; when a piece lands among the device's other events is real timing).
        func receipts(_ run: String) throws -> [String: [String]] {
            var byDevice: [String: [String]] = [:]
            let lines = try CLI.sksim(["log", "cat", scratch.path(run), "--type", "receiptRefreshStarted,receiptDelivered", "--json"]).output
            for line in lines.split(separator: "\n") {
                let event = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
                let products = (event["entries"] as? [[String: Any]])?.map { ($0["payment"] as? [String: Any])?["productIdentifier"] as? String ?? "?" }
                let said = "\(event["type"] ?? "") \(event["request"] ?? "") \(event["firstIndex"] ?? "") \(products ?? []) \(event["isLast"] ?? "")"
                let track = event["type"] as? String == "receiptDelivered" ? "\(event["device"] ?? "") refresh \(event["request"] ?? "")" : "\(event["device"] ?? "")"
                byDevice[track, default: []].append(said)
            }
            return byDevice
        }
        // A receipt lists every non-consumable bought before it, for good (R-R2); a consumable leaves it once
        // finished, which is the live run's timing. So the catalog sells only non-consumables: with a refresh
        // at every step, a receipt lists a purchase whatever the timing. Recorded once, replayed live once:
        // a divergence fails the test.
        let catalog = """
        {"format": "sksim-catalog", "version": 1, "products": [
          {"identifier": "com.example.replay.removeads", "kind": "nonConsumable", "displayPrice": "2.99"},
          {"identifier": "com.example.replay.levels", "kind": "nonConsumable", "displayPrice": "1.99"}]}
        """
        try catalog.write(toFile: scratch.path("catalog.json"), atomically: true, encoding: .utf8)
        var topology = ReplayTopology(seed: 11, purchasesPerDevice: 12, relaunchProbability: 0.2)
        topology.receiptRefreshProbability = 1
        topology.catalog = scratch.path("catalog.json")
        try topology.text.write(toFile: scratch.path("live.yaml"), atomically: true, encoding: .utf8)
        let run = try CLI.sksim(["run", scratch.path("live.yaml"), "--out", scratch.path("rec"), "--duration", "60"])
        #expect(run.status == 0, "\(run.output) \(run.error)")
        let recorded = try receipts("rec")
        try #require(recorded.values.joined().contains { $0.hasPrefix("receiptDelivered") && !$0.contains(" [] ") },
                     "no receipt lists a purchase: \(recorded)")
        let (same, replayReport) = try CLI.liveReplay(scratch.path("rec"), topology: scratch.path("live.yaml"), out: scratch.path("same"))
        #expect(same.status == 0, "\(replayReport)")
        #expect(same.json["divergences"] as? Int == 0, "\(replayReport)")
        #expect(same.json["events"] as? Int == same.json["comparedEvents"] as? Int, "\(replayReport)")
        #expect(try receipts("same") == recorded)
        // The receipts list the live run's purchases: each entry is a purchase the live log has.
        let replayedLog = try CLI.sksim(["log", "cat", scratch.path("same"), "--type", "transactionPurchased,subscriptionRenewed,receiptDelivered", "--json"]).output
        // (Their dates are the live purchases' times, which real timing never makes the recorded ones.)
        var purchasedAt: [String: Int] = [:]
        var entries = 0
        for line in replayedLog.split(separator: "\n") {
            let event = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
            if let identifier = event["transactionIdentifier"] as? String { purchasedAt[identifier] = event["timestamp"] as? Int }
            for entry in event["entries"] as? [[String: Any]] ?? [] {
                let identifier = entry["transactionIdentifier"] as? String ?? ""
                entries += 1
                #expect(purchasedAt[identifier] != nil && purchasedAt[identifier] == entry["transactionDate"] as? Int,
                        "a receipt lists \(entry), which is not a purchase of the live run")
            }
        }
        #expect(entries > 0)
    }

    @Test("--live refuses options it does not take, with one clear line and exit 2", arguments: [
        (["--speed", "max"], "--speed max"),
        (["--loop", "2"], "--loop"),
        (["--from", "5"], "--from"),
        (["--speed", "0"], "--speed '0'"),
        (["--partition", "queue-1"], "--partition"),
    ])
    func refusedOptions(arguments: [String], fragment: String) throws {
        let scratch = CLI.Scratch()
        #expect(try CLI.sksim(["simulate", "--devices", "1", "--seed", "25", "--out", scratch.path("rec")]).status == 0)
        let outcome = try CLI.sksim(["replay", scratch.path("rec"), "--live"] + arguments)
        #expect(outcome.status == 2, "\(outcome.output) \(outcome.error)")
        #expect(outcome.error.contains(fragment), "\(outcome.error)")
        #expect(outcome.error.split(separator: "\n").count == 1, "\(outcome.error)")
        #expect(!FileManager.default.fileExists(atPath: scratch.path("rec/queue.log")))
    }

    @Test("The live comparison finds nothing between a log and itself, and names the track where another observer's run differs (one observer fewer: a device's attachments)")
    func comparison() throws {
        let recording = try recordInMemory(seed: 3)
        let itself = try LiveComparison.compare(recording: recording, replayed: recording)
        #expect(itself.result.divergences == 0)
        #expect(itself.tracks > 20)
        let other = try LiveComparison.compare(recording: recording, replayed: try recordInMemory(seed: 3, observers: [.deliverThenFinish]))
        #expect(other.result.divergences > 0)
        let first = try #require(other.result.firstDivergence)
        // The observers' names aside (docs/replay.md, "Live replay"), the first difference is a device's missing second attachment.
        #expect(first.track == "\(first.context?.device ?? "?")'s app-side events", "\(first)")
        #expect(first.kind == .different)
    }
}
