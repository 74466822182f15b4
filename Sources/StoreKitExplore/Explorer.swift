import Foundation
import StoreKitModel
import StoreKitRoles
import StoreKitRuntime
import StoreKitSimulation

extension Scenario {
    /// A scenario for exploration: every choice point on, with probabilities high enough that
    /// a few thousand schedules visit each (app kills, duplicate deliveries, late
    /// `removedTransactions`, attach order, relaunches, restores, deferrals, failures, progress
    /// 1.0 before a download finishes). With `outages`, also stalls and partitions of any process
    /// (the queue or a role), so the bus's retries and catch-up run under them.
    public static func exploration(devices: Int = 1, purchasesPerDevice: Int = 3,
                                   observers: [ObserverBehavior] = [.downloadThenFinish, .audit], seed: UInt64 = 1,
                                   outages: Bool = false) -> Scenario {
        var scenario = Scenario(seed: seed, devices: devices)
        scenario.apps.purchasesPerDevice = purchasesPerDevice
        scenario.apps.observers = observers
        scenario.apps.restoreProbability = 0.2
        scenario.apps.relaunchProbability = 0.1
        scenario.apps.thinkTime = .exponential(minimumMilliseconds: 50, meanMilliseconds: 400)
        var points = ChoicePoints()
        points.killProbability = 0.05
        points.duplicateDeliveryProbability = 0.1
        points.removalDelayProbability = 0.2
        points.shuffleAttachOrder = true
        scenario.apps.choicePoints = points
        scenario.store.failureProbability = 0.1
        scenario.store.deferralProbability = 0.2
        scenario.store.cancellationProbability = 0.05
        scenario.store.approvalProbability = 0.6
        scenario.store.restoreFailureProbability = 0.05
        scenario.store.approvalLatency = .uniform(minimumMilliseconds: 200, maximumMilliseconds: 2_000)
        scenario.downloader.failureProbabilityPerTick = 0.01
        scenario.downloader.tickMilliseconds = 50
        scenario.downloader.reportsFullProgressBeforeFinishing = true
        if outages {
            scenario.network.stallProbability = 0.01
            scenario.network.partitionProbability = 0.01
            scenario.network.outageLatency = .uniform(minimumMilliseconds: 100, maximumMilliseconds: 1_500)
        }
        return scenario
    }
}

/// One schedule as it ran: the choices it used, what broke, and its size.
public struct ScheduleRun: Sendable {
    public var choices: [UInt64]
    public var violations: [AppViolation]
    /// Events in its log: the schedule's steps.
    public var steps: Int
    /// FNV-1a 64 over every record's timestamp and payload: equal digests, equal logs.
    public var logDigest: UInt64
    /// The log's events, kept only when asked for (traces).
    public var events: [RecordedEvent]
}

/// What to spend on an exploration.
public struct ExplorationBudget: Sendable, Hashable {
    public var schedules: Int
    public var seconds: Double

    public init(schedules: Int = 2_000, seconds: Double = 10) {
        self.schedules = schedules
        self.seconds = seconds
    }
}

/// A violation found, shrunk and drawn.
public struct FoundViolation: Sendable {
    public var invariant: AppInvariant
    public var message: String
    /// The seed of the schedule that found it.
    public var seed: UInt64
    /// The shrunk choice sequence: it reproduces the violation (see `ReproduceFile`).
    public var choices: [UInt64]
    public var choicesBeforeShrinking: Int
    public var stepsBeforeShrinking: Int
    public var stepsAfterShrinking: Int
    /// Devices and purchases per device of the shrunk scenario.
    public var devices: Int
    public var purchasesPerDevice: Int
    /// Schedules explored up to and including the one that found it, and the time taken.
    public var schedulesUntilFound: Int
    public var secondsUntilFound: Double
    /// The shrink's runs and the steps (events) they appended, as one job counts them (`Explorer.shrinkStepLimit`).
    public var shrinkRuns: Int
    public var shrinkSteps: Int
    public var shrinkSeconds: Double
    /// False when the shrink budget ran out first (the schedule is smaller, not minimal).
    public var oneMinimal: Bool
    public var mermaid: String
    public var html: String
    public var reproduce: ReproduceFile
}

/// What an exploration did.
public struct ExplorationReport: Sendable {
    public var strategy: ExplorationStrategy
    public var schedules: Int
    public var seconds: Double
    public var schedulesPerSecond: Double { seconds > 0 ? Double(schedules) / seconds : 0 }
    /// True when `exhaustive` ran out of schedules to try before the budget did.
    public var exhausted: Bool
    /// Distinct states the exhaustive search branched from (nil for the other strategies).
    public var distinctStates: Int?
    public var violations: [FoundViolation]
    /// Worker threads that ran the schedules (1 for `exhaustive`, which runs on one).
    public var jobs = 1

    /// One paragraph for people (and for a failing test's message).
    public var summary: String {
        var lines = [String(format: "%d schedules (%@) in %.2f s%@: %.0f schedules/s%@", schedules, strategy.description, seconds,
                            jobs > 1 ? " on \(jobs) jobs" : "", schedulesPerSecond, exhausted ? ", space exhausted" : "")]
        if let distinctStates { lines[0] += ", \(distinctStates) distinct states" }
        for found in violations {
            lines.append("violation \(found.invariant.rawValue) (\(found.invariant.rules)): \(found.message)")
            lines.append("  seed \(found.seed), found after \(found.schedulesUntilFound) schedules; shrunk from \(found.choicesBeforeShrinking) choices / \(found.stepsBeforeShrinking) steps to \(found.choices.count) choices / \(found.stepsAfterShrinking) steps\(found.oneMinimal ? " (1-minimal)" : " (shrink budget spent: \(found.shrinkRuns) runs, \(found.shrinkSteps) steps)")")
            lines.append("  choices \(found.choices)")
        }
        if violations.isEmpty { lines.append("no violation") }
        return lines.joined(separator: "\n")
    }
}

