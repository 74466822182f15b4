import Foundation
@testable import StoreKitExplore
import StoreKitModel
import StoreKitRoles
import StoreKitTestSupport
import Testing

/// `explore(jobs:)` and `sksim explore --jobs`: more workers, the same result. Four jobs on this
/// 2-core machine on purpose (more threads than cores, so the workers' timing varies).
@Suite struct ParallelExploreTests {
    /// Buggy behaviours, strategies and seeds whose violation is found after several schedules
    /// (so several workers ran schedules around it), one past pct's length lag (284 > 64).
    static let cases: [(observers: [ObserverBehavior], strategy: ExplorationStrategy, seed: UInt64)] = [
        ([.creditEveryDelivery], .random, 6),
        ([.finishOnFirstDownload], .random, 2),
        ([.creditEveryDelivery], .pct(depth: 3), 1),
        ([.finishOnFirstDownload], .pct(depth: 3), 1),
        ([.creditEveryDelivery], .pct(depth: 3), 2),
    ]

    static func explorer(_ observers: [ObserverBehavior]) -> Explorer {
        Explorer(scenario: .exploration(observers: observers))
    }

    @Test("random and pct on 4 jobs find the same violation as on 1: seed, choices, steps, schedules until found, report bytes",
          arguments: 0..<5)
    func sameViolation(index: Int) throws {
        let (observers, strategy, seed) = Self.cases[index]
        let budget = ExplorationBudget(schedules: 2_000, seconds: 600)
        let serial = try Self.explorer(observers).explore(strategy: strategy, budget: budget, seed: seed)
        let parallel = try Self.explorer(observers).explore(strategy: strategy, budget: budget, seed: seed, jobs: 4)
        #expect(serial.jobs == 1 && parallel.jobs == 4)
        let one = try #require(serial.violations.first, "\(serial.summary)")
        let four = try #require(parallel.violations.first, "\(parallel.summary)")
        #expect(one.schedulesUntilFound > 1, "a case where only one schedule ran shows nothing about workers")
        #expect(parallel.schedules == serial.schedules && four.schedulesUntilFound == one.schedulesUntilFound)
        #expect(four.invariant == one.invariant && four.message == one.message && four.seed == one.seed)
        #expect(four.choices == one.choices && four.choicesBeforeShrinking == one.choicesBeforeShrinking)
        #expect(four.stepsBeforeShrinking == one.stepsBeforeShrinking && four.stepsAfterShrinking == one.stepsAfterShrinking)
        #expect(four.shrinkRuns == one.shrinkRuns && four.oneMinimal == one.oneMinimal)
        #expect(try four.reproduce.encoded() == one.reproduce.encoded())
        #expect(four.mermaid == one.mermaid && four.html == one.html)
    }

    @Test("A user's own observers (a @Sendable factory making fresh ones at each launch) on 4 jobs: the same violation as on 1")
    func ownObservers() throws {
        func explore(jobs: Int) throws -> FoundViolation? {
            let app = SimulatedApp(storage: { Credits() }, belief: { AppBelief(credits: $0.credits) }, launch: { CreditsEveryDelivery($0) })
            let explorer = Explorer(scenario: .exploration(observers: [.deliverThenFinish]), appLaunch: app.launch)
            return try explorer.explore(strategy: .random, budget: ExplorationBudget(schedules: 2_000, seconds: 600), seed: 6, jobs: jobs)
                .violations.first
        }
        let one = try #require(try explore(jobs: 1))
        let four = try #require(try explore(jobs: 4))
        #expect(one.reproduce.customObservers && one.schedulesUntilFound > 1)
        #expect(four.schedulesUntilFound == one.schedulesUntilFound && four.shrinkRuns == one.shrinkRuns)
        #expect(try four.reproduce.encoded() == one.reproduce.encoded() && four.mermaid == one.mermaid)
    }

    @Test("A correct behaviour on 4 jobs: no violation, every schedule of the budget counted, under random and pct")
    func correctBehaviour() throws {
        for strategy in [ExplorationStrategy.random, .pct(depth: 3)] {
            let report = try Explorer(scenario: .exploration(observers: [.downloadThenFinish, .audit]))
                .explore(strategy: strategy, budget: ExplorationBudget(schedules: 300, seconds: 600), seed: 4, jobs: 4)
            #expect(report.violations.isEmpty, "\(report.summary)")
            #expect(report.schedules == 300 && report.jobs == 4)
            #expect(report.summary.contains("300 schedules") && report.summary.contains("on 4 jobs"), "\(report.summary)")
        }
    }

