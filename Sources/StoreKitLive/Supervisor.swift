import Bus
import Foundation
import Logging
import StoreKitModel
import StoreKitRuntime
import ZeroMQ

/// `sksim run`: starts every process of a topology as a child (this same binary),
/// supervises them, shows progress, stops them cleanly and reports.
public final class Supervisor {
    public struct Options: Sendable {
        public var durationSeconds: Double = 300
        /// Restarts allowed per process. Every role restarts from the log: a queue reopens it,
        /// a store or downloader catches up and takes up what waited, an observer relaunches its
        /// apps (R-Q4); senders retry under the same command ids meanwhile.
        public var maximumRestarts = 3
        public var showProgress = isatty(STDERR_FILENO) != 0
        /// Passed to every child after its role arguments (e.g. `--seed 5 --devices 3`), so each
        /// process reads the same topology the supervisor runs.
        public var childArguments: [String] = []
        /// Whether an observer process is launched again, once the apps are done and the store is
        /// stopped, for transactions the store sent after its apps were done (a renewal). A live
        /// replay turns it off: a relaunched process would replay its inputs from the start.
        public var relaunchObserversForLateTransactions = true
        public init() {}
    }

    public enum Failure: Error, CustomStringConvertible {
        case processDied(name: String, role: RoleKind, status: String, logFile: String)
        case startFailed(String)

        public var description: String {
            switch self {
            case .processDied(let name, let role, let status, let logFile):
                "the \(role.rawValue) process '\(name)' \(status) and has no restarts left (sksim run --maximum-restarts); its log: \(logFile)"
            case .startFailed(let message): message
            }
        }
    }

    public struct Result: Sendable {
        public var report: RunReport
        public var restarts: [String: Int]
        public var finished: Bool
        /// Stopped by SIGINT or SIGTERM before the apps were done.
        public var interrupted: Bool
        public var wallSeconds: Double
        public var failure: String?

        /// The exit status of `sksim run` (docs/cli.md): 0 every app finished; 1 an invariant was
        /// violated; 2 a process failed for good; 3 stopped at the time limit with work pending;
        /// 130 interrupted.
        public var exitStatus: Int32 {
            if report.violationCount > 0 { return 1 }
            if failure != nil { return 2 }
            if interrupted { return 130 }
            if !finished || report.awaiting > 0 { return 3 }
            return 0
        }
    }

    private final class Child {
        let specification: ProcessSpecification
        var process: Process
        var restarts = 0
        var done = false
        let logFile: URL
        init(_ specification: ProcessSpecification, _ process: Process, logFile: URL) {
            self.specification = specification
            self.process = process
            self.logFile = logFile
        }
    }

    public let topology: Topology
    public let topologyPath: String
    public let runDirectory: URL
    public let executable: URL
    public let options: Options
    private let logger: Logger
    private var children: [Child] = []

    public init(topology: Topology, topologyPath: String, runDirectory: URL, executable: URL, options: Options, logger: Logger) {
        self.topology = topology
        self.topologyPath = topologyPath
        self.runDirectory = runDirectory
        self.executable = executable
        self.options = options
        self.logger = logger
    }

    private func launch(_ specification: ProcessSpecification) throws -> Process {
        let process = Process()
        process.executableURL = executable
        process.arguments = [specification.role.rawValue, "--topology", topologyPath, "--name", specification.name,
                             "--run-directory", runDirectory.path] + options.childArguments
        var environment = ProcessInfo.processInfo.environment
        environment[Shutdown.supervisorVariable] = "\(getpid())"
        process.environment = environment
        _ = FailureNote.take(process: specification.name, runDirectory: runDirectory)
        FailureNote.reserve(process: specification.name, runDirectory: runDirectory)
        ReadyNote.clear(process: specification.name, runDirectory: runDirectory)
        let logFile = runDirectory.appendingPathComponent("\(specification.name).log")
        if !FileManager.default.fileExists(atPath: logFile.path) {
            guard FileManager.default.createFile(atPath: logFile.path, contents: nil) else {
                throw Failure.startFailed("cannot create \(logFile.path); check that the run directory is writable")
            }
        }
        let handle = try FileHandle(forWritingTo: logFile)
        try handle.seekToEnd()
        process.standardError = handle
        process.standardOutput = handle
        process.standardInput = FileHandle.nullDevice
        try process.run()
        return process
    }

