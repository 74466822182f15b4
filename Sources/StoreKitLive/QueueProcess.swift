import Bus
import EventLog
import Foundation
import Logging
import StoreKitModel
import StoreKitRoles
import StoreKitRuntime
import Synchronization
import ZeroMQ

/// The queue role as a process: the single writer of its log partition. Rebuilds its
/// projection from the log on start, so a restarted queue carries on where it stopped.
public final class QueueProcess {
    public let topology: Topology
    public let process: ProcessSpecification
    public let runDirectory: URL
    private let logger: Logger

    public init(topology: Topology, name: String, runDirectory: URL, logger: Logger) throws {
        self.topology = topology
        self.process = try topology.process(named: name)
        guard process.role == .queue else { throw TopologyError(file: topology.file, keyPath: "processes", problem: "'\(name)' is a \(process.role.rawValue), not a queue") }
        self.runDirectory = runDirectory
        self.logger = logger
    }

    /// The partition of a topology's only queue.
    public static let partition = LogProjection.partition
    /// The partition this queue is the single writer of.
    public var partition: String { process.partition ?? Self.partition }

    /// The queue's log, opened for this run, and the one engine over it.
    private struct OpenedLog {
        var writer: PartitionWriter
        var engine: QueueEngine
        /// The records of the run's start (its header, when the log was new), to publish once durable.
        var startup: [EngineRecord]
        /// The run's wall-clock start: log timestamps count from it.
        var startedAt: Int64
        /// Wakes the endpoint when durability advances.
        var wakeup: PollWakeup
        var durabilityRounds: DurabilityRounds
    }

    /// How many times the log made records durable (fsyncs), counted on the flusher's thread.
    private final class DurabilityRounds: Sendable {
        let count = Atomic<Int>(0)
    }

    public func run() throws {
        let log = try openLog()
        let context = try ZeroMQContext()
        let endpoint: QueueEndpoint
        do {
            endpoint = try makeEndpoint(context: context, log: log)
        } catch {
            context.terminate()
            throw error
        }
        logger.info("queue listening", metadata: ["events": "\(endpoint.eventsEndpoint)", "requests": "\(endpoint.requestsEndpoint)"])
        try ReadyNote.write(process: process.name, runDirectory: runDirectory)
        defer {
            endpoint.close()
            context.terminate()
        }
        while !Shutdown.isRequested {
            try endpoint.step(timeout: .milliseconds(50))
            if let failure = endpoint.handlerFailure { throw failure }
        }
        // Publish what is still waiting, within a bound, then close the log.
        let deadline = LiveClock.monotonicNanoseconds() + 1_000_000_000
        while endpoint.unpublishedCount > 0 && LiveClock.monotonicNanoseconds() < deadline {
            try endpoint.step(timeout: .milliseconds(5))
        }
        try log.writer.close()
        report(log, counters: endpoint.counters)
    }

    /// Opens the partition's log (refusing another run's) and rebuilds the engine from it, so a
    /// restarted queue carries on; starts the run when the log is new.
    private func openLog() throws -> OpenedLog {
        let logDirectory = runDirectory.appendingPathComponent("log", isDirectory: true)
        try FileManager.default.createDirectory(at: logDirectory, withIntermediateDirectories: true)
        // The log wakes the endpoint when durability advances: no timer on a lifecycle's critical path.
        let wakeup = try PollWakeup()
        let durabilityRounds = DurabilityRounds()
        // This thread runs the endpoint: when it made records durable itself (a lightly loaded step) it
        // publishes them in the same step, so only the flusher's syncs need to wake it.
        let endpointThread = pthread_self()
        var writerConfiguration = PartitionWriterConfiguration(durability: topology.durability, onDurable: { _ in
            durabilityRounds.count.add(1, ordering: .relaxed)
            if pthread_equal(pthread_self(), endpointThread) == 0 { wakeup.signal() }
        })
        // The endpoint syncs a lightly loaded step itself, with no hand-off, and wakes the flusher under load.
        writerConfiguration.ownerRequestsSyncs = true
        // A log of another run is refused before the writer opens it: opening recovers a torn tail,
        // which would change a log this queue must not touch.
        let ownHeader = topology.scenario.header(runtime: "live", startedAtUnixNanoseconds: LiveClock.wallNanoseconds())
        if let logged = Self.loggedHeader(logDirectory: logDirectory, partition: partition) {
            try Self.refuseAnotherRun(logged: logged, own: ownHeader, logDirectory: logDirectory)
        }
        let writer = try PartitionWriter(directory: logDirectory, partition: partition, configuration: writerConfiguration)
        for recovery in writer.recoveries { logger.warning("recovered the log's torn tail", metadata: ["recovery": "\(recovery)"]) }
        // The engine rebuilds its projection from the log, so a restarted queue carries on. No invariant
        // checker: `sksim run` reports the violations it folds from the log, and nothing reads this one's.
        let engine = try QueueEngine(catalog: topology.scenario.catalog, storage: DiskLogStorage(writer: writer), checksInvariants: false)
        // Checked again on the engine's fold, in case the first record could not be read before.
        if let logged = engine.header { try Self.refuseAnotherRun(logged: logged, own: ownHeader, logDirectory: logDirectory) }
        let startup = try engine.start(ownHeader)
        let startedAt = engine.header?.startedAtUnixNanoseconds ?? LiveClock.wallNanoseconds()
        logger.info("queue ready", metadata: ["partition": "\(partition)", "sequence": "\(engine.projection.lastSequence)", "devices": "\(engine.projection.devices.count)"])
        return OpenedLog(writer: writer, engine: engine, startup: startup, startedAt: startedAt, wakeup: wakeup, durabilityRounds: durabilityRounds)
    }

