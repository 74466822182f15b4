import EventLog
import Foundation
import StoreKitModel
import StoreKitRuntime
import Testing
@testable import StoreKitLive

/// Queue partitions: several queues, each the single writer of its own log partition, devices
/// routed by account (docs/load-testing.md, "Partitions").
@Suite struct PartitionTopologyTests {
    static func topology(queues: [String], devices: Int = 8, purchases: Int = 4, thinkMilliseconds: Int = 5) -> String {
        let half = devices / 2
        return """
        name: partitions-test
        seed: 7
        heartbeatMilliseconds: 100
        scenario:
          devices: \(devices)
          devicesPerAccount: 2
          purchasesPerDevice: \(purchases)
          observers: [downloadThenFinish, audit]
          restoreProbability: 0.2
          relaunchProbability: 0.1
          thinkTimeMilliseconds: {minimum: 1, mean: \(thinkMilliseconds)}
          store: {latencyMilliseconds: {minimum: 1, mean: 5}}
          downloader: {minimumBytesPerSecond: 5000000, maximumBytesPerSecond: 20000000, tickMilliseconds: 5}
        processes:
        \(queues.map { "  - \($0)" }.joined(separator: "\n"))
          - {name: store, role: store}
          - {name: downloader, role: downloader}
          - {name: observer-1, role: observer, devices: "1-\(half)"}
          - {name: observer-2, role: observer, devices: "\(half + 1)-\(devices)"}
        """
    }

    static let twoQueues = [
        #"{name: queue-1, role: queue, events: "ipc://{run}/q1-e.ipc", requests: "ipc://{run}/q1-r.ipc"}"#,
        #"{name: queue-2, role: queue, events: "ipc://{run}/q2-e.ipc", requests: "ipc://{run}/q2-r.ipc"}"#,
    ]

    @Test("Several queues: each writes the partition named after it, in the file's order")
    func partitionsNamedAfterQueues() throws {
        let topology = try Topology.parse(Self.topology(queues: Self.twoQueues), file: "t.yaml")
        #expect(topology.queues.map(\.partition) == ["queue-1", "queue-2"])
        let endpoints = topology.partitionEndpoints(runDirectory: URL(fileURLWithPath: "/r"))
        #expect(endpoints.map(\.requestsEndpoint) == ["ipc:///r/q1-r.ipc", "ipc:///r/q2-r.ipc"])
    }

    @Test("A topology's only queue keeps writing partition 'queue', whatever its name")
    func singleQueueUnchanged() throws {
        let queue = #"{name: main, role: queue, events: "ipc://{run}/e.ipc", requests: "ipc://{run}/r.ipc"}"#
        let topology = try Topology.parse(Self.topology(queues: [queue]), file: "t.yaml")
        #expect(topology.queues.map(\.partition) == [LogProjection.partition])
    }

    @Test("An explicit 'partition' names the partition; two queues writing one partition are refused, naming both")
    func duplicatePartitionRefused() throws {
        let queues = [
            #"{name: a, role: queue, partition: shared, events: "ipc://{run}/a-e.ipc", requests: "ipc://{run}/a-r.ipc"}"#,
            #"{name: b, role: queue, partition: shared, events: "ipc://{run}/b-e.ipc", requests: "ipc://{run}/b-r.ipc"}"#,
        ]
        let error = #expect(throws: TopologyError.self) { try Topology.parse(Self.topology(queues: queues), file: "t.yaml") }
        #expect(error?.code == .conflict && error?.keyPath == "processes[1].partition", "\(String(describing: error))")
    }

    @Test("Endpoints that overlap (one port on one address, or on every interface) are refused", arguments: [
        ("tcp://127.0.0.1:5601", "tcp://127.0.0.1:5601"),
        ("tcp://*:5601", "tcp://127.0.0.1:5601"),
    ])
    func overlappingEndpointsRefused(first: String, second: String) throws {
        let queues = [
            "{name: a, role: queue, events: \"\(first)\", requests: \"tcp://127.0.0.1:5700\"}",
            "{name: b, role: queue, events: \"\(second)\", requests: \"tcp://127.0.0.1:5701\"}",
        ]
        let error = #expect(throws: TopologyError.self) { try Topology.parse(Self.topology(queues: queues), file: "t.yaml") }
        #expect(error?.code == .conflict && error?.keyPath == "processes[1].events", "\(String(describing: error))")
    }

    @Test("Only queues have a partition")
    func partitionOnlyForQueues() throws {
        let text = Self.topology(queues: Self.twoQueues).replacingOccurrences(of: "{name: store, role: store}", with: "{name: store, role: store, partition: x}")
        let error = #expect(throws: TopologyError.self) { try Topology.parse(text, file: "t.yaml") }
        #expect(error?.code == .wrongRole && error?.keyPath == "processes[2]", "\(String(describing: error))")
    }