    private func writeRunFile() throws {
        let partitions = topology.partitionEndpoints(runDirectory: runDirectory)
        let several = partitions.count > 1
        let byPartition = Dictionary(uniqueKeysWithValues: partitions.map { ($0.partition, RunFile.Endpoints(events: $0.eventsEndpoint, requests: $0.requestsEndpoint)) })
        let first = byPartition[partitions[0].partition]!
        let entries = children.map { child in
            let specification = child.specification
            let devices = specification.deviceIndices.first.map { "\($0 + 1)-\(specification.deviceIndices.last! + 1)" }
            let isQueue = specification.role == .queue
            return RunFile.Entry(role: specification.role.rawValue, name: specification.name, pid: child.process.processIdentifier,
                                 host: specification.host, binds: isQueue ? byPartition[specification.partition!] : nil,
                                 connects: isQueue ? nil : first, devices: devices, log: child.logFile.path,
                                 partition: isQueue && several ? specification.partition : nil)
        }
        try RunFile(topology: topologyPath, runDirectory: runDirectory.path, seed: topology.scenario.seed, supervisor: getpid(),
                    processes: entries,
                    partitions: several ? partitions.map { RunFile.Partition(name: $0.partition, events: $0.eventsEndpoint, requests: $0.requestsEndpoint) } : nil)
            .write(to: runDirectory.appendingPathComponent("run.json"))
    }

    /// Starts every queue, one after another, each answering before the next starts (bounded).
    /// With `thisHost`, only the queues on it; the others, started by hand on their hosts, must answer.
    private func launchQueues(context: ZeroMQContext, thisHost: String? = nil) throws {
        for (specification, endpoints) in zip(topology.queues, topology.partitionEndpoints(runDirectory: runDirectory)) {
            if let thisHost, specification.host != thisHost {
                try waitForRemoteQueue(specification, requests: endpoints.requestsEndpoint, context: context)
                continue
            }
            let child = Child(specification, try launch(specification), logFile: runDirectory.appendingPathComponent("\(specification.name).log"))
            children.append(child)
            try waitForQueue(child, requests: endpoints.requestsEndpoint, context: context)
        }
    }

    /// Waits (bounded) until a queue started by hand on another host answers PING.
    private func waitForRemoteQueue(_ queue: ProcessSpecification, requests: String, context: ZeroMQContext) throws {
        let seconds = 60
        let deadline = LiveClock.monotonicNanoseconds() + Int64(seconds) * 1_000_000_000
        let socket = try context.socket(.dealer)
        defer { socket.close() }
        if let keys = try topology.curveClientKeys() { try keys.apply(to: socket) }
        try socket.connect(requests)
        logger.notice("waiting for a queue started by hand", metadata: ["name": "\(queue.name)", "host": "\(queue.host)", "requests": "\(requests)"])
        while LiveClock.monotonicNanoseconds() < deadline && !Shutdown.isRequested {
            _ = try socket.send([Array("PING".utf8)], mode: .nonBlocking)
            if let reply = try socket.receive(timeout: .milliseconds(200)), reply.first == Array("PONG".utf8) { return }
        }
        throw Failure.startFailed("the queue '\(queue.name)' of host \(queue.host) did not answer on \(requests) within \(seconds) s; start it there with `sksim queue --topology \(topologyPath) --name \(queue.name)`")
    }

