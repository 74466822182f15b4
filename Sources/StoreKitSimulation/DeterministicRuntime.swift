import BusProtocol
import Foundation
import StoreKitModel
import StoreKitRoles
import StoreKitRuntime

/// The deterministic environment: where the log and the content go, and the one choice
/// source every random decision of the run comes from.
public struct DeterministicEnvironment {
    public var storage: LogStorage
    public var content: ContentStorage
    public var choices: ChoiceSource
    /// Shown in reports as where the log is ("memory" for an in-memory log).
    public var logDescription: String

    public init(storage: LogStorage, content: ContentStorage, choices: ChoiceSource, logDescription: String) {
        self.storage = storage
        self.content = content
        self.choices = choices
        self.logDescription = logDescription
    }

    /// In memory: a log in memory, virtual content, choices from the seed.
    public static func inMemory(seed: UInt64, recordingChoices: Bool = false) -> DeterministicEnvironment {
        DeterministicEnvironment(storage: MemoryLogStorage(), content: VirtualContentStorage(),
                                 choices: SeededChoices(seed: seed, recording: recordingChoices), logDescription: "memory")
    }
}

/// What the network model did, for reports and tests.
public struct NetworkCounters: Sendable, Hashable {
    /// Copies of events a subscriber had already delivered (dropped by its `SubscriberState`).
    public var duplicatesDelivered = 0
    /// Published events lost on one link: really missing, until the subscriber fetches them.
    public var eventsLost = 0
    /// Heartbeats lost on their link.
    public var heartbeatsLost = 0
    /// FETCH requests the subscribers sent (their first, after gaps, and again when unanswered).
    public var fetchesSent = 0
    /// FETCH requests or replies lost on their link, or that reached a queue that was down.
    public var fetchesLost = 0
    /// Gaps the subscribers noticed in the live stream and filled.
    public var gapsRecovered = 0
    /// Times a subscriber heard nothing, not even a heartbeat, for its silence timeout.
    public var publisherSilences = 0
    public var crashes = 0
    /// Commands that reached a queue that was down: lost with its connection, sent again by their
    /// sender once it reconnects.
    public var commandsHeldWhileQueueDown = 0
    /// Commands or answers lost on their link (`commandLossProbability`).
    public var commandsLost = 0
    /// Copies dropped because their sender already had `linkCapacity` messages waiting at the queue.
    public var commandsDroppedAtFullLink = 0
    /// Commands sent again by their sender (`CommandRetries`).
    public var retriesSent = 0
    /// Commands the queue answered `unavailable` (out of its sender's order, or overloaded).
    public var answeredUnavailable = 0
    /// Commands a sender gave up on (its role then fails and is restarted, as live).
    public var commandsGivenUp = 0
    public var stalls = 0
    public var partitions = 0
}

/// A process of the deterministic runtime that an outage can hit.
public enum SimulatedProcess: Sendable, Hashable {
    case queue
    case role(RoleFactory.Kind)
}

/// A stall (the process stops, as under SIGSTOP: what is sent to it waits, its timers fire late)
/// or a partition (its links to the queue are cut: what either side sends arrives once they heal),
/// planned at a time of the run (tests), besides those drawn as choices (`stallProbability`,
/// `partitionProbability`).
public struct PlannedOutage: Sendable, Hashable {
    public enum Kind: Sendable, Hashable { case stall, partition }
    public var kind: Kind
    public var process: SimulatedProcess
    public var startNanoseconds: Int64
    public var durationNanoseconds: Int64

    public init(_ kind: Kind, of process: SimulatedProcess, atNanoseconds start: Int64, forNanoseconds duration: Int64) {
        self.kind = kind
        self.process = process
        startNanoseconds = start
        durationNanoseconds = duration
    }
}

/// Every role in one process on a virtual clock, through the one queue engine. The
/// network model delays each message per link (links keep their order), publishes
/// events only once the log has made them durable, and can duplicate and lose messages, crash
/// any role, stall any process and cut its links, each a recorded choice.
/// Messages travel through the bus's own protocol logic, as in the live processes: each role sends
/// through a `CommandPipeline` (window, numbering, `CommandRetries`), the queue judges each arrival
/// with `QueueAdmission` (sender order, bounds, overload) before the engine, and each role hears
/// the events through a `SubscriberState` (gaps, duplicates, heartbeats, FETCH from the log).
/// Same choices, same log, byte for byte, wherever it is written.
public final class DeterministicRuntime {
    public let scenario: Scenario
    public let environment: DeterministicEnvironment
    @exclusivity(unchecked) public private(set) var engine: QueueEngine
    @exclusivity(unchecked) public private(set) var counters = NetworkCounters()
    /// The run's first record when already known (exploration runs one scenario thousands of
    /// times, and encoding the scenario and catalog to JSON would cost more than the run).
    public var header: RunHeader?
    /// Called with every event as it is appended, in log order: a checker of the whole log
    /// (exploration's invariants) reads the events as they are made instead of decoding the log again.
    public var eventAppended: ((RecordedEvent) -> Void)?
    /// The run stops once its log holds more events than this (exploration bounds each schedule:
    /// an observer that adds a payment from every callback never lets a run settle).
    public var eventLimit: UInt64 = .max
    /// True when the run stopped at `eventLimit`.
    public private(set) var stoppedAtEventLimit = false

    private struct Slot {
        var kind: RoleFactory.Kind
        /// The role, with the commands it made that wait for room in its window (the one role side of every runtime).
        var host: RoleHost
        var role: Role { host.role }
        var incarnation = 0
        /// The origin of this incarnation's commands (role name and incarnation), made once
        /// rather than formatted for every command.
        var origin: String
        var isDown = false
        /// This incarnation's subscriber (the live one's logic): what it has delivered, its gaps and FETCHes.
        var subscriber: SubscriberState<LoggedSequence>
        /// With `NetworkBehavior.appsFollowDevices`, the app role's subscriber instead: a stream per device
        /// (`FollowedDevices`, the live logic), fed its topic groups' messages.
        var followed: FollowedDevices<LoggedDeviceRecord>?
        /// The subscriber's draws (heartbeat and FETCH delays and losses; with topic groups, every draw of
        /// its event link), a stream of its own.
        let subscriberChoices: ChoiceSource
        /// The pending check of the subscriber's timers (FETCH retry, silence); one of another generation is stale.
        var subscriberTimerAt: Int64?
        var subscriberTimerGeneration = 0
        /// Last sequence this role has heard, once each and in order: every role hears the whole log (one
        /// that follows its devices: every record up to it was heard, the lowest over its devices' streams).
        var delivered: UInt64 = 0
        var lastCommandArrival: Int64 = 0
        var lastEventArrival: Int64 = 0
        /// The subscriber's request link (FETCH) and its replies, each in order.
        var lastFetchArrival: Int64 = 0
        var lastReplyArrival: Int64 = 0
        /// This incarnation's sender: numbering, window and retries.
        var pipeline: CommandPipeline
        /// Its unanswered commands by number, with when each was first sent (the pipeline keeps no
        /// bytes here: the runtime moves `Command` values).
        var unanswered: [UInt64: (command: Command, sentAt: Int64)] = [:]
        /// The pending wake-up of the pipeline (`Action.wake`); a wake of another generation is stale.
        var wakeAt: Int64?
        var wakeGeneration = 0
        /// Copies of this role's commands on their way to the queue or waiting in its inbox.
        var atQueue = 0
        /// Outages: the process stopped, or its links to the queue cut, through these times.
        var stalledThrough: Int64 = -1
        var partitionedThrough: Int64 = -1
    }

