import Bus
import Foundation
import Histogram
import Logging
import StoreKitLive
import StoreKitModel
import StoreKitRuntime
import ZeroMQ

/// `sksim load`: starts the queue, store and downloader of a topology and N driver processes
/// (or waits for drivers started by hand on other hosts), hands each a plan, starts them all at
/// one instant, merges their per-interval stage histograms as they arrive, shows the live view,
/// judges thresholds, and at the end reads the log for the run's correctness figures.
public final class LoadCoordinator {
    public struct Options: Sendable {
        /// The plan every driver gets (its index and the driver count are filled in here).
        public var plan = LoadPlan()
        /// Drivers this command starts as local processes, and drivers expected from elsewhere.
        public var localDrivers = 1
        public var remoteDrivers = 0
        /// Where drivers reach the coordinator (default `ipc://{run}/load.ipc`).
        public var listenEndpoint: String?
        public var thresholds: [Threshold] = []
        public var abortOnFail = false
        /// `--metrics`: where each interval's merged figures are served to Prometheus while the load runs.
        public var metrics: MetricsEndpoint?
        /// `--abort-on-fail` judges nothing before this much of the load ran (k6's `delayAbortEval`).
        public var abortDelayNanoseconds: Int64 = 5_000_000_000
        public var showLiveView = isatty(STDERR_FILENO) != 0
        /// This machine's `host` in the topology, for a load across hosts: only the services on it
        /// are started here; the other hosts' queues are started by hand (docs/load-testing.md).
        public var thisHost: String?
        /// Passed to every service process after its role arguments (`Supervisor.Options.childArguments`), and to every local driver.
        public var childArguments: [String] = []
        /// A driver silent this long (no report) fails the run.
        public var driverSilenceSeconds = 15.0
        /// Called once the queue, store and downloader are up (their ready notes, with their pids, are
        /// in the run directory) and before any driver starts: `bench load --queue-cores` caps the queues here.
        public var servicesStarted: (@Sendable (_ runDirectory: URL) throws -> Void)?
        /// `--driver PATH`: the executable started as each local driver, with `sksim driver`'s arguments
        /// (nil: this executable's own `driver` command).
        public var driverExecutable: URL?
        public init() {}
    }

    /// One second (one interval) of the whole run, all drivers merged: a row of timeseries.csv.
    public struct IntervalRow: Sendable, Codable {
        public var interval: Int
        public var startSeconds: Double
        public var counters: LoadCounters
        public var inFlight: Int
        public var stages: [String: StageSummary]
    }

    public struct Result: Sendable {
        public var figures: LoadFigures
        public var thresholds: [(threshold: Threshold, passed: Bool, actual: Double?)]
        public var rows: [IntervalRow]
        public var drivers: Int
        public var coordinatorCPUSeconds: Double
        public var driversCPUSeconds: Double
        public var coordinatorPeakMemoryBytes: Int64
        /// The largest peak resident memory any driver reported.
        public var driverPeakMemoryBytes: Int64
        public var wallSeconds: Double
        public var aborted: String?
        /// Drivers that died or fell silent during the load: their reports up to then are kept.
        public var lostDrivers: [LostDriver] = []
        /// Where the report was written (set by the command once it wrote it).
        public var reportDirectory: URL?
        public var startUnixNanoseconds: Int64
        public var runDirectory: URL
        public var histogramLog: URL
        public var plan: LoadPlan
        /// A failed threshold, or a driver lost: its figures are not whole, so the run cannot pass.
        public var thresholdsFailed: Bool { thresholds.contains { !$0.passed } || !lostDrivers.isEmpty }
    }

    public let topology: Topology
    public let topologyPath: String
    public let runDirectory: URL
    public let executable: URL
    public let options: Options
    private let logger: Logger

    public init(topology: Topology, topologyPath: String, runDirectory: URL, executable: URL, options: Options, logger: Logger) {
        self.topology = topology
        self.topologyPath = topologyPath
        self.runDirectory = runDirectory
        self.executable = executable
        self.options = options
        self.logger = logger
    }

    /// A driver that died (kill -9, a crash) or fell silent during the load. What it reported is kept;
    /// the lifecycles it had in flight at its last report count as errors (they ended without their end).
    public struct LostDriver: Sendable, Codable, Equatable {
        public var name: String
        public var reason: String
        /// Its last interval reported (-1: none).
        public var lastInterval: Int
        public var inFlight: Int
    }

