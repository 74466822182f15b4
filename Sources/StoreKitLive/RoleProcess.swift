import Bus
import Foundation
import Logging
import StoreKitModel
import StoreKitRoles
import StoreKitRuntime
import ZeroMQ

/// Runs a store, downloader or observer role as a process: events from the queue in,
/// commands to the queue out, timers on the monotonic clock. The role code is the same
/// the deterministic simulation runs.
public final class RoleProcess {
    public let topology: Topology
    public let process: ProcessSpecification
    public let runDirectory: URL
    private let logger: Logger

    /// How long the queue may stay silent (no events, no heartbeats) before this process
    /// gives up with an error.
    public var queueSilenceLimitSeconds: Double = 15
    /// Commands waiting for room in the sender's window. At this many the role stops reading events
    /// (which wait in the subscriber's connection, or are fetched again once dropped) and works off
    /// its backlog as the queue acknowledges it: a burst of other clients' commands makes the store
    /// lag, not fail (docs/reliability.md, "Bounds").
    public static let maximumWaitingCommands = 100_000
    /// Events handed to the role per round of `react`; the commands they made go out before the next
    /// ones. A whole received batch at once (thousands under load) held every command it made until the
    /// last event was handled, so the queue sat idle and then got them all in one burst: the store and
    /// the queue took turns instead of working at the same time.
    public static let eventsPerRound = 256

    /// The next round's share of `unread` (at most `eventsPerRound` events), taken from it. Once the
    /// last is taken, `unread` lets go of the received batch's storage (an empty slice of it would keep it).
    public static func takeRound<Element>(from unread: inout ArraySlice<Element>) -> ArraySlice<Element> {
        let share = unread.prefix(eventsPerRound)
        unread = unread.count > eventsPerRound ? unread.dropFirst(eventsPerRound) : []
        return share
    }
    /// A role to run instead of the topology's (a live replay plays recorded users, store and downloader).
    public var replacementRole: Role?

    public init(topology: Topology, name: String, runDirectory: URL, logger: Logger) throws {
        self.topology = topology
        self.process = try topology.process(named: name)
        guard process.role != .queue else {
            throw TopologyError(file: topology.file, keyPath: "processes", problem: "'\(name)' is the queue; run it with `sksim queue`")
        }
        self.runDirectory = runDirectory
        self.logger = logger
    }

    /// Exit status of an observer process stopped (by a signal, or its supervisor gone) before its
    /// apps were done: 128 + SIGTERM, as a shell reports it.
    public static let stoppedStatus: Int32 = 143
    /// Exit status of a role that found the run cannot be trusted (another client sent commands
    /// under its ids): `sksim run` fails the run instead of restarting it.
    public static let untrustedRunStatus: Int32 = 4

    public enum Outcome: Sendable, Equatable {
        /// An observer whose devices are done and settled.
        case finished
        /// Stopped by SIGTERM or SIGINT.
        case stopped
    }

    /// The role, over this process's environment: its own choices (drawn from the seed and the
    /// process's name) and real content files under the run directory.
    private func makeRole() -> Role {
        if let replacementRole { return replacementRole }
        let factory = RoleFactory(scenario: topology.scenario, choices: SeededChoices(seed: topology.scenario.seed, stream: process.name),
                                  content: FileContentStorage(root: runDirectory))
        switch process.role {
        case .store: return factory.make(.store, name: process.name)
        case .downloader: return factory.make(.downloader, name: process.name)
        case .observer, .queue: return factory.make(.apps, name: process.name, deviceIndices: process.deviceIndices)
        case .appStoreServer: preconditionFailure("the App Store server reads the log in its own process (sksim appStoreServer), not as a role")
        }
    }

