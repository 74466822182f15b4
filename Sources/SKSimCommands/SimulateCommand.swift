import ArgumentParser
import EventLog
import Foundation
import StoreKitModel
import StoreKitRoles
import StoreKitSimulation

struct SimulateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "simulate",
        abstract: "Run every role in one process on a virtual clock: same seed, same log, byte for byte.")

    @Option(help: "Simulated devices (app installs).") var devices = 10
    @Option(help: "Purchases each device's user makes.") var purchasesPerDevice = 5
    @Option(help: "Seed for every random choice (default: a new one, printed and logged).") var seed: UInt64?
    @Option(help: "Product catalog: an Xcode .storekit file or an sksim catalog (default: the built-in sample).") var catalog: String?
    @Option(help: "Output directory for the log, content files and app storage (default: out/simulate-<seed>).") var out: String?
    @Option(help: "Devices signed in to the same account (later ones restore on first launch, R-Q9).") var devicesPerAccount = 2
    @Option(help: "Observers per device, comma-separated: \(ObserverBehavior.allCases.map(\.rawValue).joined(separator: ", ")).")
    var observers = "downloadThenFinish,audit"
    @Option(help: "Log durability: always, group (the default: every 256 records or 1 ms), os.") var durability = "group"
    @Flag(help: "Print one JSON object instead of the human summary.") var json = false

    func run() async throws {
        let seed = chooseSeed(seed)
        let (catalog, source) = try loadCatalog(catalog)
        var scenario = Scenario(seed: seed, devices: devices, catalog: catalog, catalogSource: source)
        scenario.apps.purchasesPerDevice = purchasesPerDevice
        scenario.apps.devicesPerAccount = devicesPerAccount
        scenario.apps.observers = try parseObservers(observers)
        let directory = outputDirectory(out, prefix: "simulate", seed: seed)
        let report: RunReport
        do {
            let simulation = try DeterministicSimulation(scenario: scenario, outputDirectory: directory,
                                                         durability: try parseDurability(durability))
            report = try simulation.run()
        } catch let error as ConfigurationError {
            throw UserFacingError("invalid simulation: \(error)")
        }
        if json {
            printLine(JSONShapes.report(report).serialized())
        } else {
            printLine(JSONShapes.summaryText(report))
        }
        if report.violationCount > 0 { throw ExitCode(1) }
    }
}

func parseObservers(_ list: String) throws -> [ObserverBehavior] {
    try list.split(separator: ",").map { name in
        guard let behavior = ObserverBehavior(rawValue: name.trimmingCharacters(in: .whitespaces)) else {
            throw UserFacingError("unknown observer behaviour '\(name)'; use one of \(ObserverBehavior.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return behavior
    }
}

func parseDurability(_ name: String) throws -> DurabilityPolicy {
    switch name {
    case "always": return .always
    case "group", "groupCommit": return .defaultGroupCommit
    case "os", "operatingSystem": return .operatingSystem
    default: throw UserFacingError("unknown durability '\(name)'; use always, group or os")
    }
}
