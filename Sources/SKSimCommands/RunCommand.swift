import ArgumentParser
import Foundation
import Logging
import StoreKitLive
import StoreKitModel
import StoreKitRuntime
import StoreKitSimulation

func loadTopology(_ path: String?, seed: UInt64? = nil, devices: Int? = nil) throws -> Topology {
    do {
        return try Topology.load(path: path).overriding(seed: seed, devices: devices)
    } catch {
        throw UserFacingError("\(error)", code: .invalidInput)
    }
}

/// The path of this very executable, so `run` can start its children from it.
package func currentExecutable() -> URL {
    if let path = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") { return URL(fileURLWithPath: path) }
    return URL(fileURLWithPath: CommandLine.arguments[0]).standardizedFileURL
}

/// A duration on the command line: `500ms`, `30s`, `2m`, `1h`, or plain seconds; never zero or negative.
func parseDurationArgument(_ text: String) throws -> Double {
    do {
        return try DurationText.positiveSeconds(text)
    } catch {
        throw ValidationError(error.description)
    }
}

struct RunCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Run a whole topology on this machine: every role a process over ZeroMQ (the main job).",
        discussion: """
            Without a file, runs the built-in local topology (`sksim topology show` prints it). Live runs \
            depend on real timing: the same seed gives the same users and store decisions, but counts such \
            as events and restores vary from run to run (`sksim simulate` is the deterministic twin).
            Exit status: 0 every app finished; 1 an invariant was violated; 2 a process failed for good or \
            the run could not start; 3 stopped at --duration with work pending; 130 interrupted (Ctrl-C).
            """)

    @Argument(help: "Topology file (default: the built-in local topology).") var topology: String?
    @Option(help: "Output directory: log, content, per-process logs, run.json (default: the topology's `output`, else out/<topology name>-<seed>).") var out: String?
    @Option(parsing: .unconditional, help: ArgumentHelp("Stop after this long even if the apps are not done: 500ms, 30s, 2m, 1h (default: 5m).", valueName: "duration"),
            transform: parseDurationArgument)
    var duration: Double = 300
    @Option(parsing: .unconditional, help: "Seed for every random choice (default: the topology's).") var seed: UInt64?
    @Option(parsing: .unconditional, help: "Simulated devices, shared evenly by the topology's observer processes (default: the topology's).") var devices: Int?
    @Option(parsing: .unconditional, help: "Restarts allowed per process; each rebuilds from the log (for an observer, an app relaunch).") var maximumRestarts = 3
    @Flag(help: "Print one JSON object instead of the human summary.") var json = false
    @OptionGroup var appStoreServer: AppStoreServerOverrides
    @OptionGroup var verbosity: VerbosityOptions

    func validate() throws {
        guard maximumRestarts >= 0 else { throw ValidationError("--maximum-restarts must be 0 or more, found \(maximumRestarts)") }
    }

    func run() async throws {
        Shutdown.installSignalHandlers()
        let loaded = appStoreServer.apply(to: try loadTopology(topology, seed: seed, devices: devices))
        let topologyPath = topology.map { URL(fileURLWithPath: $0).standardizedFileURL.path } ?? Topology.builtInName
        do {
            try Supervisor.checkAllLocal(loaded, topologyPath: topology ?? Topology.builtInName)
            // A client key the queue does not list only shows as a queue that "did not answer".
            try loaded.checkClientKeyAllowed()
        } catch {
            throw UserFacingError("\(error)", code: .invalidInput)
        }
        let directory = try prepareRunDirectory(out ?? loaded.output, topology: loaded)
        var options = Supervisor.Options()
        options.durationSeconds = duration
        options.maximumRestarts = maximumRestarts
        options.childArguments = (seed.map { ["--seed", "\($0)"] } ?? []) + (devices.map { ["--devices", "\($0)"] } ?? [])
            + appStoreServer.childArguments
        var logger = Logger(label: "sksim.run")
        logger[metadataKey: "topology"] = "\(loaded.name)"
        // On a terminal the progress line tells the story; info lines would break it up.
        if options.showProgress && logger.logLevel > .debug { logger.logLevel = .warning }
        if let warning = loaded.unauthenticatedTransportWarning { logger.warning("\(warning)") }
        for warning in loaded.observerKeyWarnings() { logger.warning("\(warning)") }
        let supervisor = Supervisor(topology: loaded, topologyPath: topologyPath, runDirectory: directory.standardizedFileURL,
                                    executable: currentExecutable(), options: options, logger: logger)
        let result: Supervisor.Result
        do {
            result = try supervisor.run()
        } catch {
            throw UserFacingError("run failed: \(describeError(error))", code: .failed)
        }
        let appStore = AppStoreServerReport(runDirectory: directory, topology: loaded)
        if let appStore, appStore.undelivered > 0 {
            printError("app store server: \(appStore.undelivered) notifications left undelivered after the drain; `sksim app-store-server \(directory.path) --notification-url URL` sends them")
        }
        var extra: [(String, JSONValue)] = [
            ("topology", .string(loaded.name)), ("wallSeconds", .double((result.wallSeconds * 1000).rounded() / 1000)),
            ("finished", .bool(result.finished)), ("interrupted", .bool(result.interrupted)),
            ("restarts", .object(result.restarts.sorted { $0.key < $1.key }.map { ($0.key, .int($0.value)) })),
            ("runFile", .string(directory.appendingPathComponent("run.json").path)),
            ("failure", result.failure.map { .string($0) } ?? .null),
            ("exitStatus", .int(Int(result.exitStatus))),
        ]
        if let appStore {
            extra.append(("appStoreServer", .object([("listening", .string(appStore.listening)), ("undelivered", .int(appStore.undelivered))])))
        }
        if json {
            printLine(JSONShapes.report(result.report, extra: extra).serialized())
        } else {
            printLine(JSONShapes.summaryText(result.report).replacingOccurrences(of: "simulated time", with: "elapsed time  "))
            if !result.restarts.isEmpty { printLine("restarts        " + result.restarts.sorted { $0.key < $1.key }.map { "\($0.key) ×\($0.value)" }.joined(separator: ", ")) }
            printLine("processes       \(directory.appendingPathComponent("run.json").path)")
            if let appStore { printLine("app store       \(appStore.listening), \(appStore.undelivered) notifications undelivered") }
            if result.interrupted { printLine("interrupted     stopped by a signal before the apps were done") }
        }
        if let failure = result.failure { throw UserFacingError(failure, code: .failed, exitStatus: result.exitStatus) }
        if result.exitStatus != 0 { throw ExitCode(result.exitStatus) }
    }

    /// A new run directory: refuses a file, or a directory that already holds a run.
    private func prepareRunDirectory(_ requested: String?, topology: Topology) throws -> URL {
        let directory = outputDirectory(requested, prefix: topology.name, seed: topology.scenario.seed)
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: directory.path, isDirectory: &isDirectory), !isDirectory.boolValue {
            throw UserFacingError("--out \(directory.relativePath) is a file, not a directory; give a new directory for the run")
        }
        if FileManager.default.fileExists(atPath: directory.appendingPathComponent("log").path) {
            throw UserFacingError("\(directory.relativePath) already holds a run; choose a new --out directory or remove the old run", code: .outputExists)
        }
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        } catch {
            throw UserFacingError("cannot create the run directory \(directory.relativePath) (\(describeError(error))); choose a writable --out directory", code: .unwritable)
        }
        return directory
    }
}

