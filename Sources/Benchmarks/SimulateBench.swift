import ArgumentParser
import Foundation
import SKSimCommands
import StoreKitLive
import StoreKitModel
import StoreKitRoles
import StoreKitRuntime
import StoreKitSimulation

/// `sksim bench simulate`: the deterministic runtime on exploration-sized scenarios (virtual
/// content, in-memory log), beside the pure projection fold of the same events.
struct SimulateBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "simulate",
        abstract: "Deterministic runtime throughput (in-memory log, virtual content) beside the pure projection fold of the same events.",
        discussion: """
            Runs --runs scenarios of --devices devices with --purchases-per-device purchases each (seeds 1, 2, …), \
            then folds each run's log into a fresh projection (decode and apply, nothing else): the baseline. \
            Beside them, the ceiling: the work every event costs in any runtime of these roles (the engine's \
            encoding, fold and invariant check, the app's own fold; no decisions, scheduling, store, downloader or \
            observers), timed over the same events; no runtime of this design can beat its rate, so \
            ceilingRatioToBaseline bounds ratioToBaseline. \
            JSON fields: runs, events, seconds, eventsPerSecond, baselineEventsPerSecond, ratioToBaseline, \
            ceilingEventsPerSecond, ceilingRatioToBaseline, runtimeShareOfCeiling, peakMemoryMegabytes.
            """)

    @Option(parsing: .unconditional, help: "Scenarios run, one seed each.") var runs = 200
    @Option(parsing: .unconditional, help: "Devices per scenario.") var devices = 4
    @Option(parsing: .unconditional, help: "Purchases per device.") var purchasesPerDevice = 10
    @Flag(help: "Print one JSON object.") var json = false
    @OptionGroup var results: BenchResultsOptions

    func run() async throws {
        BenchCommand.warnIfDebug()
        guard runs > 0, devices > 0, purchasesPerDevice >= 0 else {
            throw UserFacingError("--runs and --devices must be at least 1, --purchases-per-device at least 0")
        }
        ProjectionBenchmark.resetPeakMemory()
        var events = 0
        var runtimeSeconds = 0.0
        var foldSeconds = 0.0
        var ceilingSeconds = 0.0
        var recordedEvents: [RecordedEvent] = []
        // The runs differ only in their seed, so the run's first record (the scenario and the
        // catalog as JSON, which costs more than a small run) is made once, as exploration does.
        var header: RunHeader?
        for seed in 1...UInt64(runs) {
            var scenario = Scenario(seed: seed, devices: devices)
            scenario.apps.purchasesPerDevice = purchasesPerDevice
            let environment = DeterministicEnvironment.inMemory(seed: seed)
            let start = ProjectionBenchmark.monotonicSeconds()
            if header == nil { header = scenario.header(runtime: "deterministic", startedAtUnixNanoseconds: 0) }
            header!.seed = seed
            let runtime = try DeterministicRuntime(scenario: scenario, environment: environment)
            runtime.header = header
            let report = try runtime.run()
            runtimeSeconds += ProjectionBenchmark.monotonicSeconds() - start
            events += report.totals.events

            let foldStart = ProjectionBenchmark.monotonicSeconds()
            var projection = QueueProjection()
            try environment.storage.forEachRecord(from: 1) { sequence, timestamp, payload in
                projection.apply(try LogProjection.decode(sequence: sequence, timestamp: timestamp, payload: payload))
            }
            foldSeconds += ProjectionBenchmark.monotonicSeconds() - foldStart
            precondition(projection.totals == report.totals, "the fold of run \(seed) disagrees with the run")

            // The ceiling, over the same events, decoded beforehand (not timed).
            recordedEvents.removeAll(keepingCapacity: true)
            try environment.storage.forEachRecord(from: 1) { sequence, timestamp, payload in
                recordedEvents.append(try LogProjection.decode(sequence: sequence, timestamp: timestamp, payload: payload))
            }
            var work = PerEventWork()
            let ceilingStart = ProjectionBenchmark.monotonicSeconds()
            for recorded in recordedEvents { work.perform(recorded) }
            ceilingSeconds += ProjectionBenchmark.monotonicSeconds() - ceilingStart
            precondition(work.totals == report.totals && work.encodedBytes > 0, "the ceiling's fold of run \(seed) disagrees with the run")
        }
        let eventsPerSecond = Double(events) / runtimeSeconds
        let baseline = Double(events) / foldSeconds
        let ceiling = Double(events) / ceilingSeconds
        let memory = ProjectionBenchmark.peakMemoryMegabytes()
        let object = JSONValue.object([
                ("runs", .int(runs)), ("events", .int(events)), ("seconds", .double((runtimeSeconds * 1000).rounded() / 1000)),
                ("eventsPerSecond", .double(eventsPerSecond.rounded())), ("baselineEventsPerSecond", .double(baseline.rounded())),
                ("ratioToBaseline", .double((eventsPerSecond / baseline * 1000).rounded() / 1000)),
                ("ceilingEventsPerSecond", .double(ceiling.rounded())),
                ("ceilingRatioToBaseline", .double((ceiling / baseline * 1000).rounded() / 1000)),
                ("runtimeShareOfCeiling", .double((eventsPerSecond / ceiling * 1000).rounded() / 1000)),
                ("peakMemoryMegabytes", .double((memory * 10).rounded() / 10)),
            ])
        results.record(bench: "simulate", figures: object)
        if json {
            printLine(object.serialized())
            return
        }
        printLine(String(format: "deterministic runtime: %d runs, %d events in %.3f s: %.0f events/s", runs, events, runtimeSeconds, eventsPerSecond))
        printLine(String(format: "baseline (decode and fold the same events): %.0f events/s; ratio %.3f; peak memory %.1f MB",
                         baseline, eventsPerSecond / baseline, memory))
        printLine(String(format: "ceiling (the engine's encoding, fold and check and the app's fold of the same events, nothing else): %.0f events/s; ratio to baseline %.3f (no runtime of these roles can exceed it); the runtime reaches %.3f of it",
                         ceiling, ceiling / baseline, eventsPerSecond / ceiling))
    }
}