    public func run() throws -> Outcome {
        let context = try ZeroMQContext()
        let subscriber: PartitionedSubscriber, sender: PartitionedSender
        do {
            (subscriber, sender) = try connect(context)
        } catch {
            context.terminate()
            throw error
        }
        defer {
            subscriber.close()
            sender.close()
            context.terminate()
        }
        let host = RoleHost(role: makeRole())
        var transport = LiveRoleTransport(sender: sender, processName: process.name)
        // Every role catches up on history silently, then takes up what it must: a restarted
        // store decides what waited, a downloader restarts transfers, apps relaunch (R-Q4).
        let caughtUp = try catchUp(subscriber) { recorded in host.catchUp(recorded) }
        logger.info("caught up", metadata: ["events": "\(caughtUp)"])
        transport.tick()
        try host.resume(over: &transport)
        // Caught up and reacting from here on: a benchmark starts its measured load only now, so that
        // this process's start-up is not counted as the latency of the lifecycles that wait for it.
        try? ReadyNote.write(process: process.name, runDirectory: runDirectory)
        if try react(host, subscriber: subscriber, transport: &transport) { return .finished }
        // Let commands already sent be acknowledged, within a bound.
        let deadline = LiveClock.monotonicNanoseconds() + 1_000_000_000
        while sender.outstandingCount > 0 && LiveClock.monotonicNanoseconds() < deadline {
            _ = try sender.poll(timeout: .milliseconds(10))
        }
        logger.info("stopped", metadata: ["refusedCommands": "\(transport.refused)"])
        return .stopped
    }

    /// The subscriber to every partition's events and the sender of this incarnation's commands, each
    /// command to its device's account's partition.
    private func connect(_ context: ZeroMQContext) throws -> (PartitionedSubscriber, PartitionedSender) {
        let curveKeys = try topology.curveClientKeys()
        let partitions = topology.partitionEndpoints(runDirectory: runDirectory)
        let routes = DeviceRoutes(partitionCount: partitions.count)
        var subscriberConfiguration = EventSubscriberConfiguration(eventsEndpoint: partitions[0].eventsEndpoint, requestsEndpoint: partitions[0].requestsEndpoint)
        subscriberConfiguration.silenceTimeout = .milliseconds(topology.heartbeatMilliseconds * 8)
        subscriberConfiguration.curve = curveKeys
        // A key bound to this process's devices may hear only theirs: one stream per device.
        subscriberConfiguration.followedDevices = topology.followedDevices(process: process.name, clientKey: curveKeys?.clientKeyPair.publicKey)
        let subscriber = try PartitionedSubscriber(context: context, partitions: partitions, configuration: subscriberConfiguration, routes: routes)
        // A new incarnation gets a new origin, so its command numbers never collide with
        // those of a process that ran before it under the same name.
        var senderConfiguration = CommandSenderConfiguration(origin: "\(process.name).\(getpid())", requestsEndpoint: partitions[0].requestsEndpoint)
        senderConfiguration.curve = curveKeys
        let sender: PartitionedSender
        do {
            sender = try PartitionedSender(context: context, partitions: partitions, configuration: senderConfiguration, routes: routes)
        } catch {
            subscriber.close()
            throw error
        }
        // Each command carries what this process had heard, recorded with it in the log.
        sender.hears(subscriber)
        let logger = self.logger
        for warning in topology.observerKeyWarnings(process: process.name) { logger.warning("\(warning)") }
        subscriber.onStateChange = { state in logger.info("subscription state changed", metadata: ["state": "\(state)"]) }
        // Rate-limited like the queue's refusals: a publisher sending garbage at full speed once had every
        // role write a warning per frame (megabytes a second of log).
        var malformedReports = RefusalReportLimiter(interval: .seconds(1))
        subscriber.onMalformed = { failure in
            guard let report = malformedReports.admit(failure, at: .now) else { return }
            logger.warning("dropped a malformed event frame", metadata: ["reason": "\(report)"])
        }
        return (subscriber, sender)
    }

