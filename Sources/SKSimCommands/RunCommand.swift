import ArgumentParser
import Foundation
import Logging
import StoreKitLive
import StoreKitRuntime
import StoreKitSimulation

/// The default topology: topology/local.yaml beside the working directory.
let defaultTopologyPath = "topology/local.yaml"

func loadTopology(_ path: String) throws -> Topology {
    do {
        return try Topology.load(path: path)
    } catch {
        throw UserFacingError("\(error)")
    }
}

/// The path of this very executable, so `run` can start its children from it.
func currentExecutable() -> URL {
    if let path = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") { return URL(fileURLWithPath: path) }
    return URL(fileURLWithPath: CommandLine.arguments[0]).standardizedFileURL
}

struct RunCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Run a whole topology on this machine: every role a process over ZeroMQ (the main job).")

    @Argument(help: "Topology file (default: topology/local.yaml).") var topology: String = defaultTopologyPath
    @Option(help: "Output directory: log, content, per-process logs, run.json (default: out/<topology>-<seed>).") var out: String?
    @Option(help: "Stop after this many seconds even if the apps are not done.") var duration: Double = 300
    @Option(help: "Restarts allowed per process; each rebuilds from the log (for an observer, an app relaunch).") var maximumRestarts = 3
    @Flag(help: "Print one JSON object instead of the human summary.") var json = false

    func run() async throws {
        Shutdown.installSignalHandlers()
        let loaded = try loadTopology(topology)
        let directory = outputDirectory(out ?? loaded.output, prefix: loaded.name, seed: loaded.scenario.seed)
        if FileManager.default.fileExists(atPath: directory.appendingPathComponent("log").path) {
            throw UserFacingError("\(directory.path) already holds a run; choose a new --out directory or remove the old run")
        }
        var options = Supervisor.Options()
        options.durationSeconds = duration
        options.maximumRestarts = maximumRestarts
        var logger = Logger(label: "sksim.run")
        logger[metadataKey: "topology"] = "\(loaded.name)"
        // On a terminal the progress line tells the story; info lines would break it up.
        if options.showProgress && logger.logLevel > .debug { logger.logLevel = .warning }
        let supervisor = Supervisor(topology: loaded, topologyPath: URL(fileURLWithPath: topology).path, runDirectory: directory.standardizedFileURL,
                                    executable: currentExecutable(), options: options, logger: logger)
        let result: Supervisor.Result
        do {
            result = try supervisor.run()
        } catch {
            throw UserFacingError("run failed: \(error)")
        }
        let extra: [(String, JSONValue)] = [
            ("topology", .string(loaded.name)), ("wallSeconds", .double((result.wallSeconds * 1000).rounded() / 1000)),
            ("finished", .bool(result.finished)),
            ("restarts", .object(result.restarts.sorted { $0.key < $1.key }.map { ($0.key, .int($0.value)) })),
            ("runFile", .string(directory.appendingPathComponent("run.json").path)),
            ("failure", result.failure.map { .string($0) } ?? .null),
        ]
        if json {
            printLine(JSONShapes.report(result.report, extra: extra).serialized())
        } else {
            printLine(JSONShapes.summaryText(result.report).replacingOccurrences(of: "simulated time", with: "elapsed time  "))
            if !result.restarts.isEmpty { printLine("restarts        " + result.restarts.sorted { $0.key < $1.key }.map { "\($0.key) ×\($0.value)" }.joined(separator: ", ")) }
            printLine("processes       \(directory.appendingPathComponent("run.json").path)")
        }
        if let failure = result.failure { throw UserFacingError(failure) }
        if result.report.violationCount > 0 { throw ExitCode(1) }
    }
}

/// `sksim queue|store|downloader|observer`: one role of a topology, for spreading a
/// run over hosts (and what `run` starts for each process).
struct RoleOptions: ParsableArguments {
    @Option(help: "Topology file.") var topology: String = defaultTopologyPath
    @Option(help: "This process's name in the topology.") var name: String
    @Option(help: "Run directory (log, content, ipc sockets) (default: out/<topology name>).") var runDirectory: String?

    func resolve() throws -> (Topology, URL, Logger) {
        Shutdown.installSignalHandlers()
        let topology = try loadTopology(self.topology)
        let directory = URL(fileURLWithPath: runDirectory ?? topology.output ?? "out/\(topology.name)", isDirectory: true).standardizedFileURL
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        var logger = Logger(label: "sksim.\(name)")
        logger[metadataKey: "process"] = "\(name)"
        return (topology, directory, logger)
    }
}

struct QueueCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "queue", abstract: "Run the queue of a topology: the single writer of the log.")
    @OptionGroup var options: RoleOptions

    func run() async throws {
        let (topology, directory, logger) = try options.resolve()
        do {
            try QueueProcess(topology: topology, name: options.name, runDirectory: directory, logger: logger).run()
        } catch {
            logger.critical("queue failed", metadata: ["error": "\(error)"])
            throw UserFacingError("\(error)")
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
        let (topology, directory, logger) = try options.resolve()
        let process = try topology.process(named: options.name)
        guard process.role == Kind.kind else {
            throw UserFacingError("'\(options.name)' is a \(process.role.rawValue) in \(options.topology), not a \(Kind.kind.rawValue); run `sksim \(process.role.rawValue) --name \(options.name)`")
        }
        do {
            _ = try RoleProcess(topology: topology, name: options.name, runDirectory: directory, logger: logger).run()
        } catch {
            logger.critical("\(Kind.kind.rawValue) failed", metadata: ["error": "\(error)"])
            throw UserFacingError("\(error)")
        }
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