/// Runs schedules of a scenario under a strategy, checks the app invariants over each log,
/// and shrinks, draws and writes down what it finds. Users call it from their own `swift test`
/// with their app (`appLaunch:`), exactly as `sksim explore` does with the built-in behaviours.
public struct Explorer {
    public var scenario: Scenario
    /// Called after each schedule with the count so far (progress on a terminal).
    public var progress: ((_ schedules: Int, _ seconds: Double) -> Void)?
    /// Run headers of this explorer's scenario per size (seeds differ only in the header's seed).
    private let headers = HeaderCache()
    /// The in-memory log the schedules of a search and of a shrink are written to, one after
    /// another (emptied before each, its capacity kept).
    private let reusedLog = MemoryLogStorage()

    /// Most events one schedule may append; nil: 10,000 plus 1,000 per purchase of the scenario
    /// (a schedule takes about 25 per purchase). Observers that make a command from every callback
    /// (an `add(_:)` or a restore in a loop) never let a run settle: such a schedule is refused with
    /// `ExplorationError.scheduleDidNotEnd` instead of running for a day of simulated time.
    public var maximumSteps: Int?

    /// `maximumSteps` for a run of `scenario`.
    func stepLimit(_ scenario: Scenario) -> Int {
        maximumSteps ?? 10_000 + 1_000 * scenario.devices * max(1, scenario.apps.purchasesPerDevice)
    }

    /// Most runs, and most steps (events appended, summed over every run), one shrink may spend,
    /// counted as one job would spend them, so where the budget ends the shrink is the same on every
    /// machine and for every `jobs` (the result is then smaller, not minimal). The step default
    /// is about 10 s of shrinking on a 2-core Linux machine.
    public var shrinkRunLimit = 20_000
    public var shrinkStepLimit = Explorer.defaultShrinkStepLimit
    public static let defaultShrinkStepLimit = 200_000
    /// An opt-in wall-clock limit on one shrink, in seconds (nil, the default: none). When it ends
    /// a shrink, the result depends on the machine's speed and on `jobs`.
    public var shrinkSecondsLimit: Double?

    /// Called at every launch of every device with its queue: the app's own code, which attaches
    /// its observers itself (StoreKitSim's `SimulatedApp.launch`). Nil uses the scenario's built-in behaviours.
    /// With `explore(jobs:)` above 1 it is called from several threads at once.
    public var appLaunch: (@Sendable (_ queue: PaymentQueue) -> Void)?
    /// The user's purchases, handed to the app's own code (StoreKitSim's `SimulatedApp.purchase`), which
    /// adds the payment itself; nil: the simulated user adds them.
    public var appPurchase: (@Sendable (_ queue: PaymentQueue, _ payment: Payment) -> Bool)?

    /// Explores the scenario's built-in observer behaviours.
    public init(scenario: Scenario) {
        self.scenario = scenario
    }

    /// Explores the app's own code (`SimulatedApp.launch` of StoreKitSim) on every device.
    public init(scenario: Scenario, appLaunch: @escaping @Sendable (_ queue: PaymentQueue) -> Void,
                appPurchase: (@Sendable (_ queue: PaymentQueue, _ payment: Payment) -> Bool)? = nil) {
        self.scenario = scenario
        self.appLaunch = appLaunch
        self.appPurchase = appPurchase
    }

    // MARK: One schedule

    /// Runs one schedule driven by `choices` and checks every invariant over its log.
    public func run(choices source: ChoiceSource, scenario runScenario: Scenario? = nil, trace: AppTrace? = nil,
                    keepEvents: Bool = false, storage: LogStorage = MemoryLogStorage()) throws -> ScheduleRun {
        let outcome = try execute(choices: source, scenario: runScenario, trace: trace, keepEvents: keepEvents, storage: storage)
        var digest: UInt64 = 0xCBF2_9CE4_8422_2325
        try storage.forEachRecord(from: 1) { _, timestamp, payload in
            digest = (digest ^ UInt64(bitPattern: timestamp)) &* 0x0000_0100_0000_01B3
            for byte in payload { digest = (digest ^ UInt64(byte)) &* 0x0000_0100_0000_01B3 }
        }
        return ScheduleRun(choices: outcome.choices, violations: outcome.violations, steps: outcome.steps, logDigest: digest,
                           events: outcome.events)
    }

    /// One schedule as the search runs it (`run` without the log's digest): the invariants'
    /// violations, the events of its log and the choices it made. What `sksim bench explore` times.
    public func check(choices source: some ChoiceSource, scenario runScenario: Scenario? = nil,
                      storage: LogStorage) throws -> (violations: [AppViolation], steps: Int, choices: Int) {
        let outcome = try execute(choices: source, scenario: runScenario, storage: storage)
        return (outcome.violations, outcome.steps, outcome.choices.count)
    }

    /// What the search and the shrink need of a schedule: `run` without the log's digest (which
    /// reads every byte of the log again).
    struct ScheduleOutcome {
        var choices: [UInt64]
        var violations: [AppViolation]
        var steps: Int
        var events: [RecordedEvent]
        /// Where each choice came from, when the run was asked to record it (shrinking).
        var keys: [ChoiceKey] = []
    }

