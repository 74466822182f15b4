import ArgumentParser
import Foundation
import SKSimCommands
import StoreKitExplore
import StoreKitModel
import StoreKitRoles
import Testing

/// The explorer against the built-in observer behaviours: each buggy one is caught by its
/// invariant, the correct ones pass, shrinking is 1-minimal, reproduce files replay exactly.
@Suite struct ExploreTests {
    /// Each buggy behaviour, the observers it runs beside, and the invariants that may catch it first.
    /// An observer that attaches late misses both redeliveries and a restore's end that came before
    /// it attached, so either of those two invariants is its catch (the restore's is the one a random
    /// schedule of seed 1 meets first).
    static let buggy: [(ObserverBehavior, [ObserverBehavior], Set<AppInvariant>)] = [
        (.sdkFinishesEarly, [.sdkFinishesEarly, .deliverThenFinish], [.grantBeforeFinish]),          // R-T4, R-Q5
        (.finishOnFirstDownload, [.finishOnFirstDownload], [.downloadsBeforeFinish]),                 // R-D3
        (.finishAtFullProgress, [.finishAtFullProgress], [.noCompletionFromProgress]),                // R-D2
        (.creditEveryDelivery, [.creditEveryDelivery], [.grantedOnce]),                               // R-Q4
        (.attachesLate, [.audit, .attachesLate], [.launchObserversSeeRedeliveries, .restoreDoneOnce]), // R-Q4, R-O3
        (.restoreDoneEarly, [.restoreDoneEarly], [.restoreDoneAfterHandled]),                         // R-O3
        (.deferredAsFailed, [.deferredAsFailed], [.deferredApprovedGranted]),                         // R-T1
        (.finishBeforeDownloads, [.finishBeforeDownloads], [.downloadsBeforeFinish]),                 // R-D3
    ]

    @Test("Each buggy behaviour is caught by its invariant within 2,000 schedules (random), R-Q4 R-Q5 R-T4 R-D2 R-D3 R-O3 R-T1",
          arguments: 0..<8)
    func buggyBehaviourIsCaught(index: Int) throws {
        let (behavior, observers, invariants) = Self.buggy[index]
        var explorer = Explorer(scenario: .exploration(observers: observers))
        explorer.shrinkStepLimit = 20_000
        let report = try explorer.explore(strategy: .random, budget: ExplorationBudget(schedules: 2_000, seconds: 60), seed: 1)
        let found = try #require(report.violations.first, "\(behavior) was not caught: \(report.summary)")
        #expect(invariants.contains(found.invariant), "\(behavior): \(report.summary)")
        #expect(found.choices.count <= found.choicesBeforeShrinking)
    }

    @Test("pct finds the second SDK finishing before the grant (R-Q5) and the credit on every delivery (R-Q4)")
    func pctFinds() throws {
        for (observers, invariant) in [([ObserverBehavior.sdkFinishesEarly, .deliverThenFinish], AppInvariant.grantBeforeFinish),
                                       ([.creditEveryDelivery], .grantedOnce)] {
            var explorer = Explorer(scenario: .exploration(observers: observers))
            explorer.shrinkStepLimit = 20_000
            let report = try explorer.explore(strategy: .pct(depth: 3), budget: ExplorationBudget(schedules: 2_000, seconds: 60), seed: 1)
            #expect(report.violations.first?.invariant == invariant, "\(report.summary)")
        }
    }

    @Test("Correct behaviours break no invariant over a thousand schedules each", arguments: [
        [ObserverBehavior.downloadThenFinish, .audit], [.restoreThenFinish, .audit], [.deliverThenFinish, .audit],
    ])
    func correctBehavioursPass(observers: [ObserverBehavior]) throws {
        let report = try Explorer(scenario: .exploration(observers: observers))
            .explore(strategy: .random, budget: ExplorationBudget(schedules: 1_000, seconds: 600), seed: 3)
        #expect(report.violations.isEmpty, "\(report.summary)")
        #expect(report.schedules == 1_000)
    }

