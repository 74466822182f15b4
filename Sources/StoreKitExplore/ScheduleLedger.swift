import Foundation
import StoreKitRoles

/// The schedules of one random or pct search, handed out by index to one or more workers, and
/// what they found. It keeps the search's result independent of how many workers ran it and of
/// their timing:
/// - schedule `i` depends on `(seed, i)` only (and, for pct, on schedules at least `lengthLag`
///   before it, which are waited for: see `claim`);
/// - indices are handed out in order, and a finding stops only further hand-outs, so every
///   schedule below a finding has run by the time the workers stop;
/// - the finding (violation or error) with the lowest index wins, as it would run first serially;
/// - with a step budget (a shrink's), schedule `i` counts only when the schedules below it spent
///   fewer steps than the budget, as serial trying checks the budget before each run: the cut is
///   where the finished prefix's steps reach it, and what ran past it is thrown away.
final class ScheduleLedger: @unchecked Sendable {
    /// A schedule that broke an invariant, or threw.
    enum Finding {
        case violation(AppViolation, Explorer.ScheduleOutcome, Scenario)
        case failure(any Error)
    }

    /// The pct length of schedule `i` is the most choices any schedule below `i - lengthLag`
    /// made (at least `Explorer.initialPCTLength`): a fixed lag, so a worker seldom waits for
    /// another's result, whatever the number of workers (up to about `lengthLag`).
    static let lengthLag = 64

    // Everything below is guarded by `condition`.
    private let condition = NSCondition()
    private let budget: ExplorationBudget
    private let start: Double
    private let tracksLength: Bool
    private let stepBudget: Int?
    private var next = 0
    private var completed = 0
    private var longest = Explorer.initialPCTLength
    /// Choice counts of finished schedules not yet folded into `longest` (at most about
    /// `lengthLag` plus the number of workers).
    private var pendingLengths: [Int: Int] = [:]
    private var first: (index: Int, finding: Finding)?
    /// Every index below this one has finished; `finishedAbove` holds those above it that have.
    private var finishedPrefix = 0
    private var finishedAbove: Set<Int> = []
    /// With a step budget: the steps of each finished schedule, their sum, the sum over those below
    /// `finishedPrefix`, and the cut: the first index serial trying would not run.
    private var stepsByIndex: [Int: Int] = [:]
    private var finishedSteps = 0
    private var prefixSteps = 0
    private var cut: Int?

    /// `stepBudget`: most steps the schedules may spend in all, counted in index order (nil: no such limit).
    init(budget: ExplorationBudget, start: Double, tracksLength: Bool, stepBudget: Int? = nil) {
        self.budget = budget
        self.start = start
        self.tracksLength = tracksLength
        self.stepBudget = stepBudget
    }

    /// The next schedule to run and its pct length, or nil when the search is over (budget
    /// spent or something found). Waits, for pct, until the schedule `lengthLag + 1` below has
    /// finished.
    func claim() -> (index: Int, length: Int)? {
        condition.lock()
        defer { condition.unlock() }
        while true {
            // Finished schedules (all below `next`) that spent the step budget put the cut at or below `next`.
            guard first == nil, cut == nil, finishedSteps < stepBudget ?? .max, next < budget.schedules, monotonicSeconds() - start < budget.seconds else { return nil }
            let joining = next - Self.lengthLag - 1
            guard tracksLength, joining >= 0 else { break }
            if let length = pendingLengths.removeValue(forKey: joining) {
                longest = max(longest, length)
                break
            }
            // Bounded: re-checks the budget at least every 100 ms.
            _ = condition.wait(until: Date(timeIntervalSinceNow: 0.1))
        }
        defer { next += 1 }
        return (next, longest)
    }

    /// Schedule `index` ran: it made `choices` choices, appended `steps` events and found `finding`
    /// (nil: nothing broke). Returns how many schedules have finished.
    @discardableResult
    func complete(_ index: Int, choices: Int, steps: Int = 0, finding: Finding?) -> Int {
        condition.lock()
        defer { condition.unlock() }
        completed += 1
        finishedAbove.insert(index)
        if stepBudget != nil {
            stepsByIndex[index] = steps
            finishedSteps += steps
        }
        while finishedAbove.remove(finishedPrefix) != nil {
            finishedPrefix += 1
            if let stepBudget, cut == nil {
                prefixSteps += stepsByIndex[finishedPrefix - 1] ?? 0
                if prefixSteps >= stepBudget { cut = finishedPrefix }
            }
        }
        if tracksLength { pendingLengths[index] = choices }
        if let finding, first.map({ index < $0.index }) ?? true { first = (index, finding) }
        condition.broadcast()
        return completed
    }

    /// True when the result is settled: something was found and every schedule below it has
    /// finished, or nothing more is handed out and every schedule handed out has finished.
    /// Schedules above a finding may still be running (their results no longer matter).
    var isSettled: Bool {
        condition.lock()
        defer { condition.unlock() }
        return settled
    }

    private var settled: Bool {
        // Every schedule below the cut has finished (the cut is found by folding that prefix).
        if cut != nil { return true }
        if let first { return finishedPrefix >= first.index }
        return finishedPrefix == next && (next >= budget.schedules || monotonicSeconds() - start >= budget.seconds)
    }

    /// Waits until `isSettled`.
    func waitUntilSettled() {
        condition.lock()
        defer { condition.unlock() }
        // Bounded: every schedule handed out finishes, and each one finishing wakes this.
        while !settled { _ = condition.wait(until: Date(timeIntervalSinceNow: 0.1)) }
    }

    /// Once settled: the lowest-index finding below the cut, and the schedules and their steps
    /// counted as serial would count them (up to and including the finding, else up to the cut,
    /// else every schedule handed out); the steps are 0 without a step budget.
    func outcome() -> (schedules: Int, steps: Int, first: (index: Int, finding: Finding)?) {
        condition.lock()
        defer { condition.unlock() }
        let counted = min(first.map { $0.index + 1 } ?? next, cut ?? .max)
        let steps = (0..<counted).reduce(0) { $0 + (stepsByIndex[$1] ?? 0) }
        return (counted, steps, first.flatMap { $0.index < counted ? $0 : nil })
    }
}