    /// Generic over the source so that the recorder calls it directly (`RecordingChoices`).
    func execute<Source: ChoiceSource>(choices source: Source, scenario runScenario: Scenario? = nil, trace: AppTrace? = nil,
                                       keepEvents: Bool = false, recordsKeys: Bool = false, storage: LogStorage) throws -> ScheduleOutcome {
        var scenario = runScenario ?? self.scenario
        if appLaunch != nil || trace != nil {
            scenario.hooks = AppHooks(trace: trace, appLaunch: appLaunch, appPurchase: appPurchase)
        }
        let recording = RecordingChoices(source, recordsKeys: recordsKeys)
        let environment = DeterministicEnvironment(storage: storage, content: VirtualContentStorage(), choices: recording, logDescription: "memory")
        let runtime = try DeterministicRuntime(scenario: scenario, environment: environment)
        if runScenario == nil || headers.isVariant(scenario, of: self.scenario) { runtime.header = headers.header(for: scenario) }
        // The invariants read each event as the engine appends it (in log order, the same values
        // the log decodes to), so the log is not decoded a second time.
        let limit = max(1, stepLimit(scenario))
        let checked = CheckedEvents(keepEvents: keepEvents, tallyFrom: max(0, limit - 999))
        runtime.eventAppended = { checked.add($0) }
        runtime.eventLimit = UInt64(limit)
        _ = try runtime.run()
        let steps = Int(storage.lastSequence)
        precondition(steps == checked.count, "the log holds \(steps) events, the runtime appended \(checked.count)")
        if let refused = checked.refusedObserver {
            throw ExplorationError.observerRefused(name: refused.name, reason: refused.reason)
        }
        if runtime.stoppedAtEventLimit {
            throw ExplorationError.scheduleDidNotEnd(seed: scenario.seed, steps: steps, limit: limit, lastEvents: checked.tally)
        }
        checked.monitor.finish()
        return ScheduleOutcome(choices: recording.values, violations: checked.monitor.violations, steps: steps, events: checked.events,
                               keys: recording.keys)
    }

    /// The seed of schedule `index` of an exploration seeded with `seed` (SplitMix64).
    public static func scheduleSeed(_ seed: UInt64, _ index: Int) -> UInt64 {
        var mixed = seed &+ UInt64(index + 1) &* 0x9E37_79B9_7F4A_7C15
        mixed = (mixed ^ (mixed >> 30)) &* 0xBF58_476D_1CE4_E5B9
        mixed = (mixed ^ (mixed >> 27)) &* 0x94D0_49BB_1331_11EB
        return mixed ^ (mixed >> 31)
    }

    // MARK: Exploring

    /// The pct length (positions its unusual choices are drawn over) before any schedule ran.
    static let initialPCTLength = 64

    /// Explores until a violation is found (then shrinks and draws it), the budget is spent, or
    /// (exhaustive) every schedule was tried.
    ///
    /// `jobs` threads (this one and `jobs - 1` more; values below 1 count as 1) run the schedules
    /// of `random` and `pct` and the shrink of what they find; the result (violation, seeds,
    /// choices, steps, schedules until found, shrink runs) is the same for every `jobs`
    /// (`ScheduleLedger` says how). With more than one, the observer factory is called from
    /// several threads at once: it must make fresh observers at every call and share nothing
    /// mutable. `exhaustive` runs on this thread only; so does `progress`; so does a scenario
    /// whose `hooks` are set (they are one object: use `observers:` instead).
    public func explore(strategy: ExplorationStrategy, budget: ExplorationBudget = ExplorationBudget(), seed: UInt64 = 1,
                        jobs: Int = 1) throws -> ExplorationReport {
        if case .exhaustive(let depth) = strategy { return try exhaust(depth: depth, budget: budget, seed: seed) }
        let start = monotonicSeconds()
        // Hooks set on the scenario itself (a trace, a factory the compiler did not check for
        // @Sendable) are one object the runtimes would share: those explorations run on one thread.
        let jobs = scenario.hooks == nil ? max(1, jobs) : 1
        var tracksLength = false
        if case .pct = strategy { tracksLength = true }
        let ledger = ScheduleLedger(budget: budget, start: start, tracksLength: tracksLength)
        let pool = makePool(jobs: jobs)
        defer { pool?.close() }
        let scenario = self.scenario
        inParallel(ledger, pool: pool, start: start, progress: progress) { explorer, index, length in
            let scheduleSeed = Self.scheduleSeed(seed, index)
            var runScenario = scenario
            runScenario.seed = scheduleSeed
            explorer.reusedLog.removeAll()
            do {
                // Each source by its own type, so that the recorder calls it directly.
                let result = switch strategy {
                case .random, .exhaustive(_):
                    try explorer.execute(choices: SeededChoices(seed: scheduleSeed), scenario: runScenario, storage: explorer.reusedLog)
                case .pct(let depth):
                    try explorer.execute(choices: PCTChoices(seed: scheduleSeed, depth: depth, length: length), scenario: runScenario,
                                         storage: explorer.reusedLog)
                }
                return (result.choices.count, result.steps, result.violations.first.map { .violation($0, result, runScenario) })
            } catch {
                return (0, 0, .failure(error))
            }
        }
        let (schedules, _, first) = ledger.outcome()
        switch first?.finding {
        case .failure(let error): throw error
        case .violation(let violation, let result, let runScenario):
            let found = try shrinkAndDraw(violation, result, scenario: runScenario, schedules: schedules,
                                          seconds: monotonicSeconds() - start, pool: pool)
            return ExplorationReport(strategy: strategy, schedules: schedules, seconds: monotonicSeconds() - start,
                                     exhausted: false, distinctStates: nil, violations: [found], jobs: jobs)
        case nil:
            return ExplorationReport(strategy: strategy, schedules: schedules, seconds: monotonicSeconds() - start,
                                     exhausted: false, distinctStates: nil, violations: [], jobs: jobs)
        }
    }