    /// What the scheduler holds: small and trivially copied (no reference counting as it moves
    /// through the scheduler); a command and a timer's token wait in slabs of their own.
    private enum Action {
        /// The command in `commandsInFlight` at this slot, sent by the role at `from`.
        case command(Int, from: Int)
        /// The queue takes the next command of its inbox (with a service time).
        case serveQueue
        /// The queue's answer reaches the sender at `slot` (its incarnation then).
        case answer(slot: Int, incarnation: Int, number: UInt64, status: AcknowledgementStatus)
        /// The sender at `slot` looks at its retries.
        case wake(slot: Int, generation: Int)
        /// An outage (`PlannedOutage`) begins.
        case outage(Int)
        case publish(first: UInt64, last: UInt64)
        /// The event is held in `held` (see there), not copied into every delivery.
        case deliver(sequence: UInt64, slot: Int)
        /// The queue's heartbeat timer (in the background: it keeps no run going).
        case heartbeat
        /// A heartbeat saying the log is published through `through` reaches the subscriber at `slot`.
        case heartbeatArrives(through: UInt64, slot: Int)
        /// A FETCH from `from` by the subscriber at `slot` reaches the queue.
        case fetchArrives(from: UInt64, slot: Int, incarnation: Int)
        /// The FETCH reply in `fetchReplies` at this slot reaches the subscriber at `slot`.
        case fetchReply(Int, slot: Int)
        /// The subscriber at `slot` looks at its timers (in the background).
        case subscriberTimer(slot: Int, generation: Int)
        /// The message in `groupMessages` at this slot (a group's records of one round) reaches the subscriber at `slot`.
        case groupRecords(Int, slot: Int)
        /// The groups' heartbeats in `groupMessages` at this slot reach the subscriber at `slot`.
        case groupHeartbeats(Int, slot: Int)
        /// The token in `timerTokens` at this slot, for the role at `slot`.
        case timer(Int, slot: Int, incarnation: Int)
        case restart(slot: Int)
        case restartQueue

        /// True when carrying this out runs code of the role at `slot`.
        func concerns(slot index: Int) -> Bool {
            switch self {
            case .deliver(_, let slot), .timer(_, let slot, _), .restart(let slot), .fetchReply(_, let slot),
                 .heartbeatArrives(_, let slot), .subscriberTimer(let slot, _), .groupRecords(_, let slot), .groupHeartbeats(_, let slot): slot == index
            case .command, .publish, .restartQueue, .serveQueue, .answer, .wake, .outage, .heartbeat, .fetchArrives: false
            }
        }

        /// Heartbeats and subscribers' timer checks run while there is other work, or a subscriber
        /// misses something published; they never keep a run going on their own.
        var isBackground: Bool {
            switch self {
            case .heartbeat, .heartbeatArrives, .subscriberTimer, .groupHeartbeats: true
            default: false
            }
        }
    }

    private let factory: RoleFactory
    // `@exclusivity(unchecked)`: the run loop is the only code touching this state, one access at a
    // time (roles return effects, they never call back), so the dynamic checks only cost time.
    @exclusivity(unchecked) private var slots: [Slot] = []
    @exclusivity(unchecked) private var scheduler = Scheduler<Action>()
    @exclusivity(unchecked) private var commandsInFlight = Slab<Arrival>()
    @exclusivity(unchecked) private var timerTokens = Slab<TimerToken>()
    @exclusivity(unchecked) private var fetchReplies = Slab<FetchReply>()
    @exclusivity(unchecked) private var groupMessages = Slab<GroupLinkMessage>()
    /// With `NetworkBehavior.appsFollowDevices`: the app role's topic groups.
    private let groups: TopicGroups?
    /// What a `FollowedDevices` call delivered, handed to its role, then emptied (reused).
    @exclusivity(unchecked) private var followedBuffer: [LoggedDeviceRecord] = []
    /// Background actions in the scheduler (`Action.isBackground`).
    @exclusivity(unchecked) private var backgroundScheduled = 0
    /// A heartbeat tick is scheduled.
    @exclusivity(unchecked) private var heartbeatsTicking = false
    /// What a subscriber call delivered, handed to its role, then emptied (reused).
    @exclusivity(unchecked) private var deliveredBuffer: [LoggedSequence] = []
    /// A FETCH reply's records, made for `SubscriberState` (reused).
    @exclusivity(unchecked) private var replyBuffer: [LoggedSequence] = []
    @exclusivity(unchecked) fileprivate var now: Int64 = 0
    @exclusivity(unchecked) private var lastDurable: Int64 = 0
    @exclusivity(unchecked) private var publishedRounds = 0
    @exclusivity(unchecked) private var published: UInt64 = 0
    /// Appended events until every role has heard them: a delivery names its sequence, so an
    /// event is stored once rather than copied (with its strings and arrays retained) into each
    /// role's delivery.
    @exclusivity(unchecked) private var held = HeldEvents()
    private var queueIsDown = false
    /// Duplicates answered by engines that crashed since (a restarted engine counts from 0).
    private var earlierDuplicates = 0
    /// The queue's answer to a FETCH: every record from `from` through `through` (none when `through`
    /// is below `from`), read from the log, which is published through `published`.
    private struct FetchReply {
        var from: UInt64
        var through: UInt64
        var published: UInt64
        var incarnation: Int
        /// For a subscriber that follows its devices: the records, each with its device (the queue reads
        /// them from its log as it answers); nil for one that hears the whole partition.
        var records: [LoggedDeviceRecord]?
    }
    /// Records one FETCH reply carries at most, as live (`EventSubscriberConfiguration.fetchBatchSize`).
    private static let fetchBatchSize: UInt64 = 1_000
    /// The queue's heartbeat interval (`NetworkBehavior.catchUpMilliseconds`), at least a millisecond.
    private let heartbeatNanoseconds: Int64
    /// The subscribers' settings, as a live role process sets them (silence after eight heartbeats).
    private let subscriberConfiguration: SubscriberState<LoggedSequence>.Configuration
    /// Called with each role and each sequence it hears, in the order it hears them (tests).
    public var eventHeard: ((RoleFactory.Kind, UInt64) -> Void)?
    /// A command on its way to the queue, or in its inbox: the sender's slot and incarnation.
    private struct Arrival {
        var command: Command
        var slot: Int
        var incarnation: Int
        /// The last sequence the sender had heard when it sent this copy (recorded with it in the log's input record).
        var heard: UInt64
        /// The sender's lowest unanswered number when it sent this copy (`SenderReport`), as a live sender reports it.
        var lowestUnanswered: UInt64
    }
    /// The queue's rules before the engine, as live (`QueueAdmission`).
    private var admission = QueueAdmission()
    /// Commands arrived and waiting for the queue (with a service time, or while it is stalled), in order.
    private var inbox: [Arrival] = []
    private var inboxHead = 0
    private var serveScheduled = false
    private var queueIncarnation = 0
    private var queueStalledThrough: Int64 = -1
    private var queuePartitionedThrough: Int64 = -1
    private let serviceNanoseconds: Int64?
    /// `CommandPipeline`s measure time as instants: the run's time 0 is this one (only differences count).
    private let epoch = ContinuousClock.now
    /// The senders' retry rule; `CommandRetries.Policy.standard` unless a test reproduces another.
    public var retryPolicy = CommandRetries.Policy.standard
    /// The senders' window, as live (`CommandPipeline.standardWindow`).
    public var senderWindow = CommandPipeline.standardWindow
    /// Messages one sender may have on their way to the queue or waiting in its inbox (a ZeroMQ
    /// connection's high-water marks, four windows); more are dropped, as a non-blocking send drops them.
    public var linkCapacity: Int { senderWindow * 4 }
    /// Outages at planned times, besides those drawn as choices.
    public var plannedOutages: [PlannedOutage] = []
    /// When set, every answered command's first send and answer times (simulated nanoseconds), in
    /// order of answer: what a test of latency before and after a stall reads.
    public var recordsAnswerTimes = false
    public private(set) var answerTimes: [(sentNanoseconds: Int64, answeredNanoseconds: Int64)] = []
    /// Read once: through `environment` and `scenario` every use copied (and retained) them.
    private let choices: ChoiceSource
    private let network: NetworkBehavior
    /// The app-side removal delay (probability, nanoseconds), nil when exploration did not turn it on.
    private let removalDelay: (probability: Double, nanoseconds: Int64)?