    @Test("The library's default is one job, and exhaustive runs on one whatever is asked")
    func defaults() throws {
        let explorer = Explorer(scenario: .exploration(observers: [.downloadThenFinish, .audit]))
        #expect(try explorer.explore(strategy: .random, budget: ExplorationBudget(schedules: 3, seconds: 60)).jobs == 1)
        var scenario = Scenario.exploration(devices: 1, purchasesPerDevice: 1, observers: [.deliverThenFinish])
        scenario.catalog = try Catalog(products: [Product(identifier: "coins", kind: .consumable, referenceName: "Coins", displayPrice: "1")])
        let exhaustive = try Explorer(scenario: scenario).explore(strategy: .exhaustive(depth: 1), budget: ExplorationBudget(schedules: 10_000, seconds: 60), jobs: 4)
        #expect(exhaustive.exhausted && exhaustive.jobs == 1, "\(exhaustive.summary)")
    }

    @Test("The ledger: indices in order, the lowest-index finding wins whatever order they finish in, and nothing is handed out after one")
    func ledgerOrder() throws {
        struct Broke: Error { var index: Int }
        let ledger = ScheduleLedger(budget: ExplorationBudget(schedules: 100, seconds: 600), start: monotonicSeconds(), tracksLength: false)
        let claimed = (0..<4).compactMap { _ in ledger.claim()?.index }
        #expect(claimed == [0, 1, 2, 3])
        ledger.complete(3, choices: 10, finding: .failure(Broke(index: 3)))
        #expect(ledger.claim() == nil, "a finding stops the hand-out")
        #expect(!ledger.isSettled, "schedules below the finding are still running")
        ledger.complete(0, choices: 10, finding: nil)
        ledger.complete(2, choices: 10, finding: .failure(Broke(index: 2)))
        #expect(!ledger.isSettled, "schedule 1, below the finding at 2, is still running")
        ledger.complete(1, choices: 10, finding: nil)
        #expect(ledger.isSettled, "everything below the finding at 2 finished; 3's result no longer matters")
        let (schedules, _, first) = ledger.outcome()
        #expect(schedules == 3 && first?.index == 2)
        guard case .failure(let error) = first?.finding else { Issue.record("no failure recorded"); return }
        #expect((error as? Broke)?.index == 2)
    }

    @Test("Without a finding the ledger is settled once the budget is handed out and every schedule has finished")
    func ledgerSettlesAtBudget() throws {
        let ledger = ScheduleLedger(budget: ExplorationBudget(schedules: 2, seconds: 600), start: monotonicSeconds(), tracksLength: false)
        let claimed = [ledger.claim()?.index, ledger.claim()?.index, ledger.claim()?.index]
        #expect(claimed == [0, 1, nil])
        ledger.complete(1, choices: 10, finding: nil)
        #expect(!ledger.isSettled)
        ledger.complete(0, choices: 10, finding: nil)
        #expect(ledger.isSettled && ledger.outcome().schedules == 2 && ledger.outcome().first == nil)
    }

    @Test("pct's length of schedule i is the most choices made below i - 64 (at least 64), so no worker's timing changes it")
    func ledgerLength() throws {
        let lag = ScheduleLedger.lengthLag
        let ledger = ScheduleLedger(budget: ExplorationBudget(schedules: 1_000, seconds: 600), start: monotonicSeconds(), tracksLength: true)
        var lengths: [Int] = []
        for index in 0..<(lag + 3) {
            let claim = try #require(ledger.claim())
            #expect(claim.index == index)
            lengths.append(claim.length)
            // Schedule 0 made 200 choices, schedule 1 made 300, the others 10.
            ledger.complete(index, choices: [200, 300][safe: index] ?? 10, finding: nil)
        }
        #expect(lengths[...lag].allSatisfy { $0 == Explorer.initialPCTLength }, "\(lengths)")
        #expect(lengths[lag + 1] == 200 && lengths[lag + 2] == 300, "\(lengths)")
    }