    /// The threads that help this one when `jobs` is above 1.
    private func makePool(jobs: Int) -> WorkerPool? {
        guard jobs > 1 else { return nil }
        let scenario = self.scenario
        let appLaunch = appLaunch, appPurchase = appPurchase
        let maximumSteps = maximumSteps
        return WorkerPool(threads: jobs - 1) {
            // Each worker's own copy: threads sharing one catalog contend for its strings' reference counts.
            var explorer = Explorer(scenario: scenario.unsharedCopy())
            explorer.appLaunch = appLaunch
            explorer.appPurchase = appPurchase
            explorer.maximumSteps = maximumSteps
            return explorer
        }
    }

    /// Runs `attempt` on every index `ledger` hands out, on this thread (with this explorer, and
    /// `progress` every 256 indices) and the pool's, until the ledger's result is settled.
    private func inParallel(_ ledger: ScheduleLedger, pool: WorkerPool?, start: Double,
                            progress: ((_ schedules: Int, _ seconds: Double) -> Void)? = nil, _ attempt: @escaping WorkerPool.Attempt) {
        pool?.post(ledger, attempt)
        var reported = 0
        while let (index, length) = ledger.claim() {
            let (choices, steps, finding) = attempt(self, index, length)
            let completed = ledger.complete(index, choices: choices, steps: steps, finding: finding)
            // Every 256 schedules, counted over all workers.
            if let progress, completed / 256 > reported / 256 {
                reported = completed
                progress(completed, monotonicSeconds() - start)
            }
        }
        ledger.waitUntilSettled()
    }

    /// Depth-first over the choice tree, one schedule per leaf. A draw is branched from only
    /// when its state (abstract log so far, position among the reactions to it, kind of
    /// choice) was not branched from before with as many unusual choices left; each branch
    /// takes one value per class of outcomes (`ExhaustiveSpace`), within the bound on
    /// unusual choices.
    private func exhaust(depth: Int, budget: ExplorationBudget, seed: UInt64) throws -> ExplorationReport {
        let start = monotonicSeconds()
        let space = ExhaustiveSpace(scenario: scenario, depth: depth)
        // A prefix and how many unusual (non-zero) choices it holds.
        var stack: [(prefix: [UInt64], unusual: Int)] = [([], 0)]
        // Per state, the fewest unusual choices it was branched from with (more left, more explored).
        var seen: [UInt64: Int] = [:]
        var schedules = 0
        var runScenario = scenario
        runScenario.seed = seed
        while let (prefix, unusual) = stack.popLast() {
            guard schedules < budget.schedules, monotonicSeconds() - start < budget.seconds else {
                stack.append((prefix, unusual))
                break
            }
            let storage = HashingLogStorage()
            let source = ExhaustiveChoices(prefix: prefix, space: space, storage: storage)
            let result = try execute(choices: source, scenario: runScenario, storage: storage)
            schedules += 1
            if schedules % 256 == 0 { progress?(schedules, monotonicSeconds() - start) }
            if let violation = result.violations.first {
                let found = try shrinkAndDraw(violation, result, scenario: runScenario, schedules: schedules,
                                              seconds: monotonicSeconds() - start)
                return ExplorationReport(strategy: .exhaustive(depth: depth), schedules: schedules, seconds: monotonicSeconds() - start,
                                         exhausted: false, distinctStates: seen.count, violations: [found])
            }
            guard unusual < space.depth else { continue }
            let draws = source.draws
            for position in stride(from: draws.count - 1, through: prefix.count, by: -1) {
                let draw = draws[position]
                guard draw.values.count > 1 else { continue }
                if let before = seen[draw.state], before <= unusual { continue }
                seen[draw.state] = unusual
                let base = Array(result.choices[..<position])
                for value in draw.values where value != 0 { stack.append((base + [value], unusual + 1)) }
            }
        }
        return ExplorationReport(strategy: .exhaustive(depth: depth), schedules: schedules, seconds: monotonicSeconds() - start,
                                 exhausted: stack.isEmpty, distinctStates: seen.count, violations: [])
    }

    // MARK: Shrinking

    /// Runs a shrink candidate: its choices by source and kind (`KeyedChoices`), or, with `keys`
    /// nil, its values as one sequence in execution order (`ReplayedChoices`).
    func execute(candidate entries: [ChoiceEntry], keys: [ChoiceKey]?, scenario: Scenario, recordsKeys: Bool = false,
                 storage: LogStorage) throws -> ScheduleOutcome {
        if let keys {
            return try execute(choices: KeyedChoices(entries, keys: keys), scenario: scenario, recordsKeys: recordsKeys, storage: storage)
        }
        return try execute(choices: ReplayedChoices(entries.map(\.value)), scenario: scenario, recordsKeys: recordsKeys, storage: storage)
    }

    /// True when `choices` (on `scenario`) still breaks `invariant`.
    /// Each choice addressed by its key's index in the order keys were first drawn: the keys, and the entries.
    private static func addressed(keys found: [ChoiceKey], choices: [UInt64]) -> (keys: [ChoiceKey], entries: [ChoiceEntry]) {
        var keys: [ChoiceKey] = []
        var keyIndex: [ChoiceKey: Int] = [:]
        var entries: [ChoiceEntry] = []
        for (key, value) in zip(found, choices) {
            let index = keyIndex[key] ?? keys.count
            if index == keys.count {
                keys.append(key)
                keyIndex[key] = index
            }
            entries.append(ChoiceEntry(key: index, value: value))
        }
        return (keys, entries)
    }

