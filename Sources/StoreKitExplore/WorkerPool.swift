import Foundation

/// Threads that help the calling thread with the schedules of one ledger after another (an
/// exploration's search, then each step of its shrink), each with an explorer of its own (its
/// own log and header cache), started once per exploration.
final class WorkerPool: @unchecked Sendable {
    /// What a worker does with index `index` (and pct length `length`) a ledger handed out: the
    /// choices it made, the steps (events) it ran and what it found.
    typealias Attempt = @Sendable (_ explorer: Explorer, _ index: Int, _ length: Int) -> (choices: Int, steps: Int, finding: ScheduleLedger.Finding?)

    // Guarded by `condition`.
    private let condition = NSCondition()
    private var task: (ledger: ScheduleLedger, attempt: Attempt)?
    private var generation = 0
    private var closed = false
    private var running = 0

    /// Starts `threads` threads, each with the explorer `makeExplorer` gives it.
    init(threads: Int, makeExplorer: @escaping @Sendable () -> Explorer) {
        for _ in 0..<max(0, threads) {
            running += 1
            let thread = Thread { [self] in
                let explorer = makeExplorer()
                var seen = 0
                while let (ledger, attempt, generation) = nextTask(after: seen) {
                    seen = generation
                    while let (index, length) = ledger.claim() {
                        let (choices, steps, finding) = attempt(explorer, index, length)
                        ledger.complete(index, choices: choices, steps: steps, finding: finding)
                    }
                }
                condition.lock()
                running -= 1
                condition.broadcast()
                condition.unlock()
            }
            thread.stackSize = 8 << 20
            thread.start()
        }
    }

    /// Hands the workers the indices of `ledger`, to run with `attempt`.
    func post(_ ledger: ScheduleLedger, _ attempt: @escaping Attempt) {
        condition.lock()
        task = (ledger, attempt)
        generation += 1
        condition.broadcast()
        condition.unlock()
    }

    /// Stops the workers (each finishes the schedule in hand) and waits until they have exited,
    /// so nothing of the user's (observer factory) runs after the exploration returns.
    func close() {
        condition.lock()
        defer { condition.unlock() }
        closed = true
        task = nil
        condition.broadcast()
        while running > 0 { _ = condition.wait(until: Date(timeIntervalSinceNow: 0.1)) }
    }

    private func nextTask(after seen: Int) -> (ScheduleLedger, Attempt, Int)? {
        condition.lock()
        defer { condition.unlock() }
        while !closed, generation == seen { _ = condition.wait(until: Date(timeIntervalSinceNow: 0.1)) }
        guard !closed, let task else { return nil }
        return (task.ledger, task.attempt, generation)
    }
}