    fileprivate struct DriverState {
        var name: String
        var identity: [UInt8]
        var index: Int
        var ready = false
        var lastInterval = -1
        var isFinal = false
        var lastHeard = LiveClock.monotonicNanoseconds()
        var cpuNanoseconds: Int64 = 0
        var peakMemoryBytes: Int64 = 0
        var inFlight = 0
    }

    fileprivate struct IntervalAccumulator {
        var histograms = StageHistograms()
        var custom = CustomFigures()
        var counters = LoadCounters()
        var inFlight = 0
    }

    public func run() throws -> Result {
        let wallStart = LiveClock.monotonicNanoseconds()
        var supervisorOptions = Supervisor.Options()
        supervisorOptions.childArguments = options.childArguments
        let supervisor = Supervisor(topology: topology, topologyPath: topologyPath, runDirectory: runDirectory, executable: executable,
                                    options: supervisorOptions, logger: logger)
        var localProcesses: [Process] = []
        var servicesRunning = false
        defer {
            for process in localProcesses where process.isRunning { process.terminate() }
            if servicesRunning { supervisor.stopServices() }
        }
        try supervisor.startServices(thisHost: options.thisHost)
        servicesRunning = true
        try options.servicesStarted?(runDirectory)

        let context = try ZeroMQContext()
        defer { context.terminate() }
        let router = try context.socket(.router)
        defer { router.close() }
        let security = try DriverEndpointSecurity(topology: topology, context: context, router: router)
        defer { security?.close() }
        let endpoint = try listen(router)
        for index in 0..<options.localDrivers {
            localProcesses.append(try launchDriver(name: "driver-\(index + 1)", endpoint: endpoint))
        }
        let expected = options.localDrivers + options.remoteDrivers
        if options.remoteDrivers > 0 {
            logger.notice("waiting for drivers started by hand", metadata: ["expected": "\(options.remoteDrivers)", "coordinator": "\(endpoint)"])
        }
        var roster = DriverRoster()
        try admitDrivers(into: &roster, expected: expected, router: router, security: security, supervisor: supervisor, localProcesses: localProcesses)

        // Everyone starts at one instant, a little ahead so the START reaches every host first.
        let startUnix = LiveClock.wallNanoseconds() + 300_000_000
        let startMonotonic = LiveClock.monotonicNanoseconds() + 300_000_000
        for driver in roster.drivers.values {
            _ = try router.send([driver.identity] + LoadWire.frames(.start, LoadStart(startAtUnixNanoseconds: startUnix)), mode: .nonBlocking)
            // Silence counts from the start: setting up a driver's devices (before its ready) may take
            // longer than the silence bound, and it sends no report until the load runs.
            roster.drivers[driver.name]?.lastHeard = startMonotonic
        }
        let logURL = runDirectory.appendingPathComponent("histograms.hlog")
        _ = FileManager.default.createFile(atPath: logURL.path, contents: nil)
        let logHandle = try FileHandle(forWritingTo: logURL)
        defer { try? logHandle.close() }
        let progress = LoadProgress(options: options, logger: logger, router: router, roster: roster,
                                    histogramLog: HistogramLogWriter(startUnixNanoseconds: startUnix), logHandle: logHandle)
        try collectReports(progress, router: router, security: security, supervisor: supervisor, localProcesses: localProcesses)
        try progress.emitReadyIntervals()
        progress.liveView?.finish()
        var figures = progress.figures
        let loadEnd = LiveClock.monotonicNanoseconds()
        figures.loadSeconds = min(Double(options.plan.loadNanoseconds) / 1e9, max(progress.lastStartSeconds, Double(loadEnd - startMonotonic) / 1e9))
        if progress.aborted != nil { figures.loadSeconds = min(figures.loadSeconds, Double(loadEnd - startMonotonic) / 1e9) }

        // The run's correctness, from its log: stop the services first so the log is complete.
        for process in localProcesses { waitOrKill(process) }
        supervisor.stopServices()
        servicesRunning = false
        try addLogFigures(to: &figures)

        let drivers = progress.roster.drivers.values
        let judged = options.thresholds.map { threshold in (threshold, threshold.passes(figures), threshold.actual(in: figures)) }
        return Result(figures: figures, thresholds: judged, rows: progress.rows, drivers: expected,
                      coordinatorCPUSeconds: Double(processCPUNanoseconds()) / 1e9,
                      driversCPUSeconds: drivers.reduce(0.0) { $0 + Double($1.cpuNanoseconds) } / 1e9,
                      coordinatorPeakMemoryBytes: peakResidentBytes(),
                      driverPeakMemoryBytes: drivers.map(\.peakMemoryBytes).max() ?? 0,
                      wallSeconds: Double(LiveClock.monotonicNanoseconds() - wallStart) / 1e9, aborted: progress.aborted,
                      lostDrivers: progress.lostDrivers,
                      startUnixNanoseconds: startUnix, runDirectory: runDirectory, histogramLog: logURL, plan: options.plan)
    }