/// `sksim queue|store|downloader|observer`: one role of a topology, for spreading a
/// run over hosts (and what `run` starts for each process).
struct RoleOptions: ParsableArguments {
    @Option(help: "Topology file (default: the built-in local topology).") var topology: String?
    @Option(help: "This process's name in the topology.") var name: String
    @Option(help: "Run directory (log, content, ipc sockets) (default: the topology's `output`, else out/<topology name>).") var runDirectory: String?
    @Option(parsing: .unconditional, help: "Seed override, as given to `sksim run --seed` (every process of a run must use the same).") var seed: UInt64?
    @Option(parsing: .unconditional, help: "Devices override, as given to `sksim run --devices` (every process of a run must use the same).") var devices: Int?
    @OptionGroup var liveReplay: LiveReplayChildOptions
    @OptionGroup var appStoreServer: AppStoreServerOverrides
    @OptionGroup var verbosity: VerbosityOptions

    func resolve() throws -> (Topology, URL, Logger) {
        Shutdown.installSignalHandlers()
        Shutdown.followSupervisor()
        let topology = try liveReplay.replayed(appStoreServer.apply(to: loadTopology(self.topology, seed: seed, devices: devices)))
        let directory = URL(fileURLWithPath: runDirectory ?? topology.output ?? "out/\(topology.name)", isDirectory: true).standardizedFileURL
        var logger = Logger(label: "sksim.\(name)")
        logger[metadataKey: "process"] = "\(name)"
        return (topology, directory, logger)
    }

