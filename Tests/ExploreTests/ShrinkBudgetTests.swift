import Foundation
@testable import StoreKitExplore
import StoreKitModel
import StoreKitTestSupport
import Testing

/// The shrink's budget is counted in runs and simulation steps as one job spends them, never in
/// seconds: where it runs out, and so the shrunk schedule, is the same on every machine and for
/// every `jobs`.
@Suite struct ShrinkBudgetTests {
    /// A violation whose whole shrink spends about 12,400 steps (random, seed 6: found after several
    /// schedules, with 3 purchases), explored with `shrinkStepLimit` steps on `jobs` threads.
    static func found(shrinkStepLimit: Int, jobs: Int) throws -> FoundViolation {
        var explorer = Explorer(scenario: .exploration(observers: [.creditEveryDelivery]))
        explorer.shrinkStepLimit = shrinkStepLimit
        let report = try explorer.explore(strategy: .random, budget: ExplorationBudget(schedules: 2_000, seconds: 600), seed: 6, jobs: jobs)
        return try #require(report.violations.first, "\(report.summary)")
    }

    @Test("A step budget that runs out mid-way gives the same shrunk choices, runs, steps and report on 1 and 2 jobs, and twice in a row",
          arguments: [700, 10_000, 12_000])
    func budgetSpentMidWay(shrinkStepLimit: Int) throws {
        // Cut among the first removals (3 purchases), within the shrink of the schedule found with one
        // purchase, and in the last pass over the sequence in execution order.
        let runs = try [1, 1, 2].map { try Self.found(shrinkStepLimit: shrinkStepLimit, jobs: $0) }
        let first = runs[0]
        #expect(!first.oneMinimal && first.summaryLine.hasSuffix("(shrink budget spent: \(first.shrinkRuns) runs, \(first.shrinkSteps) steps)"), "\(first.summaryLine)")
        // Stopped by the budget: spent, and overrun by less than one run (a run of this scenario appends well under 200 events).
        #expect(first.shrinkSteps >= shrinkStepLimit && first.shrinkSteps < shrinkStepLimit + 200, "\(first.shrinkSteps)")
        #expect(first.stepsAfterShrinking <= first.stepsBeforeShrinking)
        for other in runs.dropFirst() {
            #expect(other.choices == first.choices && other.shrinkRuns == first.shrinkRuns && other.shrinkSteps == first.shrinkSteps)
            #expect(other.oneMinimal == first.oneMinimal && other.purchasesPerDevice == first.purchasesPerDevice)
            #expect(try other.reproduce.encoded() == first.reproduce.encoded() && other.html == first.html)
        }
        // The shrunk schedule, though not minimal, still breaks the invariant when replayed.
        let replayed = try Explorer(scenario: .exploration(observers: [.creditEveryDelivery])).reproduce(first.reproduce)
        #expect(replayed.violations.contains { $0.invariant == first.invariant })
    }

    @Test("A budget large enough ends the shrink 1-minimal, having spent the same on 1 and 2 jobs")
    func budgetLargeEnough() throws {
        let one = try Self.found(shrinkStepLimit: Explorer.defaultShrinkStepLimit, jobs: 1)
        let two = try Self.found(shrinkStepLimit: Explorer.defaultShrinkStepLimit, jobs: 2)
        #expect(one.oneMinimal && one.shrinkSteps < Explorer.defaultShrinkStepLimit, "\(one.shrinkSteps) steps")
        #expect(two.oneMinimal && two.choices == one.choices && two.shrinkRuns == one.shrinkRuns && two.shrinkSteps == one.shrinkSteps)
        // Exactly what it spent is enough too; one step less is not.
        let exact = try Self.found(shrinkStepLimit: one.shrinkSteps + 1, jobs: 2)
        #expect(exact.oneMinimal && exact.choices == one.choices)
        let short = try Self.found(shrinkStepLimit: one.shrinkSteps - 50, jobs: 2)
        #expect(!short.oneMinimal)
    }

    @Test("The ledger with a step budget cuts where the finished prefix's steps reach it: a finding past the cut does not count")
    func ledgerCutsAtStepBudget() throws {
        struct Broke: Error {}
        let ledger = ScheduleLedger(budget: ExplorationBudget(schedules: 100, seconds: 600), start: monotonicSeconds(), tracksLength: false,
                                    stepBudget: 100)
        let claimed = (0..<4).compactMap { _ in ledger.claim()?.index }
        #expect(claimed == [0, 1, 2, 3])
        // Finished out of order: 2 finds something, 3 does not; 0 and 1 spend 60 and 50 steps.
        ledger.complete(2, choices: 0, steps: 10, finding: .failure(Broke()))
        ledger.complete(3, choices: 0, steps: 10, finding: nil)
        #expect(!ledger.isSettled, "0 and 1, below the finding, are still running")
        ledger.complete(0, choices: 0, steps: 60, finding: nil)
        ledger.complete(1, choices: 0, steps: 50, finding: nil)
        // Serial trying ran 0 (0 steps spent before it) and 1 (60), then stopped: 110 is past 100.
        #expect(ledger.isSettled && ledger.claim() == nil)
        let (schedules, steps, first) = ledger.outcome()
        #expect(schedules == 2 && steps == 110 && first == nil)
    }

    @Test("The ledger hands out no more once finished schedules spent the step budget, and counts a finding below the cut")
    func ledgerStopsHandingOut() throws {
        struct Broke: Error {}
        let ledger = ScheduleLedger(budget: ExplorationBudget(schedules: 100, seconds: 600), start: monotonicSeconds(), tracksLength: false,
                                    stepBudget: 100)
        #expect(ledger.claim()?.index == 0 && ledger.claim()?.index == 1)
        ledger.complete(1, choices: 0, steps: 120, finding: nil)
        #expect(ledger.claim() == nil, "schedule 1's steps alone reach the budget: nothing past it can count")
        #expect(!ledger.isSettled)
        ledger.complete(0, choices: 0, steps: 30, finding: .failure(Broke()))
        let (schedules, steps, first) = ledger.outcome()
        #expect(ledger.isSettled && schedules == 1 && steps == 30 && first?.index == 0)
    }

    @Test("sksim explore --shrink-steps 0 or negative is refused in one line (status 2); the JSON says the steps spent",
          arguments: ["0", "-5"])
    func commandLine(value: String) throws {
        let sksim = try SKSimProgram.executable(packageRoot: TraceBrowserTests.repositoryRoot)
        let refused = try SKSimProgram.run(sksim, ["explore", "--shrink-steps=\(value)", "--schedules", "1"])
        #expect(refused.status == 2)
        let lines = refused.error.split(separator: "\n")
        #expect(lines.count == 1 && lines[0].contains("--shrink-steps is \(value); use at least 1"), "\(refused.error)")
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("shrink-budget-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: scratch) }
        let found = try SKSimProgram.run(sksim, ["explore", "--observers", "creditEveryDelivery", "--strategy", "random", "--seed", "6",
                                                 "--shrink-steps", "1500", "--report", scratch.path, "--json"])
        #expect(found.status == 1, "\(found.error)")
        let violation = try #require((found.json["violations"] as? [[String: Any]])?.first)
        #expect(violation["oneMinimal"] as? Bool == false)
        #expect((violation["shrinkSteps"] as? Int ?? 0) >= 1_500, "\(violation)")
    }
}

extension FoundViolation {
    /// The summary's line for this violation's shrink.
    fileprivate var summaryLine: String {
        ExplorationReport(strategy: .random, schedules: 1, seconds: 1, exhausted: false, violations: [self]).summary
            .split(separator: "\n")[2].description
    }
}