    public init(scenario: Scenario, environment: DeterministicEnvironment) throws {
        try scenario.validate()
        self.scenario = scenario
        self.environment = environment
        choices = environment.choices.stream(ChoiceStream.network)
        network = scenario.network
        if let points = scenario.apps.choicePoints, points.removalDelayProbability > 0 {
            removalDelay = (points.removalDelayProbability, Int64(points.removalDelayMilliseconds * 1e6))
        } else {
            removalDelay = nil
        }
        engine = try QueueEngine(catalog: scenario.catalog, storage: environment.storage)
        engine.keepsPayloads = false
        factory = RoleFactory(scenario: scenario, choices: environment.choices, content: environment.content)
        downloader = RoleFactory.Kind.allCases.firstIndex(of: .downloader)  // Slots are made in this order.
        serviceNanoseconds = scenario.network.queueServiceMicroseconds.map { Int64($0 * 1_000) }.flatMap { $0 > 0 ? $0 : nil }
        heartbeatNanoseconds = max(1_000_000, Int64(scenario.network.catchUpMilliseconds * 1e6))
        subscriberConfiguration = .init(silenceTimeout: .nanoseconds(heartbeatNanoseconds * 8), fetchRetryInterval: .seconds(1))
        var groups: TopicGroups?
        for kind in RoleFactory.Kind.allCases {
            let role = factory.make(kind, name: kind.rawValue)
            let origin = "\(role.name).0"
            slots.append(Slot(kind: kind, host: RoleHost(role: role), origin: origin,
                              subscriber: SubscriberState(startSequence: 1, configuration: subscriberConfiguration, now: epoch),
                              subscriberChoices: environment.choices.stream(ChoiceStream.subscriber(kind.rawValue)),
                              pipeline: CommandPipeline(origin: origin, window: CommandPipeline.standardWindow, policy: .standard, now: .now)))
            if kind == .apps, scenario.network.appsFollowDevices == true {
                let followed = Self.followedDevices(scenario.deviceNames, startSequence: 1, configuration: subscriberConfiguration, now: epoch)
                slots[slots.count - 1].followed = followed
                groups = TopicGroups(slot: slots.count - 1, devices: followed.devices)
            }
        }
        self.groups = groups
    }

    /// Runs until nothing is left to do (or the simulated-time bound), closes the log and reports.
    public func run() throws -> RunReport {
        guard environment.storage.lastSequence == 0 else {
            throw ConfigurationError("the log already holds a run; a deterministic run starts from an empty log", code: .logNotEmpty)
        }
        let header = self.header ?? scenario.header(runtime: "deterministic", startedAtUnixNanoseconds: 0)
        let started = try engine.start(header)
        let first = held.count
        for record in started { held.append(record.recorded) }
        appended(from: first)
        for index in slots.indices { slots[index].pipeline = makePipeline(origin: slots[index].origin) }
        for (index, outage) in plannedOutages.enumerated() { scheduler.schedule(at: outage.startNanoseconds, .outage(index)) }
        for index in slots.indices {
            // Each subscriber asks for the log from its start at once, as a live one does (one that follows its
            // devices once the run's first record is published, as a live observer process starts after the queue).
            if slots[index].followed == nil { maintainSubscriber(index) }
            var link = SimulatedLink(runtime: self, slot: index)
            slots[index].host.resume(over: &link)
        }
        let limit = Int64(scenario.maximumSimulatedSeconds * 1e9)
        var stoppedAtLimit = false
        // The run ends when only background work is left and every role has heard what was published.
        while scheduler.count > backgroundScheduled || subscriberIsBehind(), let (time, action) = scheduler.next() {
            if stoppedAtEventLimit { break }
            let isBackground = action.isBackground
            if isBackground { backgroundScheduled -= 1 }
            // Work for a process that is stalled or cut off waits for it; a wake-up with nothing to do
            // is no step. Neither moves the clock nor draws a choice, so runs without them are as before.
            if try passesOver(action, at: time) { continue }
            if time > limit {
                stoppedAtLimit = true
                break
            }
            now = time
            try carryOut(action)
            // Content files that cannot be written (`--write-content` on a full disk) stop the run:
            // they are the simulator's own files, not a simulated download failure. Only the
            // downloader's own steps can set it, so only they are followed by the (dynamic) read.
            if let downloader, action.concerns(slot: downloader), let failure = slots[downloader].role.environmentFailure { throw failure }
            // Heartbeats and timer checks are no steps of the run: no outage is drawn after them.
            if isBackground { continue }
            if network.crashProbability > 0, choices.chance(.crash, network.crashProbability) { crashOne() }
            if let probability = network.stallProbability, probability > 0, choices.chance(.stall, probability) { drawOutage(.stall) }
            if let probability = network.partitionProbability, probability > 0, choices.chance(.partition, probability) { drawOutage(.partition) }
        }
        try environment.storage.close()
        return RunReport(seed: scenario.seed, totals: engine.projection.totals, pending: engine.projection.pendingCount,
                         violations: engine.checker.violations, violationCount: engine.checker.violationCount,
                         logDirectory: environment.logDescription, simulatedNanoseconds: now,
                         duplicateCommands: earlierDuplicates + engine.duplicates, stoppedAtTimeLimit: stoppedAtLimit)
    }

    /// The downloader's slot: the one role whose environment can fail (its content files).
    private let downloader: Int?

    /// The role hosting the apps (devices), for tests and reports.
    public var apps: AppRole? { slots.first { $0.kind == .apps }?.role as? AppRole }

    private func carryOut(_ action: Action) throws {
        switch action {
        case .command(let commandSlot, _):
            let arrival = commandsInFlight.remove(commandSlot)
            guard !queueIsDown else {
                // Lost with the connection; its sender sends it again once it reconnects.
                slots[arrival.slot].atQueue -= 1
                counters.commandsHeldWhileQueueDown += 1
                return
            }
            if serviceNanoseconds == nil && inboxHead == inbox.count {
                try handleAtQueue(arrival)
            } else {
                inbox.append(arrival)
                if !serveScheduled {
                    serveScheduled = true
                    scheduler.schedule(at: max(now, queueBusyUntil), .serveQueue)
                }
            }
        case .serveQueue:
            serveScheduled = false
            guard inboxHead < inbox.count else { return }
            let arrival = inbox[inboxHead]
            inboxHead += 1
            if inboxHead == inbox.count {
                inbox.removeAll(keepingCapacity: true)
                inboxHead = 0
            }
            try handleAtQueue(arrival)
            queueBusyUntil = now + (serviceNanoseconds ?? 0)
            if inboxHead < inbox.count {
                serveScheduled = true
                scheduler.schedule(at: queueBusyUntil, .serveQueue)
            }
        case .answer(let index, _, let number, let status):
            answered(slot: index, number: number, status: status)
        case .wake(let index, _):
            slots[index].wakeAt = nil
            let work = slots[index].pipeline.due(now: instant(now))
            for (number, _) in work.resend {
                guard let entry = slots[index].unanswered[number] else { continue }
                counters.retriesSent += 1
                transmit(entry.command, from: index)
            }
            if !work.completions.isEmpty {
                // A live role exits when a command goes unanswered for good, and is restarted.
                counters.commandsGivenUp += work.completions.count
                crash(slot: index)
                return
            }
            // At least a millisecond on, as a live sender's poll waits: a wake-up that found nothing
            // due must not be scheduled at the same instant again.
            scheduleWake(index, notBefore: now + 1_000_000)
        case .outage(let index):
            let outage = plannedOutages[index]
            let target = outage.process == .queue ? slots.count : slots.firstIndex { outage.process == .role($0.kind) } ?? slots.count
            begin(outage.kind, of: target, forNanoseconds: outage.durationNanoseconds)
        case .publish(let first, let last):
            // With topic groups, finding what the app still needs looks at every device's stream: not at every round.
            publishedRounds &+= 1
            if groups == nil || publishedRounds % 64 == 0 { releaseHeard() }
            if !heartbeatsTicking {
                // Heartbeats tick while a subscriber may miss something; in a quiet stretch (days of
                // simulated time before a renewal) they would cost steps and draws and change nothing.
                heartbeatsTicking = true
                scheduleBackground(at: (now / heartbeatNanoseconds + 1) * heartbeatNanoseconds, .heartbeat)
            }
            // A role that follows its devices hears them on their topic groups instead (`publishToGroups`).
            let followedSlot = groups?.slot ?? -1
            for sequence in first...last {
                published = sequence
                let isFinish = held.isTransactionFinished(sequence)
                for index in slots.indices where index != followedSlot { send(sequence, isFinish: isFinish, to: index) }
            }
            if let groups { publishToGroups(groups, first: first, last: last) }
        case .deliver, .heartbeat, .heartbeatArrives, .fetchArrives, .fetchReply, .subscriberTimer, .groupRecords, .groupHeartbeats:
            carryOutOnEventLinks(action)
        case .timer(let tokenSlot, let index, let incarnation):
            let token = timerTokens.remove(tokenSlot)
            guard slots[index].incarnation == incarnation, !slots[index].isDown else { return }
            var link = SimulatedLink(runtime: self, slot: index)
            slots[index].host.fire(token, over: &link)
        case .restart(let index):
            try restart(index)
        case .restartQueue:
            earlierDuplicates += engine.duplicates
            engine = try QueueEngine(catalog: scenario.catalog, storage: environment.storage)
            engine.keepsPayloads = false
            queueIsDown = false
            queueIncarnation += 1
            admission = QueueAdmission()
            // Every sender connects again and sends what the old queue did not answer, in order.
            for index in slots.indices where !slots[index].isDown {
                slots[index].pipeline.reconnected(now: instant(now))
                scheduleWake(index, at: now)
            }
        }
    }

