import Foundation
import StoreKitExplore
import StoreKitSim
import Testing

/// The correct app on Apple's API (content and analytics observers) over as many random schedules
/// as `SKSIM_SOAK_SCHEDULES` says: no invariant may break. Too long for the quick suite (100,000
/// schedules take about two minutes of a debug build on two cores); `scripts/soak` runs it.
@Suite struct CorrectAppSoakTests {
    static let schedules = ProcessInfo.processInfo.environment["SKSIM_SOAK_SCHEDULES"].flatMap(Int.init)

    @Test("the correct Apple-API app breaks no invariant over the soak's schedules",
          .enabled(if: schedules != nil, "set SKSIM_SOAK_SCHEDULES (scripts/soak sets 100000)"))
    func correctAppHolds() throws {
        let schedules = try #require(Self.schedules)
        let simulated = BuiltInBugsTests.App.correct.simulated
        let explorer = Explorer(scenario: .exploration(devices: 1, purchasesPerDevice: 3), appLaunch: simulated.launch,
                                appPurchase: simulated.purchase)
        let report = try explorer.explore(strategy: .random, budget: ExplorationBudget(schedules: schedules, seconds: 3_600), seed: 1, jobs: 2)
        #expect(report.violations.isEmpty, "\(report.violations.prefix(3).map { "\($0.invariant): \($0.message)" })")
        #expect(report.schedules == schedules)
    }
}
