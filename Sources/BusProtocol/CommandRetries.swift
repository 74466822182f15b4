import StoreKitModel

/// When a `CommandSender` sends a command again: the sender's retry logic with no socket and no
/// clock of its own (the caller passes `now` to every call), so a test drives it through a stall
/// in simulated time (`CommandRetriesTests`).
///
/// The queue handles one connection's commands in order and answers them in that order, so the
/// answers themselves say what was lost:
/// - **Answers flow, an older command is still unanswered** while a newer one was answered: the
///   older one (or its answer) was lost. It is sent again.
/// - **Answers stop** (the queue is stalled, overloaded, or gone): whatever was sent is either
///   waiting in the connection for the queue or lost with it; sending copies of it all would only
///   queue a duplicate behind each original, and a queue that comes back would then have to work
///   through all of them before any new command (a retry storm that outlasts the stall: the
///   sustained overload of a metastable failure). So only one command, the oldest, is sent again
///   per probe interval, an interval that doubles while the silence lasts (with jitter, so many
///   senders do not probe in step). Its answer ends the stall.
/// - **The connection was made again** (`reconnected`): the queue restarted, and everything it had
///   not answered was lost with the old connection; every outstanding command is sent again at
///   once, in number order (a payment after its device's registration).
/// - **The queue answered `unavailable`**: it recorded nothing; that command is sent again after its
///   own interval, which doubles per attempt.
///
/// Retries of commands lost while answers flow also draw on a budget that answers refill: at most
/// `retryBudgetRatio` retries per answer beyond a reserve, so a sender never sends the queue more
/// than a fraction of retries for what it gets answered. (An `unavailable` answer is the queue asking
/// for the retry, so those are not counted: they are paced by each command's own interval.)
public struct CommandRetries {
    public struct Policy: Sendable {
        /// The least time without an answer before the sender probes, and a command's first
        /// interval after an `unavailable` answer.
        public var retryInterval: Duration
        /// The longest probe or retry interval.
        public var maximumRetryInterval: Duration
        /// A command still unanswered this long after its first send is given up.
        public var giveUpAfter: Duration
        /// Retries earned per answer (budget refill), beyond `retryBudgetReserve`.
        public var retryBudgetRatio: Double = 0.2
        /// Retries a sender may make before any answer refills the budget, and the budget's ceiling.
        public var retryBudgetReserve: Double = 1_000
        /// Which rule decides the retries.
        public var rule: Rule = .probeWhileSilent

        public init(retryInterval: Duration, maximumRetryInterval: Duration, giveUpAfter: Duration) {
            self.retryInterval = retryInterval
            self.maximumRetryInterval = maximumRetryInterval
            self.giveUpAfter = giveUpAfter
        }

        /// The bus's settings (`CommandSenderConfiguration`'s defaults), live and simulated.
        public static let standard = Policy(retryInterval: .milliseconds(500), maximumRetryInterval: .seconds(2), giveUpAfter: .seconds(10))
    }

    public enum Rule: Sendable, Hashable {
        /// The rule described above.
        case probeWhileSilent
        /// The former rule, kept only to reproduce the storm it caused (issue 30): while the queue is
        /// silent, or for commands older than its last answer, every unanswered command up to the
        /// last one due is sent again at each call, on its own doubling interval, with no jitter and
        /// no budget.
        case everyUnansweredCommand
    }

    /// What `due(now:)` asks the sender to do.
    public struct Work {
        /// Commands to send again, in number order, with their payloads.
        public var resend: [(number: UInt64, payload: [UInt8])] = []
        /// Commands given up: number, attempts and time since their first send.
        public var expired: [(number: UInt64, attempts: Int, elapsed: Duration)] = []
    }

    /// What an answer meant.
    public enum Answer: Equatable {
        /// Not one of the outstanding commands (an answer to a copy, after the first answer).
        case late
        /// `unavailable`: the command stays outstanding and is sent again later.
        case retryLater
        /// The command completed; `sentOnce` tells a duplicate of someone else's command apart.
        case completed(sentOnce: Bool)
    }