    /// The live runtime's loop over the role's host, in rounds until a stop is requested: due timers,
    /// the waiting commands that fit in the window, the answers, then up to `eventsPerRound` events (unless backlogged).
    /// True when an observer's devices are all done and settled.
    private func react(_ host: RoleHost, subscriber: PartitionedSubscriber, transport: inout LiveRoleTransport<PartitionedSender>) throws -> Bool {
        var lastHeard = LiveClock.monotonicNanoseconds()
        var reportedBacklog = false
        let sender = transport.sender
        // Events received and not yet handed to the role: at most `eventsPerRound` go per round.
        var unread: ArraySlice<RecordedEvent> = []
        while !Shutdown.isRequested {
            transport.tick()
            // Timers first: a decision due at once (the store's zero latency, set by the events of the
            // last round) is sent in this round, not after another receive.
            while let token = transport.nextDueTimer() { try host.fire(token, over: &transport) }
            try checkEnvironment(host)
            try host.sendWaiting(over: &transport)
            let backlogged = host.waitingCount >= Self.maximumWaitingCommands
            if backlogged && !reportedBacklog {
                logger.warning("working off a backlog before reading more events", metadata: ["waitingCommands": "\(host.waitingCount)"])
            }
            reportedBacklog = backlogged
            // Backlogged, the wait is for acknowledgements (they make room), not for events.
            try takeAnswers(sender.poll(timeout: backlogged ? .milliseconds(5) : .zero), refused: &transport.refused)
            if backlogged {
                // Not reading is this role's choice, not the queue's silence.
                lastHeard = LiveClock.monotonicNanoseconds()
                continue
            }
            if unread.isEmpty {
                let untilTimer = transport.nanosecondsUntilNextTimer ?? 5_000_000
                unread = try subscriber.receive(timeout: .nanoseconds(min(untilTimer, host.waitingCount == 0 ? 5_000_000 : 0)))[...]
                if !unread.isEmpty || subscriber.isLive { lastHeard = LiveClock.monotonicNanoseconds() }
            } else {
                // Working through what was received is not the queue's silence.
                lastHeard = LiveClock.monotonicNanoseconds()
            }
            for recorded in Self.takeRound(from: &unread) {
                transport.tick()
                try host.deliver(recorded, over: &transport)
            }
            try checkEnvironment(host)
            if Double(LiveClock.monotonicNanoseconds() - lastHeard) / 1e9 > queueSilenceLimitSeconds {
                let events = subscriber.partitions.map(\.eventsEndpoint).joined(separator: ", ")
                throw RoleProcessError("\(process.name) heard nothing from the queue at \(events) for \(Int(queueSilenceLimitSeconds)) s; is the queue running?", code: .queueUnreachable)
            }
            // Settled is judged from events, so every event an answer named must have been heard
            // first (after a queue restart, "duplicate" answers outrun the events they name).
            if process.role == .observer, unread.isEmpty, host.isSettled, sender.outstandingCount == 0,
               subscriber.hasDelivered(through: sender.acknowledgedThrough) {
                logger.info("every device is done and settled", metadata: ["devices": "\(process.deviceIndices.count)", "refusedCommands": "\(transport.refused)"])
                return true
            }
        }
        return false
    }

    /// Checked after every reaction and before the next send: what the role answered to the failure (a
    /// failed download, on a timer or an event) is not a simulated outcome and must not reach the log.
    /// A restarted process takes the work up again from the log.
    private func checkEnvironment(_ host: RoleHost) throws {
        if let failure = host.environmentFailure {
            throw RoleProcessError(failure.message(contentRoot: runDirectory, then: "run again"), code: .environment)
        }
    }

    /// The queue's answers: a command given up stops the process (a restart sends again from the log);
    /// refusals are counted.
    private func takeAnswers(_ completions: [CommandCompletion], refused: inout Int) throws {
        for completion in completions {
            switch completion {
            case .failed(_, let error):
                if case .duplicateOfUnsentCommand = error {
                    throw RoleProcessError("\(process.name): \(error)", code: .untrustedLog, failsTheRun: true)
                }
                throw RoleProcessError("\(process.name): \(error)", code: .commandFailed)
            case .acknowledged(let acknowledgement) where acknowledgement.status == .rejected || acknowledgement.status == .malformed:
                refused += 1
                logger.debug("command refused", metadata: ["command": "\(acknowledgement.commandID.map { "\($0)" } ?? "?")", "reason": "\(acknowledgement.message)"])
            default:
                break
            }
        }
    }

