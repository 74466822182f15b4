import StoreKitExplore
import StoreKitModel
import StoreKitRoles
import Testing

/// Shrinking keeps only what the failure needs: choices are addressed by their source and kind,
/// so removing one purchase's choices does not move the others' (issue 28, item 7).
@Suite struct ShrinkTests {
    /// Bugs that one purchase of a product with two downloads shows, whatever else happens. (Not
    /// `creditEveryDelivery`: the schedule random finds first redelivers through the user's relaunch
    /// at the next purchase step, which needs that step; shrinking removes, it does not swap a
    /// relaunch for a duplicate delivery.)
    @Test("A bug that one purchase shows shrinks to a trace with one purchase (R-D3, R-D2)",
          arguments: [ObserverBehavior.finishOnFirstDownload, .finishAtFullProgress])
    func singlePurchaseBugShrinksToOnePurchase(behavior: ObserverBehavior) throws {
        let explorer = Explorer(scenario: .exploration(purchasesPerDevice: 3, observers: [behavior]))
        let report = try explorer.explore(strategy: .random, budget: ExplorationBudget(schedules: 2_000, seconds: 60), seed: 1)
        let found = try #require(report.violations.first, "\(behavior) was not caught: \(report.summary)")
        #expect(found.purchasesPerDevice == 1, "\(report.summary)")
        let replayed = try explorer.reproduce(found.reproduce)
        #expect(replayed.violations.contains { $0.invariant == found.invariant })
        let purchases = replayed.events.filter { recorded in
            if case .transactionAdded = recorded.event { return true }
            return false
        }
        #expect(purchases.count == 1, "\(found.stepsAfterShrinking) steps: \(replayed.events.map { "\($0.event)" })")
    }
}
