import StoreKitExplore
import StoreKitModel
import StoreKitRoles
import StoreKitSim
import Testing

/// The server in the simulation: each reply is asynchronous work whose timing and failure exploration chooses.
final class SimulatedAsyncServer: AsyncServer {
    func check(transactionIdentifier: String) async -> Bool { await SimulatedWork.result() }
}

/// `Task { … }` and `await` in the app's code run deterministically, each completion a choice.
@Suite struct AsyncAppTests {
    static func explorer(_ make: @escaping @Sendable (EntitlementStore) -> AsyncObserver) -> Explorer {
        var scenario = Scenario.exploration(devices: 1, purchasesPerDevice: 3, observers: [.deliverThenFinish])
        scenario.catalog = try! Catalog(products: Catalog.sample.products.filter { $0.hostedContent.isEmpty })
        scenario.apps.choicePoints?.asynchronousWorkFailureProbability = 0.2
        let app = SimulatedApp(storage: { EntitlementStore() },
                               belief: { AppBelief(credits: $0.credits, restoresShownDone: $0.restoresShownDone) },
                               launch: make)
        var explorer = Explorer(scenario: scenario, appLaunch: app.launch)
        explorer.shrinkStepLimit = 30_000
        return explorer
    }

    @Test("an observer that awaits its server in a task gives the same log for the same seed")
    func deterministic() throws {
        let explorer = Self.explorer { AsyncObserver(store: $0, server: SimulatedAsyncServer()) }
        let first = try explorer.run(choices: SeededChoices(seed: 9))
        let second = try explorer.run(choices: SeededChoices(seed: 9))
        #expect(first.logDigest == second.logDigest)
        #expect(first.choices == second.choices)
        #expect(first.choices.count > 20)
    }

    @Test("an observer that awaits its server in a task keeps every invariant over 300 schedules")
    func correctIsClean() throws {
        let report = try Self.explorer { AsyncObserver(store: $0, server: SimulatedAsyncServer()) }
            .explore(strategy: .random, budget: ExplorationBudget(schedules: 300, seconds: 60), seed: 3)
        #expect(report.violations.isEmpty, "\(report.violations.map(\.message))")
        #expect(report.schedules == 300)
    }

    @Test("an observer that finishes while its server check is under way is found")
    func finishWhileCheckingIsFound() throws {
        let report = try Self.explorer { FinishesWhileChecking(store: $0, server: SimulatedAsyncServer()) }
            .explore(strategy: .random, budget: ExplorationBudget(schedules: 2_000, seconds: 60), seed: 1)
        #expect(report.violations.first?.invariant == .grantBeforeFinish, "\(report.violations.map(\.message))")
    }
}