    @exclusivity(unchecked) private var queueBusyUntil: Int64 = 0
    /// When the last outage ends.
    private var outagesThrough: Int64 = -1

    private func makePipeline(origin: String) -> CommandPipeline {
        CommandPipeline(origin: origin, window: senderWindow, policy: retryPolicy, now: instant(now),
                        random: ChoiceRandom(choices: choices, kind: .retryJitter))
    }

    private func instant(_ nanoseconds: Int64) -> ContinuousClock.Instant { epoch + .nanoseconds(nanoseconds) }

    private func nanoseconds(_ instant: ContinuousClock.Instant) -> Int64 {
        let duration = instant - epoch
        return duration.components.seconds * 1_000_000_000 + duration.components.attoseconds / 1_000_000_000
    }

    /// Whether `action`, due at `time`, is passed over: put off until an outage of the process it
    /// concerns is over (what waited keeps its order), or dropped as stale.
    private func passesOver(_ action: Action, at time: Int64) throws -> Bool {
        var until: Int64 = -1
        switch action {
        case .command(_, let from):
            until = max(queueStalledThrough, queuePartitionedThrough, slots[from].partitionedThrough)
        case .serveQueue:
            guard inboxHead < inbox.count else {
                serveScheduled = false
                return true
            }
            until = queueStalledThrough
        case .publish:
            until = queueStalledThrough
        case .deliver(_, let index), .groupRecords(_, let index), .groupHeartbeats(_, let index):
            until = max(slots[index].stalledThrough, slots[index].partitionedThrough, queuePartitionedThrough)
        case .answer(let index, let incarnation, _, _):
            guard slots[index].incarnation == incarnation, !slots[index].isDown else { return true }
            until = max(slots[index].stalledThrough, slots[index].partitionedThrough, queuePartitionedThrough, queueStalledThrough)
        case .timer(_, let index, _):
            until = slots[index].stalledThrough
        case .wake(let index, let generation):
            guard slots[index].wakeGeneration == generation, !slots[index].isDown else { return true }
            until = slots[index].stalledThrough
            guard time <= until || slots[index].pipeline.outstandingCount > 0 else {
                slots[index].wakeAt = nil
                return true
            }
            if time > until, let wake = slots[index].pipeline.nextWake(now: instant(time)), nanoseconds(wake) > time {
                // Nothing due yet (answers came meanwhile): look again then.
                slots[index].wakeGeneration += 1
                slots[index].wakeAt = nanoseconds(wake)
                scheduler.schedule(at: nanoseconds(wake), .wake(slot: index, generation: slots[index].wakeGeneration))
                return true
            }
        case .heartbeat:
            until = queueStalledThrough
        case .heartbeatArrives(_, let index):
            until = max(slots[index].stalledThrough, slots[index].partitionedThrough, queuePartitionedThrough)
        case .fetchArrives(_, let index, _):
            until = max(queueStalledThrough, queuePartitionedThrough, slots[index].partitionedThrough)
        case .fetchReply(_, let index):
            until = max(slots[index].stalledThrough, slots[index].partitionedThrough, queuePartitionedThrough)
        case .subscriberTimer(let index, let generation):
            guard slots[index].subscriberTimerGeneration == generation, !slots[index].isDown else { return true }
            until = slots[index].stalledThrough
        case .restart, .restartQueue, .outage:
            return false
        }
        guard time <= until else { return false }
        // Just after the outage, before what was due then and after what waited before it: each link keeps its order.
        if action.isBackground { backgroundScheduled += 1 }
        scheduler.scheduleBeforeOthers(at: until + 1, action)
        return true
    }

    /// The queue takes one command: its rules (`QueueAdmission`), then the engine; the answer goes
    /// back once what the command appended is durable (the endpoint answers in order).
    private func handleAtQueue(_ arrival: Arrival) throws {
        slots[arrival.slot].atQueue -= 1
        let command = arrival.command
        let unpublished = Int(engine.projection.lastSequence - min(engine.projection.lastSequence, published))
        var status: AcknowledgementStatus
        var refusal = admission.atEndpoint(command, sender: nil, unpublishedRecords: unpublished)
        if refusal == nil {
            let report = SenderReport(lowestUnanswered: arrival.lowestUnanswered)
            refusal = engine.withProjection { admission.beforeEngine(command, report: report, projection: $0) }
        }
        if let refusal {
            if refusal.reason == .paymentBound { try engine.noteRefused(command.id, heard: HeardSequences([arrival.heard]), timestamp: now) }
            status = refusal.status
        } else {
            let first = held.count
            let decision = try engine.handle(command, timestamp: now, heard: HeardSequences([arrival.heard])) { held.append($0) }
            appended(from: first)
            switch decision {
            case .accepted: status = .accepted
            case .rejected: status = .rejected
            case .duplicate: status = .duplicate
            }
        }
        if status == .unavailable { counters.answeredUnavailable += 1 }
        if let probability = network.commandLossProbability, probability > 0, choices.chance(.networkLoss, probability) {
            counters.commandsLost += 1
            return
        }
        scheduler.schedule(at: max(now, lastDurable), .answer(slot: arrival.slot, incarnation: arrival.incarnation,
                                                              number: command.id.number, status: status))
    }

    /// The answer to one of a sender's commands; room in its window takes waiting commands.
    private func answered(slot index: Int, number: UInt64, status: AcknowledgementStatus) {
        let id = CommandID(origin: slots[index].origin, number: number)
        switch slots[index].pipeline.answered(id, status: status, now: instant(now)) {
        case .answered?, .duplicateOfUnsentCommand?, .gaveUp?:
            // (No other client uses a simulated role's origin: a "duplicate" of a command sent once is
            // a copy the link made, whose original was answered first.)
            if let entry = slots[index].unanswered.removeValue(forKey: number), recordsAnswerTimes {
                answerTimes.append((entry.sentAt, now))
            }
        case nil:
            break
        }
        var link = SimulatedLink(runtime: self, slot: index)
        slots[index].host.sendWaiting(over: &link)
        scheduleWake(index)
    }

    /// Makes sure the sender at `index` is woken by its pipeline's next wake-up (or none, with nothing outstanding).
    private func scheduleWake(_ index: Int, at forced: Int64? = nil, notBefore earliest: Int64 = 0) {
        guard let next = forced ?? slots[index].pipeline.nextWake(now: instant(now)).map(nanoseconds) else {
            if slots[index].wakeAt != nil {
                slots[index].wakeAt = nil
                slots[index].wakeGeneration += 1
            }
            return
        }
        let wake = max(next, earliest)
        if let scheduled = slots[index].wakeAt, scheduled <= wake { return }
        slots[index].wakeGeneration += 1
        slots[index].wakeAt = max(now, wake)
        scheduler.schedule(at: max(now, wake), .wake(slot: index, generation: slots[index].wakeGeneration))
    }

