import ArgumentParser
import Foundation
import SKSimCommands
import StoreKitExplore
import StoreKitLive
import StoreKitModel
import StoreKitRoles
import StoreKitRuntime
import StoreKitSimulation

/// `sksim bench explore`: exploration throughput beside the cost of replaying the same event
/// sequences; time and schedules to find and shrink each built-in buggy behaviour; correct
/// behaviours over many schedules; the exhaustive search of the throughput scenario.
struct ExploreBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "explore",
        abstract: "Schedules per second (1 device, 2 observers, 3 transactions) beside replaying the same events; finding and shrinking each buggy behaviour; correct behaviours; exhaustive.",
        discussion: """
            Throughput: --schedules random schedules of 1 device (downloadThenFinish, audit) with 3 purchases, each a whole \
            deterministic run plus the invariant check over its log (as `sksim explore` runs it: no digest of the log), on --jobs threads (default: every active processor) \
            and again on one. Baseline, same run and same threads: decoding and folding each schedule's log into a fresh \
            QueueProjection (the cost of just replaying its event sequence). Both are wall-clock figures over batches of \
            1,024 schedules: the threads run a batch, then fold its logs. The throughput is measured --repetitions times and \
            each figure (rates and CPU per schedule, runtime and baseline alike) is the best of them: the machine's other \
            work only ever slows a run (as bench replay takes the best of two). Buggy behaviours: \
            pct (depth 3) and random from seed 1, budget 2,000 schedules and 10 s each; shrink budget 10 s. Correct \
            behaviours: --correct-schedules random schedules each, on --jobs threads. JSON fields: throughput {schedules, events, seconds, \
            schedulesPerSecond, baselineSchedulesPerSecond, ratioToBaseline, jobs, \
            schedulesPerSecondOneJob, baselineSchedulesPerSecondOneJob, cpuMicrosecondsPerSchedule, \
            cpuMicrosecondsPerScheduleOneJob (CPU of every thread while running: unlike the wall-clock figures, \
            not lowered by other processes taking the cores), cpuMicrosecondsPerScheduleRuntimeAlone, \
            cpuMicrosecondsPerScheduleRuntimeAloneOneJob (the same schedules and logs through the deterministic runtime \
            alone, run after each batch: no invariant monitor, no recording of choices; the difference is what exploration adds)}, exhaustive {schedules, seconds, exhausted, \
            distinctStates}, buggy [{behavior, strategy, found, invariant, schedules, seconds, shrinkSeconds, shrinkRuns, \
            stepsBeforeShrinking, stepsAfterShrinking, choices}], correct [{observers, schedules, violations}].
            """)

    @Option(parsing: .unconditional, help: "Random schedules for the throughput figure.") var schedules = 20_000
    @Option(parsing: .unconditional, help: "Times the throughput is measured; each figure is the best of them.") var repetitions = 3
    @Option(parsing: .unconditional, help: "Random schedules per correct behaviour.") var correctSchedules = 20_000
    @Option(parsing: .unconditional, help: "Budget in seconds of the exhaustive search.") var exhaustiveSeconds = 30.0
    @Option(help: "Buggy behaviours to find, comma-separated (default: every built-in buggy one).") var buggy: String?
    @Option(parsing: .unconditional, help: "Worker threads for the throughput figure and the correct behaviours (default: this machine's active processors); throughput is also measured on one.")
    var jobs: Int?
    @Flag(help: "Print one JSON object.") var json = false
    @OptionGroup var results: BenchResultsOptions

    /// Each built-in buggy behaviour, with the observers it runs beside.
    static let buggySetups: [(ObserverBehavior, [ObserverBehavior])] = [
        (.sdkFinishesEarly, [.sdkFinishesEarly, .deliverThenFinish]),
        (.finishOnFirstDownload, [.finishOnFirstDownload]),
        (.finishAtFullProgress, [.finishAtFullProgress]),
        (.creditEveryDelivery, [.creditEveryDelivery]),
        (.attachesLate, [.deliverThenFinish, .attachesLate]),
        (.restoreDoneEarly, [.restoreDoneEarly]),
        (.deferredAsFailed, [.deferredAsFailed]),
        (.finishBeforeDownloads, [.finishBeforeDownloads]),
    ]

    static let correctSetups: [[ObserverBehavior]] = [[.downloadThenFinish, .audit], [.deliverThenFinish, .audit], [.restoreThenFinish, .audit]]

    func run() async throws {
        BenchCommand.warnIfDebug()
        guard schedules >= 1, correctSchedules >= 0, exhaustiveSeconds > 0, (1...100).contains(repetitions) else {
            throw UserFacingError("--schedules must be at least 1, --correct-schedules at least 0, --exhaustive-seconds above 0, --repetitions 1 to 100")
        }
        let workerCount = jobs ?? ProcessInfo.processInfo.activeProcessorCount
        guard (1...maximumWorkerThreads).contains(workerCount) else {
            throw UserFacingError("--jobs is \(workerCount); use 1 to \(maximumWorkerThreads) worker threads")
        }
        let chosen = try buggy.map(parseObservers)
        if let chosen, let unknown = chosen.first(where: { behavior in !Self.buggySetups.contains { $0.0 == behavior } }) {
            throw UserFacingError("--buggy: \(unknown.rawValue) is not one of the buggy behaviours (\(Self.buggySetups.map(\.0.rawValue).joined(separator: ", ")))")
        }
        var output: [(String, JSONValue)] = []

        // Throughput beside replaying the same events, on every processor and on one.
        let scenario = Scenario.exploration(devices: 1, purchasesPerDevice: 3, observers: [.downloadThenFinish, .audit])
        let explorer = Explorer(scenario: scenario)
        let all = try Self.bestThroughput(scenario, schedules: schedules, jobs: workerCount, repetitions: repetitions)
        let one = workerCount == 1 ? all : try Self.bestThroughput(scenario, schedules: schedules, jobs: 1, repetitions: repetitions)
        precondition(all.events == one.events, "the same schedules made different logs on \(workerCount) jobs and on one")
        let perSecond = Double(schedules) / all.runSeconds
        let baseline = Double(schedules) / all.foldSeconds
        let perSecondOneJob = Double(schedules) / one.runSeconds
        let baselineOneJob = Double(schedules) / one.foldSeconds
        output.append(("throughput", .object([
            ("schedules", .int(schedules)), ("events", .int(all.events)), ("seconds", .double((all.runSeconds * 1000).rounded() / 1000)),
            ("schedulesPerSecond", .double(perSecond.rounded())), ("baselineSchedulesPerSecond", .double(baseline.rounded())),
            ("ratioToBaseline", .double((perSecond / baseline * 1000).rounded() / 1000)), ("jobs", .int(workerCount)),
            ("schedulesPerSecondOneJob", .double(perSecondOneJob.rounded())),
            ("baselineSchedulesPerSecondOneJob", .double(baselineOneJob.rounded())),
            ("cpuMicrosecondsPerSchedule", .double((all.runCPUSeconds / Double(schedules) * 1e6).rounded())),
            ("cpuMicrosecondsPerScheduleOneJob", .double((one.runCPUSeconds / Double(schedules) * 1e6).rounded())),
            ("cpuMicrosecondsPerScheduleRuntimeAlone", .double((all.runtimeAloneCPUSeconds / Double(schedules) * 1e6).rounded())),
            ("cpuMicrosecondsPerScheduleRuntimeAloneOneJob", .double((one.runtimeAloneCPUSeconds / Double(schedules) * 1e6).rounded())),
        ])))
        if !json {
            printLine(String(format: "throughput: %d schedules (%.1f events each) on %d jobs in %.2f s: %.0f schedules/s; baseline (decode and fold the same logs, %d jobs): %.0f schedules/s; ratio %.3f",
                             schedules, Double(all.events) / Double(schedules), workerCount, all.runSeconds, perSecond, workerCount, baseline, perSecond / baseline))
            printLine(String(format: "throughput on 1 job: %.0f schedules/s; baseline on 1 job: %.0f schedules/s; %d jobs ran %.2fx the schedules of one; CPU per schedule %.0f µs on %d jobs, %.0f µs on 1",
                             perSecondOneJob, baselineOneJob, workerCount, perSecond / perSecondOneJob,
                             all.runCPUSeconds / Double(schedules) * 1e6, workerCount, one.runCPUSeconds / Double(schedules) * 1e6))
            printLine(String(format: "the same schedules through the runtime alone (no invariant monitor, no choice recording): CPU per schedule %.0f µs on %d jobs, %.0f µs on 1; exploration adds %.0f %% and %.0f %%",
                             all.runtimeAloneCPUSeconds / Double(schedules) * 1e6, workerCount, one.runtimeAloneCPUSeconds / Double(schedules) * 1e6,
                             (all.runCPUSeconds / all.runtimeAloneCPUSeconds - 1) * 100, (one.runCPUSeconds / one.runtimeAloneCPUSeconds - 1) * 100))
        }

        // Exhaustive on the same scenario.
        let exhaustive = try explorer.explore(strategy: .exhaustive, budget: ExplorationBudget(schedules: .max, seconds: exhaustiveSeconds), seed: 1)
        output.append(("exhaustive", .object([
            ("schedules", .int(exhaustive.schedules)), ("seconds", .double((exhaustive.seconds * 1000).rounded() / 1000)),
            ("exhausted", .bool(exhaustive.exhausted)), ("distinctStates", .int(exhaustive.distinctStates ?? 0)),
            ("violations", .int(exhaustive.violations.count)),
        ])))
        if !json { printLine("exhaustive: " + exhaustive.summary.replacingOccurrences(of: "\n", with: "; ")) }

        // Each buggy behaviour: found, and shrunk.
        let buggyFigures = try buggyFigures(chosen: chosen)
        output.append(("buggy", .array(buggyFigures)))

        // Correct behaviours: no violation.
        var correct: [JSONValue] = []
        for observers in Self.correctSetups where correctSchedules > 0 {
            let report = try Explorer(scenario: .exploration(observers: observers))
                .explore(strategy: .random, budget: ExplorationBudget(schedules: correctSchedules, seconds: .infinity), seed: 1, jobs: workerCount)
            let names = observers.map(\.rawValue).joined(separator: ",")
            correct.append(.object([("observers", .string(names)), ("schedules", .int(report.schedules)),
                                    ("violations", .int(report.violations.count)),
                                    ("violation", report.violations.first.map { .string("\($0.invariant.rawValue): \($0.message)") } ?? .null)]))
            if !json { printLine("correct \(names): " + report.summary.replacingOccurrences(of: "\n", with: "; ")) }
        }
        output.append(("correct", .array(correct)))
        let object = JSONValue.object(output)
        if json { printLine(object.serialized()) }
        results.record(bench: "explore", figures: object)
    }

    /// Each buggy behaviour asked for (all by default) explored with pct and random: found, and shrunk.
    func buggyFigures(chosen: [ObserverBehavior]?) throws -> [JSONValue] {
        var buggyFigures: [JSONValue] = []
        for (behavior, observers) in Self.buggySetups where chosen?.contains(behavior) ?? true {
            for strategy in [ExplorationStrategy.pct(depth: 3), .random] {
                let report = try Explorer(scenario: .exploration(observers: observers))
                    .explore(strategy: strategy, budget: ExplorationBudget(schedules: 2_000, seconds: 10), seed: 1)
                let found = report.violations.first
                buggyFigures.append(.object([
                    ("behavior", .string(behavior.rawValue)), ("strategy", .string(strategy.description)), ("found", .bool(found != nil)),
                    ("invariant", found.map { .string($0.invariant.rawValue) } ?? .null),
                    ("schedules", .int(report.schedules)), ("seconds", .double((report.seconds * 1000).rounded() / 1000)),
                    ("shrinkSeconds", found.map { .double(($0.shrinkSeconds * 1000).rounded() / 1000) } ?? .null),
                    ("shrinkRuns", found.map { .int($0.shrinkRuns) } ?? .null),
                    ("stepsBeforeShrinking", found.map { .int($0.stepsBeforeShrinking) } ?? .null),
                    ("stepsAfterShrinking", found.map { .int($0.stepsAfterShrinking) } ?? .null),
                    ("choices", found.map { .int($0.choices.count) } ?? .null),
                ]))
                if !json {
                    if let found {
                        printLine(String(format: "%@ (%@): %@ after %d schedules, %.3f s; shrunk in %.3f s (%d runs) from %d to %d steps, %d choices",
                                         behavior.rawValue, strategy.description, found.invariant.rawValue, found.schedulesUntilFound,
                                         found.secondsUntilFound, found.shrinkSeconds, found.shrinkRuns, found.stepsBeforeShrinking,
                                         found.stepsAfterShrinking, found.choices.count))
                    } else {
                        printLine(String(format: "%@ (%@): NOT FOUND in %d schedules, %.3f s", behavior.rawValue, strategy.description, report.schedules, report.seconds))
                    }
                }
            }
        }
        return buggyFigures
    }

    /// `throughput` measured `repetitions` times, each figure the smallest (fastest) of them.
    static func bestThroughput(_ scenario: Scenario, schedules: Int, jobs: Int, repetitions: Int) throws
        -> (runSeconds: Double, foldSeconds: Double, events: Int, runCPUSeconds: Double, runtimeAloneCPUSeconds: Double) {
        var best = try throughput(scenario, schedules: schedules, jobs: jobs)
        for _ in 1..<max(1, repetitions) {
            let next = try throughput(scenario, schedules: schedules, jobs: jobs)
            precondition(next.events == best.events, "the same schedules made different logs in two repetitions")
            best = (min(best.runSeconds, next.runSeconds), min(best.foldSeconds, next.foldSeconds), best.events,
                    min(best.runCPUSeconds, next.runCPUSeconds), min(best.runtimeAloneCPUSeconds, next.runtimeAloneCPUSeconds))
        }
        return best
    }

    /// Wall-clock seconds `jobs` threads take to run `schedules` random schedules of `scenario`
    /// (seeds as `Explorer.explore` gives them from seed 1), and to decode and fold their logs
    /// into a fresh projection each, batch by batch; and the events of all the logs.
    /// `runCPUSeconds`: the process's CPU time (every thread) while running them, which the
    /// machine's load does not change as it changes the wall-clock figures.
    /// `runtimeAloneCPUSeconds`: the CPU of running the same schedules again through the deterministic
    /// runtime alone (same seeds, same logs: no invariant monitor, no recording of choices, the header
    /// made once), so that the difference is what exploration adds.
    static func throughput(_ scenario: Scenario, schedules: Int, jobs: Int) throws -> (runSeconds: Double, foldSeconds: Double, events: Int,
                                                                                       runCPUSeconds: Double, runtimeAloneCPUSeconds: Double) {
        let batch = 1_024
        // One log per schedule of a batch, emptied before each (as `Explorer.explore` does with its one).
        // Unsafe but sound: worker w touches only explorers[w], and each log is handed to one worker at a time.
        nonisolated(unsafe) let logs = (0..<min(batch, schedules)).map { _ in MemoryLogStorage() }
        // Each worker's own copy of the scenario, as `Explorer.explore`'s workers have.
        let scenarios = (0..<jobs).map { $0 == 0 ? scenario : scenario.unsharedCopy() }
        nonisolated(unsafe) let explorers = scenarios.map { Explorer(scenario: $0) }
        let slots = WorkerSlots(jobs)
        defer { slots.release() }
        var runSeconds = 0.0
        var foldSeconds = 0.0
        var runCPUNanoseconds: Int64 = 0
        var runtimeAloneCPUNanoseconds: Int64 = 0
        let header = scenario.header(runtime: "deterministic", startedAtUnixNanoseconds: 0)
        // Each schedule's events under exploration, which the runtime alone must repeat (one writer per offset).
        nonisolated(unsafe) let steps = UnsafeMutableBufferPointer<Int>.allocate(capacity: min(batch, schedules))
        defer { steps.deallocate() }
        for first in stride(from: 0, to: schedules, by: batch) {
            let count = min(batch, schedules - first)
            let runStart = ProjectionBenchmark.monotonicSeconds()
            let runCPUStart = processCPUNanoseconds()
            slots.inParallel(count: count) { worker, offset in
                logs[offset].removeAll()
                var runScenario = scenarios[worker]
                runScenario.seed = Explorer.scheduleSeed(1, first + offset)
                steps[offset] = try explorers[worker].check(choices: SeededChoices(seed: runScenario.seed), scenario: runScenario, storage: logs[offset]).steps
            }
            runSeconds += ProjectionBenchmark.monotonicSeconds() - runStart
            runCPUNanoseconds += processCPUNanoseconds() - runCPUStart
            let aloneCPUStart = processCPUNanoseconds()
            slots.inParallel(count: count) { worker, offset in
                logs[offset].removeAll()
                var runScenario = scenarios[worker]
                runScenario.seed = Explorer.scheduleSeed(1, first + offset)
                let environment = DeterministicEnvironment(storage: logs[offset], content: VirtualContentStorage(),
                                                           choices: SeededChoices(seed: runScenario.seed), logDescription: "memory")
                let runtime = try DeterministicRuntime(scenario: runScenario, environment: environment)
                var scheduleHeader = header
                scheduleHeader.seed = runScenario.seed
                runtime.header = scheduleHeader
                _ = try runtime.run()
                precondition(Int(logs[offset].lastSequence) == steps[offset], "the runtime alone made another log than exploration")
            }
            runtimeAloneCPUNanoseconds += processCPUNanoseconds() - aloneCPUStart
            let foldStart = ProjectionBenchmark.monotonicSeconds()
            slots.inParallel(count: count) { worker, offset in
                var projection = QueueProjection()
                try logs[offset].forEachRecord(from: 1) { sequence, timestamp, payload in
                    projection.apply(try LogProjection.decode(sequence: sequence, timestamp: timestamp, payload: payload))
                }
                precondition(projection.totals.events == Int(logs[offset].lastSequence), "the fold disagrees with the schedule")
                slots.events[worker] += projection.totals.events
            }
            foldSeconds += ProjectionBenchmark.monotonicSeconds() - foldStart
            if let error = slots.firstError() { throw error }
        }
        return (runSeconds, foldSeconds, slots.events.reduce(0, +), Double(runCPUNanoseconds) / 1e9, Double(runtimeAloneCPUNanoseconds) / 1e9)
    }
}