    public let policy: Policy
    public private(set) var retriesSent = 0
    /// Probes sent while the queue was silent.
    public private(set) var probesSent = 0
    /// Retries held back because the budget was spent.
    public private(set) var retriesDeferredByBudget = 0

    private struct Outstanding {
        var payload: [UInt8]
        var firstSent: ContinuousClock.Instant
        var nextAttempt: ContinuousClock.Instant
        var interval: Duration
        var attempts: Int
        /// The queue answered `unavailable`: nothing was recorded, so it is sent again when due.
        var refused = false
    }

    private var outstanding = NumberedWindow<Outstanding>()
    /// When the queue last answered one of these commands as handled (accepted, rejected or duplicate).
    private var lastAnswer: ContinuousClock.Instant
    /// The highest number so answered.
    private var highestHandled: UInt64 = 0
    /// While the queue is silent: when the next probe may go, and the interval after it.
    private var nextProbe: ContinuousClock.Instant?
    private var probeInterval: Duration
    private var budget: Double
    private var random: any RandomNumberGenerator

    public init(policy: Policy, now: ContinuousClock.Instant, random: any RandomNumberGenerator = SystemRandomNumberGenerator()) {
        self.policy = policy
        lastAnswer = now
        probeInterval = policy.retryInterval
        budget = policy.retryBudgetReserve
        self.random = random
    }

    public var outstandingCount: Int { outstanding.count }

    /// Records the first send of command `number` (numbers ascend).
    public mutating func sent(_ number: UInt64, payload: [UInt8], now: ContinuousClock.Instant) {
        // Silence before this command says nothing about the queue.
        if outstanding.isEmpty { lastAnswer = max(lastAnswer, now) }
        outstanding.insert(Outstanding(payload: payload, firstSent: now, nextAttempt: now + policy.retryInterval,
                                       interval: policy.retryInterval, attempts: 1), at: number)
    }

    /// Takes the queue's answer to command `number`.
    public mutating func answered(_ number: UInt64, status: AcknowledgementStatus, now: ContinuousClock.Instant) -> Answer {
        // The entry changed in place or moved out: a copy of it would retain its payload.
        if status == .unavailable {
            var newlyRefused = false
            let held = outstanding.update(number) { pending in
                newlyRefused = !pending.refused
                pending.refused = true
                pending.nextAttempt = min(pending.nextAttempt, now + pending.interval)
            }
            guard held else { return .late }
            if newlyRefused { refusedCount += 1 }
            return .retryLater
        }
        guard let pending = outstanding.remove(number) else { return .late }
        if pending.refused { refusedCount -= 1 }
        if status != .malformed {
            lastAnswer = now
            highestHandled = max(highestHandled, number)
            budget = min(policy.retryBudgetReserve, budget + policy.retryBudgetRatio)
            // The queue answers again: the stall is over.
            nextProbe = nil
            probeInterval = policy.retryInterval
        }
        return .completed(sentOnce: pending.attempts == 1)
    }

    /// The connection to the queue was made again: everything outstanding is sent again at once.
    public mutating func reconnected(now: ContinuousClock.Instant) {
        for (number, _) in outstanding { outstanding.update(number) { $0.nextAttempt = now } }
        // The answers the new queue gives are the first: nothing it has not answered is lost yet.
        highestHandled = 0
        lastAnswer = now
        reconnectedAt = now
    }
    private var reconnectedAt: ContinuousClock.Instant?

    /// The earliest time `due(now:)` has work, or nil with nothing outstanding. O(1) unless the queue
    /// answered `unavailable` to some outstanding command: a poll loop asks at every turn.
    public mutating func nextWake(now: ContinuousClock.Instant) -> ContinuousClock.Instant? {
        guard let lowest = lowestOutstanding() else { return nil }
        if reconnectedAt != nil { return now }
        // The two times alone, not the entry (a copy of it would retain its payload at every turn).
        let (firstSent, nextAttempt) = outstanding.read(lowest) { ($0.firstSent, $0.nextAttempt) }!
        if policy.rule == .everyUnansweredCommand {
            return outstanding.reduce(firstSent + policy.giveUpAfter) { min($0, $1.value.nextAttempt) }
        }
        var earliest = min(nextProbe ?? lastAnswer + policy.retryInterval, firstSent + policy.giveUpAfter)
        if lowest < highestHandled { earliest = min(earliest, nextAttempt) }
        if refusedCount > 0 {
            for (_, pending) in outstanding where pending.refused { earliest = min(earliest, pending.nextAttempt) }
        }
        return earliest
    }

