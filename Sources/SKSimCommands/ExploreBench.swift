import ArgumentParser
import Foundation
import StoreKitExplore
import StoreKitLive
import StoreKitModel
import StoreKitRoles
import StoreKitRuntime

/// `sksim bench explore`: exploration throughput beside the cost of replaying the same event
/// sequences; time and schedules to find and shrink each built-in buggy behaviour; correct
/// behaviours over many schedules; the exhaustive search of the throughput scenario.
struct ExploreBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "explore",
        abstract: "Schedules per second (1 device, 2 observers, 3 transactions) beside replaying the same events; finding and shrinking each buggy behaviour; correct behaviours; exhaustive.",
        discussion: """
            Throughput: --schedules random schedules of 1 device (downloadThenFinish, audit) with 3 purchases, each a whole \
            deterministic run plus the invariant check over its log. Baseline, same run: decoding and folding each \
            schedule's log into a fresh QueueProjection (the cost of just replaying its event sequence). Buggy behaviours: \
            pct (depth 3) and random from seed 1, budget 2,000 schedules and 10 s each; shrink budget 10 s. Correct \
            behaviours: --correct-schedules random schedules each. JSON fields: throughput {schedules, events, seconds, \
            schedulesPerSecond, baselineSchedulesPerSecond, ratioToBaseline}, exhaustive {schedules, seconds, exhausted, \
            distinctStates}, buggy [{behavior, strategy, found, invariant, schedules, seconds, shrinkSeconds, shrinkRuns, \
            stepsBeforeShrinking, stepsAfterShrinking, choices}], correct [{observers, schedules, violations}].
            """)

    @Option(help: "Random schedules for the throughput figure.") var schedules = 20_000
    @Option(help: "Random schedules per correct behaviour.") var correctSchedules = 20_000
    @Option(help: "Budget in seconds of the exhaustive search.") var exhaustiveSeconds = 30.0
    @Option(help: "Buggy behaviours to find, comma-separated (default: every built-in buggy one).") var buggy: String?
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
        guard schedules >= 1, correctSchedules >= 0, exhaustiveSeconds > 0 else {
            throw UserFacingError("--schedules must be at least 1, --correct-schedules at least 0, --exhaustive-seconds above 0")
        }
        let chosen = try buggy.map(parseObservers)
        if let chosen, let unknown = chosen.first(where: { behavior in !Self.buggySetups.contains { $0.0 == behavior } }) {
            throw UserFacingError("--buggy: \(unknown.rawValue) is not one of the buggy behaviours (\(Self.buggySetups.map(\.0.rawValue).joined(separator: ", ")))")
        }
        var output: [(String, JSONValue)] = []

        // Throughput beside replaying the same events.
        let explorer = Explorer(scenario: .exploration(devices: 1, purchasesPerDevice: 3, observers: [.downloadThenFinish, .audit]))
        var runSeconds = 0.0
        var foldSeconds = 0.0
        var events = 0
        // One log for every schedule, emptied before each (as `Explorer.explore` does).
        let storage = MemoryLogStorage()
        for index in 0..<schedules {
            storage.removeAll()
            var scenario = explorer.scenario
            scenario.seed = Explorer.scheduleSeed(1, index)
            let start = ProjectionBenchmark.monotonicSeconds()
            let result = try explorer.run(choices: SeededChoices(seed: scenario.seed), scenario: scenario, storage: storage)
            runSeconds += ProjectionBenchmark.monotonicSeconds() - start
            events += result.steps
            let foldStart = ProjectionBenchmark.monotonicSeconds()
            var projection = QueueProjection()
            try storage.forEachRecord(from: 1) { sequence, timestamp, payload in
                projection.apply(try LogProjection.decode(sequence: sequence, timestamp: timestamp, payload: payload))
            }
            foldSeconds += ProjectionBenchmark.monotonicSeconds() - foldStart
            precondition(projection.totals.events == result.steps, "the fold disagrees with the schedule")
        }
        let perSecond = Double(schedules) / runSeconds
        let baseline = Double(schedules) / foldSeconds
        output.append(("throughput", .object([
            ("schedules", .int(schedules)), ("events", .int(events)), ("seconds", .double((runSeconds * 1000).rounded() / 1000)),
            ("schedulesPerSecond", .double(perSecond.rounded())), ("baselineSchedulesPerSecond", .double(baseline.rounded())),
            ("ratioToBaseline", .double((perSecond / baseline * 1000).rounded() / 1000)),
        ])))
        if !json {
            printLine(String(format: "throughput: %d schedules (%.1f events each) in %.2f s: %.0f schedules/s; baseline (decode and fold the same logs): %.0f schedules/s; ratio %.3f",
                             schedules, Double(events) / Double(schedules), runSeconds, perSecond, baseline, perSecond / baseline))
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
        output.append(("buggy", .array(buggyFigures)))

        // Correct behaviours: no violation.
        var correct: [JSONValue] = []
        for observers in Self.correctSetups where correctSchedules > 0 {
            let report = try Explorer(scenario: .exploration(observers: observers))
                .explore(strategy: .random, budget: ExplorationBudget(schedules: correctSchedules, seconds: .infinity), seed: 1)
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
}