    /// A stall or partition of one process (`target`: a slot, or `slots.count` for the queue) drawn as choices.
    private func drawOutage(_ kind: PlannedOutage.Kind) {
        let choiceKind: ChoiceKind = kind == .stall ? .stall : .partition
        let target = choices.index(choiceKind, count: slots.count + 1)
        let duration = (network.outageLatency ?? NetworkBehavior.defaultOutageLatency).sampleNanoseconds(choices, choiceKind)
        begin(kind, of: target, forNanoseconds: duration)
    }

    private func begin(_ kind: PlannedOutage.Kind, of target: Int, forNanoseconds duration: Int64) {
        // One outage at a time: what waited for one is put after it once, so an outage beginning
        // while work waits for another could put later work on a link before earlier work.
        guard now > outagesThrough else { return }
        let through = now + max(1, duration)
        outagesThrough = through
        switch (kind, target == slots.count) {
        case (.stall, true): queueStalledThrough = max(queueStalledThrough, through)
        case (.partition, true): queuePartitionedThrough = max(queuePartitionedThrough, through)
        case (.stall, false): slots[target].stalledThrough = max(slots[target].stalledThrough, through)
        case (.partition, false): slots[target].partitionedThrough = max(slots[target].partitionedThrough, through)
        }
        if kind == .stall { counters.stalls += 1 } else { counters.partitions += 1 }
    }

    /// The events the engine added to `held` from position `start` on become durable after the
    /// log's latency (in append order), then are published.
    private func appended(from start: Int) {
        guard start < held.count else { return }
        let first = held.firstSequence + UInt64(start)
        let last = held.firstSequence + UInt64(held.count - 1)
        if let eventAppended {
            for sequence in first...last { held.lend(sequence, eventAppended) }
        }
        if last > eventLimit { stoppedAtEventLimit = true }
        let durable = max(lastDurable, now + network.durabilityLatency.sampleNanoseconds(choices, .durabilityDelay))
        lastDurable = durable
        scheduler.schedule(at: durable, .publish(first: first, last: last))
    }

    /// Forgets the events every role has heard (a role that is down holds them until it is back).
    private func releaseHeard() {
        var heardByAll = UInt64.max
        for index in slots.indices where index != groups?.slot { heardByAll = min(heardByAll, slots[index].delivered) }
        if let groups { heardByAll = min(heardByAll, followedReleasePoint(groups)) }
        held.release(through: heardByAll)
    }

    /// One published event on the link to the role at `index`: delayed, possibly lost (really
    /// missing, until its subscriber notices the gap and fetches it) or duplicated.
    private func send(_ sequence: UInt64, isFinish: Bool, to index: Int) {
        var arrival = max(now + network.deliveryLatency.sampleNanoseconds(choices, .networkDelay), slots[index].lastEventArrival)
        let isLost = network.lossProbability > 0 && choices.chance(.networkLoss, network.lossProbability)
        if isFinish, slots[index].kind == .apps, let removalDelay, choices.chance(.removalDelay, removalDelay.probability) {
            // The app hears `removedTransactions` late (and, the link keeping its order, what follows too).
            arrival += removalDelay.nanoseconds
        }
        if isLost {
            counters.eventsLost += 1
        } else {
            slots[index].lastEventArrival = arrival
            scheduler.schedule(at: arrival, .deliver(sequence: sequence, slot: index))
        }
        if network.duplicateProbability > 0, choices.chance(.networkDuplicate, network.duplicateProbability) {
            let copy = arrival + network.deliveryLatency.sampleNanoseconds(choices, .networkDelay)
            slots[index].lastEventArrival = copy
            scheduler.schedule(at: copy, .deliver(sequence: sequence, slot: index))
        }
    }

    /// Whether the sender of the role at `index` has room in its window.
    fileprivate func senderHasCapacity(slot index: Int) -> Bool { slots[index].pipeline.hasCapacity }

    /// A role's timer: handed back at the virtual time it is due, to the incarnation that set it.
    fileprivate func setTimer(afterNanoseconds delay: Int64, _ token: TimerToken, slot index: Int) {
        let tokenSlot = timerTokens.insert(token)
        scheduler.schedule(at: now + max(0, delay), .timer(tokenSlot, slot: index, incarnation: slots[index].incarnation))
    }

    /// Numbers `body` in the role's pipeline and sends it.
    fileprivate func submit(_ body: CommandBody, slot index: Int) {
        guard let (command, _) = slots[index].pipeline.submit(body, now: instant(now), encode: { _ in [] }) else {
            preconditionFailure("submitted to a full window")
        }
        slots[index].unanswered[command.id.number] = (command, now)
        transmit(command, from: index)
        if slots[index].wakeAt == nil { scheduleWake(index) }
    }

    /// One copy of `command` on the link from the role at `index` to the queue.
    private func transmit(_ command: Command, from index: Int) {
        let arrival = max(now + network.deliveryLatency.sampleNanoseconds(choices, .networkDelay), slots[index].lastCommandArrival)
        slots[index].lastCommandArrival = arrival
        // Drawn before the original is scheduled (scheduling draws nothing, so the draws and
        // the scheduler's order are as before), so that only a duplicated command is copied.
        if network.duplicateProbability > 0, choices.chance(.networkDuplicate, network.duplicateProbability) {
            scheduleCommand(command, from: index, arrival: arrival)
            // A copy whose original did arrive: the engine must answer it "duplicate".
            let copy = arrival + network.deliveryLatency.sampleNanoseconds(choices, .networkDelay)
            slots[index].lastCommandArrival = copy
            scheduleCommand(command, from: index, arrival: copy)
        } else {
            scheduleCommand(command, from: index, arrival: arrival)
        }
    }

    private func scheduleCommand(_ command: Command, from index: Int, arrival: Int64) {
        if let probability = network.commandLossProbability, probability > 0, choices.chance(.networkLoss, probability) {
            counters.commandsLost += 1
            return
        }
        guard slots[index].atQueue < linkCapacity else {
            counters.commandsDroppedAtFullLink += 1
            return
        }
        slots[index].atQueue += 1
        let commandSlot = commandsInFlight.insert(Arrival(command: command, slot: index, incarnation: slots[index].incarnation, heard: slots[index].delivered,
                                                                 lowestUnanswered: slots[index].pipeline.lowestUnanswered()))
        scheduler.schedule(at: arrival, .command(commandSlot, from: index))
    }

    /// One role (or the queue) goes down; it comes back after the restart latency.
    private func crashOne() {
        let target = choices.index(.crash, count: slots.count + 1)
        let back = now + max(1, network.restartLatency.sampleNanoseconds(choices))
        if target == slots.count {
            guard !queueIsDown else { return }
            queueIsDown = true
            // What waited in its inbox is lost with it; the senders send it again once they reconnect.
            for arrival in inbox[inboxHead...] { slots[arrival.slot].atQueue -= 1 }
            inbox.removeAll()
            inboxHead = 0
            counters.crashes += 1
            scheduler.schedule(at: back, .restartQueue)
            return
        }
        crash(slot: target, back: back)
    }

    /// The role at `index` goes down (its sender with it) and comes back at `back`.
    private func crash(slot index: Int, back: Int64? = nil) {
        guard !slots[index].isDown else { return }
        let back = back ?? now + max(1, network.restartLatency.sampleNanoseconds(choices))
        slots[index].isDown = true
        slots[index].incarnation += 1
        slots[index].origin = "\(slots[index].role.name).\(slots[index].incarnation)"
        slots[index].unanswered.removeAll()
        slots[index].host.dropWaiting()
        slots[index].wakeAt = nil
        slots[index].wakeGeneration += 1
        slots[index].subscriberTimerAt = nil
        slots[index].subscriberTimerGeneration += 1
        counters.crashes += 1
        scheduler.schedule(at: back, .restart(slot: index))
    }