    @Test("A shrunk schedule is 1-minimal: without any one of its choices, or with one set to 0, the violation is gone")
    func shrinkIsOneMinimal() throws {
        let explorer = Explorer(scenario: .exploration(observers: [.creditEveryDelivery]))
        let report = try explorer.explore(strategy: .random, budget: ExplorationBudget(schedules: 2_000, seconds: 60), seed: 5)
        let found = try #require(report.violations.first)
        #expect(found.oneMinimal)
        let scenario = try found.reproduce.makeScenario()
        func fails(_ choices: [UInt64]) throws -> Bool {
            try explorer.run(choices: ReplayedChoices(choices), scenario: scenario).violations.contains { $0.invariant == found.invariant }
        }
        #expect(try fails(found.choices))
        for index in found.choices.indices {
            var without = found.choices
            without.remove(at: index)
            #expect(try !fails(without), "still fails without choice \(index)")
            if found.choices[index] != 0 {
                var zeroed = found.choices
                zeroed[index] = 0
                #expect(try !fails(zeroed), "still fails with choice \(index) at 0")
            }
        }
    }

    @Test("A reproduce file replays the same log and violation every time, also through sksim explore --reproduce")
    func reproduceIsExact() async throws {
        let explorer = Explorer(scenario: .exploration(observers: [.sdkFinishesEarly, .deliverThenFinish]))
        let report = try explorer.explore(strategy: .random, budget: ExplorationBudget(schedules: 2_000, seconds: 60), seed: 11)
        let found = try #require(report.violations.first)
        for _ in 0..<10 {
            let replayed = try Explorer(scenario: try found.reproduce.makeScenario()).reproduce(found.reproduce)
            #expect(ReproduceFile.hex(replayed.logDigest) == found.reproduce.logDigest)
            #expect(replayed.violations.first?.invariant == found.invariant)
        }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("explore-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("reproduce.json")
        try found.reproduce.encoded().write(to: file)
        #expect(try ReproduceFile.load(file) == found.reproduce)
        var command = try SKSim.parseAsRoot(["explore", "--reproduce", file.path])
        await #expect(throws: ExitCode(1)) {
            if var asyncCommand = command as? AsyncParsableCommand { try await asyncCommand.run() } else { try command.run() }
        }
    }

