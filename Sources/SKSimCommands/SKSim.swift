import ArgumentParser
import EventLog
import Foundation
import Logging
import StoreKitLive
import StoreKitModel
import StoreKitSim

/// The `sksim` command line. Lives in a library so tests can call `SKSim.parseAsRoot([...])`.
public struct SKSim: AsyncParsableCommand {
    public static var configuration: CommandConfiguration {
        CommandConfiguration(
            commandName: "sksim",
            abstract: "StoreKitSim: an event-sourced simulation of StoreKit's payment queue.",
            discussion: """
                Exit status of every command: 0 success; 1 the check it made failed (an invariant violated, a \
                damaged log, a divergence); 2 it could not do what was asked (bad input, a file that cannot be \
                read, a process that failed); 64 a command-line usage error. `sksim run` adds 3 (stopped at \
                --duration with work pending) and 130 (interrupted). See docs/cli.md.
                """,
            version: sksimVersion,
            subcommands: [RunCommand.self, SimulateCommand.self, ReplayCommand.self, ExploreCommand.self, LoadCommand.self, DriverCommand.self, TopologyCommand.self, CatalogCommand.self, LogCommand.self]
                          + RegisteredCommands.commands
                          + [QueueCommand.self, RoleCommand<StoreKind>.self, RoleCommand<DownloaderKind>.self,
                             RoleCommand<ObserverKind>.self, KeysCommand.self, AppStoreServerCommand.self,
                             AppStoreServerRoleCommand.self])
    }

    public init() {}

    /// The whole `sksim`, with `apps` registered under their names: `--observers NAME` runs an app's
    /// own code on every simulated device (`RegisteredApps`). A team's executable calls this from its
    /// `@main`, so its `simulate`, `explore`, `replay`, `run` and `load`, and the processes they start
    /// (this same executable), know its app. Sets up logging (`--quiet`, `--verbose`, `SKSIM_LOG_LEVEL`).
    /// `commands` are further subcommands, listed after `log` (the `sksim` executable adds `bench`,
    /// from the Benchmarks module, which no product module depends on).
    public static func main(apps: [String: SimulatedApp], commands: [any ParsableCommand.Type] = []) async -> Never {
        let arguments = Array(CommandLine.arguments.dropFirst())
        let (level, warning) = logLevel(arguments: arguments, environment: ProcessInfo.processInfo.environment)
        if let warning { printError(warning) }
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        RegisteredCommands.register(commands)
        do {
            try RegisteredApps.register(apps)
        } catch {
            printError("error: \(error)")
            Foundation.exit(2)
        }
        await main(arguments: arguments)
    }

    /// Parses and runs; a `UserFacingError` prints one line, `error: …`, and exits with its status.
    public static func main(arguments: [String]) async -> Never {
        do {
            var command = try parseAsRoot(arguments)
            if var asynchronous = command as? AsyncParsableCommand {
                try await asynchronous.run()
            } else {
                try command.run()
            }
            Foundation.exit(0)
        } catch let error as UserFacingError {
            printError("error: \(error.description)")
            Foundation.exit(error.exitStatus)
        } catch let error as LogError {
            // The log could not be written or read (a full disk, a failing read): one line, status 2,
            // not ArgumentParser's "Error:" with status 1 (which means "a check failed").
            printError("error: \(error.description)")
            Foundation.exit(2)
        } catch {
            // ArgumentParser's own outcomes (help, usage errors, ExitCode) keep their statuses. Any other
            // error that got this far (a file Foundation could not write) is a failure to do what was
            // asked: one readable line and status 2, not an NSError dump under "Error:" with status 1.
            guard !(error is ExitCode), exitCode(for: error) == .failure else { exit(withError: error) }
            printError("error: \(describeError(error))")
            Foundation.exit(2)
        }
    }
}

/// A failure with a message that says what was wrong and what to do; exits with its status
/// (2 by default: the command could not do what was asked) and no stack trace.
package struct UserFacingError: Error, CustomStringConvertible {
    /// What kind of failure, for code (and tests) that tell failures apart; the description is for people.
    package enum Code: String, Sendable, Hashable, CaseIterable {
        /// An option or argument out of range, malformed, or in conflict with another.
        case invalidOption
        /// A name that refers to nothing: a topology, behaviour, strategy, device, partition.
        case unknownName
        /// The run names an app this executable does not register.
        case appNotRegistered
        /// A path given that does not exist or holds no log.
        case notFound
        /// A file given that cannot be used: a topology, catalog, recording, log, certificates.
        case invalidInput
        /// The output directory already holds a run or a log, or is the recording itself.
        case outputExists
        /// An output that cannot be created or written.
        case unwritable
        /// The run, load or replay started and failed.
        case failed
    }

    package var code: Code
    package var description: String
    package var exitStatus: Int32
    package init(_ description: String, code: Code = .invalidOption, exitStatus: Int32 = 2) {
        self.description = description
        self.code = code
        self.exitStatus = exitStatus
    }
}

/// `--quiet` / `--verbose` for commands that log. The level is applied in `main` before
/// parsing (logging is bootstrapped once); these declarations make them parse and show in help.
struct VerbosityOptions: ParsableArguments {
    @Flag(name: .shortAndLong, help: "Log only warnings and errors.") var quiet = false
    @Flag(name: .shortAndLong, help: "Log debug detail too.") var verbose = false
}

/// The log level for these arguments and environment: `--quiet`/`--verbose` win over
/// `SKSIM_LOG_LEVEL` (trace, debug, info, notice, warning, error, critical).
public func logLevel(arguments: [String], environment: [String: String]) -> (level: Logger.Level, warning: String?) {
    if arguments.contains("--verbose") || arguments.contains("-v") { return (.debug, nil) }
    if arguments.contains("--quiet") || arguments.contains("-q") { return (.warning, nil) }
    guard let text = environment["SKSIM_LOG_LEVEL"] else { return (.info, nil) }
    guard let level = Logger.Level(rawValue: text.lowercased()) else {
        let names = Logger.Level.allCases.map(\.rawValue).joined(separator: ", ")
        return (.info, "warning: SKSIM_LOG_LEVEL='\(text)' is not a log level; using info (choose one of \(names))")
    }
    return (level, nil)
}