    /// A new instance reads the published log silently, then takes up what it must.
    private func restart(_ index: Int) throws {
        let host = slots[index].host
        host.replace(with: factory.make(slots[index].kind, name: slots[index].kind.rawValue))
        let through = published
        try environment.storage.forEachRecord(from: 1) { sequence, timestamp, payload in
            guard sequence <= through else { return }
            host.catchUp(try LogProjection.decode(sequence: sequence, timestamp: timestamp, payload: payload))
        }
        slots[index].origin = "\(host.role.name).\(slots[index].incarnation)"
        slots[index].isDown = false
        slots[index].delivered = through
        slots[index].pipeline = makePipeline(origin: slots[index].origin)
        // A new subscriber, from where the log read ends: it asks the queue for anything later at once.
        slots[index].subscriber = SubscriberState(startSequence: through + 1, configuration: subscriberConfiguration, now: instant(now))
        if let groups, groups.slot == index {
            slots[index].followed = Self.followedDevices(groups.devices, startSequence: through + 1, configuration: subscriberConfiguration, now: instant(now))
            groups.restarted(through: through)
        }
        if slots[index].followed == nil || groups?.started == true { maintainSubscriber(index) }
        var link = SimulatedLink(runtime: self, slot: index)
        host.resume(over: &link)
    }
}

// MARK: The event links: publishing, heartbeats and FETCH through each role's `SubscriberState`

extension DeterministicRuntime {
    private func scheduleBackground(at time: Int64, _ action: Action) {
        backgroundScheduled += 1
        scheduler.schedule(at: time, action)
    }

    /// Whether a role that is up has not heard everything published yet (a lost event it has not
    /// noticed): heartbeats must go on until it has.
    private func subscriberIsBehind() -> Bool {
        for index in slots.indices where !slots[index].isDown {
            if let followed = slots[index].followed, let groups {
                if groups.isBehind(followed) { return true }
            } else if slots[index].delivered < published {
                return true
            }
        }
        return false
    }

    private func carryOutOnEventLinks(_ action: Action) {
        switch action {
        case .deliver(let sequence, let index):
            guard !slots[index].isDown else { return }
            if sequence <= slots[index].subscriber.deliveredThrough { counters.duplicatesDelivered += 1 }
            slots[index].subscriber.receivedLive(LoggedSequence(sequence: sequence), previous: sequence - 1, now: instant(now), into: &deliveredBuffer)
            handOver(slot: index)
            maintainSubscriber(index)
        case .heartbeat:
            guard subscriberIsBehind() else {
                heartbeatsTicking = false
                return
            }
            scheduleBackground(at: now + heartbeatNanoseconds, .heartbeat)
            guard !queueIsDown else { return }
            for index in slots.indices where !slots[index].isDown {
                if let groups, groups.slot == index { sendGroupHeartbeats(groups, to: index) } else { sendHeartbeat(to: index) }
            }
        case .heartbeatArrives(let through, let index):
            guard !slots[index].isDown else { return }
            slots[index].subscriber.receivedHeartbeat(through: through, now: instant(now))
            maintainSubscriber(index)
        case .fetchArrives(let from, let index, let incarnation):
            answerFetch(from: from, slot: index, incarnation: incarnation)
        case .fetchReply(let replySlot, let index):
            let reply = fetchReplies.remove(replySlot)
            guard slots[index].incarnation == reply.incarnation, !slots[index].isDown else { return }
            if slots[index].followed != nil {
                receivedFollowedFetchReply(reply, slot: index)
                return
            }
            replyBuffer.removeAll(keepingCapacity: true)
            if reply.through >= reply.from {
                for sequence in reply.from...reply.through { replyBuffer.append(LoggedSequence(sequence: sequence)) }
            }
            let gapsBefore = slots[index].subscriber.counters.gapsRecovered
            slots[index].subscriber.receivedFetchReply(from: reply.from, records: replyBuffer, completeThrough: max(reply.through, reply.from - 1),
                                                       published: reply.published, now: instant(now), into: &deliveredBuffer)
            counters.gapsRecovered += slots[index].subscriber.counters.gapsRecovered - gapsBefore
            handOver(slot: index)
            maintainSubscriber(index)
        case .subscriberTimer(let index, _):
            slots[index].subscriberTimerAt = nil
            maintainSubscriber(index)
        case .groupRecords(let messageSlot, let index), .groupHeartbeats(let messageSlot, let index):
            receivedGroupMessage(groupMessages.remove(messageSlot), slot: index)
        default:
            preconditionFailure("\(action) is not on an event link")
        }
    }

    /// Hands the role at `index` what its subscriber delivered, in order: the role hears nothing else.
    private func handOver(slot index: Int) {
        guard !deliveredBuffer.isEmpty else { return }
        let host = slots[index].host
        var link = SimulatedLink(runtime: self, slot: index)
        for record in deliveredBuffer {
            precondition(record.sequence == slots[index].delivered + 1,
                         "\(slots[index].kind) heard \(record.sequence) after \(slots[index].delivered): its subscriber broke the log's order")
            slots[index].delivered = record.sequence
            eventHeard?(slots[index].kind, record.sequence)
            // The role reacts to the held event, lent to it without a copy (roles return effects and
            // never call back, so nothing else reads the event meanwhile).
            held.lend(record.sequence) { host.deliver($0, over: &link) }
        }
        deliveredBuffer.removeAll(keepingCapacity: true)
    }

    /// Runs the subscriber's timers to now: a FETCH it wants goes out, a silence is counted, and its
    /// next deadline is checked then.
    private func maintainSubscriber(_ index: Int) {
        let fetchFrom: UInt64?
        let isFetchOutstanding: Bool
        if slots[index].followed != nil {
            fetchFrom = slots[index].followed!.due(now: instant(now))
            if let fetchFrom { sendFetch(from: fetchFrom, slot: index) }
            for change in slots[index].followed!.takeStateChanges() where change == .publisherSilent { counters.publisherSilences += 1 }
            isFetchOutstanding = slots[index].followed!.isFetchOutstanding
        } else {
            fetchFrom = slots[index].subscriber.due(now: instant(now))
            if let fetchFrom { sendFetch(from: fetchFrom, slot: index) }
            for change in slots[index].subscriber.takeStateChanges() where change == .publisherSilent { counters.publisherSilences += 1 }
            isFetchOutstanding = slots[index].subscriber.isFetchOutstanding
        }
        // Timers are checked only while a FETCH is outstanding (its retry): a silence is noticed when the
        // subscriber next looks, not by a timer that would tick through quiet stretches. Only a FETCH
        // sent brings the deadline closer; a pending check otherwise comes no later, and looks again then.
        guard isFetchOutstanding, fetchFrom != nil || slots[index].subscriberTimerAt == nil,
              let deadline = (slots[index].followed.map { $0.nextDeadline() } ?? slots[index].subscriber.nextDeadline()).map(nanoseconds)
        else { return }
        if let scheduled = slots[index].subscriberTimerAt, scheduled <= deadline { return }
        slots[index].subscriberTimerGeneration += 1
        slots[index].subscriberTimerAt = max(now, deadline)
        scheduleBackground(at: max(now, deadline), .subscriberTimer(slot: index, generation: slots[index].subscriberTimerGeneration))
    }

    /// A FETCH on the subscriber's request link; lost ones are sent again by the subscriber's own timer.
    private func sendFetch(from: UInt64, slot index: Int) {
        if slots[index].followed != nil {
            slots[index].followed!.fetchSent(from: from, now: instant(now), sent: true)
        } else {
            slots[index].subscriber.fetchSent(now: instant(now))
        }
        counters.fetchesSent += 1
        guard let arrival = requestLinkArrival(after: slots[index].lastFetchArrival, slot: index) else {
            counters.fetchesLost += 1
            return
        }
        slots[index].lastFetchArrival = arrival
        scheduler.schedule(at: arrival, .fetchArrives(from: from, slot: index, incarnation: slots[index].incarnation))
    }

    /// When a FETCH or its reply, sent now on a subscriber's request link whose last message arrives at
    /// `last`, arrives (the link keeps its order); nil when the link loses it. The delay is drawn before
    /// the loss, from the subscriber's own stream.
    private func requestLinkArrival(after last: Int64, slot index: Int) -> Int64? {
        let draws = slots[index].subscriberChoices
        let arrival = max(now + network.deliveryLatency.sampleNanoseconds(draws, .networkDelay), last)
        if let probability = network.commandLossProbability, probability > 0, draws.chance(.networkLoss, probability) { return nil }
        return arrival
    }