    /// What one shrink has spent, counted as serial trying spends it (runs past a step's first
    /// failing candidate, or past the budget's end, that other workers made do not count).
    struct ShrinkSpending {
        var runs = 0
        /// Events the counted runs appended, a failed run's up to where it stopped.
        var steps = 0
        /// True once the budget refused a run the shrink wanted: the result is then not 1-minimal.
        var budgetSpent = false
        /// The opt-in wall-clock end (`shrinkSecondsLimit`), else infinity.
        let deadline: Double
    }

    /// True when the budget allows another run; false marks it spent. Checked before each run, as
    /// `firstFailing` counts its candidates.
    private func canRun(_ spent: inout ShrinkSpending) -> Bool {
        let allowed = spent.runs < shrinkRunLimit && spent.steps < shrinkStepLimit && monotonicSeconds() < spent.deadline
        if !allowed { spent.budgetSpent = true }
        return allowed
    }

    /// Runs one candidate on this thread, counting its run and its steps (also when it throws).
    private func counted(_ spent: inout ShrinkSpending, _ body: () throws -> ScheduleOutcome) rethrows -> ScheduleOutcome {
        spent.runs += 1
        reusedLog.removeAll()
        defer { spent.steps += Int(reusedLog.lastSequence) }
        return try body()
    }

    /// Fewer devices, then fewer purchases, with the same choices, while `invariant` still fails.
    /// True when `scenario` got smaller.
    private func reduce(_ scenario: inout Scenario, keeping choices: [ChoiceEntry], keys: [ChoiceKey]?, _ invariant: AppInvariant,
                        spent: inout ShrinkSpending) -> Bool {
        var changed = false
        while scenario.devices > 1, canRun(&spent) {
            var smaller = scenario
            smaller.devices -= 1
            guard (try? fails(choices, keys: keys, invariant, smaller, spent: &spent)) != nil else { break }
            scenario = smaller
            changed = true
        }
        while scenario.apps.purchasesPerDevice > 1, canRun(&spent) {
            var smaller = scenario
            smaller.apps.purchasesPerDevice -= 1
            guard (try? fails(choices, keys: keys, invariant, smaller, spent: &spent)) != nil else { break }
            scenario = smaller
            changed = true
        }
        return changed
    }

    private func fails(_ choices: [ChoiceEntry], keys: [ChoiceKey]?, _ invariant: AppInvariant, _ scenario: Scenario,
                       spent: inout ShrinkSpending) throws -> ScheduleOutcome? {
        let result = try counted(&spent) { try execute(candidate: choices, keys: keys, scenario: scenario, storage: reusedLog) }
        return result.violations.contains { $0.invariant == invariant } ? result : nil
    }

    /// Shrinks a failing schedule to a 1-minimal one: fewer devices and purchases first, then
    /// delta debugging over the choices (removing chunks, then single choices), then each
    /// remaining choice set to its simplest value; repeated until nothing more can go.
    ///
    /// Choices are first addressed by where they come from (`ChoiceKey`: the source, such as a
    /// device's user or the store, and the kind of choice), not by their position in the schedule:
    /// removing one moves only the later ones of the same source and kind. So dropping the first
    /// purchase's product makes the second purchase the first, and one purchase fewer then keeps
    /// the failure; a restore or a kill the failure does not need goes without moving anything else.
    /// When more than one purchase is left, random schedules with fewer purchases are searched for the
    /// same invariant (`fewerPurchasesSearchLimit` per count), and the first found is shrunk instead.
    /// A last pass shrinks the result as one sequence in execution order, the form reports and
    /// reproduce files hold, so it is 1-minimal in that form too.
    ///
    /// All of it spends one budget (`shrinkRunLimit`, `shrinkStepLimit`), checked before each run;
    /// when it refuses a run the result is smaller, not minimal (`oneMinimal` false).
    /// With `jobs` above 1 the candidates of a step (the removals of one chunk size, the
    /// simplifications from one position on) run on `jobs` threads, and the step takes the first
    /// in serial order that still fails, so the result, `runs` and `steps` (what serial trying
    /// spends) are those of one job; runs past that candidate, or past the budget, are thrown away.
    public func shrink(_ choices: [UInt64], invariant: AppInvariant, scenario start: Scenario,
                       jobs: Int = 1) throws -> (choices: [UInt64], scenario: Scenario, runs: Int, steps: Int, oneMinimal: Bool) {
        let pool = makePool(jobs: jobs)
        defer { pool?.close() }
        return try shrink(choices, invariant: invariant, scenario: start, pool: pool)
    }

    private func shrink(_ choices: [UInt64], invariant: AppInvariant, scenario start: Scenario,
                        pool: WorkerPool?) throws -> (choices: [UInt64], scenario: Scenario, runs: Int, steps: Int, oneMinimal: Bool) {
        var spent = ShrinkSpending(deadline: shrinkSecondsLimit.map { monotonicSeconds() + $0 } ?? .infinity)
        let (shrunk, scenario) = try shrink(choices, invariant: invariant, scenario: start, pool: pool, spent: &spent)
        return (shrunk, scenario, spent.runs, spent.steps, !spent.budgetSpent)
    }

