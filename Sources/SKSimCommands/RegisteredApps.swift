import ArgumentParser
import Foundation
import StoreKitModel
import StoreKitLive
import StoreKitRoles
import StoreKitSim

/// The apps an executable registered under names (`SKSim.main(apps:)`): a team's own `sksim`
/// links this library, registers its app, and `--observers NAME` then runs that app's code on
/// every simulated device, in `simulate`, `explore`, `replay` and the observer processes of `run`
/// (docs/explore.md, "In replay and load"). Written once, before the command line is parsed.
public enum RegisteredApps {
    private final class Table: @unchecked Sendable {
        let lock = NSLock()
        var apps: [String: SimulatedApp] = [:]
    }

    private static let table = Table()

    /// Registers `apps`, replacing any registered before. Names are letters, digits, '-', '_' or '.',
    /// and none is a built-in observer behaviour's name (the two share `--observers`).
    public static func register(_ apps: [String: SimulatedApp]) throws {
        for name in apps.keys.sorted() {
            guard !name.isEmpty, name.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" || $0 == "." }) else {
                throw RegistrationError("app name '\(name)' must be letters, digits, '-', '_' or '.'", code: .invalidName)
            }
            guard ObserverBehavior(rawValue: name) == nil else {
                throw RegistrationError("app name '\(name)' is a built-in observer behaviour's; register the app under another name", code: .builtInName)
            }
        }
        table.lock.withLock { table.apps = apps }
    }

    /// The names registered, sorted.
    public static var names: [String] { table.lock.withLock { table.apps.keys.sorted() } }

    /// The app registered under `name`, if any.
    public static func app(named name: String) -> SimulatedApp? {
        table.lock.withLock { table.apps[name] }
    }

    /// The app a scenario names (`apps.app`), or a sentence saying why it cannot run here.
    static func launch(for name: String) throws -> @Sendable (PaymentQueue) -> Void {
        guard let app = app(named: name) else {
            let registered = names.isEmpty ? "this executable registers no app" : "this executable registers \(names.joined(separator: ", "))"
            throw UserFacingError("the app '\(name)' is not registered (\(registered)); run the executable that registers it with SKSim.main(apps:) (docs/explore.md, \"In replay and load\")", code: .appNotRegistered)
        }
        return app.launch
    }

    /// Gives `scenario` the code of the app it names, if it names one (`AppHooks.appLaunch`).
    static func attach(to scenario: inout Scenario) throws {
        guard let name = scenario.apps.app else { return }
        let launch = try launch(for: name)
        scenario.hooks = AppHooks(trace: scenario.hooks?.trace, appLaunch: launch, appPurchase: app(named: name)?.purchase)
    }

    /// An app's receipts in a run with an App Store server are signed with that server's chain
    /// (`appStoreServer.certificates`, default `RUN/app-store`) for its bundle id, so the team's
    /// backend, trusting its `root.cer`, accepts the receipt the app sends as it accepts the server's.
    static func signReceipts(scenario: Scenario, appStoreServer section: AppStoreServerSection?, runDirectory: URL) throws {
        guard scenario.apps.app != nil, let section else { return }
        let folder = section.certificates.map { URL(fileURLWithPath: $0, isDirectory: true) } ?? runDirectory.appendingPathComponent("app-store", isDirectory: true)
        try SimulatedReceipt.useCertificates(in: folder, bundleIdentifier: section.bundleIdentifier)
    }

    public struct RegistrationError: Error, CustomStringConvertible {
        /// Why the name cannot be registered.
        public enum Code: String, Sendable, Hashable, CaseIterable {
            /// Characters other than letters, digits, '-', '_' or '.', or no characters.
            case invalidName
            /// The name of a built-in observer behaviour.
            case builtInName
        }

        public var code: Code
        public var description: String
        init(_ description: String, code: Code) {
            self.description = description
            self.code = code
        }
    }
}

/// What `--observers` names: built-in behaviours, or one registered app.
enum ObserversChoice: Equatable {
    case builtIn([ObserverBehavior])
    case app(String)

    /// Sets the scenario's observers: the app in place of every built-in one, or the behaviours.
    func apply(to scenario: inout Scenario) {
        switch self {
        case .builtIn(let behaviors):
            scenario.apps.observers = behaviors
            scenario.apps.app = nil
        case .app(let name):
            scenario.apps.observers = []
            scenario.apps.app = name
        }
    }
}

/// Parses `--observers`: one registered app's name, or built-in behaviours, comma-separated.
func parseObserversOrApp(_ list: String) throws -> ObserversChoice {
    let names = list.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
    if let app = names.first(where: { RegisteredApps.app(named: $0) != nil }) {
        guard names.count == 1 else {
            throw UserFacingError("--observers \(list): the app '\(app)' runs alone on each device (its code attaches its own observers); give --observers \(app)")
        }
        return .app(app)
    }
    do {
        return .builtIn(try parseObservers(list))
    } catch let error as UserFacingError where !RegisteredApps.names.isEmpty {
        throw UserFacingError(error.description + ", or an app this executable registers: \(RegisteredApps.names.joined(separator: ", "))", code: error.code)
    }
}

/// A line of help for `--observers` in the commands that take an app too.
func observersHelp(default defaultText: String?) -> String {
    "Observers per device, comma-separated" + (defaultText.map { " (default: \($0))" } ?? "") + ": "
        + ObserverBehavior.allCases.map { "\($0.rawValue): \($0.summary)" }.joined(separator: "; ")
        + "; or the name of one app the executable registers (SKSim.main(apps:)), which runs alone."
}

/// The subcommands an executable adds to `sksim` (`SKSim.main(apps:commands:)`). Written once, before
/// the command line is parsed.
public enum RegisteredCommands {
    private final class Table: @unchecked Sendable {
        let lock = NSLock()
        var commands: [any ParsableCommand.Type] = []
    }

    private static let table = Table()

    public static func register(_ commands: [any ParsableCommand.Type]) {
        table.lock.withLock { table.commands = commands }
    }

    public static var commands: [any ParsableCommand.Type] { table.lock.withLock { table.commands } }
}
