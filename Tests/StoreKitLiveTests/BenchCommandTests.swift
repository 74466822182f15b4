import Foundation
import Testing

/// Each benchmark runs (short durations) and emits every documented JSON field. No figure is
/// asserted: speed is measured by the benchmarks themselves, never by tests.
@Suite(.serialized) struct BenchCommandTests {
    static func object(_ arguments: [String]) throws -> [String: Any] {
        let outcome = try CommandLineTests.sksim(arguments + ["--json", "--no-results"])
        #expect(outcome.status == 0, "\(outcome.error)")
        return try #require(try JSONSerialization.jsonObject(with: Data(outcome.output.utf8)) as? [String: Any])
    }

    @Test("bench bus emits throughput, the baseline, the floor, the lone lifecycle and the half-load latency")
    func bus() throws {
        let object = try Self.object(["bench", "bus", "--transports", "ipc", "--seconds", "0.5", "--latency-seconds", "0.3", "--in-flight", "50"])
        let transport = try #require((object["transports"] as? [[String: Any]])?.first)
        for field in ["lifecyclesPerSecond", "latencyP50Microseconds", "latencyP99Microseconds", "rawMessagesPerSecond", "ratioToBaseline",
                      "unloadedLatencyP50Microseconds", "floorMicroseconds", "ratioToFloor", "halfLoadLatencyP99Microseconds",
                      "fsyncMicroseconds", "roundTripMicroseconds", "halfLoadOfferedPerSecond", "queueCores", "storeCores", "driverCores"] {
            #expect(transport[field] is Double, "\(field) missing")
        }
        for field in ["halfLoadUnfinished", "retriesSent", "queueAnsweredUnavailable", "queueDuplicates", "repliesDropped", "durabilityRounds"] {
            #expect(transport[field] is Int, "\(field) missing")
        }
        #expect((transport["floorMicroseconds"] as? Double ?? 0) > 0)
        // The half load drains: every lifecycle started in its window is counted, however late it ends.
        #expect((transport["halfLoadOfferedPerSecond"] as? Double ?? 0) > 0)
        #expect((transport["halfLoadLifecyclesPerSecond"] as? Double ?? 0) > 0)
        // The queue's CPU is read from the kernel while it works, and its statistics after it stops.
        #expect((transport["queueCores"] as? Double ?? 0) > 0)
        #expect((transport["durabilityRounds"] as? Int ?? 0) > 0)
    }

    @Test("bench simulate emits events/s beside its baseline")
    func simulate() throws {
        let object = try Self.object(["bench", "simulate", "--runs", "1", "--devices", "3"])
        for field in ["eventsPerSecond", "baselineEventsPerSecond", "ratioToBaseline", "peakMemoryMegabytes"] {
            #expect(object[field] is Double, "\(field) missing")
        }
    }

    @Test("a bench run is recorded as one JSON file with the commit and the machine")
    func recorded() throws {
        let scratch = CommandLineTests.Scratch()
        let outcome = try CommandLineTests.sksim(["bench", "simulate", "--runs", "1", "--devices", "2", "--results", scratch.path("results")])
        #expect(outcome.status == 0, "\(outcome.error)")
        let files = try FileManager.default.contentsOfDirectory(atPath: scratch.path("results"))
        #expect(files.count == 1)
        let data = try #require(FileManager.default.contents(atPath: scratch.path("results/" + files[0])))
        let record = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        #expect(record["bench"] as? String == "simulate")
        #expect((record["machine"] as? [String: Any])?["cores"] is Int)
        #expect(record["figures"] is [String: Any])
    }
}
