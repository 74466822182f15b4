import ArgumentParser
import Foundation
import StoreKitExplore
import StoreKitLive
import StoreKitModel
import StoreKitRoles

/// `sksim explore`: observer-ordering exploration over the deterministic runtime.
struct ExploreCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "explore",
        abstract: "Explore schedules (observer order, kills, relaunches, duplicate deliveries, store outcomes, …) for broken app invariants; shrink, draw and write down what breaks.",
        discussion: """
            Each schedule is one deterministic run (in-memory log, virtual content) driven by recorded choices. The \
            invariants (docs/invariants.md) are checked over each schedule's log. On a violation: the seed and the choice \
            sequence, shrunk to a 1-minimal schedule, drawn as a sequence diagram (trace.mmd, trace.html) and written to \
            reproduce.json under --report DIR (default out/explore-<seed>). random and pct schedules, and the shrink, run \
            on --jobs threads; the result (violation, seeds, choices, steps, schedules, report files) is the same for \
            every --jobs and machine (only --seconds can end the search where the machine's speed puts it). Exit status: 0 no violation, 1 a violation \
            (also when --reproduce reproduced it), 3 --reproduce did not give the recorded log.
            """)

    @Argument(help: "A topology file whose scenario to explore (its choice points are turned on if it has none).")
    var topology: String?
    @Option(parsing: .unconditional, help: "Devices (default: 1).") var devices: Int?
    @Option(parsing: .unconditional, help: "Purchases each device's user makes (default: 3).") var purchasesPerDevice: Int?
    @Option(help: "Observers per device, comma-separated: \(ObserverBehavior.allCases.map(\.rawValue).joined(separator: ", ")) (default: downloadThenFinish,audit); or the name of one app the executable registers (SKSim.main(apps:)).")
    var observers: String?
    @Option(help: "random, pct or exhaustive (default: pct).") var strategy = "pct"
    @Option(parsing: .unconditional, help: "Unusual (non-zero) choices per schedule: where pct makes them (default: 3), or the most exhaustive allows (default: 2).")
    var depth: Int?
    @Option(parsing: .unconditional, help: "Most schedules to run (default: 2000).") var schedules = 2_000
    @Option(parsing: .unconditional, help: "Most seconds to explore (default: 10).") var seconds = 10.0
    @Option(parsing: .unconditional, help: "Seed of the exploration (default: a new one, printed).") var seed: UInt64?
    @Option(parsing: .unconditional, help: "Worker threads running random and pct schedules (default: this machine's active processors); the result is the same for every value. exhaustive runs on one.")
    var jobs: Int?
    @Option(parsing: .unconditional, help: "Most simulation steps (events, summed over its runs) the shrink may spend, counted as one job would (default: \(Explorer.defaultShrinkStepLimit)).")
    var shrinkSteps = Explorer.defaultShrinkStepLimit
    @Option(help: "Directory for trace.mmd, trace.html and reproduce.json of a violation (default: out/explore-<seed>).")
    var report: String?
    @Option(help: "Replay a reproduce.json exactly and check it gives the same log and violation.") var reproduce: String?
    @Flag(help: "Print one JSON object.") var json = false

    func run() async throws {
        if let reproduce { return try replay(reproduce) }
        let scenario = try makeScenario()
        let chosenStrategy = try parseStrategy()
        guard schedules >= 1, seconds > 0 else { throw UserFacingError("--schedules must be at least 1 and --seconds greater than 0") }
        let workerCount = jobs ?? ProcessInfo.processInfo.activeProcessorCount
        guard (1...Self.maximumJobs).contains(workerCount) else {
            throw UserFacingError("--jobs is \(workerCount); use 1 to \(Self.maximumJobs) worker threads (default: this machine's \(ProcessInfo.processInfo.activeProcessorCount) active processors)")
        }
        guard shrinkSteps >= 1 else { throw UserFacingError("--shrink-steps is \(shrinkSteps); use at least 1 (default: \(Explorer.defaultShrinkStepLimit))") }
        let explorationSeed = chooseSeed(seed)
        // A registered app's own code, as the user's `swift test` explores it (`Explorer(scenario:appLaunch:)`).
        var explorer = try scenario.apps.app.map { Explorer(scenario: scenario, appLaunch: try RegisteredApps.launch(for: $0), appPurchase: RegisteredApps.app(named: $0)?.purchase) } ?? Explorer(scenario: scenario)
        explorer.shrinkStepLimit = shrinkSteps
        if isatty(STDERR_FILENO) == 1 {
            explorer.progress = { count, elapsed in
                writeStandardError(String(format: "\rexplore: %d schedules, %.0f/s ", count, Double(count) / max(elapsed, 1e-9)))
            }
        }
        let result = try explorer.explore(strategy: chosenStrategy, budget: ExplorationBudget(schedules: schedules, seconds: seconds), seed: explorationSeed,
                                          jobs: workerCount)
        if isatty(STDERR_FILENO) == 1 { writeStandardError("\r") }
        var files: [(trace: String, mermaid: String, reproduce: String)] = []
        if !result.violations.isEmpty {
            let directory = outputDirectory(report, prefix: "explore", seed: explorationSeed)
            for found in result.violations { files.append(try write(found, under: directory)) }
        }
        if json {
            printLine(Self.json(result, seed: explorationSeed, files: files).serialized())
        } else {
            printLine("explore: seed \(explorationSeed), \(result.jobs) job\(result.jobs == 1 ? "" : "s"), \(scenario.summary)")
            printLine(result.summary)
            for file in files { printLine("trace \(file.trace)\nmermaid \(file.mermaid)\nreproduce with: sksim explore --reproduce \(file.reproduce)") }
        }
        if !result.violations.isEmpty { throw ExitCode(1) }
    }

    static let maximumJobs = maximumWorkerThreads

    static func json(_ result: ExplorationReport, seed: UInt64, files: [(trace: String, mermaid: String, reproduce: String)]) -> JSONValue {
        .object([
            ("seed", .unsigned(seed)), ("strategy", .string(result.strategy.description)),
            ("schedules", .int(result.schedules)), ("seconds", .double((result.seconds * 1000).rounded() / 1000)),
            ("schedulesPerSecond", .double(result.schedulesPerSecond.rounded())), ("exhausted", .bool(result.exhausted)),
            ("distinctStates", result.distinctStates.map { .int($0) } ?? .null), ("jobs", .int(result.jobs)),
            ("violations", .array(zip(result.violations, files).map { found, file in
                .object([
                    ("invariant", .string(found.invariant.rawValue)), ("rules", .string(found.invariant.rules)),
                    ("message", .string(found.message)), ("seed", .unsigned(found.seed)),
                    ("choices", .array(found.choices.map { .unsigned($0) })),
                    ("trace", .string(file.trace)), ("mermaid", .string(file.mermaid)), ("reproduce", .string(file.reproduce)),
                    ("steps", .object([("beforeShrinking", .int(found.stepsBeforeShrinking)), ("afterShrinking", .int(found.stepsAfterShrinking))])),
                    ("choicesBeforeShrinking", .int(found.choicesBeforeShrinking)),
                    ("devices", .int(found.devices)), ("purchasesPerDevice", .int(found.purchasesPerDevice)),
                    ("schedulesUntilFound", .int(found.schedulesUntilFound)),
                    ("secondsUntilFound", .double((found.secondsUntilFound * 1000).rounded() / 1000)),
                    ("shrinkRuns", .int(found.shrinkRuns)), ("shrinkSteps", .int(found.shrinkSteps)), ("oneMinimal", .bool(found.oneMinimal)), ("shrinkSeconds", .double((found.shrinkSeconds * 1000).rounded() / 1000)),
                ])
            })),
        ])
    }

    /// trace.html, trace.mmd and reproduce.json of one violation, under DIR/<invariant>/.
    private func write(_ found: FoundViolation, under directory: URL) throws -> (trace: String, mermaid: String, reproduce: String) {
        let folder = directory.appendingPathComponent(found.invariant.rawValue, isDirectory: true)
        do {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            let trace = folder.appendingPathComponent("trace.html")
            let mermaid = folder.appendingPathComponent("trace.mmd")
            let reproduce = folder.appendingPathComponent("reproduce.json")
            try Data(found.html.utf8).write(to: trace)
            try Data(found.mermaid.utf8).write(to: mermaid)
            try found.reproduce.encoded().write(to: reproduce)
            return (trace.relativePath, mermaid.relativePath, reproduce.relativePath)
        } catch {
            throw UserFacingError("cannot write the report under \(folder.path): \(describeError(error, withPath: false)); choose a writable --report directory", code: .unwritable)
        }
    }

    private func parseStrategy() throws -> ExplorationStrategy {
        switch strategy {
        case "random": return .random
        case "exhaustive":
            let depth = depth ?? 2
            guard (0...10).contains(depth) else { throw UserFacingError("--depth is \(depth); exhaustive allows 0 to 10 unusual choices per schedule") }
            return .exhaustive(depth: depth)
        case "pct":
            let depth = depth ?? 3
            guard (1...100).contains(depth) else { throw UserFacingError("--depth is \(depth); use 1 to 100") }
            return .pct(depth: depth)
        default: throw UserFacingError("unknown strategy '\(strategy)'; use random, pct or exhaustive", code: .unknownName)
        }
    }

    private func makeScenario() throws -> Scenario {
        var scenario = Scenario.exploration()
        if let topology {
            let loaded = try Topology.load(path: topology).scenario
            let points = scenario.apps.choicePoints
            scenario = loaded
            if scenario.apps.choicePoints == nil { scenario.apps.choicePoints = points }
        }
        if let devices {
            guard (1...1_000).contains(devices) else { throw UserFacingError("--devices is \(devices); explore 1 to 1000 devices") }
            scenario.devices = devices
        }
        if let purchasesPerDevice {
            guard (0...1_000).contains(purchasesPerDevice) else { throw UserFacingError("--purchases-per-device is \(purchasesPerDevice); use 0 to 1000") }
            scenario.apps.purchasesPerDevice = purchasesPerDevice
        }
        if let observers { try parseObserversOrApp(observers).apply(to: &scenario) }
        do {
            try scenario.validate()
        } catch {
            throw UserFacingError("invalid exploration scenario: \(error)", code: .invalidInput)
        }
        return scenario
    }

    private func replay(_ path: String) throws {
        let file: ReproduceFile
        do {
            file = try ReproduceFile.load(URL(fileURLWithPath: path))
        } catch {
            throw UserFacingError("\(error)", code: .invalidInput)
        }
        guard !file.customObservers else {
            throw UserFacingError("\(path) was found with your own observers; replay it from your test with Explorer(scenario:appLaunch:).reproduce(file)", code: .invalidInput)
        }
        let run = try Explorer(scenario: try file.makeScenario()).reproduce(file)
        let digest = ReproduceFile.hex(run.logDigest)
        let reproduced = digest == file.logDigest && run.violations.contains { $0.invariant == file.invariant }
        if json {
            printLine(JSONValue.object([
                ("reproduced", .bool(reproduced)), ("invariant", .string(file.invariant.rawValue)),
                ("violations", .array(run.violations.map { .string($0.description) })), ("steps", .int(run.steps)),
                ("logDigest", .string(digest)), ("expectedLogDigest", .string(file.logDigest)),
            ]).serialized())
        } else if reproduced {
            printLine("reproduced: \(run.steps) steps, log digest \(digest)")
            for violation in run.violations { printLine("violation \(violation)") }
        } else {
            printLine("did not reproduce: log digest \(digest) (\(run.steps) steps), expected \(file.logDigest) (\(file.steps) steps); was the file written by another sksim (\(file.sksimVersion))?")
        }
        throw ExitCode(reproduced ? 1 : 3)
    }
}

/// The JSON of an exploration as `sksim explore --json` prints it, for tests.
public enum ExploreCommandJSON {
    public static func render(_ report: ExplorationReport, seed: UInt64 = 1) -> String {
        ExploreCommand.json(report, seed: seed, files: report.violations.map { _ in ("t.html", "t.mmd", "reproduce.json") }).serialized()
    }
}
