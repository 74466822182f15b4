#if canImport(StoreKitApp)
import StoreKitApp
#endif
import StoreKitExplore
import StoreKitModel
import StoreKitRoles
import StoreKitSim
import Testing

@Suite struct StoreKitAppTests {
    /// The app on every device: its storage made once per device, its objects at every launch.
    static func app(checks: ServerChecks) -> SimulatedApp { StoreObserver.simulatedApp(checks: checks) }

    static func scenario() throws -> Scenario {
        var scenario = Scenario.exploration(devices: 1, purchasesPerDevice: 3)
        scenario.catalog = try Catalog(products: Catalog.sample.products.filter { StoreObserver.productIdentifiers.contains($0.identifier) })
        // The server's replies fail one time in five.
        scenario.apps.choicePoints?.asynchronousWorkFailureProbability = 0.2
        return scenario
    }

    @Test("the iOS app's own observer (products request, receipt, server check, downloads) keeps every invariant over 300 schedules")
    func appIsCorrect() throws {
        let checks = ServerChecks()
        var explorer = Explorer(scenario: try Self.scenario(), appLaunch: Self.app(checks: checks).launch)
        explorer.shrinkStepLimit = 30_000
        let report = try explorer.explore(strategy: .random, budget: ExplorationBudget(schedules: 300, seconds: 60), seed: 5)
        #expect(report.violations.isEmpty, "\(report.violations.map(\.message))")
        #expect(report.schedules == 300)
        // The server was asked, and every receipt the app read held the transaction it asked about.
        #expect(checks.asked > 300)
        #expect(checks.heldIt == checks.asked)
    }

    @Test("one schedule of the app downloads hosted content, has the server check each purchase, and finishes every transaction")
    func oneSchedule() throws {
        let checks = ServerChecks()
        var scenario = try Self.scenario()
        scenario.apps.choicePoints = nil
        scenario.store.failureProbability = 0
        scenario.store.deferralProbability = 0
        scenario.store.cancellationProbability = 0
        scenario.apps.purchasesPerDevice = 6
        let explorer = Explorer(scenario: scenario, appLaunch: Self.app(checks: checks).launch)
        let run = try explorer.run(choices: SeededChoices(seed: 2), keepEvents: true)
        #expect(run.violations.isEmpty, "\(run.violations)")
        let finished = run.events.count { if case .transactionFinished = $0.event { true } else { false } }
        let downloadsFinished = run.events.count { if case .downloadFinished = $0.event { true } else { false } }
        let grants = run.events.count { if case .appActionRecorded(.contentGranted) = $0.event { true } else { false } }
        #expect(finished >= 6)
        #expect(downloadsFinished >= 1)
        #expect(grants == finished)
        #expect(checks.asked >= 6)
    }
}