    /// The queue answers a FETCH from its log: at most a batch of what it has published from `from` on.
    private func answerFetch(from: UInt64, slot index: Int, incarnation: Int) {
        guard !queueIsDown else {
            counters.fetchesLost += 1
            return
        }
        let from = max(1, from)
        let through = min(published, from + Self.fetchBatchSize - 1)
        guard let arrival = requestLinkArrival(after: slots[index].lastReplyArrival, slot: index) else {
            counters.fetchesLost += 1
            return
        }
        slots[index].lastReplyArrival = arrival
        let records = slots[index].followed == nil ? nil : followedRecords(from: from, through: through)
        let reply = fetchReplies.insert(FetchReply(from: from, through: through, published: published, incarnation: incarnation, records: records))
        scheduler.schedule(at: arrival, .fetchReply(reply, slot: index))
    }

    /// A heartbeat on the event link to the role at `index`, behind the events sent before it.
    private func sendHeartbeat(to index: Int) {
        let draws = slots[index].subscriberChoices
        let arrival = max(now + network.deliveryLatency.sampleNanoseconds(draws, .networkDelay), slots[index].lastEventArrival)
        if network.lossProbability > 0, draws.chance(.networkLoss, network.lossProbability) {
            counters.heartbeatsLost += 1
            return
        }
        slots[index].lastEventArrival = arrival
        scheduleBackground(at: arrival, .heartbeatArrives(through: published, slot: index))
    }
}

// MARK: Topic groups: the app role follows each of its devices (`NetworkBehavior.appsFollowDevices`)

extension DeterministicRuntime {
    /// The app role's subscriber when it follows its devices, with the settings of the others.
    fileprivate static func followedDevices(_ devices: [String], startSequence: UInt64, configuration: SubscriberState<LoggedSequence>.Configuration,
                                            now: ContinuousClock.Instant) -> FollowedDevices<LoggedDeviceRecord> {
        let streams = SubscriberState<LoggedDeviceRecord>.Configuration(
            silenceTimeout: configuration.silenceTimeout, fetchRetryInterval: configuration.fetchRetryInterval,
            maximumHeldRecords: configuration.maximumHeldRecords)
        return FollowedDevices(devices: devices, startSequence: startSequence, configuration: streams, now: now)
    }

    /// A round of published records on the followed devices' groups, as the queue publishes it: one message
    /// per group that has records in it (with the group's record before them), each delayed, lost or
    /// duplicated on its own, on the one event link (one connection: its order kept). Run-wide records go
    /// to no group; the app hears them by FETCH. The first round starts the subscriber (its first FETCH).
    private func publishToGroups(_ groups: TopicGroups, first: UInt64, last: UInt64) {
        var rounds: [(group: Int, sequences: [UInt64])] = []
        var roundOfGroup: [Int: Int] = [:]
        for sequence in first...last {
            var device: String?
            held.lend(sequence) { device = $0.event.device }
            guard let device else {
                groups.lastRunWide = sequence
                continue
            }
            // Scenario device names have one width, so no device's name starts with another's: its group is its own.
            guard let group = groups.groupOfDevice[device] else { continue }
            if let round = roundOfGroup[group] {
                rounds[round].sequences.append(sequence)
            } else {
                roundOfGroup[group] = rounds.count
                rounds.append((group, [sequence]))
            }
        }
        for round in rounds {
            let previous = groups.last[round.group]
            groups.last[round.group] = round.sequences[round.sequences.count - 1]
            sendGroupRecords(group: round.group, previous: previous, round.sequences, to: groups.slot)
        }
        if !groups.started {
            groups.started = true
            if !slots[groups.slot].isDown { maintainSubscriber(groups.slot) }
        }
    }

    /// One group's records of a round on the event link to the role at `index`; every draw from its subscriber's stream.
    private func sendGroupRecords(group: Int, previous: UInt64, _ sequences: [UInt64], to index: Int) {
        let draws = slots[index].subscriberChoices
        var arrival = max(now + network.deliveryLatency.sampleNanoseconds(draws, .networkDelay), slots[index].lastEventArrival)
        let isLost = network.lossProbability > 0 && draws.chance(.networkLoss, network.lossProbability)
        if let removalDelay, sequences.contains(where: { held.isTransactionFinished($0) }), draws.chance(.removalDelay, removalDelay.probability) {
            arrival += removalDelay.nanoseconds
        }
        let message = GroupLinkMessage.records(group: group, previous: previous, sequences: sequences)
        if isLost {
            counters.eventsLost += sequences.count
        } else {
            slots[index].lastEventArrival = arrival
            scheduler.schedule(at: arrival, .groupRecords(groupMessages.insert(message), slot: index))
        }
        if network.duplicateProbability > 0, draws.chance(.networkDuplicate, network.duplicateProbability) {
            let copy = arrival + network.deliveryLatency.sampleNanoseconds(draws, .networkDelay)
            slots[index].lastEventArrival = copy
            scheduler.schedule(at: copy, .groupRecords(groupMessages.insert(message), slot: index))
        }
    }

    /// Each group's heartbeat (its last published sequence) on the event link to the role at `index`, behind
    /// the records sent before; each lost on its own.
    private func sendGroupHeartbeats(_ groups: TopicGroups, to index: Int) {
        let draws = slots[index].subscriberChoices
        let arrival = max(now + network.deliveryLatency.sampleNanoseconds(draws, .networkDelay), slots[index].lastEventArrival)
        var heartbeats: [(group: Int, last: UInt64)] = []
        for group in groups.last.indices {
            if network.lossProbability > 0, draws.chance(.networkLoss, network.lossProbability) {
                counters.heartbeatsLost += 1
            } else {
                heartbeats.append((group, groups.last[group]))
            }
        }
        guard !heartbeats.isEmpty else { return }
        slots[index].lastEventArrival = arrival
        scheduleBackground(at: arrival, .groupHeartbeats(groupMessages.insert(.heartbeats(heartbeats)), slot: index))
    }

    private func receivedGroupMessage(_ message: GroupLinkMessage, slot index: Int) {
        guard !slots[index].isDown, let devices = slots[index].followed?.devices else { return }
        switch message {
        case .records(let group, let previous, let sequences):
            let records = sequences.map { LoggedDeviceRecord(sequence: $0, device: devices[group]) }
            let duplicatesBefore = slots[index].followed!.streams[group].counters.duplicatesDropped
            slots[index].followed!.receivedRecords(group: devices[group], previous: previous, records, now: instant(now), into: &followedBuffer)
            counters.duplicatesDelivered += slots[index].followed!.streams[group].counters.duplicatesDropped - duplicatesBefore
            handOverFollowed(slot: index)
        case .heartbeats(let heartbeats):
            for (group, last) in heartbeats { slots[index].followed!.receivedHeartbeat(group: devices[group], last: last, now: instant(now)) }
        }
        maintainSubscriber(index)
    }

    /// The records of a FETCH reply to a role that follows its devices, each with its device. Those the
    /// runtime no longer holds were heard by every stream they could concern (`followedReleasePoint`).
    private func followedRecords(from: UInt64, through: UInt64) -> [LoggedDeviceRecord] {
        let start = max(from, held.firstSequence)
        guard through >= start else { return [] }
        var records: [LoggedDeviceRecord] = []
        records.reserveCapacity(Int(through - start + 1))
        for sequence in start...through {
            var device: String?
            held.lend(sequence) { device = $0.event.device }
            records.append(LoggedDeviceRecord(sequence: sequence, device: device))
        }
        return records
    }

    private func receivedFollowedFetchReply(_ reply: FetchReply, slot index: Int) {
        let gapsBefore = slots[index].followed!.counters.gapsRecovered
        slots[index].followed!.receivedFetchReply(from: reply.from, records: reply.records ?? [], completeThrough: max(reply.through, reply.from - 1),
                                                  published: reply.published, now: instant(now), into: &followedBuffer)
        counters.gapsRecovered += slots[index].followed!.counters.gapsRecovered - gapsBefore
        handOverFollowed(slot: index)
        maintainSubscriber(index)
    }

