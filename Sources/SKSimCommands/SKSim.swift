import ArgumentParser

/// The `sksim` command line. Lives in a library so tests can call `SKSim.parseAsRoot([...])`.
public struct SKSim: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "sksim",
        abstract: "StoreKitSim: an event-sourced simulation of StoreKit's payment queue.",
        subcommands: [RunCommand.self, SimulateCommand.self, QueueCommand.self, RoleCommand<StoreKind>.self,
                      RoleCommand<DownloaderKind>.self, RoleCommand<ObserverKind>.self, LogCommand.self, BenchCommand.self, KeysCommand.self,
                      LoadCommand.self, DriverCommand.self])

    public init() {}
}

/// A failure with a message that says what was wrong and what to do; exits non-zero
/// without a stack trace.
struct UserFacingError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
