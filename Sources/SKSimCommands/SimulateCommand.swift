import ArgumentParser
import EventLog
import Foundation
import StoreKitLive
import StoreKitModel
import StoreKitRoles
import StoreKitRuntime
import StoreKitSimulation

struct SimulateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "simulate",
        abstract: "Run every role in one process on a virtual clock: same seed, same log, byte for byte, wherever it is written.",
        discussion: """
            With a TOPOLOGY file, runs exactly its scenario section (the same one `sksim run` runs over real \
            processes), so a live run and a deterministic run of one file can be compared; the options below \
            override it. Content is virtual unless --write-content is given: its bytes are derived from the \
            content id and offset and checked, not written.
            """)

    @Argument(help: "A topology file whose scenario to run (default: the options below on the built-in sample catalog).")
    var topology: String?
    @Option(parsing: .unconditional, help: "Simulated devices (app installs) (default: 10).") var devices: Int?
    @Option(parsing: .unconditional, help: "Purchases each device's user makes (default: 5).") var purchasesPerDevice: Int?
    @Option(parsing: .unconditional, help: "Seed for every random choice (default: the topology's, or a new one, printed and logged).") var seed: UInt64?
    @Option(help: "Product catalog: an Xcode .storekit file or an sksim catalog (default: the built-in sample).") var catalog: String?
    @Option(help: "Output directory for the log and content (default: out/simulate-<seed>).") var out: String?
    @Option(parsing: .unconditional, help: "Devices signed in to the same account; later ones restore on first launch, R-Q9 (default: 2).") var devicesPerAccount: Int?
    @Option(help: ArgumentHelp(observersHelp(default: "downloadThenFinish,audit")))
    var observers: String?
    @Option(parsing: .unconditional, help: "Share of devices (0 to 1) whose user may not authorise payments; their payments fail with paymentNotAllowed, R-Q1 (default: 0).")
    var restrictedDeviceShare: Double?
    @Option(parsing: .unconditional, help: "Chance (0 to 1), per purchase, that the app also refreshes its receipt (SKReceiptRefreshRequest), R-R2 (default: 0).")
    var receiptRefreshProbability: Double?
    @Option(parsing: .unconditional, help: "Chance (0 to 1), per purchase of a subscription with promotional offers in a group the device bought in before, that the app attaches a signed SKPaymentDiscount, F-O5 (default: 0).")
    var promotionalOfferProbability: Double?
    @Option(parsing: .unconditional, help: "Renewals of one auto-renewable subscription at most before it expires, F-U1 (default: 3).")
    var maximumRenewals: Int?
    @Option(parsing: .unconditional, help: "Chance (0 to 1) that a subscription's user cancelled before a period ends, so it expires, F-U2 (default: 0.2).")
    var cancellationAtRenewalProbability: Double?
    @Option(parsing: .unconditional, help: "Chance (0 to 1) that a purchase is interrupted: it fails with paymentCancelled, then, if the user fixes the account, a new purchased transaction arrives, F-I1 (default: 0).")
    var interruptedPurchaseProbability: Double?
    @Option(parsing: .unconditional, help: "Chance (0 to 1) that a subscription renewal cannot be billed, so billing retry begins, F-B1 (default: 0).")
    var billingIssueProbability: Double?
    @Flag(help: "Keep subscriptions in billing retry entitled for a grace period (16 days, sped up by the time rate), F-B1.")
    var billingGracePeriod = false
    @Option(help: "Log durability: always (fsync each command), group (fsync batches), os (no fsync).") var durability = "group"
    @Flag(help: "Write downloaded content to real files under the output directory (default: virtual content).") var writeContent = false
    @Flag(help: "Print one JSON object instead of the human summary.") var json = false

    func validate() throws {
        // The topology's bound (docs/topology.md): far more once ran for hours instead of being refused.
        if let purchasesPerDevice, !(0...1_000_000).contains(purchasesPerDevice) {
            throw ValidationError("--purchases-per-device \(purchasesPerDevice) is out of range; use 0 to 1000000, as a topology's purchasesPerDevice")
        }
    }

    func run() async throws {
        var scenario = try baseScenario()
        if let devices { scenario.devices = devices }
        if let purchasesPerDevice { scenario.apps.purchasesPerDevice = purchasesPerDevice }
        if let devicesPerAccount { scenario.apps.devicesPerAccount = devicesPerAccount }
        if let observers { try parseObserversOrApp(observers).apply(to: &scenario) }
        if let restrictedDeviceShare { scenario.apps.restrictedDeviceShare = restrictedDeviceShare }
        if let receiptRefreshProbability { scenario.apps.receiptRefreshProbability = receiptRefreshProbability }
        if let promotionalOfferProbability { scenario.apps.promotionalOfferProbability = promotionalOfferProbability }
        if let maximumRenewals { scenario.store.maximumRenewals = maximumRenewals }
        if let cancellationAtRenewalProbability { scenario.store.cancellationAtRenewalProbability = cancellationAtRenewalProbability }
        if let interruptedPurchaseProbability { scenario.store.interruptedPurchaseProbability = interruptedPurchaseProbability }
        if let billingIssueProbability { scenario.store.billingIssueProbability = billingIssueProbability }
        if billingGracePeriod { scenario.store.billingGracePeriodEnabled = true }
        if let seed { scenario.seed = seed }
        try RegisteredApps.attach(to: &scenario)
        let directory = outputDirectory(out, prefix: "simulate", seed: scenario.seed)
        let report: RunReport
        do {
            try scenario.validate()
            let logDirectory = directory.appendingPathComponent("log", isDirectory: true)
            if !((try? LogDirectory.partitions(in: logDirectory)) ?? []).isEmpty {
                throw UserFacingError("\(logDirectory.path) already holds a log; choose a new --out directory or remove the old run", code: .outputExists)
            }
            do {
                try FileManager.default.createDirectory(at: logDirectory, withIntermediateDirectories: true)
            } catch {
                // Once Foundation's NSError dump under "Error:", status 1 (for `--out` naming a file).
                throw UserFacingError("cannot create the run directory: \(describeError(error)); give a new --out directory", code: .unwritable)
            }
            let storage = try DiskLogStorage(directory: logDirectory, partition: LogProjection.partition,
                                             durability: try parseDurability(durability))
            let content: ContentStorage = writeContent ? FileContentStorage(root: directory) : VirtualContentStorage()
            let environment = DeterministicEnvironment(storage: storage, content: content,
                                                       choices: SeededChoices(seed: scenario.seed), logDescription: logDirectory.relativePath)
            report = try DeterministicRuntime(scenario: scenario, environment: environment).run()
        } catch let error as ConfigurationError {
            throw UserFacingError("invalid simulation: \(error)", code: .invalidInput)
        } catch let failure as EnvironmentFailure {
            throw UserFacingError("the " + failure.message(contentRoot: directory, then: "simulate again into a new --out directory"), code: .failed)
        }
        if json {
            printLine(JSONShapes.report(report).serialized())
        } else {
            printLine(JSONShapes.summaryText(report))
        }
        if report.violationCount > 0 { throw ExitCode(1) }
    }

    /// The topology's scenario, or the defaults with the catalog option.
    private func baseScenario() throws -> Scenario {
        if let topology {
            var scenario = try Topology.load(path: topology).scenario
            if let catalog {
                let (loaded, source) = try loadCatalog(catalog)
                scenario.catalog = loaded
                scenario.catalogSource = source
            }
            return scenario
        }
        let (loaded, source) = try loadCatalog(catalog)
        var scenario = Scenario(seed: chooseSeed(seed), devices: 10, catalog: loaded, catalogSource: source)
        scenario.apps.purchasesPerDevice = 5
        return scenario
    }
}

package func parseObservers(_ list: String) throws -> [ObserverBehavior] {
    try list.split(separator: ",").map { name in
        guard let behavior = ObserverBehavior(rawValue: name.trimmingCharacters(in: .whitespaces)) else {
            throw UserFacingError("unknown observer behaviour '\(name)'; use one of \(ObserverBehavior.allCases.map(\.rawValue).joined(separator: ", "))", code: .unknownName)
        }
        return behavior
    }
}

func parseDurability(_ name: String) throws -> DurabilityPolicy {
    switch name {
    case "always": return .always
    case "group", "groupCommit": return .defaultGroupCommit
    case "os", "operatingSystem": return .operatingSystem
    default: throw UserFacingError("unknown durability '\(name)'; use always, group or os", code: .unknownName)
    }
}