    /// Binds the driver endpoint, within the protocol's limits; returns where it listens.
    private func listen(_ router: Socket) throws -> String {
        router.receiveLimits = LoadWire.limits
        // A frame beyond the protocol's whole-message limit closes its connection before libzmq
        // allocates it (a stranger's 17 MB frame once took the coordinator from 38 to 95 MB).
        try router.set(.maximumMessageSize, Int64(LoadWire.limits.maximumByteCount))
        try router.set(.receiveHighWaterMark, 100_000)
        let endpoint = topology.resolved(options.listenEndpoint ?? "ipc://{run}/load.ipc", runDirectory: runDirectory)
        do {
            try router.bind(endpoint)
        } catch {
            throw LoadProtocolError("cannot listen for drivers on \(endpoint) (\(error)); choose another --listen endpoint")
        }
        return endpoint
    }

    /// The drivers that joined, by name and by their socket identity.
    fileprivate struct DriverRoster {
        var drivers: [String: DriverState] = [:]
        var byIdentity: [[UInt8]: String] = [:]
        var ignoredFrames = 0
    }

    /// Hello and plan, then ready: bounded waits, watching the local drivers stay alive.
    private func admitDrivers(into roster: inout DriverRoster, expected: Int, router: Socket, security: DriverEndpointSecurity?,
                              supervisor: Supervisor, localProcesses: [Process]) throws {
        let setUpDeadline = LiveClock.monotonicNanoseconds() + 120_000_000_000
        while roster.drivers.count < expected || roster.drivers.values.contains(where: { !$0.ready }) {
            guard !Shutdown.isRequested else { throw LoadProtocolError("stopped by a signal before the load started") }
            guard LiveClock.monotonicNanoseconds() < setUpDeadline else {
                throw LoadProtocolError("\(roster.drivers.values.filter(\.ready).count) of \(expected) drivers were ready within 120 s; see the driver logs in \(runDirectory.path)")
            }
            if let dead = localProcesses.firstIndex(where: { !$0.isRunning }) {
                throw LoadProtocolError("driver-\(dead + 1) exited at start (status \(localProcesses[dead].terminationStatus)); see \(runDirectory.appendingPathComponent("driver-\(dead + 1).log").path)")
            }
            if let failure = try supervisor.superviseServices() { throw LoadProtocolError(failure) }
            try security?.admit()
            guard let frames = try receive(router, ignoredFrames: &roster.ignoredFrames), frames.count == 3, let verb = LoadWire.verb(frames[1]) else { continue }
            switch verb {
            case .hello:
                try admitHello(frames, into: &roster, expected: expected, router: router)
            case .ready:
                guard let name = roster.byIdentity[frames[0]] else { continue }
                roster.drivers[name]?.ready = true
                roster.drivers[name]?.lastHeard = LiveClock.monotonicNanoseconds()
            case .failed:
                // Only a driver that said hello can fail the load.
                guard let name = roster.byIdentity[frames[0]] else {
                    ignore("ignored a FAILED from a peer that is no driver of this load", count: &roster.ignoredFrames)
                    continue
                }
                throw LoadProtocolError("driver '\(name)' failed: \(String(decoding: frames[2], as: UTF8.self))")
            default:
                continue
            }
        }
    }

