import StoreKitExplore
import StoreKitModel
import StoreKitRoles
import Testing

/// Shrinking keeps only what the failure needs: choices are addressed by their source and kind,
/// so removing one purchase's choices does not move the others' (issue 28, item 7).
@Suite struct ShrinkTests {
    /// Bugs that one purchase shows: of a product with two downloads, whatever else happens; and
    /// `creditEveryDelivery`, which one purchase shows through a repeated delivery or a kill between
    /// its credit and its finish, though random first finds it through the user's relaunch at a later
    /// purchase step (removal keeps that step; the shrink's search with fewer purchases finds one).
    @Test("A bug that one purchase shows shrinks to a trace with one purchase (R-D3, R-D2, R-Q4)",
          arguments: [ObserverBehavior.finishOnFirstDownload, .finishAtFullProgress, .creditEveryDelivery])
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