    /// Refuses ipc:// paths longer than a Unix socket path may be.
    private func checkEndpointLengths() throws {
        for partition in topology.partitionEndpoints(runDirectory: runDirectory) {
            for endpoint in [partition.eventsEndpoint, partition.requestsEndpoint] where endpoint.hasPrefix("ipc://") && endpoint.utf8.count - 6 > 100 {
                throw Failure.startFailed("the ipc endpoint \(endpoint) is longer than the 100 bytes a Unix socket path may have; use a shorter --out directory")
            }
        }
    }

    /// Waits until the queue answers on its requests endpoint (bounded).
    private func waitForQueue(_ queue: Child, requests: String, context: ZeroMQContext) throws {
        let deadline = LiveClock.monotonicNanoseconds() + 10_000_000_000
        let socket = try context.socket(.dealer)
        defer { socket.close() }
        if let keys = try topology.curveClientKeys() { try keys.apply(to: socket) }
        try socket.connect(requests)
        while LiveClock.monotonicNanoseconds() < deadline {
            if !queue.process.isRunning {
                let cause = FailureNote.take(process: queue.specification.name, runDirectory: runDirectory)
                    ?? "it exited with status \(queue.process.terminationStatus)"
                throw Failure.startFailed("the queue could not start: \(cause) (its log: \(queue.logFile.path))")
            }
            // Only our own queue counts: on tcp:// another run's queue may answer on the same port.
            guard ReadyNote.pid(process: queue.specification.name, runDirectory: runDirectory) == queue.process.processIdentifier else {
                usleep(10_000)
                continue
            }
            _ = try socket.send([Array("PING".utf8)], mode: .nonBlocking)
            if let reply = try socket.receive(timeout: .milliseconds(200)), reply.first == Array("PONG".utf8) { return }
        }
        throw Failure.startFailed("the queue '\(queue.specification.name)' did not answer on \(requests) within 10 s; see \(queue.logFile.path)")
    }

    /// `sksim run` starts every process here; a topology meant for several hosts is refused before anything is created.
    public static func checkAllLocal(_ topology: Topology, topologyPath: String) throws {
        let localHosts: Set<String> = ["localhost", "127.0.0.1", "::1", ProcessInfo.processInfo.hostName]
        if let remote = topology.processes.first(where: { !localHosts.contains($0.host) }) {
            throw Failure.startFailed("process '\(remote.name)' is meant for host \(remote.host), but `sksim run` starts every process on this machine; on each host run `sksim \(remote.role.rawValue) --topology \(topologyPath) --name \(remote.name)` (see docs/topology.md)")
        }
    }