    /// A driver's hello: it gets its plan (its index among the drivers), unless it is a second driver of
    /// the same name or one more than expected.
    private func admitHello(_ frames: [[UInt8]], into roster: inout DriverRoster, expected: Int, router: Socket) throws {
        // Anything that reaches the endpoint can send frames: one that is not a driver's hello is
        // ignored (it once aborted the whole load), and logged for the first few.
        let hello: DriverHello
        do {
            hello = try LoadWire.decode(DriverHello.self, frames[2])
        } catch {
            ignore("ignored a HELLO that no driver sent", error: error, count: &roster.ignoredFrames)
            return
        }
        guard roster.drivers[hello.name] == nil else {
            throw LoadProtocolError("two drivers are named '\(hello.name)'; give each driver started by hand its own --name")
        }
        guard roster.drivers.count < expected else {
            throw LoadProtocolError("driver '\(hello.name)' (pid \(hello.pid) on \(hello.host)) arrived, but only \(expected) were expected; raise --remote-drivers")
        }
        var plan = options.plan
        plan.driverIndex = roster.drivers.count
        plan.driverCount = expected
        roster.drivers[hello.name] = DriverState(name: hello.name, identity: frames[0], index: plan.driverIndex)
        roster.byIdentity[frames[0]] = hello.name
        _ = try router.send([frames[0]] + LoadWire.frames(.plan, plan), mode: .nonBlocking)
        logger.info("driver joined", metadata: ["name": "\(hello.name)", "host": "\(hello.host)", "pid": "\(hello.pid)"])
    }

    /// The load itself: reports merged as they come until every driver sent its final one or was lost.
    private func collectReports(_ progress: LoadProgress, router: Socket, security: DriverEndpointSecurity?, supervisor: Supervisor,
                                localProcesses: [Process]) throws {
        let intervalSeconds = progress.intervalSeconds
        while progress.roster.drivers.values.contains(where: { !$0.isFinal }) {
            if Shutdown.isRequested { try progress.stopDrivers("stopped by a signal") }
            if let failure = try supervisor.superviseServices() {
                try progress.stopDrivers(failure)
                throw LoadProtocolError(failure)
            }
            // A local driver that died (kill -9, a crash) says so at once, not after its silence bound;
            // one that exited 0 sent its final report, still to be read.
            for (index, process) in localProcesses.enumerated()
            where !process.isRunning && !(process.terminationReason == .exit && process.terminationStatus == 0) && progress.roster.drivers["driver-\(index + 1)"]?.isFinal != true {
                progress.lose("driver-\(index + 1)", Self.deathMessage(process, name: "driver-\(index + 1)", runDirectory: runDirectory))
            }
            let now = LiveClock.monotonicNanoseconds()
            for silent in progress.roster.drivers.values where !silent.isFinal && Double(now - silent.lastHeard) / 1e9 > options.driverSilenceSeconds + intervalSeconds {
                progress.lose(silent.name, "driver '\(silent.name)' sent no report for \(Int(options.driverSilenceSeconds)) s; see its log (\(runDirectory.appendingPathComponent("\(silent.name).log").path) for a local one)")
            }
            guard progress.roster.drivers.values.contains(where: { !$0.isFinal }) else { break }
            try security?.admit()
            guard let frames = try receive(router, ignoredFrames: &progress.roster.ignoredFrames), frames.count == 3,
                  let verb = LoadWire.verb(frames[1]) else { continue }
            guard let name = progress.roster.byIdentity[frames[0]] else {
                // A stranger, or a driver too late to join: ignored and logged (the first few), as while gathering.
                ignore("ignored a \(verb.rawValue) from a peer that is no driver of this load", count: &progress.roster.ignoredFrames)
                continue
            }
            switch verb {
            case .report:
                try progress.take(try LoadWire.decode(DriverReport.self, frames[2]), from: name, now: now)
            case .failed:
                throw LoadProtocolError("driver '\(name)' failed: \(String(decoding: frames[2], as: UTF8.self))")
            default:
                continue
            }
        }
    }

    /// What the log says of the run: violations, what is pending, rejections and duplicates.
    private func addLogFigures(to figures: inout LoadFigures) throws {
        // Across hosts, this host's log folder holds only its own queues' partitions; the others are
        // checked on their hosts (`sksim log project`, docs/load-testing.md).
        let localQueues = topology.queues.filter { queue in options.thisHost.map { queue.host == $0 } ?? true }
        let built = try PartitionedLogProjection.build(directory: runDirectory.appendingPathComponent("log", isDirectory: true),
                                                       partitions: localQueues.map { $0.partition! })
        figures.violations = built.violationCount
        figures.violationMessages = built.violations.prefix(20).map { "\($0)" }
        figures.pending = built.pendingCount
        figures.logRejections = built.totals.rejections
        figures.duplicates = QueueStatistics.duplicateCommands(in: runDirectory, topology: topology)
    }

