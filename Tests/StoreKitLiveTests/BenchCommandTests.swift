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
                      "fsyncMicroseconds", "fsyncP99Microseconds", "roundTripMicroseconds", "halfLoadOfferedPerSecond", "queueCores", "storeCores", "driverCores", "queueMicrosecondsPerLifecycle",
                      "ceilingRatioToBaseline", "skeletonLifecyclesPerSecond", "skeletonRatioToBaseline", "skeletonHalfLoadLatencyP50Microseconds",
                      "skeletonHalfLoadLatencyP99Microseconds", "machineBusyPercent", "stealPercent", "halfLoadMachineBusyPercent", "halfLoadStealPercent",
                      "contextSwitchesPerLifecycle", "halfLoadContextSwitchesPerLifecycle"] {
            #expect(transport[field] is Double, "\(field) missing")
        }
        for field in ["halfLoadUnfinished", "retriesSent", "queueAnsweredUnavailable", "queueDuplicates", "repliesDropped", "durabilityRounds"] {
            #expect(transport[field] is Int, "\(field) missing")
        }
        #expect((transport["floorMicroseconds"] as? Double ?? 0) > 0)
        // The queue cannot use more than every core: the ratio with every core to itself is at least the ratio measured.
        #expect((transport["queueMicrosecondsPerLifecycle"] as? Double ?? 0) > 0)
        #expect((transport["ceilingRatioToBaseline"] as? Double ?? 0) >= (transport["ratioToBaseline"] as? Double ?? 1))
        // The half load drains: every lifecycle started in its window is counted, however late it ends.
        #expect((transport["halfLoadOfferedPerSecond"] as? Double ?? 0) > 0)
        #expect((transport["halfLoadLifecyclesPerSecond"] as? Double ?? 0) > 0)
        // The queue's CPU is read from the kernel while it works, and its statistics after it stops.
        #expect((transport["queueCores"] as? Double ?? 0) > 0)
        #expect((transport["durabilityRounds"] as? Int ?? 0) > 0)
        // The skeleton's lifecycles go through its queue, its file and its store: it finishes some, closed and open,
        // and each of them takes at least one fdatasync.
        #expect((transport["skeletonLifecyclesPerSecond"] as? Double ?? 0) > 0)
        #expect((transport["skeletonHalfLoadLatencyP50Microseconds"] as? Double ?? 0) > 0)
        #expect((transport["skeletonHalfLoadLatencyP99Microseconds"] as? Double ?? 0) >= (transport["skeletonHalfLoadLatencyP50Microseconds"] as? Double ?? 1))
        #expect((0...100).contains(transport["machineBusyPercent"] as? Double ?? -1))
        #expect((0...100).contains(transport["halfLoadStealPercent"] as? Double ?? -1))
        // A lifecycle crosses three processes: their threads wake and sleep, read from the kernel's count.
        #expect((transport["contextSwitchesPerLifecycle"] as? Double ?? 0) > 0)
        #expect((transport["halfLoadContextSwitchesPerLifecycle"] as? Double ?? 0) > 0)
    }

    @Test("bench load emits the baseline and, per partition count, starts, lifecycles, the driver's CPU and each queue's figures")
    func load() throws {
        let object = try Self.object(["bench", "load", "--durations", "1s", "--rate", "200", "--devices", "20", "--baseline-seconds", "0.5",
                                      "--partitions", "1,2"])
        let baseline = try #require(object["baseline"] as? [String: Any])
        for field in ["lifecyclesPerSecond", "latencyP50Microseconds", "latencyP99Microseconds"] { #expect(baseline[field] is Double, "\(field) missing") }
        let runs = try #require(object["runs"] as? [[String: Any]])
        #expect(runs.compactMap { $0["partitions"] as? Int } == [1, 2])
        for run in runs {
            for field in ["durationSeconds", "ratePerSecond", "startsPerSecond", "lifecyclesPerSecond", "sustainedLifecyclesPerSecond",
                          "driverCpuMicrosecondsPerLifecycle", "coordinatorCpuSeconds", "driverPeakMemoryMegabytes",
                          "coordinatorPeakMemoryMegabytes", "ratioToBaseline", "machineBusyPercent"] {
                #expect(run[field] is Double, "\(field) missing")
            }
            for field in ["started", "missedStarts", "lifecycles", "removedP50Microseconds", "removedP99Microseconds", "cores"] {
                #expect(run[field] is Int, "\(field) missing")
            }
            // No --queue-cores: no limit, and JSON says so with null rather than leaving the field out.
            #expect(run["queueCoresLimit"] is NSNull)
            #expect((run["started"] as? Int ?? 0) > 0 && (run["lifecycles"] as? Int ?? 0) > 0)
            let queues = try #require(run["queues"] as? [[String: Any]])
            #expect(queues.count == run["partitions"] as? Int)
            #expect(queues.allSatisfy { $0["partition"] is String && $0["cpuSeconds"] is Double && ($0["records"] as? Int ?? 0) > 0 })
        }
        let refused = try CommandLineTests.sksim(["bench", "load", "--queue-cores", "0", "--no-results"])
        #expect(refused.status != 0 && refused.error.contains("--queue-cores 0.0 is out of range"), "\(refused.error)")
    }

    @Test("bench load --drivers 1,2 runs the same load with one and with two drivers and emits driverScaling, their CPU per lifecycle")
    func loadDriverScaling() throws {
        let object = try Self.object(["bench", "load", "--durations", "1s", "--rate", "200", "--devices", "20", "--baseline-seconds", "0.5",
                                      "--drivers", "1,2"])
        let runs = try #require(object["runs"] as? [[String: Any]])
        #expect(runs.compactMap { $0["drivers"] as? Int } == [1, 2])
        #expect(runs.allSatisfy { ($0["started"] as? Int ?? 0) == 200 })
        let scaling = try #require(object["driverScaling"] as? [[String: Any]])
        #expect(scaling.compactMap { $0["drivers"] as? Int } == [1, 2])
        #expect(scaling.allSatisfy { ($0["driverMicrosecondsPerLifecycle"] as? Double ?? 0) > 0 })
        let refused = try CommandLineTests.sksim(["bench", "load", "--drivers", "0", "--no-results"])
        #expect(refused.status != 0 && refused.error.contains("--drivers '0'"), "\(refused.error)")
    }

    @Test("bench simulate emits events/s beside its baseline and its ceiling")
    func simulate() throws {
        let object = try Self.object(["bench", "simulate", "--runs", "1", "--devices", "3"])
        for field in ["eventsPerSecond", "baselineEventsPerSecond", "ratioToBaseline", "ceilingEventsPerSecond", "ceilingRatioToBaseline",
                      "runtimeShareOfCeiling", "peakMemoryMegabytes"] {
            #expect(object[field] is Double, "\(field) missing")
        }
        #expect((object["events"] as? Int ?? 0) > 0)
    }

    @Test("bench replay emits events/s beside its baseline and its ceiling, memory, and the lateness of timed replays")
    func replay() throws {
        let object = try Self.object(["bench", "replay", "--events", "1000", "--soak-seeds", "1", "--timed-devices", "1", "--timed-seconds", "1"])
        for field in ["eventsPerSecond", "baselineEventsPerSecond", "ratioToBaseline", "ceilingEventsPerSecond", "ceilingRatioToBaseline",
                      "runtimeShareOfCeiling", "peakMemoryMegabytes"] {
            #expect(object[field] is Double, "\(field) missing")
        }
        #expect((object["events"] as? Int ?? 0) > 0)
        #expect(object["divergences"] as? Int == 0)
        let soak = object["soak"] as? [String: Any]
        #expect((soak?["recordings"] as? Int ?? 0) > 0 && soak?["diverged"] as? Int == 0 && soak?["faultyDiverged"] as? Int == 0, "\(String(describing: soak))")
        let timed = object["timed"] as? [[String: Any]] ?? []
        #expect(timed.map { $0["speed"] as? Double } == [1, 1, 10, 10])
        for run in timed {
            for field in ["p50Microseconds", "p99Microseconds", "maxMicroseconds", "firstTenthP99Microseconds", "lastTenthP99Microseconds"] {
                #expect(run[field] is Double, "timed \(field) missing")
            }
            #expect(run["divergences"] as? Int == 0)
        }
    }

    @Test("bench explore emits throughput beside its baseline, the exhaustive search, each buggy behaviour asked for and the correct ones")
    func explore() throws {
        let object = try Self.object(["bench", "explore", "--schedules", "10", "--correct-schedules", "3", "--exhaustive-seconds", "0.5",
                                      "--buggy", "sdkFinishesEarly"])
        let throughput = try #require(object["throughput"] as? [String: Any])
        for field in ["seconds", "schedulesPerSecond", "baselineSchedulesPerSecond", "ratioToBaseline", "schedulesPerSecondOneJob",
                      "baselineSchedulesPerSecondOneJob", "cpuMicrosecondsPerSchedule", "cpuMicrosecondsPerScheduleOneJob",
                      "cpuMicrosecondsPerScheduleRuntimeAlone", "cpuMicrosecondsPerScheduleRuntimeAloneOneJob"] {
            #expect(throughput[field] is Double, "\(field) missing")
        }
        #expect(throughput["schedules"] as? Int == 10)
        #expect(throughput["jobs"] as? Int == ProcessInfo.processInfo.activeProcessorCount)
        let exhaustive = try #require(object["exhaustive"] as? [String: Any])
        #expect(exhaustive["exhausted"] is Bool && exhaustive["distinctStates"] is Int)
        let buggy = try #require(object["buggy"] as? [[String: Any]])
        #expect(buggy.count == 2 && buggy.allSatisfy { $0["behavior"] as? String == "sdkFinishesEarly" }, "pct and random, of the behaviour asked for")
        #expect(buggy.allSatisfy { $0["found"] as? Bool == true && $0["invariant"] is String && $0["stepsAfterShrinking"] is Int })
        #expect((object["correct"] as? [[String: Any]])?.count == 3)
        let refused = try CommandLineTests.sksim(["bench", "explore", "--buggy", "downloadThenFinish", "--no-results"])
        #expect(refused.status != 0 && refused.error.contains("--buggy: downloadThenFinish is not one of the buggy behaviours"), "\(refused.error)")
        let noRepetition = try CommandLineTests.sksim(["bench", "explore", "--repetitions", "0", "--no-results"])
        #expect(noRepetition.status != 0 && noRepetition.error.contains("--repetitions 1 to 100"), "\(noRepetition.error)")
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
