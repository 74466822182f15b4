import StoreKitExplore
import StoreKitModel
import StoreKitRoles
import StoreKitRuntime
import StoreKitSimulation
import Testing

/// Exploration with stalls and partitions of any process as choice points (issue 30, item 2).
@Suite struct OutageExplorationTests {
    @Test("the exploration scenario with outages stalls and partitions the queue and the roles, each a recorded choice")
    func outagesAreChoices() throws {
        var stalled = Set<String>()
        var stalls = 0
        var partitions = 0
        for seed in 1...20 as ClosedRange<UInt64> {
            let scenario = Scenario.exploration(devices: 2, seed: seed, outages: true)
            let choices = SeededChoices(seed: seed, recording: true)
            let runtime = try DeterministicRuntime(scenario: scenario, environment: DeterministicEnvironment(
                storage: MemoryLogStorage(), content: VirtualContentStorage(), choices: choices, logDescription: "memory"))
            let report = try runtime.run()
            #expect(report.violationCount == 0 && !report.stoppedAtTimeLimit, "seed \(seed): \(report.violations)")
            stalls += runtime.counters.stalls
            partitions += runtime.counters.partitions
            for choice in choices.recorded where choice.kind == .stall && choice.bound == 4 { stalled.insert("\(choice.value)") }
        }
        #expect(stalls > 0 && partitions > 0, "\(stalls) stalls, \(partitions) partitions")
        // The process stalled is itself a choice among the three roles and the queue.
        #expect(stalled.count > 1, "\(stalled)")
    }

    @Test("correct observers break no invariant over schedules with stalls and partitions")
    func correctObserversSurviveOutages() throws {
        var explorer = Explorer(scenario: .exploration(observers: [.downloadThenFinish, .audit], outages: true))
        explorer.shrinkStepLimit = 20_000
        let report = try explorer.explore(strategy: .random, budget: ExplorationBudget(schedules: 200, seconds: 60), seed: 1)
        #expect(report.violations.isEmpty, "\(report.summary)")
    }
}