    private func shrink(_ choices: [UInt64], invariant: AppInvariant, scenario start: Scenario, pool: WorkerPool?,
                        spent: inout ShrinkSpending) throws -> (choices: [UInt64], scenario: Scenario) {
        var scenario = start
        // Where each choice came from: the schedule as found, run once recording it.
        let found = try counted(&spent) {
            try execute(choices: ReplayedChoices(choices), scenario: start, recordsKeys: true, storage: reusedLog)
        }
        let (keys, addressed) = Self.addressed(keys: found.keys, choices: found.choices)

        /// Shrinks `start` as long as anything goes; `keys` nil: as one sequence (every entry's key 0).
        func minimise(_ start: [ChoiceEntry], keys: [ChoiceKey]?) throws -> [ChoiceEntry] {
            var current = Self.trimmed(start)
            // Fewer devices, then fewer purchases, with the same choices (tried again after each round).
            func reduceScenario(_ changed: inout Bool) {
                if reduce(&scenario, keeping: current, keys: keys, invariant, spent: &spent) { changed = true }
            }
            // Each choice (last first) to 0, else to half its value, where the failure stays.
            func simplify(_ current: inout [ChoiceEntry], _ changed: inout Bool) throws {
                var next = current.count - 1
                while next >= 0 {
                    // The simplifications from `next` down, as far as serial trying would get within the
                    // run budget (it checks the budget before each position).
                    var candidates: [(index: Int, value: UInt64)] = []
                    var truncated = false
                    for index in stride(from: next, through: 0, by: -1) where current[index].value != 0 {
                        guard spent.runs + candidates.count < shrinkRunLimit else {
                            truncated = true
                            break
                        }
                        for simpler in [0, current[index].value / 2] where simpler < current[index].value { candidates.append((index, simpler)) }
                    }
                    let base = current
                    let hit = try firstFailing(candidates.count, invariant, keys: keys, spent: &spent, pool: pool,
                                               throwing: false) { [candidates, scenario] position in
                        var candidate = base
                        candidate[candidates[position].index].value = candidates[position].value
                        return (candidate, scenario)
                    }
                    guard let hit else {
                        if truncated { spent.budgetSpent = true }
                        break
                    }
                    current[candidates[hit].index].value = candidates[hit].value
                    changed = true
                    next = candidates[hit].index - 1
                }
                current = Self.trimmed(current)
            }
            var changed = true
            while changed, canRun(&spent) {
                changed = false
                reduceScenario(&changed)
                // Simplest values first (cheap, and it makes the removals below more likely to pass).
                try simplify(&current, &changed)
                // Delta debugging: remove chunks, halving the chunk size down to one choice.
                var granularity = 2
                while current.count >= 1, canRun(&spent) {
                    let chunk = max(1, (current.count + granularity - 1) / granularity)
                    let allStarts = Array(stride(from: 0, to: current.count, by: chunk))
                    let starts = Array(allStarts.prefix(max(0, shrinkRunLimit - spent.runs)))
                    let base = current
                    let hit = try firstFailing(starts.count, invariant, keys: keys, spent: &spent, pool: pool,
                                               throwing: true) { [scenario] position in
                        var candidate = base
                        candidate.removeSubrange(starts[position]..<min(base.count, starts[position] + chunk))
                        return (candidate, scenario)
                    }
                    if let hit {
                        current.removeSubrange(starts[hit]..<min(current.count, starts[hit] + chunk))
                        current = Self.trimmed(current)
                        changed = true
                        granularity = max(2, granularity - 1)
                    } else {
                        if starts.count < allStarts.count { spent.budgetSpent = true }
                        if chunk == 1 { break }
                        granularity = min(current.count, granularity * 2)
                    }
                }
                try simplify(&current, &changed)
            }
            // A last round that changed nothing, with the budget never spent, tried every single
            // removal and simplification: 1-minimal (`budgetSpent` says which).
            return current
        }

        let byKey = try minimise(addressed, keys: keys)
        // Removal cannot trade what needs a second purchase (the user's relaunch at its step) for what
        // one purchase shows (a kill, a repeated delivery): the same failure is searched for with fewer
        // purchases, and what is found there is shrunk instead, within the same budget.
        if scenario.apps.purchasesPerDevice > 1,
           let fewer = try schedule(breaking: invariant, fewerPurchasesThan: scenario, spent: &spent) {
            return try shrink(fewer.choices, invariant: invariant, scenario: fewer.scenario, pool: pool, spent: &spent)
        }
        // As one sequence in execution order: the values the shrunk schedule drew, which
        // `ReplayedChoices` replays exactly; then shrunk in that form.
        let sequence = try counted(&spent) { try execute(candidate: byKey, keys: keys, scenario: scenario, storage: reusedLog) }
        let last = try minimise(sequence.choices.map { ChoiceEntry(key: 0, value: $0) }, keys: nil)
        return (last.map(\.value), scenario)
    }

    /// Random schedules per purchase count that `shrink` tries when removal left more than one purchase.
    static let fewerPurchasesSearchLimit = 256

    /// The first random schedule, with fewer purchases than `scenario` (one, then two, …), that
    /// breaks `invariant`: its choices and scenario. Drawn from `scenario`'s seed alone, so it is the
    /// same for any number of jobs.
    private func schedule(breaking invariant: AppInvariant, fewerPurchasesThan scenario: Scenario,
                          spent: inout ShrinkSpending) throws -> (choices: [UInt64], scenario: Scenario)? {
        for purchases in 1..<scenario.apps.purchasesPerDevice {
            for index in 0..<Self.fewerPurchasesSearchLimit {
                guard canRun(&spent) else { return nil }
                // The schedule keeps its seed (the log's header, the reproduce file); only its choices are new.
                var smaller = scenario
                smaller.apps.purchasesPerDevice = purchases
                let choicesSeed = Self.scheduleSeed(scenario.seed ^ UInt64(purchases), index)
                // A schedule that cannot run (one that does not end) is no candidate.
                guard let outcome = try? counted(&spent, {
                    try execute(choices: SeededChoices(seed: choicesSeed), scenario: smaller, storage: reusedLog)
                }) else { continue }
                if outcome.violations.contains(where: { $0.invariant == invariant }) { return (outcome.choices, smaller) }
            }
        }
        return nil
    }

