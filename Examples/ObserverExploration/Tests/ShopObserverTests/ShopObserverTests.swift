import ShopObserver
import StoreKitExplore
import StoreKitModel
import StoreKitRoles
import StoreKitSim
import Testing

@Suite struct ShopObserverTests {
    /// One device buying consumables only, with every choice point of exploration turned on.
    static func scenario() throws -> Scenario {
        var scenario = Scenario.exploration(devices: 1, purchasesPerDevice: 3)
        scenario.catalog = try Catalog(products: [
            Product(identifier: "coins.100", kind: .consumable, referenceName: "100 Coins", displayPrice: "0.99"),
        ])
        return scenario
    }

    /// The app on every simulated device: its store survives launches and kills, its observer does not;
    /// the explorer reads what it credited from the store (`AppBelief`).
    static func app(fixed: Bool) -> SimulatedApp {
        SimulatedApp(storage: { CoinStore() }, belief: { AppBelief(credits: $0.credits) },
                     launch: { ShopObserver(store: $0, fixed: fixed) })
    }

    @Test("The in-memory credit record credits a consumable twice (R-Q4): the explorer finds, shrinks and draws it")
    func buggyObserverIsCaught() throws {
        let explorer = Explorer(scenario: try Self.scenario(), appLaunch: Self.app(fixed: false).launch)
        let report = try explorer.explore(strategy: .random, budget: ExplorationBudget(schedules: 2_000, seconds: 60), seed: 1)
        let found = try #require(report.violations.first, "\(report.summary)")
        #expect(found.invariant == .grantedOnce)
        print(report.summary)
        print(found.mermaid)
        // The reproduce file replays it exactly, with the same app.
        let replayed = try explorer.reproduce(found.reproduce)
        #expect(ReproduceFile.hex(replayed.logDigest) == found.reproduce.logDigest)
    }

    @Test("Checking the app's persistent record first breaks no invariant")
    func fixedObserverPasses() throws {
        let explorer = Explorer(scenario: try Self.scenario(), appLaunch: Self.app(fixed: true).launch)
        let report = try explorer.explore(strategy: .random, budget: ExplorationBudget(schedules: 2_000, seconds: 10), seed: 1)
        #expect(report.violations.isEmpty, "\(report.summary)")
    }
}
