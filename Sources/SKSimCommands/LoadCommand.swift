import ArgumentParser
import Foundation
import AppStoreServer
import Logging
import StoreKitLive
import StoreKitLoad
import StoreKitModel

/// The default load topology: built in (byte for byte topology/load.yaml), so `sksim load` runs
/// from any directory; its processes are told `built-in:load` instead of a path.
let defaultLoadTopologyPath = Topology.builtInLoadName

/// What a load's processes are given as `--topology`: the built-in name, or the file's absolute path.
func loadTopologyPath(_ topology: String) -> String {
    Topology.builtInText(topology) != nil ? topology : URL(fileURLWithPath: topology).path
}

struct LoadCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "load",
        abstract: "A load test: driver processes play many devices against a real queue; latency per lifecycle stage, thresholds, a report.",
        discussion: """
            The open model (--rate R, or --stages '30s:100/s,2m:2000/s,30s:0') starts lifecycles at a rate whatever the \
            system does; the closed model (--devices N --think-time D) has N devices that each start again a think time \
            after their last lifecycle. Every stage is timed from the lifecycle's intended start. Settings may also sit in \
            the topology's 'load:' section; the command line wins. Durations: 500ms, 30s, 2m, 1h. \
            A failed threshold exits 99 (after the report is written). See docs/load-testing.md.
            """)

    @Argument(help: "Topology file (default: the built-in load topology, the same as topology/load.yaml; `sksim topology show load` prints it).")
    var topology: String = defaultLoadTopologyPath
    @Option(help: "open (arrivals at a rate) or closed (devices with think times).") var model: LoadModel?
    @Option(parsing: .unconditional, help: "Open model: lifecycle starts per second, e.g. 2000 or 2000/s.") var rate: String?
    @Option(parsing: .unconditional, help: "Closed model: the devices; open model: the device pool lifecycles are spread over.") var devices: Int?
    @Option(parsing: .unconditional, help: "Open model: stages DURATION:RATE,… each ramping from the previous rate, e.g. 30s:100/s,2m:2000/s,30s:0.") var stages: String?
    @Option(parsing: .unconditional, help: "How long the load runs (not with --stages), e.g. 30s or 2m (default 10s).") var duration: String?
    @Option(parsing: .unconditional, help: "Closed model: mean think time between a device's lifecycles (exponential), e.g. 100ms.") var thinkTime: String?
    @Option(name: .customLong("threshold"), help: "A pass/fail criterion, repeatable: 'finished.p99<50ms', 'violations==0', 'rate>=1000'.") var thresholds: [String] = []
    @Flag(help: "Stop the load as soon as a threshold fails (latency and count thresholds, judged every interval).") var abortOnFail = false
    @Option(help: "Write summary.json, timeseries.csv, histograms.hlog and report.html into this directory.") var report: String?
    @Flag(help: "Print one JSON object instead of the summary.") var json = false
    @Option(parsing: .unconditional, help: "Driver processes to start on this machine (default 1).") var drivers: Int?
    @Option(parsing: .unconditional, help: "Drivers started by hand (`sksim driver`) on other hosts to wait for.") var remoteDrivers: Int?
    @Option(help: "Where drivers reach this coordinator (default ipc://{run}/load.ipc; tcp://0.0.0.0:PORT for other hosts).") var listen: String?
    @Option(parsing: .unconditional, help: "Fraction of lifecycles that are restores (default 0).") var restoreFraction: Double?
    @Option(parsing: .unconditional, help: "Fraction of purchases that buy hosted content and download it (default 0).") var downloadFraction: Double?
    @Option(parsing: .unconditional, help: "Reporting interval (default 1s).") var interval: String?
    @Option(parsing: .unconditional, help: "After the last start, how long to wait for lifecycles in flight (default 10s).") var drain: String?
    @Option(parsing: .unconditional, help: "Lifecycles one driver keeps in flight at most; starts beyond are missed (default 50000).") var maximumInFlight: Int?
    @Option(help: "Output directory (default: out/load-<seed>).") var out: String?
    @Option(help: "The team's product catalog: an Xcode .storekit file or a native catalog; the store sells it and the drivers buy from it.") var catalog: String?
    @Option(help: "Products to buy and their weights, ID=WEIGHT,… (default: every product of the catalog equally).") var products: String?
    @Option(help: "Lifecycle kinds and their weights, e.g. purchase=90,restore=5,receiptRefresh=3,refundRequest=2,askToBuy=1 (default: purchases, and --restore-fraction restores).") var mix: String?
    @Option(parsing: .unconditional, help: "A start that can be made only more than this behind its schedule is not made and counts as missed (default 1s).") var lateStartBound: String?
    @Option(parsing: .unconditional, help: "--abort-on-fail judges no threshold before this much of the load ran (default 5s), like k6's delayAbortEval.") var abortDelay: String?
    @Option(help: "Your server: before finishing a purchased or restored transaction, the app POSTs it there as JSON; a non-2xx answer, a timeout or a refused connection leaves it unfinished and counts as an error.") var backend: String?
    @Option(parsing: .unconditional, help: "How long a --backend POST may take before it counts as an error (default 5s).") var backendTimeout: String?
    @Option(help: "Serve the run's figures to Prometheus at http://HOST:PORT/metrics while the load runs, e.g. 127.0.0.1:9464.") var metrics: String?
    @Option(help: "Your own driver: an executable built with StoreKitLoadKit, started as each local driver with `sksim driver`'s arguments (docs/load-testing.md, \"Your own driver\").") var driver: String?
    @Option(help: "This machine's `host` in the topology, for a load across hosts: start only the services on it and wait for the other hosts' queues (started by hand with `sksim queue`).") var host: String?
    @OptionGroup var appStoreServer: AppStoreServerOverrides

    func run() async throws {
        Shutdown.installSignalHandlers()
        let loaded = appStoreServer.apply(to: try loadTopology(topology))
        let commandLine = commandLineSettings()
        var options: LoadCoordinator.Options
        let settings: LoadSettings
        do {
            settings = try LoadSettings.fromTopology(path: topology).overridden(by: commandLine)
            options = try settings.resolve(seed: loaded.scenario.seed)
        } catch {
            throw UserFacingError("\(error)", code: .invalidInput)
        }
        options.showLiveView = options.showLiveView && !json
        options.childArguments = appStoreServer.childArguments
        // The drivers this starts (this executable) run the topology's app: it must be registered here too.
        // (A team's own driver, --driver, registers its app itself.)
        if let app = loaded.scenario.apps.app, options.localDrivers > 0, settings.driver == nil { _ = try RegisteredApps.launch(for: app) }
        if let host {
            guard loaded.processes.contains(where: { $0.host == host && $0.role != .observer }) else {
                throw UserFacingError("--host \(host): no queue, store or downloader of \(topology) names host \(host); give the 'host' of this machine's processes (hosts in the file: \(Set(loaded.processes.map(\.host)).sorted().joined(separator: ", ")))", code: .unknownName)
            }
            options.thisHost = host
        }
        let directory = outputDirectory(out ?? loaded.output, prefix: "load", seed: loaded.scenario.seed).standardizedFileURL
        if FileManager.default.fileExists(atPath: directory.appendingPathComponent("log").path) {
            throw UserFacingError("\(directory.path) already holds a run; choose a new --out directory or remove the old run", code: .outputExists)
        }
        // The team's catalog: the store must sell it, so its processes get a copy of the topology that names it.
        var topology = loaded
        var topologyPath = loadTopologyPath(self.topology)
        if let catalogPath = settings.catalog {
            let catalogFile = URL(fileURLWithPath: catalogPath)
            do {
                _ = try Catalog.load(contentsOf: catalogFile)
            } catch {
                throw UserFacingError("--catalog: \(error)", code: .invalidInput)
            }
            do {
                topologyPath = try LoadSettings.writeTopology(self.topology, catalog: catalogFile, into: directory)
            } catch {
                throw UserFacingError("\(error)", code: .invalidInput)
            }
            topology = try loadTopology(topologyPath)
        }
        do {
            options.plan.products = try settings.loadProducts(storeCatalog: topology.scenario.catalog,
                                                              isBuiltInSample: settings.catalog == nil && topology.scenario.catalogSource == "built-in sample",
                                                              source: settings.catalog ?? "the topology's catalog (\(topology.scenario.catalogSource))")
        } catch {
            throw UserFacingError("\(error)", code: .invalidInput)
        }
        var metricsEndpoint: MetricsEndpoint?
        if let metrics {
            do {
                metricsEndpoint = try MetricsEndpoint(listen: metrics)
            } catch {
                throw UserFacingError("\(error)")
            }
            options.metrics = metricsEndpoint
        }
        defer { metricsEndpoint?.close() }
        var logger = Logger(label: "sksim.load")
        if logger.logLevel > .debug { logger.logLevel = .warning }
        let coordinator = LoadCoordinator(topology: topology, topologyPath: topologyPath, runDirectory: directory,
                                          executable: currentExecutable(), options: options, logger: logger)
        var result: LoadCoordinator.Result
        do {
            result = try coordinator.run()
        } catch {
            throw UserFacingError("load failed: \(error)", code: .failed)
        }
        try measureNotifications(topology: topology, runDirectory: directory, into: &result)
        if let report {
            do {
                result.reportDirectory = URL(fileURLWithPath: report, isDirectory: true).standardizedFileURL
                try LoadReportWriter.write(result, to: URL(fileURLWithPath: report, isDirectory: true))
            } catch {
                throw UserFacingError("cannot write the report into \(report): \(describeError(error)); free some space or choose another --report folder", code: .unwritable)
            }
        }
        printLine(json ? LoadSummaryJSON(result).serialized() : summaryText(result))
        if result.thresholdsFailed { throw ExitCode(99) }
    }

    /// The settings given on the command line; they override the topology's `load` section.
    private func commandLineSettings() -> LoadSettings {
        var commandLine = LoadSettings()
        commandLine.model = model
        commandLine.rate = rate
        commandLine.devices = devices
        commandLine.stages = stages
        commandLine.duration = duration
        commandLine.thinkTime = thinkTime
        commandLine.thresholds = thresholds
        commandLine.abortOnFail = abortOnFail ? true : nil
        commandLine.drivers = drivers
        commandLine.remoteDrivers = remoteDrivers
        commandLine.listen = listen
        commandLine.restoreFraction = restoreFraction
        commandLine.downloadFraction = downloadFraction
        commandLine.interval = interval
        commandLine.drain = drain
        commandLine.maximumInFlight = maximumInFlight
        commandLine.catalog = catalog.map { URL(fileURLWithPath: $0).standardizedFileURL.path }
        commandLine.products = products
        commandLine.mix = mix
        commandLine.lateStartBound = lateStartBound
        commandLine.abortDelay = abortDelay
        commandLine.backend = backend
        commandLine.backendTimeout = backendTimeout
        commandLine.driver = driver.map { URL(fileURLWithPath: $0).standardizedFileURL.path }
        return commandLine
    }

    /// With an App Store server that sends notifications, stage notified from its journal (the server has
    /// stopped, its drain over: the journal says what was delivered, and when), and the thresholds judged
    /// again with it (`notified.p99<2s`); the other figures are unchanged.
    private func measureNotifications(topology: Topology, runDirectory: URL, into result: inout LoadCoordinator.Result) throws {
        guard let section = topology.appStoreServer, section.notificationURL != nil else { return }
        let certificates = section.certificates.map { URL(fileURLWithPath: $0, isDirectory: true) }
            ?? runDirectory.appendingPathComponent("app-store", isDirectory: true)
        do {
            try LoadNotifications.measure(runDirectory: runDirectory, certificates: certificates, into: &result.figures)
        } catch {
            throw UserFacingError("cannot time the notifications from \(runDirectory.path): \(describeError(error))", code: .failed)
        }
        result.thresholds = result.thresholds.map { ($0.threshold, $0.threshold.passes(result.figures), $0.threshold.actual(in: result.figures)) }
    }
}

