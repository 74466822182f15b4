import Foundation
import StoreKitTestSupport
import Testing

/// `sksim replay` of a recording from a topology with two queues (two log partitions, devices
/// routed by account): real processes record it, the replay re-drives each partition's engine.
@Suite(.serialized) struct PartitionReplayTests {
    typealias CLI = ReplayCommandLineTests

    static let topology = {
        var topology = ReplayTopology(seed: 23, purchasesPerDevice: 3, relaunchProbability: 0.1)
        topology.name = "replay-partitions"
        topology.devices = 8
        topology.devicesPerAccount = 2
        topology.restoreProbability = 0.2
        // Receipt refreshes, answered live by the store from each partition's recording.
        topology.receiptRefreshProbability = 0.3
        topology.thinkTimeMeanMilliseconds = 5
        topology.queues = 2
        return topology
    }()

    @Test("A two-partition recording replays byte for byte per partition (exit 0, --out writes both partitions); a changed observer names the partition of its first divergence (exit 1); slices and timed replays ask for --partition")
    func twoPartitions() throws {
        let scratch = CLI.Scratch()
        try Self.topology.text.write(toFile: scratch.path("parts.yaml"), atomically: true, encoding: .utf8)
        let run = try CLI.sksim(["run", scratch.path("parts.yaml"), "--out", scratch.path("rec"), "--duration", "60"])
        #expect(run.status == 0, "\(run.output) \(run.error)")
        let before = try CLI.snapshot(scratch.path("rec/log"))

        let same = try CLI.sksim(["replay", scratch.path("rec"), "--out", scratch.path("same"), "--json"])
        #expect(same.status == 0, "\(same.output) \(same.error)")
        #expect(same.json["identical"] as? Bool == true, "\(same.output)")
        #expect(same.json["divergences"] as? Int == 0)
        let partitions = try #require(same.json["partitions"] as? [[String: Any]])
        #expect(partitions.map { $0["partition"] as? String } == ["queue-1", "queue-2"])
        #expect(partitions.allSatisfy { ($0["events"] as? Int ?? 0) > 1 && $0["identical"] as? Bool == true })
        #expect(partitions.reduce(0) { $0 + ($1["events"] as? Int ?? 0) } == same.json["events"] as? Int)
        for name in ["queue-1", "queue-2"] {
            #expect(try CLI.snapshot(scratch.path("same/log/\(name)")) == CLI.snapshot(scratch.path("rec/log/\(name)")), "\(name)")
        }

        let changed = try CLI.sksim(["replay", scratch.path("rec"), "--observers", "deliverThenFinish", "--json"])
        #expect(changed.status == 1, "\(changed.output) \(changed.error)")
        let first = try #require(changed.json["firstDivergence"] as? [String: Any])
        let named = try #require(first["partition"] as? String, "\(first)")
        let changedPartitions = try #require(changed.json["partitions"] as? [[String: Any]])
        let itsPartition = try #require(changedPartitions.first { $0["partition"] as? String == named }, "\(named)")
        #expect((itsPartition["divergences"] as? Int ?? 0) > 0)
        #expect(!(first["recorded"] is NSNull) || !(first["replayed"] is NSNull), "\(first)")
        #expect(changedPartitions.reduce(0) { $0 + ($1["divergences"] as? Int ?? 0) } == changed.json["divergences"] as? Int)

        let one = try CLI.sksim(["replay", scratch.path("rec"), "--partition", "queue-2", "--from", "2", "--json"])
        #expect(one.status == 0, "\(one.output) \(one.error)")
        #expect(one.json["events"] as? Int == partitions[1]["events"] as? Int)

        for arguments in [["--from", "5"], ["--speed", "10"]] {
            let refused = try CLI.sksim(["replay", scratch.path("rec")] + arguments)
            #expect(refused.status == 2)
            #expect(refused.error.contains("--partition NAME"), "\(refused.error)")
        }
        let unknown = try CLI.sksim(["replay", scratch.path("rec"), "--partition", "queue-9"])
        #expect(unknown.status == 2)
        #expect(unknown.error.contains("it has queue-1, queue-2"), "\(unknown.error)")
        #expect(try CLI.snapshot(scratch.path("rec/log")) == before)
    }

    @Test("A two-queue live recording replays live over its topology's two queues with 0 divergences, compared per partition and reported as one; over a one-queue topology it is refused (exit 2)")
    func liveReplayOfTwoPartitions() throws {
        let scratch = CLI.Scratch()
        let topology = Self.topology
        try topology.text.write(toFile: scratch.path("parts.yaml"), atomically: true, encoding: .utf8)
        // One recording, replayed live once (`recordAndReplayLive`): a divergence fails the test.
        let (same, report, before) = try CLI.recordAndReplayLive(scratch, topology: "parts.yaml")
        #expect(same.status == 0, "\(report)")
        #expect(same.json["divergences"] as? Int == 0, "\(report)")
        let live = try #require(same.json["live"] as? [String: Any])
        #expect(live["processes"] as? Int == 6)
        #expect(live["settled"] as? Bool == true)
        let partitions = try #require(same.json["partitions"] as? [[String: Any]], "\(same.output)")
        #expect(partitions.map { $0["partition"] as? String } == ["queue-1", "queue-2"])
        #expect(partitions.allSatisfy { ($0["events"] as? Int ?? 0) > 10 && $0["divergences"] as? Int == 0 })
        #expect(partitions.reduce(0) { $0 + ($1["events"] as? Int ?? 0) } == same.json["events"] as? Int)
        for name in ["queue-1", "queue-2"] { #expect(FileManager.default.fileExists(atPath: scratch.path("same/log/\(name)")), "\(name)") }
        func receipts(_ run: String) throws -> Int {
            try CLI.sksim(["log", "cat", scratch.path(run), "--type", "receiptDelivered"]).output.split(separator: "\n").count
        }
        #expect(try receipts("rec") > 0, "the recording has no receipt")
        #expect(try receipts("same") == receipts("rec"))

        var oneQueue = topology
        oneQueue.queues = 1
        try oneQueue.text.write(toFile: scratch.path("one.yaml"), atomically: true, encoding: .utf8)
        let refused = try CLI.sksim(["replay", scratch.path("rec"), "--live", scratch.path("one.yaml")])
        #expect(refused.status == 2, "\(refused.output) \(refused.error)")
        #expect(refused.error.contains("queue-1, queue-2"), "\(refused.error)")
        #expect(try CLI.snapshot(scratch.path("rec/log")) == before)
    }
}