    public func run() throws -> Result {
        let start = LiveClock.monotonicNanoseconds()
        try Self.checkAllLocal(topology, topologyPath: topologyPath)
        try FileManager.default.createDirectory(at: runDirectory, withIntermediateDirectories: true)
        try checkEndpointLengths()
        let context = try ZeroMQContext()
        defer { context.terminate() }

        do {
            // The queues first: everyone else connects to them. Then the store and the downloader, and
            // the apps once those have caught up on the log and react: apps that bought while the store
            // was still starting had every early purchase (and receipt refresh) wait for its start-up,
            // answered in one burst when it came, as if the store were slow.
            try launchQueues(context: context)
            func start(_ specification: ProcessSpecification) throws -> Child {
                let child = Child(specification, try launch(specification), logFile: runDirectory.appendingPathComponent("\(specification.name).log"))
                children.append(child)
                return child
            }
            try waitUntilCaughtUp(topology.processes.filter { $0.role != .queue && $0.role != .observer }.map(start))
            for specification in topology.processes where specification.role == .observer { _ = try start(specification) }
            try writeRunFile()
        } catch {
            // Nothing is left running when the start fails (a queue holding its ports would block the next run).
            stopAll()
            throw error
        }
        logger.info("started", metadata: ["processes": "\(children.count)", "runDirectory": "\(runDirectory.path)"])

        var progress: ProgressView? = options.showProgress ? try ProgressView(context: context, partitions: topology.partitionEndpoints(runDirectory: runDirectory), topology: topology) : nil
        var failure: String?
        var finished = false
        var stoppedAtLimit = false
        var storeStopped = false
        while !Shutdown.isRequested {
            if let message = try superviseOnce() {
                failure = message
                break
            }
            if children.filter({ $0.specification.role == .observer }).allSatisfy(\.done) {
                if storeStopped {
                    finished = true
                    break
                }
                // The apps are done, but the store may have decided something after an app was done
                // (a renewal falls due at any time). Stop the store so nothing more comes, then give
                // what came late to the apps' next launch, as StoreKit does (R-Q4).
                storeStopped = true
                stopStores()
                let late = options.relaunchObserversForLateTransactions ? try observersOfLateTransactions() : []
                if late.isEmpty {
                    finished = true
                    break
                }
                for child in late {
                    logger.info("relaunching an observer for transactions that came after its apps were done",
                                metadata: ["name": "\(child.specification.name)"])
                    child.done = false
                    child.process = try launch(child.specification)
                }
                try? writeRunFile()
                continue
            }
            if Double(LiveClock.monotonicNanoseconds() - start) / 1e9 > options.durationSeconds {
                logger.notice("duration reached; stopping", metadata: ["seconds": "\(options.durationSeconds)"])
                stoppedAtLimit = true
                break
            }
            if progress != nil { try progress!.update() } else { usleep(50_000) }
        }
        let interrupted = Shutdown.isRequested && !finished && failure == nil
        progress?.finish()
        progress = nil
        stopAll()
        let built = try PartitionedLogProjection.build(directory: runDirectory.appendingPathComponent("log", isDirectory: true),
                                                       partitions: topology.queues.map { $0.partition! })
        let duplicates = QueueStatistics.duplicateCommands(in: runDirectory, topology: topology) ?? 0
        let report = RunReport(seed: topology.scenario.seed, totals: built.totals, pending: built.pendingCount,
                               violations: built.violations, violationCount: built.violationCount,
                               logDirectory: runDirectory.appendingPathComponent("log").path,
                               simulatedNanoseconds: LiveClock.monotonicNanoseconds() - start,
                               duplicateCommands: duplicates, stoppedAtTimeLimit: stoppedAtLimit)
        var restarts: [String: Int] = [:]
        for child in children where child.restarts > 0 { restarts[child.specification.name] = child.restarts }
        return Result(report: report, restarts: restarts, finished: finished, interrupted: interrupted,
                      wallSeconds: Double(LiveClock.monotonicNanoseconds() - start) / 1e9, failure: failure)
    }

    /// Checks every child once; restarts a dead process (for an observer, an app relaunch,
    /// R-Q4) and returns a message when a process died for good.
    private func superviseOnce() throws -> String? {
        for child in children where !child.done && !child.process.isRunning {
            var status = child.process.terminationReason == .uncaughtSignal
                ? "was killed by signal \(child.process.terminationStatus)" : "exited with status \(child.process.terminationStatus)"
            if let cause = FailureNote.take(process: child.specification.name, runDirectory: runDirectory) { status += ": \(cause)" }
            if child.specification.role == .observer && child.process.terminationReason == .exit && child.process.terminationStatus == 0 {
                child.done = true
                logger.info("observer finished", metadata: ["name": "\(child.specification.name)"])
                continue
            }
            if child.process.terminationReason == .exit && child.process.terminationStatus == RoleProcess.untrustedRunStatus {
                // Restarting cannot help: commands nobody in this run sent are in the log.
                return "the \(child.specification.role.rawValue) process '\(child.specification.name)' stopped the run: \(status)"
            }
            if child.restarts < options.maximumRestarts {
                child.restarts += 1
                logger.warning("\(child.specification.role.rawValue) died; restarting it from the log",
                               metadata: ["name": "\(child.specification.name)", "status": "\(status)", "restart": "\(child.restarts)"])
                child.process = try launch(child.specification)
                do {
                    try writeRunFile()
                } catch {
                    // run.json is for people and tools; the run itself goes on without its update.
                    logger.warning("could not update run.json", metadata: ["error": "\(describeError(error))"])
                }
                continue
            }
            return Failure.processDied(name: child.specification.name, role: child.specification.role, status: status,
                                       logFile: child.logFile.path).description
        }
        return nil
    }

