import EventLog
import Foundation
import StoreKitModel
import StoreKitRoles

/// The outcome of a run, shared by `simulate` and `run`.
public struct RunReport: Sendable {
    public var seed: UInt64
    public var totals: EventTotals
    public var pending: Int
    public var violations: [Violation]
    public var violationCount: Int
    public var logDirectory: String
    public var simulatedNanoseconds: Int64
    public var duplicateCommands: Int
    public var stoppedAtTimeLimit: Bool

    public init(seed: UInt64, totals: EventTotals, pending: Int, violations: [Violation], violationCount: Int,
                logDirectory: String, simulatedNanoseconds: Int64, duplicateCommands: Int, stoppedAtTimeLimit: Bool) {
        self.seed = seed
        self.totals = totals
        self.pending = pending
        self.violations = violations
        self.violationCount = violationCount
        self.logDirectory = logDirectory
        self.simulatedNanoseconds = simulatedNanoseconds
        self.duplicateCommands = duplicateCommands
        self.stoppedAtTimeLimit = stoppedAtTimeLimit
    }
}

/// All four roles in one process on a virtual clock. Every ordering comes from the
/// scheduler (time, then insertion order) and every random choice from the seed, so
/// the same scenario gives the same log, byte for byte.
public final class DeterministicSimulation {
    public static let partition = "queue"

    public let scenario: Scenario
    public let outputDirectory: URL
    public let logDirectory: URL
    public let durability: DurabilityPolicy
    /// Network delay from a sender to the queue and from the queue to each subscriber.
    public var deliveryLatency: LatencyDistribution = .uniform(minimumMilliseconds: 0.2, maximumMilliseconds: 3)

    public private(set) var queue: QueueRole
    public private(set) var store: StoreRole
    public private(set) var downloader: DownloaderRole
    public private(set) var apps: AppRole
    public private(set) var checker = InvariantChecker()

    private enum Action {
        case command(Command)
        case event(RecordedEvent, subscriber: Int)
        case timer(TimerToken, role: Int)
    }

    private var scheduler = Scheduler<Action>()
    private var now: Int64 = 0
    private var roles: [Role] { [store, downloader, apps] }
    private var commandCounters: [UInt64]
    /// Last arrival time per sender and per subscriber: links keep their order, as a
    /// ZeroMQ connection does.
    private var lastCommandArrival: [Int64]
    private var lastEventArrival: [Int64]
    private var random: SeededRandom
    private let writer: PartitionWriter

    public init(scenario: Scenario, outputDirectory: URL, durability: DurabilityPolicy = .defaultGroupCommit) throws {
        try scenario.validate()
        self.scenario = scenario
        self.outputDirectory = outputDirectory
        self.logDirectory = outputDirectory.appendingPathComponent("log", isDirectory: true)
        self.durability = durability
        if FileManager.default.fileExists(atPath: logDirectory.path),
           !((try? LogDirectory.partitions(in: logDirectory)) ?? []).isEmpty {
            throw ConfigurationError("\(logDirectory.path) already holds a log; choose a new --out directory or remove the old run")
        }
        try FileManager.default.createDirectory(at: logDirectory, withIntermediateDirectories: true)
        writer = try PartitionWriter(directory: logDirectory, partition: Self.partition,
                                     configuration: PartitionWriterConfiguration(durability: durability))
        queue = QueueRole(catalog: scenario.catalog)
        store = StoreRole(catalog: scenario.catalog, behavior: scenario.store, seed: scenario.seed)
        downloader = DownloaderRole(contentDirectory: outputDirectory.appendingPathComponent("content", isDirectory: true),
                                    behavior: scenario.downloader, seed: scenario.seed)
        apps = AppRole(devices: scenario.makeApps(storage: outputDirectory.appendingPathComponent("apps", isDirectory: true)))
        random = SeededRandom(seed: scenario.seed, stream: "network")
        commandCounters = [0, 0, 0]
        lastCommandArrival = [0, 0, 0]
        lastEventArrival = [0, 0, 0]
    }

    /// Runs until nothing is left to do (or the simulated-time bound), closes the log
    /// and reports.
    public func run() throws -> RunReport {
        try append(.runStarted(seed: scenario.seed, scenario: scenario.summary), commandID: nil)
        perform(apps.start(), role: 2)
        let limit = Int64(scenario.maximumSimulatedSeconds * 1e9)
        var stoppedAtLimit = false
        while let (time, action) = scheduler.next() {
            if time > limit {
                stoppedAtLimit = true
                break
            }
            now = time
            switch action {
            case .command(let command):
                let (events, _) = queue.handle(command)
                for event in events { try append(event, commandID: command.id) }
            case .event(let recorded, let subscriber):
                perform(roles[subscriber].receive(recorded, now: now), role: subscriber)
            case .timer(let token, let role):
                perform(roles[role].timerFired(token, now: now), role: role)
            }
        }
        try writer.close()
        return RunReport(seed: scenario.seed, totals: queue.projection.totals, pending: queue.projection.pendingCount,
                         violations: checker.violations, violationCount: checker.violationCount,
                         logDirectory: logDirectory.path, simulatedNanoseconds: now,
                         duplicateCommands: queue.duplicates, stoppedAtTimeLimit: stoppedAtLimit)
    }

    private func append(_ event: Event, commandID: CommandID?) throws {
        let payload = EventCodec.encode(event, commandID: commandID)
        let sequence = try writer.append(payload: payload, timestampNanoseconds: now)
        let recorded = RecordedEvent(sequence: sequence, timestamp: now, commandID: commandID, event: event)
        queue.apply(recorded)
        checker.check(recorded)
        for subscriber in roles.indices {
            let arrival = max(now + deliveryLatency.sampleNanoseconds(&random), lastEventArrival[subscriber])
            lastEventArrival[subscriber] = arrival
            scheduler.schedule(at: arrival, .event(recorded, subscriber: subscriber))
        }
    }

    private func perform(_ effects: [Effect], role: Int) {
        for effect in effects {
            switch effect {
            case .send(let body):
                commandCounters[role] += 1
                let command = Command(id: CommandID(origin: roles[role].name, number: commandCounters[role]), body: body)
                let arrival = max(now + deliveryLatency.sampleNanoseconds(&random), lastCommandArrival[role])
                lastCommandArrival[role] = arrival
                scheduler.schedule(at: arrival, .command(command))
            case .timer(let delay, let token):
                scheduler.schedule(at: now + max(0, delay), .timer(token, role: role))
            }
        }
    }
}