    /// The position of the first of `count` candidates (made by `candidate`) that still breaks
    /// `invariant`, tried in order on this thread and the pool's while the budget lasts; `spent` grows
    /// by the runs and steps serial trying makes (up to and including that candidate, or up to the
    /// first the step budget refuses). A candidate that throws counts as not failing, or (`throwing`)
    /// ends the shrink with its error, as serial trying would.
    private func firstFailing(_ count: Int, _ invariant: AppInvariant, keys: [ChoiceKey]?, spent: inout ShrinkSpending, pool: WorkerPool?,
                              throwing: Bool,
                              _ candidate: @escaping @Sendable (_ position: Int) -> (choices: [ChoiceEntry], scenario: Scenario)) throws -> Int? {
        guard count > 0, canRun(&spent) else { return nil }
        let now = monotonicSeconds()
        let ledger = ScheduleLedger(budget: ExplorationBudget(schedules: count, seconds: spent.deadline - now), start: now, tracksLength: false,
                                    stepBudget: shrinkStepLimit - spent.steps)
        inParallel(ledger, pool: pool, start: now) { explorer, position, _ in
            let (choices, scenario) = candidate(position)
            explorer.reusedLog.removeAll()
            // The events appended before a throw count too: serial trying spends them.
            var steps: Int { Int(explorer.reusedLog.lastSequence) }
            do {
                let result = try explorer.execute(candidate: choices, keys: keys, scenario: scenario, storage: explorer.reusedLog)
                guard let violation = result.violations.first(where: { $0.invariant == invariant }) else { return (0, steps, nil) }
                return (0, steps, .violation(violation, result, scenario))
            } catch {
                return (0, steps, throwing ? .failure(error) : nil)
            }
        }
        let (tried, steps, first) = ledger.outcome()
        spent.runs += tried
        spent.steps += steps
        // Fewer tried than asked, with nothing found: the budget ended the step.
        if first == nil, tried < count { spent.budgetSpent = true }
        switch first?.finding {
        case .failure(let error): throw error
        case .violation: return first?.index
        case nil: return nil
        }
    }

    /// Zeros after which their source and kind draw nothing else are what a replay takes past
    /// that list's end anyway (trailing zeros, when every entry has the same key).
    static func trimmed(_ entries: [ChoiceEntry]) -> [ChoiceEntry] {
        var laterNonZero: Set<Int> = []
        var kept: [ChoiceEntry] = []
        for entry in entries.reversed() where entry.value != 0 || laterNonZero.contains(entry.key) {
            if entry.value != 0 { laterNonZero.insert(entry.key) }
            kept.append(entry)
        }
        return kept.reversed()
    }

    private func shrinkAndDraw(_ violation: AppViolation, _ original: ScheduleOutcome, scenario: Scenario, schedules: Int,
                               seconds: Double, pool: WorkerPool? = nil) throws -> FoundViolation {
        let shrinkStart = monotonicSeconds()
        let shrunk = try shrink(original.choices, invariant: violation.invariant, scenario: scenario, pool: pool)
        let shrinkSeconds = monotonicSeconds() - shrinkStart
        let trace = AppTrace()
        let final = try run(choices: ReplayedChoices(shrunk.choices), scenario: shrunk.scenario, trace: trace, keepEvents: true)
        let finalViolation = final.violations.first { $0.invariant == violation.invariant } ?? violation
        let diagram = TraceDiagram(events: final.events, trace: trace, violation: finalViolation)
        let reproduce = ReproduceFile(invariant: violation.invariant, message: finalViolation.message, seed: scenario.seed,
                                      choices: shrunk.choices, scenario: shrunk.scenario, steps: final.steps,
                                      logDigest: final.logDigest, customObservers: appLaunch != nil)
        return FoundViolation(invariant: violation.invariant, message: finalViolation.message, seed: scenario.seed,
                              choices: shrunk.choices, choicesBeforeShrinking: original.choices.count,
                              stepsBeforeShrinking: original.steps, stepsAfterShrinking: final.steps,
                              devices: shrunk.scenario.devices, purchasesPerDevice: shrunk.scenario.apps.purchasesPerDevice,
                              schedulesUntilFound: schedules, secondsUntilFound: seconds, shrinkRuns: shrunk.runs, shrinkSteps: shrunk.steps,
                              shrinkSeconds: shrinkSeconds, oneMinimal: shrunk.oneMinimal, mermaid: diagram.mermaid(), html: diagram.html(), reproduce: reproduce)
    }

    // MARK: Reproducing

    /// Replays a reproduce file: the same log, byte for byte, and the same violation.
    public func reproduce(_ file: ReproduceFile) throws -> ScheduleRun {
        let scenario = try file.makeScenario()
        return try run(choices: ReplayedChoices(file.choices), scenario: scenario, keepEvents: true)
    }
}

/// Seconds on a monotonic clock, for budgets and figures (never inside a schedule).
func monotonicSeconds() -> Double {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return Double(time.tv_sec) + Double(time.tv_nsec) * 1e-9
}

/// An in-memory log that keeps a running hash of what it holds, abstracted: the exhaustive
/// search's state. Timestamps and command ids are left out (the same events at other times,
/// or under other command numbers, are the same state), and so is download progress below
/// 1.0 (no invariant reads it: a download failing after 3 or after 7 progress reports leaves
/// the same state). Progress 1.0 stays (`no-completion-from-progress` reads it).
final class HashingLogStorage: LogStorage {
    private let memory = MemoryLogStorage()
    private(set) var hash: UInt64 = 0xCBF2_9CE4_8422_2325