extension LoadModel: ExpressibleByArgument {}

/// `sksim driver`: one load driver, started by `sksim load` or by hand on another host.
struct DriverCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "driver",
        abstract: "A load driver: plays many devices against the queue for a `sksim load` coordinator.")

    @Option(help: "Topology file (the queue's endpoints and CURVE keys; default: the built-in load topology).") var topology: String = defaultLoadTopologyPath
    @Option(help: "This driver's name, unique in the load (its devices are NAME-0, NAME-1, …).") var name: String
    @Option(help: "The coordinator's endpoint (what `sksim load --listen` bound).") var coordinator: String
    @Option(help: "Run directory the queue's ipc endpoints are in (default: out/<topology name>).") var runDirectory: String?
    @Option(parsing: .unconditional, help: "How long to wait for the coordinator's plan, e.g. 30s (default 60s).") var coordinatorTimeout: String?
    @OptionGroup var appStoreServer: AppStoreServerOverrides

    func run() async throws {
        Shutdown.installSignalHandlers()
        let loaded = appStoreServer.apply(to: try loadTopology(topology))
        guard !name.isEmpty, name.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" || $0 == "." }) else {
            throw UserFacingError("--name '\(name)' must be letters, digits, '-', '_' or '.'")
        }
        let directory = URL(fileURLWithPath: runDirectory ?? loaded.output ?? "out/\(loaded.name)", isDirectory: true).standardizedFileURL
        var configuration = LoadDriver.Configuration(
            name: name, coordinatorEndpoint: loaded.resolved(coordinator, runDirectory: directory),
            partitions: loaded.partitionEndpoints(runDirectory: directory))
        configuration.heartbeatMilliseconds = loaded.heartbeatMilliseconds
        configuration.behavior = RegisteredLoadDriver.behavior
        if let app = RegisteredLoadDriver.app {
            // A team's driver runs its own app on every device, whatever the topology names.
            configuration.app = DriverApp(name: "driver app", launch: app.launch, catalog: loaded.scenario.catalog,
                                          workLatency: loaded.scenario.apps.asynchronousWorkLatency)
        } else if let app = loaded.scenario.apps.app {
            configuration.app = DriverApp(name: app, launch: try RegisteredApps.launch(for: app), catalog: loaded.scenario.catalog,
                                          workLatency: loaded.scenario.apps.asynchronousWorkLatency)
        }
        if let coordinatorTimeout {
            do {
                configuration.coordinatorTimeoutSeconds = try DurationText.positiveSeconds(coordinatorTimeout)
            } catch {
                throw UserFacingError("--coordinator-timeout: \(error)")
            }
        }
        do {
            configuration.curve = try loaded.curveClientKeys()
        } catch {
            throw UserFacingError("\(error)", code: .invalidInput)
        }
        var logger = Logger(label: "sksim.driver")
        logger[metadataKey: "process"] = "\(name)"
        // --backend's evidence: signed from the run's log where this driver can read it (a driver on
        // another host without the log sends unsigned evidence, which a verifying backend refuses).
        let logDirectory = directory.appendingPathComponent("log", isDirectory: true)
        if FileManager.default.fileExists(atPath: logDirectory.path) {
            let section = loaded.appStoreServer ?? AppStoreServerSection()
            let certificates = section.certificates.map { URL(fileURLWithPath: $0, isDirectory: true) }
                ?? directory.appendingPathComponent("app-store", isDirectory: true)
            configuration.evidence = SignedPurchaseEvidence.producer(
                logDirectory: logDirectory, certificates: certificates,
                settings: AppStoreSettings(bundleIdentifier: section.bundleIdentifier, environment: section.environment))
        } else {
            logger.warning("the run's log is not on this host: --backend gets unsigned evidence", metadata: ["log": "\(logDirectory.path)"])
        }
        do {
            try LoadDriver(configuration: configuration, logger: logger).run()
        } catch {
            logger.critical("driver failed", metadata: ["error": "\(error)"])
            throw UserFacingError("driver \(name) failed: \(error)", code: .failed)
        }
    }
}