    @Test("Routing by account is a fixed function (FNV-1a mod N): these values may never change between versions")
    func routingIsStable() {
        // Hosts running different builds must agree, so the values are pinned.
        let accounts = (1...8).map { "account-000\($0)" }
        #expect(accounts.map { PartitionRouting.partitionIndex(account: $0, partitionCount: 2) } == [0, 1, 0, 1, 0, 1, 0, 1])
        #expect(accounts.allSatisfy { PartitionRouting.partitionIndex(account: $0, partitionCount: 1) == 0 })
        var counts = [0, 0, 0]
        for number in 0..<3_000 { counts[PartitionRouting.partitionIndex(account: "driver-1-account-\(number)", partitionCount: 3)] += 1 }
        #expect(counts.allSatisfy { (900...1_100).contains($0) }, "uneven spread: \(counts)")
    }
}

/// End-to-end with real processes: two queue processes, each writing its own partition.
@Suite(.serialized) struct PartitionRunTests {
    /// Every account's events, by partition; checks each account is in exactly the partition routing names.
    static func accountsByPartition(_ log: URL) throws -> [String: Set<String>] {
        var accountOfDevice: [String: String] = [:]
        var partitionsOfAccount: [String: Set<String>] = [:]
        for partition in try LogDirectory.partitions(in: log) {
            try PartitionReader(directory: log, partition: partition).forEachRecord { view in
                let event = try EventCodec.decodeEvent(view.payload).event
                if case .deviceRegistered(let device, let account) = event { accountOfDevice[device] = account }
                guard let device = event.device, let account = accountOfDevice[device] else { return }
                partitionsOfAccount[account, default: []].insert(partition)
            }
        }
        return partitionsOfAccount
    }

    @Test("A 2-partition sksim run ends with nothing pending; both partitions hold events; each account's events are all in its routed partition")
    func twoPartitionRun() throws {
        let run = try LiveRunTests.BackgroundRun(topologyText: PartitionTopologyTests.topology(queues: PartitionTopologyTests.twoQueues))
        let result = try #require(try run.wait(seconds: 90), "the run did not end within 90 s")
        #expect(result.failure == nil, "\(result.failure ?? "")")
        #expect(result.finished)
        #expect(result.report.awaiting == 0, "declined Ask to Buy requests are the only pending ones")
        #expect(result.report.violations.isEmpty, "\(result.report.violations)")
        #expect(result.report.totals.purchased + result.report.totals.failed + result.report.totals.declined == 8 * 4)
        let log = run.runDirectory.appendingPathComponent("log")
        #expect(try LogDirectory.partitions(in: log) == ["queue-1", "queue-2"])
        #expect(try LogMaintenance.verify(directory: log).isIntact)
        let built = try PartitionedLogProjection.build(directory: log)
        #expect(built.partitions.allSatisfy { $0.projection.recordCount > 10 }, "a partition is (nearly) empty")
        let accounts = try Self.accountsByPartition(log)
        #expect(accounts.count == 4)
        let names = ["queue-1", "queue-2"]
        for (account, partitions) in accounts {
            #expect(partitions == [names[PartitionRouting.partitionIndex(account: account, partitionCount: 2)]], "\(account) is in \(partitions)")
        }
        // The merged reader yields every event once, in time order.
        var count: UInt64 = 0
        var last = Int64.min
        try PartitionedLogProjection.forEachEventMergedByTime(directory: log, partitions: names, chunk: 16) { _, recorded in
            #expect(recorded.timestamp >= last)
            last = recorded.timestamp
            count += 1
        }
        #expect(count == built.recordCount)
    }

    @Test("kill -9 of one partition's queue mid-run: restarted from its log, the run finishes with nothing lost")
    func partitionQueueKilled() throws {
        let text = PartitionTopologyTests.topology(queues: PartitionTopologyTests.twoQueues, devices: 8, purchases: 20, thinkMilliseconds: 30)
        let run = try LiveRunTests.BackgroundRun(topologyText: text)
        let victim = try run.waitForPid(of: "queue-2")
        #expect(run.waitForEvents(150, partition: "queue-1") && run.waitForEvents(150, partition: "queue-2"), "the run did not get under way")
        #expect(kill(try #require(victim), SIGKILL) == 0)
        let result = try #require(try run.wait(seconds: 120), "the run did not end within 120 s")
        #expect(result.failure == nil, "\(result.failure ?? "")")
        // Only the killed queue restarted: every other process rode it out (a sender stuck on a
        // command the queue never acknowledges would exit and be restarted too).
        #expect(result.restarts == ["queue-2": 1])
        #expect(result.report.awaiting == 0, "declined Ask to Buy requests are the only pending ones")
        #expect(result.report.violations.isEmpty, "\(result.report.violations)")
        #expect(result.report.totals.purchased + result.report.totals.failed + result.report.totals.declined == 8 * 20)
        #expect(try LogMaintenance.verify(directory: run.runDirectory.appendingPathComponent("log")).isIntact)
    }
}