    /// The next message at the driver endpoint, nil after 50 ms without one. Anything that reaches the
    /// endpoint can send a message beyond the protocol's limits (more frames, more bytes): it is
    /// dropped unread and logged for the first few, as a stranger's HELLO is (it once ended the
    /// whole load: "inbound message of 4 frames … exceeds the limits").
    private func receive(_ router: Socket, ignoredFrames: inout Int) throws -> [[UInt8]]? {
        do {
            return try router.receive(timeout: .milliseconds(50))
        } catch {
            guard error.code == EMSGSIZE else { throw error }
            ignore("ignored a message beyond the driver protocol's limits", error: error, count: &ignoredFrames)
            return nil
        }
    }

    /// Counts a message ignored at the driver endpoint and logs the first ten (a stranger cannot flood the log).
    private func ignore(_ message: Logger.Message, error: (any Error)? = nil, count: inout Int) {
        count += 1
        guard count <= 10 else { return }
        logger.warning(message, metadata: error.map { ["error": "\($0)"] })
    }

    private func launchDriver(name: String, endpoint: String) throws -> Process {
        let process = Process()
        process.executableURL = options.driverExecutable ?? executable
        process.arguments = ["driver", "--topology", topologyPath, "--name", name, "--coordinator", endpoint, "--run-directory", runDirectory.path] + options.childArguments
        let logFile = runDirectory.appendingPathComponent("\(name).log")
        _ = FileManager.default.createFile(atPath: logFile.path, contents: nil)
        let handle = try FileHandle(forWritingTo: logFile)
        process.standardError = handle
        process.standardOutput = handle
        process.standardInput = FileHandle.nullDevice
        try process.run()
        return process
    }

    /// "driver-1 was killed by signal 9 during the load; …": how a local driver ended, with the last
    /// line of its log when that is its own error.
    static func deathMessage(_ process: Process, name: String, runDirectory: URL) -> String {
        let how = process.terminationReason == .uncaughtSignal
            ? "was killed by signal \(process.terminationStatus)" : "exited with status \(process.terminationStatus)"
        let log = runDirectory.appendingPathComponent("\(name).log")
        let lastLine = (try? String(contentsOf: log, encoding: .utf8))?.split(separator: "\n").last
            .flatMap { $0.contains("error") ? ": \($0)" : nil } ?? ""
        return "\(name) \(how) during the load\(lastLine); its reports up to then are kept, and the lifecycles it had in flight count as errors "
            + "(see \(log.path))"
    }

    private func waitOrKill(_ process: Process) {
        let deadline = LiveClock.monotonicNanoseconds() + 5_000_000_000
        while process.isRunning && LiveClock.monotonicNanoseconds() < deadline { usleep(10_000) }
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }
}

/// The merged figures of a running load: each driver's reports go into the totals and into their
/// interval, and an interval is shown (row, histogram log, live view, metrics) once every driver has
/// reported it.
private final class LoadProgress {
    let options: LoadCoordinator.Options
    let logger: Logger
    let router: Socket
    var roster: LoadCoordinator.DriverRoster
    var histogramLog: HistogramLogWriter
    let logHandle: FileHandle
    var figures = LoadFigures()
    var intervals: [Int: LoadCoordinator.IntervalAccumulator] = [:]
    var nextEmit = 0
    var rows: [LoadCoordinator.IntervalRow] = []
    var liveView: LiveView?
    var aborted: String?
    var stopSent = false
    let intervalSeconds: Double
    var lastStartSeconds = 0.0
    var lostDrivers: [LoadCoordinator.LostDriver] = []

    init(options: LoadCoordinator.Options, logger: Logger, router: Socket, roster: LoadCoordinator.DriverRoster,
         histogramLog: HistogramLogWriter, logHandle: FileHandle) {
        self.options = options
        self.logger = logger
        self.router = router
        self.roster = roster
        self.histogramLog = histogramLog
        self.logHandle = logHandle
        liveView = options.showLiveView ? LiveView() : nil
        intervalSeconds = Double(options.plan.intervalNanoseconds) / 1e9
    }

    func stopDrivers(_ reason: String) throws {
        guard !stopSent else { return }
        stopSent = true
        aborted = aborted ?? reason
        for driver in roster.drivers.values where !driver.isFinal {
            _ = try router.send([driver.identity, Array(LoadWire.Verb.stop.rawValue.utf8)], mode: .nonBlocking)
        }
    }

    func lose(_ name: String, _ reason: String) {
        guard let driver = roster.drivers[name], !driver.isFinal else { return }
        logger.error("driver lost; the load goes on without it", metadata: ["driver": "\(name)", "reason": "\(reason)"])
        roster.drivers[name]?.isFinal = true
        lostDrivers.append(LoadCoordinator.LostDriver(name: name, reason: reason, lastInterval: driver.lastInterval, inFlight: driver.inFlight))
        figures.counters.errors = figures.counters.errors &+ driver.inFlight
    }