    /// Hands the role at `index` what its devices' streams delivered: each device's events once and in
    /// order (across devices, in the order their streams delivered them, as live).
    private func handOverFollowed(slot index: Int) {
        guard let groups else { return }
        slots[index].delivered = slots[index].followed!.deliveredThrough
        guard !followedBuffer.isEmpty else { return }
        let host = slots[index].host
        var link = SimulatedLink(runtime: self, slot: index)
        for record in followedBuffer {
            let group = record.device.flatMap { groups.groupOfDevice[$0] } ?? groups.devices.count
            precondition(record.sequence > groups.heard[group],
                         "\(record.device ?? "run-wide") heard \(record.sequence) after \(groups.heard[group]): its stream broke the log's order")
            groups.heard[group] = record.sequence
            eventHeard?(slots[index].kind, record.sequence)
            held.lend(record.sequence) { host.deliver($0, over: &link) }
        }
        followedBuffer.removeAll(keepingCapacity: true)
    }

    /// Through where the role that follows its devices needs nothing held: a stream still behind its group
    /// needs what follows its last delivered record; one that has all of its group's needs nothing published.
    private func followedReleasePoint(_ groups: TopicGroups) -> UInt64 {
        guard let followed = slots[groups.slot].followed, !slots[groups.slot].isDown else { return slots[groups.slot].delivered }
        var point = followed.runWideThrough < groups.lastRunWide ? followed.runWideThrough : published
        for (group, stream) in followed.streams.enumerated() where stream.deliveredThrough < groups.last[group] {
            point = min(point, stream.deliveredThrough)
        }
        return point
    }
}

/// The app role's topic groups (`NetworkBehavior.appsFollowDevices`): the queue's side (each group's last
/// published sequence) and what the role heard of each device, to check each device's order.
private final class TopicGroups {
    let slot: Int
    /// The followed devices, in `FollowedDevices`' order (a group's index is its device's).
    let devices: [String]
    let groupOfDevice: [String: Int]
    /// Each group's last published record; 0 before its first.
    var last: [UInt64]
    var lastRunWide: UInt64 = 0
    /// The last record the role heard of each device, and (at `devices.count`) of the run-wide ones.
    var heard: [UInt64]
    /// The subscriber has started (at the first published round).
    var started = false

    init(slot: Int, devices: [String]) {
        self.slot = slot
        self.devices = devices
        groupOfDevice = Dictionary(uniqueKeysWithValues: devices.enumerated().map { ($1, $0) })
        last = Array(repeating: 0, count: devices.count)
        heard = Array(repeating: 0, count: devices.count + 1)
    }

    /// A stream has not delivered its group's last record yet: heartbeats must go on until it has.
    func isBehind(_ followed: FollowedDevices<LoggedDeviceRecord>) -> Bool {
        followed.streams.indices.contains { followed.streams[$0].deliveredThrough < last[$0] }
    }

    /// A restarted role read the log through `through` silently.
    func restarted(through: UInt64) {
        for index in heard.indices { heard[index] = max(heard[index], through) }
    }
}

/// A message on a topic-group event link.
private enum GroupLinkMessage {
    /// A group's records of one round (sequences; the events stay in `held`), with the group's record before them.
    case records(group: Int, previous: UInt64, sequences: [UInt64])
    /// The groups' heartbeats not lost on the link: each group's last published sequence.
    case heartbeats([(group: Int, last: UInt64)])
}

/// A record a followed device's stream orders: its sequence and device (nil for a run-wide one).
private struct LoggedDeviceRecord: DeviceRecord {
    var sequence: UInt64
    var device: String?
}

/// A record the simulated subscribers order: the event stays in the runtime's `held` ring, only its sequence travels.
private struct LoggedSequence: SequencedRecord {
    var sequence: UInt64
}

/// The deterministic runtime's transport for the role at `slot`: the virtual clock, its sender's
/// `CommandPipeline` over the network model, and the run's scheduler for its timers.
private struct SimulatedLink: RoleTransport {
    typealias Failure = Never
    // Unowned: a link lives for one call of the runtime that made it, and costs no reference counting.
    unowned(unsafe) let runtime: DeterministicRuntime
    let slot: Int

    var now: Int64 { runtime.now }
    var hasCapacity: Bool { runtime.senderHasCapacity(slot: slot) }
    func submit(_ body: CommandBody) { runtime.submit(body, slot: slot) }
    func setTimer(afterNanoseconds delay: Int64, _ token: TimerToken) { runtime.setTimer(afterNanoseconds: delay, token, slot: slot) }
}

/// A `RandomNumberGenerator` drawing from the run's choices, so a sender's jitter is a recorded choice.
private struct ChoiceRandom: RandomNumberGenerator {
    let choices: ChoiceSource
    let kind: ChoiceKind

    mutating func next() -> UInt64 { choices.choose(kind, below: unitChoiceBound) << 11 }
}

/// The appended events not yet heard by every role, in sequence order, in one ring of memory
/// that grows to the most held at once: no allocation per event. An event is passed to a role
/// by moving it out of its memory and back (`lend`: bits moved, nothing retained); read from
/// memory that someone could change meanwhile, it would be copied for the call, every string and
/// array in it retained and then released. The run loop is the only reader, and it reads nothing
/// else while a role reacts.
private struct HeldEvents: ~Copyable {
    private var events: UnsafeMutablePointer<RecordedEvent>
    /// Whether each is a `transactionFinished` (the removal delay applies), so that publishing
    /// does not copy the event to look at it.
    private var finishes: UnsafeMutablePointer<Bool>
    /// A power of two, so that a position in the ring is a mask, not a division.
    private var capacity: Int
    /// Where the first held event is in the ring.
    private var head = 0
    private(set) var count = 0
    /// The sequence of the first held event (the engine's sequences follow one another).
    private(set) var firstSequence: UInt64 = 1

    init() {
        capacity = 64
        events = .allocate(capacity: capacity)
        finishes = .allocate(capacity: capacity)
    }

    deinit {
        for offset in 0..<count { (events + (head + offset) & (capacity - 1)).deinitialize(count: 1) }
        events.deallocate()
        finishes.deallocate()
    }

    @inline(__always)
    private func position(_ sequence: UInt64) -> Int {
        precondition(sequence >= firstSequence && sequence - firstSequence < UInt64(count),
                     "event \(sequence) is not held (held: \(firstSequence) and \(count) after it)")
        return (head + Int(sequence - firstSequence)) & (capacity - 1)
    }

    mutating func append(_ recorded: consuming RecordedEvent) {
        precondition(recorded.sequence == firstSequence + UInt64(count),
                     "event \(recorded.sequence) appended after \(firstSequence + UInt64(count) - 1)")
        if count == capacity { grow() }
        let index = (head + count) & (capacity - 1)
        var isFinish = false
        if case .transactionFinished = recorded.event { isFinish = true }
        finishes[index] = isFinish
        (events + index).initialize(to: recorded)
        count += 1
    }

    func isTransactionFinished(_ sequence: UInt64) -> Bool { finishes[position(sequence)] }

    @inline(__always)
    func lend(_ sequence: UInt64, _ body: (RecordedEvent) -> Void) {
        let slot = events + position(sequence)
        let event = slot.move()
        body(event)
        slot.initialize(to: consume event)
    }

    /// Forgets the events through `sequence` (those before the first held are long gone).
    mutating func release(through sequence: UInt64) {
        guard sequence >= firstSequence else { return }
        let released = min(Int(sequence - firstSequence + 1), count)
        for _ in 0..<released {
            (events + head).deinitialize(count: 1)
            head = (head + 1) & (capacity - 1)
        }
        count -= released
        firstSequence += UInt64(released)
        if count == 0 { head = 0 }
    }

    /// Twice the room, the held events moved (not copied) to the front of the new ring.
    private mutating func grow() {
        let larger = capacity * 2
        let moved = UnsafeMutablePointer<RecordedEvent>.allocate(capacity: larger)
        let movedFinishes = UnsafeMutablePointer<Bool>.allocate(capacity: larger)
        for offset in 0..<count {
            let from = (head + offset) & (capacity - 1)
            (moved + offset).moveInitialize(from: events + from, count: 1)
            movedFinishes[offset] = finishes[from]
        }
        events.deallocate()
        finishes.deallocate()
        events = moved
        finishes = movedFinishes
        capacity = larger
        head = 0
    }
}