    /// Reads every event published so far by every partition, without reacting; returns how many.
    private func catchUp(_ subscriber: PartitionedSubscriber, _ apply: (RecordedEvent) -> Void) throws -> Int {
        let deadline = LiveClock.monotonicNanoseconds() + Int64(queueSilenceLimitSeconds * 1e9)
        var count = 0
        while LiveClock.monotonicNanoseconds() < deadline && !Shutdown.isRequested {
            let batch = try subscriber.receive(timeout: .milliseconds(20))
            for recorded in batch { apply(recorded) }
            count += batch.count
            if batch.isEmpty, subscriber.isCaughtUp { return count }
        }
        let silent = subscriber.silentPartitions
        guard silent.isEmpty else {
            throw RoleProcessError("\(process.name) could not reach the queue at \(silent.map(\.requestsEndpoint).joined(separator: ", ")) within \(Int(queueSilenceLimitSeconds)) s; start the queue first", code: .queueUnreachable)
        }
        return count
    }
}

/// What a live transport sends a role's commands through: one queue's `CommandSender`, or a
/// `PartitionedSender` (each command to its device's account's partition).
public protocol LiveCommandSender: AnyObject {
    var hasCapacity: Bool { get }
    func submit(_ body: CommandBody) throws(CommandSenderError) -> CommandID
}

extension CommandSender: LiveCommandSender {}
extension PartitionedSender: LiveCommandSender {}

/// The live runtime's transport for a role: the monotonic clock, read once per round and per event
/// (`tick`); the bus's sender; and the role's timers in a heap of their own. Role processes and the
/// bus benchmark's driver run their roles over it.
public struct LiveRoleTransport<Sender: LiveCommandSender>: RoleTransport {
    public typealias Failure = RoleProcessError
    public let sender: Sender
    public let processName: String
    public private(set) var now: Int64 = LiveClock.monotonicNanoseconds()
    private var timers = Scheduler<TimerToken>()
    /// Commands the queue refused (rejected or malformed), for the process's last report.
    public var refused = 0
    /// With this set, the id the sender gave each command, in the order sent, until taken
    /// (`takeSentCommandIDs`): a runtime that times its commands' answers (the load driver) matches
    /// them with what it handed its `RoleHost`, which sends in that order.
    public var reportsCommandIDs = false
    private var sentCommandIDs: [CommandID] = []

    public init(sender: Sender, processName: String) {
        self.sender = sender
        self.processName = processName
    }

    /// Reads the clock.
    public mutating func tick() { now = LiveClock.monotonicNanoseconds() }

    public var hasCapacity: Bool { sender.hasCapacity }

    public mutating func submit(_ body: CommandBody) throws(RoleProcessError) {
        let id: CommandID
        do {
            id = try sender.submit(body)
        } catch {
            throw RoleProcessError("\(processName) could not send a command: \(error)", code: .commandNotSent)
        }
        if reportsCommandIDs { sentCommandIDs.append(id) }
    }

    /// Hands each id sent since the last call to `body`, in order (`reportsCommandIDs`).
    public mutating func takeSentCommandIDs(_ body: (CommandID) -> Void) {
        guard !sentCommandIDs.isEmpty else { return }
        for id in sentCommandIDs { body(id) }
        sentCommandIDs.removeAll(keepingCapacity: true)
    }

    /// A negative delay is a time already past: it fires at once, in order with other past ones.
    public mutating func setTimer(afterNanoseconds delay: Int64, _ token: TimerToken) { timers.schedule(at: now + delay, token) }

    /// The next timer due by `now`, taken out.
    public mutating func nextDueTimer() -> TimerToken? {
        guard let time = timers.nextTime, time <= now else { return nil }
        return timers.next()?.action
    }

    public var nanosecondsUntilNextTimer: Int64? { timers.nextTime.map { max(0, $0 - now) } }
}
