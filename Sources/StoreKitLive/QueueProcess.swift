import Bus
import EventLog
import Foundation
import Logging
import StoreKitModel
import StoreKitRoles
import StoreKitSimulation
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

    public static let partition = DeterministicSimulation.partition

    public func run() throws {
        let logDirectory = runDirectory.appendingPathComponent("log", isDirectory: true)
        try FileManager.default.createDirectory(at: logDirectory, withIntermediateDirectories: true)
        let writer = try PartitionWriter(directory: logDirectory, partition: Self.partition,
                                         configuration: PartitionWriterConfiguration(durability: topology.durability == .operatingSystem ? .defaultGroupCommit : topology.durability))
        for recovery in writer.recoveries { logger.warning("recovered the log's torn tail", metadata: ["recovery": "\(recovery)"]) }
        let appender = EventLogAppender(writer: writer)
        var startup: [BusRecord] = []
        if writer.lastSequence == 0 {
            startup.append(try appender.append(.runStarted(seed: topology.scenario.seed, scenario: "topology=\(topology.name) " + topology.scenario.summary),
                                               commandID: nil, timestamp: LiveClock.wallNanoseconds()))
        }
        try writer.flush()  // The reader sees only what reached the file.
        let rebuilt = try LogProjection.build(directory: logDirectory, partition: Self.partition, through: writer.lastSequence, checkInvariants: false)
        let queue = QueueRole(catalog: topology.scenario.catalog, projection: rebuilt.projection)
        logger.info("queue ready", metadata: ["sequence": "\(queue.projection.lastSequence)", "devices": "\(queue.projection.devices.count)"])

        let context = try ZeroMQContext()
        var configuration = QueueEndpointConfiguration(
            eventsEndpoint: topology.resolved(process.eventsEndpoint!, runDirectory: runDirectory),
            requestsEndpoint: topology.resolved(process.requestsEndpoint!, runDirectory: runDirectory))
        configuration.heartbeatInterval = .milliseconds(topology.heartbeatMilliseconds)
        if let security = try topology.curveServerSecurity() {
            configuration.curveServerSecretKey = security.secretKey
            configuration.allowedClientKeys = security.allowedClientKeys
        }
        if let notice = topology.securityNotice { logger.warning("\(notice)") }
        let logger = self.logger
        let endpoint = try QueueEndpoint(context: context, configuration: configuration, writer: writer) { command in
            let duplicatesBefore = queue.duplicates
            let (events, rejection) = queue.handle(command)
            if queue.duplicates > duplicatesBefore { return .duplicate(lastSequence: queue.projection.lastSequence) }
            var records: [BusRecord] = []
            records.reserveCapacity(events.count)
            for event in events {
                let record = try appender.append(event, commandID: command.id, timestamp: LiveClock.wallNanoseconds())
                queue.apply(RecordedEvent(sequence: record.sequence, timestamp: record.timestamp, commandID: command.id, event: event))
                records.append(record)
            }
            if let rejection {
                logger.debug("command rejected", metadata: ["command": "\(command.id)", "reason": "\(rejection)"])
                return .rejected(rejection.description, appended: records)
            }
            return .accepted(records)
        }
        endpoint.onRefused = { failure in logger.warning("refused a malformed request", metadata: ["reason": "\(failure)"]) }
        endpoint.publishWhenDurable(startup)
        logger.info("queue listening", metadata: ["events": "\(endpoint.eventsEndpoint)", "requests": "\(endpoint.requestsEndpoint)"])
        defer {
            endpoint.close()
            context.terminate()
        }
        while !Shutdown.isRequested {
            try endpoint.step(timeout: .milliseconds(50))
        }
        // Publish what is still waiting, within a bound, then close the log.
        let deadline = LiveClock.monotonicNanoseconds() + 1_000_000_000
        while endpoint.unpublishedCount > 0 && LiveClock.monotonicNanoseconds() < deadline {
            try endpoint.step(timeout: .milliseconds(5))
        }
        try writer.close()
        let counters = endpoint.counters
        logger.info("queue stopped; log flushed", metadata: [
            "sequence": "\(queue.projection.lastSequence)", "commands": "\(counters.commandsHandled)",
            "duplicates": "\(queue.duplicates)", "refusedFrames": "\(counters.refused.total)",
        ])
        let stats = "{\"duplicateCommands\":\(queue.duplicates),\"commandsHandled\":\(counters.commandsHandled),\"refusedFrames\":\(counters.refused.total)}\n"
        try? stats.write(to: runDirectory.appendingPathComponent("queue-stats.json"), atomically: true, encoding: .utf8)
    }
}