    @Test("A file that is not a reproduce file is refused with one clear line")
    func badReproduceFile() throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("not-reproduce-\(UUID().uuidString).json")
        try Data("{\"hello\": 1}".utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        #expect { try ReproduceFile.load(file) } throws: { error in
            "\(error)".contains("is not a reproduce file written by sksim explore")
        }
    }

    @Test("exhaustive finishes a tiny scenario, says how many distinct states it branched from, and its bound counts unusual choices")
    func exhaustiveFinishes() throws {
        var scenario = Scenario.exploration(devices: 1, purchasesPerDevice: 1, observers: [.deliverThenFinish])
        scenario.catalog = try Catalog(products: [Product(identifier: "coins", kind: .consumable, referenceName: "Coins", displayPrice: "1")])
        let explorer = Explorer(scenario: scenario)
        let budget = ExplorationBudget(schedules: 100_000, seconds: 120)
        var counts: [Int] = []
        for depth in 0...2 {
            let report = try explorer.explore(strategy: .exhaustive(depth: depth), budget: budget)
            #expect(report.exhausted, "\(report.summary)")
            #expect(report.violations.isEmpty, "\(report.summary)")
            counts.append(report.schedules)
        }
        // No unusual choice: the one simplest schedule. Each more allowed: strictly more schedules.
        #expect(counts[0] == 1)
        #expect(counts[1] > counts[0] && counts[2] > counts[1], "\(counts)")
    }

    @Test("exhaustive finds a consumable credited twice (R-Q4), which takes one unusual choice, and not with none allowed")
    func exhaustiveFindsBug() throws {
        let explorer = Explorer(scenario: .exploration(devices: 1, purchasesPerDevice: 1, observers: [.creditEveryDelivery]))
        let budget = ExplorationBudget(schedules: 100_000, seconds: 120)
        let none = try explorer.explore(strategy: .exhaustive(depth: 0), budget: budget)
        #expect(none.exhausted && none.violations.isEmpty, "\(none.summary)")
        let report = try explorer.explore(strategy: .exhaustive(depth: 1), budget: budget)
        let found = try #require(report.violations.first, "\(report.summary)")
        #expect(found.invariant == .grantedOnce)
        #expect(!report.exhausted)
        #expect(found.choices.filter { $0 != 0 }.count == 1, "\(found.choices)")
    }

    @Test("exhaustive tries one value per outcome band: every store outcome, each chance taken and not, one product per shape")
    func exhaustiveValuesCoverEveryOutcome() throws {
        let scenario = Scenario.exploration()
        let space = ExhaustiveSpace(scenario: scenario, depth: 2)
        // Purchased, deferred, cancelled, failed: the four bands of the store's unit draw.
        let outcomes = space.values(.storeOutcome, bound: unitChoiceBound)
        #expect(outcomes.count == 4)
        for (kind, probability) in [(ChoiceKind.userRestore, scenario.apps.restoreProbability), (.userRelaunch, scenario.apps.relaunchProbability),
                                    (.appKill, 0.05), (.duplicateDelivery, 0.1), (.removalDelay, 0.2), (.approval, scenario.store.approvalProbability),
                                    (.downloadFailure, scenario.downloader.failureProbabilityPerTick)] {
            let values = space.values(kind, bound: unitChoiceBound)
            #expect(values.count == 2, "\(kind)")
            #expect(values.map { ReplayedChoices([$0]).chance(kind, probability) } == [false, true], "\(kind): \(values)")
        }
        // Timing and amounts are held; small index draws take every value.
        #expect(space.values(.latency, bound: unitChoiceBound) == [0] && space.values(.quantity, bound: 3) == [0])
        #expect(space.values(.observerOrder, bound: 2) == [0, 1] && space.values(.appKill, bound: 3) == [0, 1, 2])
        // The sample catalog's nine products fall into six shapes (kind, number of hosted contents).
        let products = space.values(.product, bound: UInt64(scenario.catalog.products.count)).map { scenario.catalog.products[Int($0)] }
        #expect(products.map(\.identifier) == ["com.example.sksim.coins.small", "com.example.sksim.removeads", "com.example.sksim.levelpack.forest",
                                              "com.example.sksim.levelpack.desert", "com.example.sksim.seasonpass", "com.example.sksim.premium.monthly"])
    }

    @Test("The trace names every lifeline, marks the violation, and the HTML page needs nothing from outside")
    func traceIsDrawn() throws {
        var explorer = Explorer(scenario: .exploration(observers: [.sdkFinishesEarly, .deliverThenFinish]))
        explorer.shrinkStepLimit = 20_000
        let found = try #require(try explorer.explore(strategy: .random, budget: ExplorationBudget(schedules: 100, seconds: 60)).violations.first)
        for lifeline in ["device", "sdkFinishesEarly-1", "deliverThenFinish-2", "queue", "store", "downloader"] {
            #expect(found.mermaid.contains("participant \(lifeline.replacingOccurrences(of: "-", with: "_")) as \(lifeline)"))
        }
        #expect(found.mermaid.hasPrefix("sequenceDiagram"))
        #expect(found.mermaid.contains("Note over queue: VIOLATION grant-before-finish"))
        #expect(found.html.contains("<svg"))
        #expect(!found.html.contains("<script") && !found.html.contains("http://www.w3.org/1999") && !found.html.contains("src="))
    }

    @Test("The command line's JSON carries the fixed fields")
    func jsonContract() throws {
        var explorer = Explorer(scenario: .exploration(observers: [.creditEveryDelivery]))
        explorer.shrinkStepLimit = 10_000
        let report = try explorer.explore(strategy: .random, budget: ExplorationBudget(schedules: 2_000, seconds: 60))
        let text = ExploreCommandJSON.render(report)
        for field in ["\"schedules\":", "\"schedulesPerSecond\":", "\"exhausted\":false", "\"violations\":[{\"invariant\":\"granted-once\"",
                      "\"seed\":", "\"choices\":[", "\"trace\":\"t.html\"", "\"steps\":{\"beforeShrinking\":"] {
            #expect(text.contains(field), "\(field) missing from \(text)")
        }
    }
}