/// Per-worker counters and errors of the throughput bench: each worker touches only its own slot.
private final class WorkerSlots: @unchecked Sendable {
    let events: UnsafeMutableBufferPointer<Int>
    private let errors: UnsafeMutableBufferPointer<(any Error)?>
    /// The next offset to hand out (guarded by `lock`).
    private var next = 0
    private let lock = NSLock()

    init(_ workers: Int) {
        events = .allocate(capacity: workers)
        events.initialize(repeating: 0)
        errors = .allocate(capacity: workers)
        errors.initialize(repeating: nil)
    }

    func release() {
        events.deallocate()
        _ = errors.deinitialize()
        errors.deallocate()
    }

    /// Runs `body(worker, offset)` once for every offset below `count`, on every worker at once,
    /// each taking the next offset when it comes free (a worker the machine holds back does
    /// fewer); returns when all are done.
    func inParallel(count: Int, _ body: @Sendable (_ worker: Int, _ offset: Int) throws -> Void) {
        next = 0
        DispatchQueue.concurrentPerform(iterations: events.count) { worker in
            while let offset = take(below: count) {
                do { try body(worker, offset) } catch { errors[worker] = errors[worker] ?? error }
            }
        }
    }

    private func take(below count: Int) -> Int? {
        lock.lock()
        defer { lock.unlock() }
        guard next < count else { return nil }
        defer { next += 1 }
        return next
    }

    func firstError() -> (any Error)? { errors.lazy.compactMap { $0 }.first }
}
