import ArgumentParser
import EventLog
import Foundation
import SKSimCommands
import StoreKitLoad
import StoreKitModel
import StoreKitReplay
import StoreKitRoles
import StoreKitRuntime
import StoreKitSimulation

/// `sksim bench replay`: replay speed beside reading and decoding the same log, memory, and
/// the lateness of timed replays over their length.
struct ReplayBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "replay",
        abstract: "Replay events/s beside reading and decoding the same log; peak memory; timed-replay lateness at 1x and 10x.",
        discussion: """
            Records a deterministic run of about --events events on disk (a temporary directory), then measures, best of \
            two each: the baseline (PartitionReader over the log, every payload decoded, nothing else) and `replay --speed \
            max` of it (reading each unit's input, the queue engine, the comparison; an unchanged replay runs no app; \
            the replayed log is counted, not kept). Peak RSS is that of `sksim replay` of the same recording in a process of its own. Timed: replays the first --timed-seconds of a --timed-devices recording (or \
            --timed-recording DIR, e.g. a live run) at 1x and 10x, each at normal priority (the baseline) and with a \
            real-time priority where allowed (as `sksim replay` runs), and reports lateness p50/p99/max and p99 over the \
            first and the last tenth. JSON fields: events, baselineEventsPerSecond, eventsPerSecond, ratioToBaseline, ceilingEventsPerSecond \
            (the baseline plus the work every replayed event costs: encoded again and compared, the engine's fold and \
            check, the app's fold), ceilingRatioToBaseline (bounds ratioToBaseline), runtimeShareOfCeiling, \
            runtimeShareOfCeilingCPUTime (the same share by the thread's CPU time, for a busy machine), \
            peakMemoryMegabytes, divergences, timed[] {speed, commands, p50Microseconds, p99Microseconds, maxMicroseconds, \
            firstTenthP99Microseconds, lastTenthP99Microseconds, scheduling (realTime or normal), machineBusyFraction, \
            stealFraction (a virtual machine's cores taken by its hypervisor), divergences}.
            """)

    @Option(parsing: .unconditional, help: "Events in the recording replayed at full speed.") var events = 1_000_000
    @Option(parsing: .unconditional, help: "Devices of the recording replayed at 1x and 10x (its length grows with them).") var timedDevices = 6
    @Option(parsing: .unconditional, help: "Simulated seconds of that recording (its run stops there): a replay at 1x lasts as long, twice.") var timedSeconds = 20.0
    @Option(help: "Replay this recording (a run directory) at 1x and 10x instead.") var timedRecording: String?
    @Option(help: "Directory for the recordings (default: the system's temporary directory).") var directory: String?
    @Option(parsing: .unconditional, help: "Seeds of the soak: each recorded with every built-in observer behaviour (default network) and once with a faulty network, then replayed unchanged.") var soakSeeds = 100
    @Flag(help: "Print one JSON object.") var json = false
    @OptionGroup var results: BenchResultsOptions

    func run() async throws {
        BenchCommand.warnIfDebug()
        guard events >= 1_000, timedDevices >= 1 else { throw UserFacingError("--events must be at least 1000 and --timed-devices at least 1") }
        guard timedSeconds >= 1, timedSeconds <= 3_600 else { throw UserFacingError("--timed-seconds must be between 1 and 3600 (each timed replay at 1x lasts that long)") }
        let base = directory.map { URL(fileURLWithPath: $0, isDirectory: true) } ?? FileManager.default.temporaryDirectory
        let scratch = base.appendingPathComponent("sksim-replay-bench-\(getpid())", isDirectory: true)
        try? FileManager.default.removeItem(at: scratch)
        defer { try? FileManager.default.removeItem(at: scratch) }

        // About 8.6 events per purchase in the default scenario (measured: 1,400 devices × 90 purchases, 1,087,571 events).
        let devices = max(1, min(2_000, events / 1_000))
        let recorded = try Self.record(seed: 1, devices: devices, purchases: max(1, events * 10 / devices / 86), in: scratch.appendingPathComponent("full"))
        let recording = try Recording.open(path: recorded.path)

        let (baselineSeconds, decoded) = try Self.readingBaseline(recorded)
        let (ceilingSeconds, ceilingCPUSeconds) = try Self.ceilingSeconds(recorded, events: decoded)
        ProjectionBenchmark.resetPeakMemory()
        var best: ReplayResult?
        var replayCPUSeconds = Double.infinity
        for _ in 0..<2 {
            let cpuStart = Self.threadCPUSeconds()
            let result = try ReplaySession(recording: recording).run()
            replayCPUSeconds = min(replayCPUSeconds, Self.threadCPUSeconds() - cpuStart)
            if best == nil || result.seconds < best!.seconds { best = result }
        }
        let cpuShare = ceilingCPUSeconds / replayCPUSeconds
        // The bench's own process also recorded the run: the replay's memory is measured in a process of its own.
        let memory = try Self.peakMemoryOfReplayProcess(recorded)
        let replayed = best!
        let baseline = Double(decoded) / baselineSeconds
        let ceiling = Double(decoded) / ceilingSeconds

        let timedDirectory = try timedRecording.map { path in URL(fileURLWithPath: path) }
            ?? Self.record(seed: 2, devices: timedDevices, purchases: 5, seconds: timedSeconds, in: scratch.appendingPathComponent("timed"))
        let timedSource = try Recording.open(path: timedDirectory.path)
        let (timed, conditions) = try Self.timedReplays(timedSource)

        let soak = try Self.soak(seeds: soakSeeds)

        let object = JSONValue.object([
                ("soak", .object([("recordings", .int(soak.recordings)), ("diverged", .int(soak.diverged)),
                                  ("faultyRecordings", .int(soak.faultyRecordings)), ("faultyDiverged", .int(soak.faultyDiverged))])),
                ("events", .int(replayed.events)), ("baselineEventsPerSecond", .double(baseline.rounded())),
                ("eventsPerSecond", .double(replayed.eventsPerSecond.rounded())),
                ("ratioToBaseline", .double((replayed.eventsPerSecond / baseline * 1000).rounded() / 1000)),
                ("ceilingEventsPerSecond", .double(ceiling.rounded())),
                ("ceilingRatioToBaseline", .double((ceiling / baseline * 1000).rounded() / 1000)),
                ("runtimeShareOfCeiling", .double((replayed.eventsPerSecond / ceiling * 1000).rounded() / 1000)),
                ("runtimeShareOfCeilingCPUTime", .double((cpuShare * 1000).rounded() / 1000)),
                ("peakMemoryMegabytes", .double((memory * 10).rounded() / 10)),
                ("divergences", .int(replayed.divergences)),
                ("timed", .array(zip(timed, conditions).map { run, condition in
                    Self.timedJSON(speed: run.0, result: run.1, condition: condition, recording: timedSource.location)
                })),
            ])
        results.record(bench: "replay", figures: object)
        if json {
            printLine(object.serialized())
            return
        }
        printLine("soak: \(soak.recordings) unchanged recordings (\(soakSeeds) seeds × \(ObserverBehavior.allCases.count) observer behaviours) replayed, \(soak.diverged) diverged; "
                  + "with duplicates, losses and crashes: \(soak.faultyDiverged) of \(soak.faultyRecordings) diverged")
        printLine(String(format: "replay --speed max: %d events in %.3f s: %.0f events/s, %d divergences; peak memory %.1f MB (the replay in a process of its own)",
                         replayed.events, replayed.seconds, replayed.eventsPerSecond, replayed.divergences, memory))
        printLine(String(format: "baseline (read and decode the same log): %d events in %.3f s: %.0f events/s; ratio %.3f",
                         decoded, baselineSeconds, baseline, replayed.eventsPerSecond / baseline))
        printLine(String(format: "ceiling (the baseline, then each event encoded again and compared, the engine's fold and check, the app's fold; nothing else): %.0f events/s; ratio to baseline %.3f (no replay of these roles can exceed it); the replay reaches %.3f of it",
                         ceiling, ceiling / baseline, replayed.eventsPerSecond / ceiling))
        printLine(String(format: "by this thread's CPU time (what a busy machine's waits for a core leave out): ceiling %.3f s, replay %.3f s; the replay reaches %.3f of the ceiling",
                         ceilingCPUSeconds, replayCPUSeconds, cpuShare))
        for ((speed, result), condition) in zip(timed, conditions) {
            guard let lateness = result.lateness else { continue }
            printLine(String(format: "replay --speed %g of %@: %d commands over %.3f s, lateness p50 %.1f µs p99 %.1f µs max %.1f µs; p99 first tenth %.1f µs, last tenth %.1f µs; %d divergences (%@ priority; cores %.0f %% busy, %.1f %% stolen)",
                             speed, timedSource.location, lateness.samples, result.seconds, Double(lateness.p50Nanoseconds) / 1e3,
                             Double(lateness.p99Nanoseconds) / 1e3, Double(lateness.maximumNanoseconds) / 1e3,
                             Double(lateness.firstTenthP99Nanoseconds) / 1e3, Double(lateness.lastTenthP99Nanoseconds) / 1e3, result.divergences,
                             lateness.scheduling == SystemReplayClock.Scheduling.realTime.rawValue ? "real-time" : "normal",
                             condition.busy * 100, condition.steal * 100))
        }
    }

    /// The baseline, best of two: the recording read with `PartitionReader` and every payload decoded.
    static func readingBaseline(_ recorded: URL) throws -> (seconds: Double, events: Int) {
        var baselineSeconds = Double.infinity
        var decoded = 0
        for _ in 0..<2 {
            let start = ProjectionBenchmark.monotonicSeconds()
            decoded = 0
            let reader = try PartitionReader(directory: recorded, partition: LogProjection.partition)
            try reader.forEachRecord { view in
                _ = try EventCodec.decodeEvent(view.payload)
                decoded += 1
            }
            baselineSeconds = min(baselineSeconds, ProjectionBenchmark.monotonicSeconds() - start)
        }
        return (baselineSeconds, decoded)
    }

    /// The ceiling, best of two: the baseline's reading and decoding, plus the work every replayed event
    /// costs whatever the replay does around it (encoding it again and comparing the bytes, the engine's
    /// fold and check, the app's fold).
    static func ceilingSeconds(_ recorded: URL, events decoded: Int) throws -> (wall: Double, cpu: Double) {
        var ceilingSeconds = Double.infinity
        var cpuSeconds = Double.infinity
        for _ in 0..<2 {
            let start = ProjectionBenchmark.monotonicSeconds()
            let cpuStart = threadCPUSeconds()
            var work = PerEventWork()
            var identical = 0
            let reader = try PartitionReader(directory: recorded, partition: LogProjection.partition)
            try reader.forEachRecord { view in
                let recorded = try LogProjection.decode(sequence: view.sequence, timestamp: view.timestampNanoseconds, payload: view.payload)
                if work.perform(recorded, comparingWith: view.payload) { identical += 1 }
            }
            ceilingSeconds = min(ceilingSeconds, ProjectionBenchmark.monotonicSeconds() - start)
            cpuSeconds = min(cpuSeconds, threadCPUSeconds() - cpuStart)
            precondition(work.events == decoded, "the ceiling read \(work.events) events, the baseline \(decoded)")
            precondition(identical == decoded, "\(decoded - identical) events did not encode again to their logged bytes")
        }
        return (ceilingSeconds, cpuSeconds)
    }

    /// This thread's CPU time. The ceiling and the replay each run on one thread: on a machine shared
    /// with other work, their CPU time is the time they ran, which the wall clock mixes with the time
    /// they waited for a core.
    static func threadCPUSeconds() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    /// Each speed twice: at normal priority (the baseline) and as `sksim replay` runs, with a
    /// real-time priority where the system allows it (SystemReplayClock). With each, the machine's load
    /// and a virtual machine's steal time (cores taken by the hypervisor, which no priority inside can
    /// win back) during it, to read the tail by.
    static func timedReplays(_ timedSource: Recording) throws -> (timed: [(Double, ReplayResult)], conditions: [(busy: Double, steal: Double)]) {
        var timed: [(Double, ReplayResult)] = []
        var conditions: [(busy: Double, steal: Double)] = []
        for speed in [1.0, 10.0] {
            for realTime in [false, true] {
                var options = ReplayOptions()
                options.speed = speed
                let clock = SystemReplayClock(realTime: realTime)
                let before = LoadBenchmark.CPUTimes.read()
                var result = try ReplaySession(recording: timedSource, options: options, clock: clock).run()
                let after = LoadBenchmark.CPUTimes.read()
                conditions.append((LoadBenchmark.CPUTimes.busyFraction(from: before, to: after), LoadBenchmark.CPUTimes.stealFraction(from: before, to: after)))
                result.lateness?.scheduling = clock.scheduling.rawValue
                timed.append((speed, result))
            }
        }
        return (timed, conditions)
    }

    static func timedJSON(speed: Double, result: ReplayResult, condition: (busy: Double, steal: Double), recording: String) -> JSONValue {
        let lateness = result.lateness
        return .object([
            ("speed", .double(speed)), ("recording", .string(recording)), ("commands", .int(lateness?.samples ?? 0)),
            ("p50Microseconds", JSONValue.microseconds(lateness?.p50Nanoseconds ?? 0)),
            ("p99Microseconds", JSONValue.microseconds(lateness?.p99Nanoseconds ?? 0)),
            ("maxMicroseconds", JSONValue.microseconds(lateness?.maximumNanoseconds ?? 0)),
            ("firstTenthP99Microseconds", JSONValue.microseconds(lateness?.firstTenthP99Nanoseconds ?? 0)),
            ("lastTenthP99Microseconds", JSONValue.microseconds(lateness?.lastTenthP99Nanoseconds ?? 0)),
            ("scheduling", .optional(lateness?.scheduling)),
            ("machineBusyFraction", .double((condition.busy * 1000).rounded() / 1000)),
            ("stealFraction", .double((condition.steal * 1000).rounded() / 1000)),
            ("divergences", .int(result.divergences)),
        ])
    }

    struct Soak {
        var recordings = 0
        var diverged = 0
        var faultyRecordings = 0
        var faultyDiverged = 0
    }

    /// Unchanged in-memory recordings replayed: every seed with every built-in behaviour, and
    /// every seed once more over a network that duplicates, loses and crashes.
    static func soak(seeds: Int) throws -> Soak {
        var soak = Soak()
        guard seeds > 0 else { return soak }
        for seed in 1...UInt64(seeds) {
            for behavior in ObserverBehavior.allCases {
                var scenario = Scenario(seed: seed, devices: 4)
                scenario.apps.purchasesPerDevice = 6
                scenario.apps.observers = behavior == .audit ? [.audit] : [behavior, .audit]
                soak.recordings += 1
                if try !replaysIdentically(scenario) { soak.diverged += 1 }
            }
            var faulty = Scenario(seed: seed, devices: 3)
            faulty.apps.purchasesPerDevice = 8
            faulty.apps.relaunchProbability = 0.2
            faulty.network.duplicateProbability = 0.1
            faulty.network.lossProbability = 0.05
            faulty.network.crashProbability = 0.002
            soak.faultyRecordings += 1
            if try !replaysIdentically(faulty) { soak.faultyDiverged += 1 }
        }
        return soak
    }

    /// Peak RSS of `sksim replay DIR --json` run as a child process (its `peakMemoryMegabytes`).
    static func peakMemoryOfReplayProcess(_ log: URL) throws -> Double {
        let process = Process()
        process.executableURL = currentExecutable()
        process.arguments = ["replay", log.path, "--json"]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0,
              let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
              let megabytes = object["peakMemoryMegabytes"] as? Double else {
            throw UserFacingError("the replay of \(log.path) in a process of its own exited \(process.terminationStatus) without its figures", code: .failed)
        }
        return megabytes
    }

    static func replaysIdentically(_ scenario: Scenario) throws -> Bool {
        let environment = DeterministicEnvironment.inMemory(seed: scenario.seed)
        _ = try DeterministicRuntime(scenario: scenario, environment: environment).run()
        let result = try ReplaySession(recording: try Recording.storage(environment.storage)).run()
        return result.identical && result.divergences == 0
    }

    /// A deterministic run written to `directory`/log; returns the log directory.
    /// A deterministic run on disk; `seconds` bounds its simulated time (the default scenario's
    /// subscriptions renew for about 25 simulated minutes, which a replay at 1x would take).
    static func record(seed: UInt64, devices: Int, purchases: Int, seconds: Double? = nil, in directory: URL) throws -> URL {
        var scenario = Scenario(seed: seed, devices: devices)
        scenario.apps.purchasesPerDevice = purchases
        if let seconds { scenario.maximumSimulatedSeconds = seconds }
        let log = directory.appendingPathComponent("log", isDirectory: true)
        try FileManager.default.createDirectory(at: log, withIntermediateDirectories: true)
        let environment = DeterministicEnvironment(
            storage: try DiskLogStorage(directory: log, partition: LogProjection.partition, durability: .operatingSystem),
            content: VirtualContentStorage(), choices: SeededChoices(seed: seed), logDescription: log.path)
        _ = try DeterministicRuntime(scenario: scenario, environment: environment).run()
        return log
    }
}