    @Test("sksim explore --jobs 4 writes the same report files and JSON as --jobs 1; the JSON says how many jobs ran")
    func commandLine() throws {
        let sksim = try SKSimProgram.executable(packageRoot: TraceBrowserTests.repositoryRoot)
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("parallel-explore-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: scratch) }
        var outputs: [[String: Any]] = []
        for jobs in ["1", "4"] {
            let outcome = try SKSimProgram.run(sksim, ["explore", "--observers", "creditEveryDelivery", "--strategy", "random", "--seed", "6",
                                                      "--jobs", jobs, "--report", scratch.appendingPathComponent(jobs).path, "--json"])
            #expect(outcome.status == 1, "\(outcome.error)")
            outputs.append(outcome.json)
        }
        #expect(outputs.map { $0["jobs"] as? Int } == [1, 4])
        let schedules = outputs.map { $0["schedules"] as? Int ?? -1 }
        #expect(schedules[0] > 1 && schedules[1] == schedules[0], "\(schedules)")
        let violations = outputs.map { ($0["violations"] as? [[String: Any]])?.first }
        for field in ["invariant", "seed", "choices", "steps", "schedulesUntilFound", "shrinkRuns"] {
            let one = violations[0]?[field] as? NSObject
            #expect(one != nil && one == violations[1]?[field] as? NSObject, "\(field) differs")
        }
        for file in ["trace.html", "trace.mmd", "reproduce.json"] {
            let one = try Data(contentsOf: scratch.appendingPathComponent("1/granted-once/\(file)"))
            let four = try Data(contentsOf: scratch.appendingPathComponent("4/granted-once/\(file)"))
            #expect(one == four, "\(file) differs")
        }
    }

    @Test("pct's choices: zero except at its change points, the same values as looking each position up in the set of points")
    func pctChangePoints() {
        for seed: UInt64 in 1...40 {
            for depth in [0, 1, 3, 6] {
                for length in [1, 5, 64] {
                    let pct = PCTChoices(seed: seed, depth: depth, length: length)
                    // The definition: `depth` points drawn into a set, every draw looked up in it.
                    var random = SeededRandom(seed: seed, stream: "pct")
                    var points: Set<Int> = []
                    for _ in 0..<depth { points.insert(Int(random.next() % UInt64(length))) }
                    var differences = 0
                    for position in 0..<80 {
                        let bound: UInt64 = [1, 2, 7, unitChoiceBound][position % 4]
                        let expected: UInt64 = bound > 1 && points.contains(position) ? random.next().multipliedFullWidth(by: bound).high : 0
                        if pct.choose(.latency, below: bound) != expected { differences += 1 }
                    }
                    #expect(differences == 0, "seed \(seed), depth \(depth), length \(length)")
                }
            }
        }
    }

    @Test("--jobs 0 or negative is refused with one line saying what to use", arguments: ["0", "-3"])
    func badJobs(value: String) throws {
        let sksim = try SKSimProgram.executable(packageRoot: TraceBrowserTests.repositoryRoot)
        let outcome = try SKSimProgram.run(sksim, ["explore", "--jobs=\(value)", "--schedules", "1"])
        #expect(outcome.status != 0 && outcome.status != 1)
        let lines = outcome.error.split(separator: "\n")
        #expect(lines.count == 1 && lines[0].contains("--jobs is \(value); use 1 to 1024 worker threads"), "\(outcome.error)")
    }
}

extension Array {
    fileprivate subscript(safe index: Int) -> Element? { indices.contains(index) ? self[index] : nil }
}

/// The app's disk in `ownObservers`: credits by the purchase they are for.
private final class Credits: @unchecked Sendable {
    var credits: [String: Int] = [:]
}

/// Buggy on purpose, on Apple's API: credits on every delivery without remembering what it credited.
private final class CreditsEveryDelivery: NSObject, SKPaymentTransactionObserver {
    let store: Credits

    init(_ store: Credits) {
        self.store = store
        super.init()
        SKPaymentQueue.default().add(self)
    }

    func paymentQueue(_ queue: SKPaymentQueue, updatedTransactions transactions: [SKPaymentTransaction]) {
        for transaction in transactions {
            switch transaction.transactionState {
            case .purchased, .restored:
                store.credits[transaction.original?.transactionIdentifier ?? transaction.transactionIdentifier ?? "", default: 0] += 1
                queue.finishTransaction(transaction)
            case .failed:
                queue.finishTransaction(transaction)
            default:
                break
            }
        }
    }
}