    /// The endpoint on the topology's sockets (with CURVE when it has keys), answering each command
    /// with the queue's rules (`QueueAdmission`) and then the engine.
    private func makeEndpoint(context: ZeroMQContext, log: OpenedLog) throws -> QueueEndpoint {
        var configuration = QueueEndpointConfiguration(
            eventsEndpoint: topology.resolved(process.eventsEndpoint!, runDirectory: runDirectory),
            requestsEndpoint: topology.resolved(process.requestsEndpoint!, runDirectory: runDirectory))
        configuration.heartbeatInterval = .milliseconds(topology.heartbeatMilliseconds)
        if let security = try topology.curveServerSecurity() {
            configuration.curveServerSecretKey = security.secretKey
            configuration.allowedClientKeys = security.allowedClientKeys
            if !security.permissions.isEmpty { configuration.clientPermissions = security.permissions }
        }
        if let notice = topology.securityNotice { logger.warning("\(notice)") }
        configuration.durabilityWakeup = log.wakeup
        let logger = self.logger
        let engine = log.engine, startedAt = log.startedAt
        // The engine's half of the queue's rules (the endpoint runs the other): each sender's commands in
        // its order, and payments within the bounds, so a burst cannot grow the queue without limit.
        var admission = QueueAdmission()
        let endpoint = try QueueEndpoint(context: context, configuration: configuration, writer: log.writer) { command, report in
            if let refusal = engine.withProjection({ admission.beforeEngine(command, report: report, projection: $0) }) {
                switch refusal.reason {
                case .outOfOrder: return .retryLater(refusal.message)
                default:
                    // Handled, and marked in the log: its sender's next command must not wait for it (SenderOrderGate).
                    try engine.noteRefused(command.id, heard: report.heard, timestamp: LiveClock.wallNanoseconds() - startedAt)
                    return .rejected(refusal.message, appended: [])
                }
            }
            // Timestamps are nanoseconds since the run started (its wall-clock start is in the first record).
            let outcome = try engine.handle(command, timestamp: LiveClock.wallNanoseconds() - startedAt, heard: report.heard)
            let records = outcome.records.map(BusRecord.init)
            switch outcome.decision {
            case .accepted: return .accepted(records)
            case .duplicate: return .duplicate(lastSequence: outcome.lastSequence)
            case .rejected(let rejection):
                logger.debug("command rejected", metadata: ["command": "\(command.id)", "reason": "\(rejection)"])
                return .rejected(rejection.description, appended: records)
            }
        }
        endpoint.recordRefused = { command, report in
            try engine.noteRefused(command.id, heard: report.heard, timestamp: LiveClock.wallNanoseconds() - startedAt)
        }
        endpoint.onRefused = { failure in logger.warning("refused a request or connection", metadata: ["reason": "\(failure)"]) }
        endpoint.publishWhenDurable(log.startup.map(BusRecord.init))
        return endpoint
    }

    /// The last words of a stopped queue: logged, and its statistics in the run directory.
    private func report(_ log: OpenedLog, counters: QueueEndpointCounters) {
        let engine = log.engine
        logger.info("queue stopped; log flushed", metadata: [
            "sequence": "\(engine.projection.lastSequence)", "commands": "\(counters.commandsHandled)",
            "duplicates": "\(engine.duplicates)", "refusedFrames": "\(counters.refused.total)",
        ])
        try? QueueStatistics(duplicateCommands: engine.duplicates, commandsHandled: counters.commandsHandled,
                             refusedFrames: counters.refused.total, cpuSeconds: Double(processCPUNanoseconds()) / 1e9,
                             peakMemoryBytes: peakResidentBytes(), durabilityRounds: log.durabilityRounds.count.load(ordering: .relaxed),
                             records: engine.projection.lastSequence,
                             commandsAnsweredUnavailable: counters.commandsRefusedAsUnavailable,
                             repliesDropped: counters.repliesDropped).write(in: runDirectory, partition: partition)
    }
}

extension QueueProcess {
    /// The run header in the partition's first record, read without writing anything; nil when there
    /// is no log yet or its first record cannot be read (the writer's recovery then judges it).
    static func loggedHeader(logDirectory: URL, partition: String) -> RunHeader? {
        guard let reader = try? PartitionReader(directory: logDirectory, partition: partition) else { return nil }
        var header: RunHeader?
        _ = try? reader.forEachRecord(from: 1, through: 1) { view in
            if case .runStarted(let logged)? = try? LogProjection.decode(sequence: view.sequence, timestamp: view.timestampNanoseconds, payload: view.payload).event {
                header = logged
            }
        }
        return header
    }

    /// A restart carries on its own run; a log of another run (a reused --run-directory) must not be
    /// continued with this topology's store and apps as if it were theirs.
    static func refuseAnotherRun(logged: RunHeader, own: RunHeader, logDirectory: URL) throws {
        let differences = [logged.seed != own.seed ? "seed \(logged.seed), not \(own.seed)" : nil,
                           logged.scenario != own.scenario ? "another scenario" : nil,
                           logged.catalogDigest != own.catalogDigest ? "another catalog (\(logged.catalogSource))" : nil]
            .compactMap { $0 }
        guard differences.isEmpty else {
            throw RoleProcessError(
                "the log in \(logDirectory.path) holds another run (\(differences.joined(separator: ", "))); "
                    + "give this queue a new --run-directory, or start it with the topology that made that log",
                code: .untrustedLog, failsTheRun: true)
        }
    }
}

extension BusRecord {
    /// The engine's record as the bus publishes it: the logged bytes, unchanged.
    init(_ record: EngineRecord) {
        self.init(sequence: record.recorded.sequence, timestamp: record.recorded.timestamp, payload: record.payload,
                  device: record.recorded.event.device)
    }
}