    /// Stops the store processes (bounded), so that they decide nothing more; they are not restarted.
    private func stopStores() {
        let stores = children.filter { $0.specification.role == .store }
        for child in stores {
            child.done = true
            if child.process.isRunning { child.process.terminate() }
        }
        waitOrKill(stores)
    }

    /// The finished observer processes that host a device with a transaction its app could finish
    /// (purchased, failed or restored) but has not: the store sent it after that app was done.
    private func observersOfLateTransactions() throws -> [Child] {
        let built = try PartitionedLogProjection.build(directory: runDirectory.appendingPathComponent("log", isDirectory: true),
                                                       partitions: topology.queues.map { $0.partition! })
        var waiting: Set<String> = []
        for (_, partition) in built.partitions {
            for device in partition.projection.devices.values
            where device.pending.values.contains(where: \.transactionState.isComplete) {
                waiting.insert(device.device)
            }
        }
        guard !waiting.isEmpty else { return [] }
        let names = topology.scenario.deviceNames
        return children.filter { child in
            child.specification.role == .observer && child.done
                && child.specification.deviceIndices.contains { names.indices.contains($0) && waiting.contains(names[$0]) }
        }
    }

    /// SIGTERM to everyone but the queue, then the queue (so late commands still land),
    /// each with a bounded wait before SIGKILL.
    private func stopAll() {
        // The App Store server reads the log: it stops last, after the queue wrote the last events, and is
        // given its notification drain to deliver what is outstanding (docs/app-store-server.md).
        let readers = children.filter { $0.specification.role == .appStoreServer }
        let order = children.filter { $0.specification.role != .queue && $0.specification.role != .appStoreServer }
            + children.filter { $0.specification.role == .queue }
        var group: [Child] = []
        for child in order {
            if child.specification.role == .queue {
                waitOrKill(group)
                group = []
            }
            if child.process.isRunning { child.process.terminate() }
            group.append(child)
        }
        waitOrKill(group)
        for child in readers where child.process.isRunning { child.process.terminate() }
        waitOrKill(readers, seconds: 5 + (topology.appStoreServer?.notificationDrainSeconds ?? 0))
        for child in children { FailureNote.discardBlank(process: child.specification.name, runDirectory: runDirectory) }
    }

    private func waitOrKill(_ group: [Child], seconds: Double = 5) {
        let deadline = LiveClock.monotonicNanoseconds() + Int64(seconds * 1e9)
        while group.contains(where: { $0.process.isRunning }) && LiveClock.monotonicNanoseconds() < deadline { usleep(10_000) }
        for child in group where child.process.isRunning {
            logger.warning("process did not stop in time; killing it", metadata: ["name": "\(child.specification.name)", "seconds": "\(seconds)"])
            kill(child.process.processIdentifier, SIGKILL)
            child.process.waitUntilExit()
        }
    }
}

/// One line of live progress on the terminal, from a subscription to every queue partition.
struct ProgressView {
    private let subscriber: PartitionedSubscriber
    private var projection = QueueProjection(commandWindow: 64)
    private var lastDraw: Int64 = 0
    private let start = LiveClock.monotonicNanoseconds()

    init(context: ZeroMQContext, partitions: [PartitionEndpoints], topology: Topology) throws {
        var configuration = EventSubscriberConfiguration(eventsEndpoint: partitions[0].eventsEndpoint, requestsEndpoint: partitions[0].requestsEndpoint)
        configuration.curve = try topology.curveClientKeys()
        subscriber = try PartitionedSubscriber(context: context, partitions: partitions, configuration: configuration,
                                               routes: DeviceRoutes(partitionCount: partitions.count))
    }