    var lastSequence: UInt64 { memory.lastSequence }

    func appendUnit(_ payloads: [[UInt8]], timestamp: Int64) throws -> UInt64 {
        for payload in payloads {
            let event = try EventCodec.decodeEvent(payload).event
            if case .downloadProgressed(_, let progress, _) = event, progress < 1 { continue }
            for byte in EventCodec.encode(event, commandID: nil) { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01B3 }
        }
        return try memory.appendUnit(payloads, timestamp: timestamp)
    }

    func forEachRecord(from: UInt64, _ body: (UInt64, Int64, UnsafeRawBufferPointer) throws -> Void) throws {
        try memory.forEachRecord(from: from, body)
    }

    func close() throws {}
}

/// The app invariant monitor fed by the runtime as events are appended (a class: the runtime
/// keeps the closure that feeds it).
final class CheckedEvents {
    // Unchecked exclusivity: only `add` changes these, once per appended event, never re-entered.
    @exclusivity(unchecked) var monitor = AppInvariantMonitor()
    @exclusivity(unchecked) var events: [RecordedEvent] = []
    @exclusivity(unchecked) var count = 0
    let keepEvents: Bool
    /// Events by name from event `tallyFrom` on: what a schedule that does not end keeps doing.
    @exclusivity(unchecked) var tally: [String: Int] = [:]
    let tallyFrom: Int
    /// The first observer whose name the queue refused (invalid, or another observer's on its
    /// device): it never hears anything, or hears what the other one does.
    @exclusivity(unchecked) var refusedObserver: (name: String, reason: String)?

    init(keepEvents: Bool, tallyFrom: Int = .max) {
        self.keepEvents = keepEvents
        self.tallyFrom = tallyFrom
    }

    func add(_ recorded: RecordedEvent) {
        monitor.check(recorded)
        count += 1
        if keepEvents { events.append(recorded) }
        if count > tallyFrom { tally[recorded.event.name, default: 0] += 1 }
        // Told by the case alone first: a pattern with bindings copies the event out, and this runs for every event.
        if case .commandRejected = recorded.event, refusedObserver == nil,
           case .commandRejected(.attachObserver(_, let observer), let rejection) = recorded.event,
           rejection.code == .invalidArgument || rejection.code == .observerAlreadyAttached {
            refusedObserver = (observer, rejection.message)
        }
    }
}

/// An exploration that cannot go on, with what to do about it.
public enum ExplorationError: Error, Sendable, Hashable, CustomStringConvertible {
    /// A schedule's log reached `Explorer.maximumSteps` events without the run settling.
    case scheduleDidNotEnd(seed: UInt64, steps: Int, limit: Int, lastEvents: [String: Int])
    /// The queue refused to attach an observer because of its name (invalid, or taken on its device).
    case observerRefused(name: String, reason: String)

    public var description: String {
        switch self {
        case .scheduleDidNotEnd(let seed, let steps, let limit, let lastEvents):
            let counted = lastEvents.values.reduce(0, +)
            let busiest = lastEvents.sorted { ($0.value, $1.key) > ($1.value, $0.key) }.prefix(3).map { "\($0.key) \($0.value)" }
            return "the schedule of seed \(seed) did not end within \(steps) events (Explorer.maximumSteps \(limit)); of its last "
                + "\(counted) events: \(busiest.joined(separator: ", ")). An observer that adds a payment, restores or refreshes the "
                + "receipt from every callback never lets the run end: give that loop an end (raise maximumSteps only if the scenario "
                + "really needs longer runs)"
        case .observerRefused(let name, let reason):
            let shown = name.utf8.count > 40 ? String(name.prefix(40)) + "…" : name
            return "the queue refused to attach observer '\(shown)' (\(reason)); give each observer's observerName 1 to 128 bytes, "
                + "the same at every launch and unique on its device"
        }
    }
}

/// The run header of an explorer's scenario, encoded once per size: the scenario's JSON and the
/// catalog's are the same for every schedule, only the seed differs.
final class HeaderCache {
    private var bySize: [Int: RunHeader] = [:]

    /// True when `scenario` differs from `base` at most in seed, devices and purchases (what
    /// exploring and shrinking change), so its header can come from the cache.
    func isVariant(_ scenario: Scenario, of base: Scenario) -> Bool {
        scenario.catalog == base.catalog && scenario.catalogSource == base.catalogSource && scenario.apps.observers == base.apps.observers
            && scenario.apps.choicePoints == base.apps.choicePoints && scenario.store == base.store
            && scenario.downloader == base.downloader && scenario.network == base.network
            && scenario.apps.restoreProbability == base.apps.restoreProbability
            && scenario.apps.relaunchProbability == base.apps.relaunchProbability
            && scenario.apps.thinkTime == base.apps.thinkTime && scenario.apps.devicesPerAccount == base.apps.devicesPerAccount
            && scenario.apps.ordering == base.apps.ordering && scenario.maximumSimulatedSeconds == base.maximumSimulatedSeconds
            && scenario.startDate == base.startDate
    }

    func header(for scenario: Scenario) -> RunHeader {
        let key = scenario.devices &* 1_000_003 &+ scenario.apps.purchasesPerDevice
        var header = bySize[key] ?? scenario.header(runtime: "deterministic", startedAtUnixNanoseconds: 0)
        bySize[key] = header
        header.seed = scenario.seed
        return header
    }
}