    /// The lowest outstanding number.
    public func lowestOutstanding() -> UInt64? {
        outstanding.isEmpty ? nil : outstanding.lowest
    }
    /// Outstanding commands the queue answered `unavailable`.
    private var refusedCount = 0

    /// The commands to send again now (marked sent) and the ones given up (removed).
    public mutating func due(now: ContinuousClock.Instant) -> Work {
        var work = Work()
        // Oldest first: first sends ascend with numbers.
        while let lowest = lowestOutstanding(), now - outstanding.read(lowest, \.firstSent)! >= policy.giveUpAfter {
            let pending = outstanding.remove(lowest)!
            if pending.refused { refusedCount -= 1 }
            work.expired.append((lowest, pending.attempts, now - pending.firstSent))
        }
        guard let lowest = lowestOutstanding() else { return work }
        if let reconnected = reconnectedAt {
            // One copy of each, in order: the new connection has none of them.
            reconnectedAt = nil
            for (number, pending) in outstanding where pending.nextAttempt <= reconnected {
                resend(number, now: now, into: &work)
            }
            return work
        }
        if policy.rule == .everyUnansweredCommand {
            formerRetries(now: now, into: &work)
            return work
        }
        if now - lastAnswer >= policy.retryInterval {
            // Silence: probe with the oldest command, no more often than the probe interval.
            if let probe = nextProbe, now < probe { return work }
            resend(lowest, now: now, into: &work)
            probesSent += 1
            nextProbe = now + jittered(probeInterval)
            probeInterval = min(probeInterval * 2, policy.maximumRetryInterval)
            return work
        }
        // Answers flow: send again what they show lost, and what the queue could not take, within the budget.
        let candidates = outstanding.filter { $0.number < highestHandled || $0.value.refused }.map(\.number)
        for number in candidates {
            let pending = outstanding[number]!
            guard pending.nextAttempt <= now else { continue }
            guard pending.refused || budget >= 1 else {
                retriesDeferredByBudget += 1
                // Looked at again after its interval.
                outstanding[number]!.nextAttempt = now + jittered(pending.interval)
                continue
            }
            if !pending.refused { budget -= 1 }
            resend(number, now: now, into: &work)
        }
        return work
    }

    /// `Rule.everyUnansweredCommand`.
    private mutating func formerRetries(now: ContinuousClock.Instant, into work: inout Work) {
        let stalled = now - lastAnswer >= policy.retryInterval
        let numbers = outstanding.map(\.number)
        guard let lastDue = numbers.last(where: { outstanding[$0]!.nextAttempt <= now && (stalled || $0 < highestHandled) }) else { return }
        for number in numbers where number <= lastDue {
            var pending = outstanding[number]!
            work.resend.append((number, pending.payload))
            retriesSent += 1
            if pending.refused { refusedCount -= 1 }
            pending.refused = false
            pending.attempts += 1
            pending.interval = min(pending.interval * 2, policy.maximumRetryInterval)
            pending.nextAttempt = now + pending.interval
            outstanding[number] = pending
        }
    }

    private mutating func resend(_ number: UInt64, now: ContinuousClock.Instant, into work: inout Work) {
        var pending = outstanding[number]!
        work.resend.append((number, pending.payload))
        retriesSent += 1
        if pending.refused { refusedCount -= 1 }
        pending.refused = false
        pending.attempts += 1
        pending.nextAttempt = now + jittered(pending.interval)
        pending.interval = min(pending.interval * 2, policy.maximumRetryInterval)
        outstanding[number] = pending
    }

    /// Between half and all of `interval`, so senders that met the same stall do not retry in step.
    private mutating func jittered(_ interval: Duration) -> Duration {
        let fraction = Double(random.next() >> 11) / Double(1 << 53)
        return interval * (0.5 + 0.5 * fraction)
    }
}