    /// The run directory, created only once the arguments are known to be right.
    static func create(_ directory: URL) throws {
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        } catch {
            throw UserFacingError("cannot create the run directory \(directory.path) (\(describeError(error))); give a writable --run-directory", code: .unwritable)
        }
    }
}

struct QueueCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "queue", abstract: "Run the queue of a topology: the single writer of the log.")
    @OptionGroup var options: RoleOptions

    func run() async throws {
        let (topology, directory, logger) = try options.resolve()
        try RoleOptions.create(directory)
        do {
            try QueueProcess(topology: topology, name: options.name, runDirectory: directory, logger: logger).run()
        } catch {
            logger.critical("queue failed; nothing more is written to the log", metadata: ["error": "\(describeError(error))"])
            FailureNote.write(describeError(error), process: options.name, runDirectory: directory)
            throw UserFacingError(describeError(error), code: .failed)
        }
    }
}

/// Store, downloader and observer share one runner; the topology says which role a name plays.
struct RoleCommand<Kind: RoleKindName>: AsyncParsableCommand {
    static var configuration: CommandConfiguration {
        CommandConfiguration(commandName: Kind.kind.rawValue, abstract: Kind.abstract)
    }
    @OptionGroup var options: RoleOptions

    init() {}

    func run() async throws {
        var (topology, directory, logger) = try options.resolve()
        // An observer process of a topology that names an app runs that app's code (this executable registers it).
        if Kind.kind == .observer {
            try RegisteredApps.attach(to: &topology.scenario)
            try RegisteredApps.signReceipts(scenario: topology.scenario, appStoreServer: topology.appStoreServer, runDirectory: directory)
        }
        let process = try topology.process(named: options.name)
        guard process.role == Kind.kind else {
            throw UserFacingError("'\(options.name)' is a \(process.role.rawValue) in \(topology.file), not a \(Kind.kind.rawValue); run `sksim \(process.role.rawValue) --name \(options.name)`")
        }
        try RoleOptions.create(directory)
        let outcome: RoleProcess.Outcome
        do {
            let roleProcess = try RoleProcess(topology: topology, name: options.name, runDirectory: directory, logger: logger)
            roleProcess.replacementRole = try options.liveReplay.role(for: process, topology: topology)
            outcome = try roleProcess.run()
        } catch {
            logger.critical("\(Kind.kind.rawValue) failed", metadata: ["error": "\(describeError(error))"])
            FailureNote.write(describeError(error), process: options.name, runDirectory: directory)
            let failsTheRun = (error as? RoleProcessError)?.failsTheRun ?? false
            throw UserFacingError(describeError(error), code: .failed, exitStatus: failsTheRun ? RoleProcess.untrustedRunStatus : 2)
        }
        // An observer stopped before its apps were done must not look finished to `sksim run` (status 0 is "done").
        if outcome == .stopped && Kind.kind == .observer { throw ExitCode(RoleProcess.stoppedStatus) }
    }
}

protocol RoleKindName { static var kind: RoleKind { get }; static var abstract: String { get } }
enum StoreKind: RoleKindName { static let kind = RoleKind.store; static let abstract = "Run the simulated App Store of a topology." }
enum DownloaderKind: RoleKindName { static let kind = RoleKind.downloader; static let abstract = "Run the hosted-content downloader of a topology." }
enum ObserverKind: RoleKindName { static let kind = RoleKind.observer; static let abstract = "Run the apps (observers and users) of some devices of a topology." }

struct KeysCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "keys", abstract: "Print a new CURVE key pair (Z85) for a topology's curve section.")

    func run() async throws {
        let pair = try CurveKeyPairMaker.generate()
        printLine("publicKey: \"\(pair.publicKey)\"\nsecretKey: \"\(pair.secretKey)\"")
    }
}

/// What the App Store server role wrote when it stopped (`RUN/app-store-server.json`): where it listened
/// and how many notifications it left undelivered after the drain.
struct AppStoreServerReport {
    var listening: String
    var undelivered: Int

    init?(runDirectory: URL, topology: Topology) {
        guard topology.appStoreServer != nil,
              let data = FileManager.default.contents(atPath: runDirectory.appendingPathComponent("app-store-server.json").path),
              let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] else { return nil }
        listening = object["listening"] as? String ?? ""
        undelivered = object["undelivered"] as? Int ?? 0
    }
}