    /// A driver's report, checked against the plan, into the totals and its interval.
    func take(_ report: DriverReport, from name: String, now: Int64) throws {
        try options.plan.checkReport(report)
        let histograms = try StageHistograms(encoded: report.histograms)
        let custom = try report.custom.map { wire throws(LoadProtocolError) in try CustomFigures(wire: wire) } ?? CustomFigures()
        try figures.custom.add(custom)
        figures.stages.add(histograms)
        figures.counters = figures.counters + report.counters
        // A report for an interval already shown (from a driver far behind) counts in the totals only.
        if report.interval >= nextEmit {
            var accumulator = intervals[report.interval] ?? LoadCoordinator.IntervalAccumulator()
            accumulator.histograms.add(histograms)
            try accumulator.custom.add(custom)
            accumulator.counters = accumulator.counters + report.counters
            accumulator.inFlight += report.inFlight
            intervals[report.interval] = accumulator
        }
        roster.drivers[name]?.lastInterval = report.interval
        roster.drivers[name]?.lastHeard = now
        roster.drivers[name]?.cpuNanoseconds = report.cpuNanoseconds
        roster.drivers[name]?.inFlight = report.inFlight
        roster.drivers[name]?.peakMemoryBytes = report.peakMemoryBytes
        if report.isFinal { roster.drivers[name]?.isFinal = true }
        if report.counters.started > 0 || report.counters.missedStarts > 0 {
            lastStartSeconds = max(lastStartSeconds, (Double(report.interval) + 1) * intervalSeconds)
        }
        try emitReadyIntervals()
    }

    func emitReadyIntervals() throws {
        while true {
            // A driver lagging far behind must not make the coordinator hold intervals without bound.
            let forced = intervals.count > 120
            guard forced || roster.drivers.values.allSatisfy({ $0.isFinal || $0.lastInterval >= nextEmit }),
                  let accumulator = intervals.removeValue(forKey: nextEmit) ?? (forced ? LoadCoordinator.IntervalAccumulator() : nil) else { return }
            try emit(accumulator)
            nextEmit += 1
            // Nothing is judged before the abort delay: early intervals hold few samples (k6's delayAbortEval).
            if options.abortOnFail, aborted == nil, Int64(nextEmit) * options.plan.intervalNanoseconds >= options.abortDelayNanoseconds,
               let failed = options.thresholds.first(where: { !$0.isEndOfRun && !$0.passes(figures) }) {
                logger.warning("threshold failed; stopping the load (--abort-on-fail)", metadata: ["threshold": "\(failed.expression)"])
                try stopDrivers("threshold '\(failed.expression)' failed during the run (--abort-on-fail)")
            }
        }
    }

    /// Interval `nextEmit`, all drivers merged: its histograms logged, its row kept, shown and served.
    private func emit(_ accumulator: LoadCoordinator.IntervalAccumulator) throws {
        var stages: [String: StageSummary] = [:]
        for stage in LifecycleStage.allCases {
            guard let histogram = accumulator.histograms.histograms[stage], histogram.totalCount > 0 else { continue }
            stages[stage.rawValue] = StageSummary(histogram)
            histogramLog.append(tag: stage.rawValue, startSeconds: Double(nextEmit) * intervalSeconds, lengthSeconds: intervalSeconds, histogram: histogram)
        }
        // A team's driver's own stages, merged like the built-in ones (their names are no built-in stage's).
        for (name, histogram) in accumulator.custom.stages.sorted(by: { $0.key < $1.key }) where histogram.totalCount > 0 {
            stages[name] = StageSummary(histogram)
            histogramLog.append(tag: name, startSeconds: Double(nextEmit) * intervalSeconds, lengthSeconds: intervalSeconds, histogram: histogram)
        }
        try logHandle.write(contentsOf: Data(histogramLog.take().utf8))
        let row = LoadCoordinator.IntervalRow(interval: nextEmit, startSeconds: Double(nextEmit) * intervalSeconds, counters: accumulator.counters,
                                              inFlight: accumulator.inFlight, stages: stages)
        rows.append(row)
        options.metrics?.record(row)
        liveView?.draw(row: row, figures: figures, elapsedSeconds: Double(nextEmit + 1) * intervalSeconds)
    }
}
