import StoreKitExplore
import StoreKitModel
import StoreKitRoles
import StoreKitSim
import Testing

/// The invariants read what the app believes from its own state (`AppBelief`), never from calls
/// the app makes to the simulator.
@Suite struct AppStateTests {
    static func app(_ make: @escaping @Sendable (EntitlementStore) -> EntitlementObserver) -> SimulatedApp {
        SimulatedApp(storage: { EntitlementStore() },
                     belief: { AppBelief(credits: $0.credits, restoresShownDone: $0.restoresShownDone) },
                     launch: make)
    }

    static func explorer(_ app: SimulatedApp) -> Explorer {
        var scenario = Scenario.exploration(devices: 1, purchasesPerDevice: 3, observers: [.deliverThenFinish])
        // Hosted content is another test's matter: this app does not download.
        scenario.catalog = try! Catalog(products: Catalog.sample.products.filter { $0.hostedContent.isEmpty })
        var explorer = Explorer(scenario: scenario, appLaunch: app.launch)
        explorer.shrinkStepLimit = 30_000
        return explorer
    }

    @Test("an app that credits once by its own state breaks no invariant over 500 random schedules")
    func correctAppIsClean() throws {
        let report = try Self.explorer(Self.app { EntitlementObserver(store: $0) })
            .explore(strategy: .random, budget: ExplorationBudget(schedules: 500, seconds: 60), seed: 11)
        #expect(report.violations.isEmpty, "\(report.violations.map(\.message))")
        #expect(report.schedules == 500)
    }

    @Test("an app that credits again at every delivery is found breaking granted-once", arguments: [1, 2] as [UInt64])
    func creditsTwiceIsFound(seed: UInt64) throws {
        let report = try Self.explorer(Self.app { CreditsEveryDelivery(store: $0) })
            .explore(strategy: .random, budget: ExplorationBudget(schedules: 2_000, seconds: 60), seed: seed)
        #expect(report.violations.first?.invariant == .grantedOnce, "\(report.violations.map(\.message))")
    }

    @Test("an app that finishes before crediting is found breaking grant-before-finish")
    func finishBeforeCreditIsFound() throws {
        let report = try Self.explorer(Self.app { FinishesBeforeCrediting(store: $0) })
            .explore(strategy: .random, budget: ExplorationBudget(schedules: 2_000, seconds: 60), seed: 1)
        #expect(report.violations.first?.invariant == .grantBeforeFinish, "\(report.violations.map(\.message))")
    }
}