    mutating func update() throws {
        for recorded in try subscriber.receive(timeout: .milliseconds(50)) { projection.apply(recorded) }
        let now = LiveClock.monotonicNanoseconds()
        guard now - lastDraw > 250_000_000 else { return }
        lastDraw = now
        let totals = projection.totals
        let seconds = Double(now - start) / 1e9
        let line = String(format: "\r%6.1f s  %7d events (%6.0f/s)  purchased %d  failed %d  restored %d  finished %d  pending %d  downloads %d ",
                          seconds, totals.events, Double(totals.events) / max(seconds, 0.001), totals.purchased, totals.failed,
                          totals.restored, totals.finished, projection.pendingCount, totals.downloadsFinished)
        try? FileHandle.standardError.write(contentsOf: Data(line.utf8))
    }

    func finish() {
        try? FileHandle.standardError.write(contentsOf: Data("\n".utf8))
        subscriber.close()
    }
}

// MARK: The services of a load test

extension Supervisor {
    /// For `sksim load`: starts the queues, each answering before the next starts, then every
    /// other process that is not an observer (the store and the downloader); load drivers play the
    /// devices instead of observers. Returns every partition's endpoints, resolved against the run directory.
    ///
    /// `thisHost` names this machine's `host` in the topology: then only the services on it are
    /// started, and the queues of other hosts (started by hand there) must answer within a bound.
    @discardableResult
    public func startServices(thisHost: String? = nil) throws -> [PartitionEndpoints] {
        let localHosts: Set<String> = thisHost.map { [$0] } ?? ["localhost", "127.0.0.1", "::1", ProcessInfo.processInfo.hostName]
        if thisHost == nil, let remote = topology.processes.first(where: { $0.role != .observer && !localHosts.contains($0.host) }) {
            throw Failure.startFailed("process '\(remote.name)' is meant for host \(remote.host), but `sksim load` starts the queue, store and downloader on this machine; run them there by hand and start drivers with `sksim driver` (see docs/load-testing.md)")
        }
        try FileManager.default.createDirectory(at: runDirectory, withIntermediateDirectories: true)
        try checkEndpointLengths()
        let context = try ZeroMQContext()
        defer { context.terminate() }
        try launchQueues(context: context, thisHost: thisHost)
        var services: [Child] = []
        for specification in topology.processes where specification.role != .queue && specification.role != .observer && localHosts.contains(specification.host) {
            services.append(Child(specification, try launch(specification), logFile: runDirectory.appendingPathComponent("\(specification.name).log")))
        }
        children.append(contentsOf: services)
        try writeRunFile()
        try waitUntilCaughtUp(services)
        return topology.partitionEndpoints(runDirectory: runDirectory)
    }

    /// Waits (bounded) until each service has caught up on the log and reacts (its ready note), so
    /// the first lifecycles of a run or a load do not wait for the store's start-up and count it as latency.
    private func waitUntilCaughtUp(_ services: [Child]) throws {
        let deadline = LiveClock.monotonicNanoseconds() + 30_000_000_000
        for service in services {
            while ReadyNote.pid(process: service.specification.name, runDirectory: runDirectory) != service.process.processIdentifier {
                if !service.process.isRunning {
                    let cause = FailureNote.take(process: service.specification.name, runDirectory: runDirectory)
                        ?? "it exited with status \(service.process.terminationStatus)"
                    throw Failure.startFailed("the \(service.specification.role.rawValue) '\(service.specification.name)' could not start: \(cause) (its log: \(service.logFile.path))")
                }
                guard LiveClock.monotonicNanoseconds() < deadline else {
                    logger.warning("a service had not caught up on the log within 30 s; starting the apps anyway", metadata: ["name": "\(service.specification.name)"])
                    return
                }
                usleep(5_000)
            }
        }
    }

    /// Checks the services once, restarting a dead one from the log; a message when one died for good.
    public func superviseServices() throws -> String? { try superviseOnce() }

    /// Stops the services, the queue last (so the log is flushed after the last command).
    public func stopServices() { stopAll() }
}
