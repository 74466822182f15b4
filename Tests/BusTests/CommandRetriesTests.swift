import Bus
import StoreKitModel
import Testing

/// The sender's retry logic in simulated time: no socket, no clock of its own (issue 30, "no
/// metastable failure"). Each test passes `now` as `start + offset`, so nothing depends on how
/// fast the machine runs.
@Suite struct CommandRetriesTests {
    /// Always the middle of the jitter range, so the schedule is exact.
    struct MiddleRandom: RandomNumberGenerator {
        mutating func next() -> UInt64 { 1 << 63 }
    }

    static let policy = CommandRetries.Policy(retryInterval: .milliseconds(500), maximumRetryInterval: .seconds(2), giveUpAfter: .seconds(10))
    let start = ContinuousClock.now

    func at(_ milliseconds: Int) -> ContinuousClock.Instant { start + .milliseconds(milliseconds) }

    func retries() -> CommandRetries { CommandRetries(policy: Self.policy, now: start, random: MiddleRandom()) }

    /// A queue of one connection in simulated time: it takes commands in order and answers each
    /// `serviceMicroseconds` after the previous one, except while stalled; it counts copies.
    struct SimulatedQueue {
        var serviceMicroseconds: Int
        var stalledFromMilliseconds: Int
        var stalledUntilMilliseconds: Int
        /// Copies waiting in the connection, with when they were sent (µs).
        var connection: [(number: UInt64, sentMicroseconds: Int)] = []
        var head = 0
        /// Copies the connection holds before a send is dropped: a sender's DEALER high-water mark (4 × its window).
        var capacity = 65_536

        mutating func send(_ number: UInt64, at microseconds: Int) {
            guard connection.count - head < capacity else { return }
            connection.append((number, microseconds))
        }
        var nextFreeMicroseconds = 0
        var applied = Set<UInt64>()
        var duplicates = 0

        /// The commands answered by `nowMicroseconds`, in order.
        mutating func answers(through nowMicroseconds: Int) -> [(number: UInt64, atMicroseconds: Int)] {
            var answered: [(UInt64, Int)] = []
            while head < connection.count {
                let first = connection[head]
                var begin = max(nextFreeMicroseconds, first.sentMicroseconds)
                if begin >= stalledFromMilliseconds * 1_000 && begin < stalledUntilMilliseconds * 1_000 { begin = stalledUntilMilliseconds * 1_000 }
                let done = begin + serviceMicroseconds
                guard done <= nowMicroseconds else { break }
                head += 1
                nextFreeMicroseconds = done
                if !applied.insert(first.number).inserted { duplicates += 1 }
                answered.append((first.number, done))
            }
            return answered
        }
    }

    /// Open load of `rate` commands per second for `seconds`, the queue stalled from 8 s to 10 s;
    /// returns the duplicates and the median latency (first send to answer) per second of start.
    func stormRun(rate: Int, seconds: Int) -> (duplicates: Int, commands: Int, medianMillisecondsBySecond: [Int: Double]) {
        var retries = Current(retries: retries())
        return stormRun(rate: rate, seconds: seconds, policy: &retries)
    }

    /// What the simulation needs of a retry policy.
    protocol Policy {
        mutating func sent(_ number: UInt64, now: ContinuousClock.Instant)
        /// True when the answer completed an outstanding command.
        mutating func answered(_ number: UInt64, now: ContinuousClock.Instant) -> Bool
        mutating func due(now: ContinuousClock.Instant) -> [UInt64]
    }

    struct Current: Policy {
        var retries: CommandRetries
        mutating func sent(_ number: UInt64, now: ContinuousClock.Instant) { retries.sent(number, payload: [], now: now) }
        mutating func answered(_ number: UInt64, now: ContinuousClock.Instant) -> Bool {
            if case .completed = retries.answered(number, status: .accepted, now: now) { return true }
            return false
        }
        mutating func due(now: ContinuousClock.Instant) -> [UInt64] {
            // As `CommandSender` does: only when something is due.
            guard let wake = retries.nextWake(now: now), wake <= now else { return [] }
            let work = retries.due(now: now)
            #expect(work.expired.isEmpty)
            return work.resend.map(\.number)
        }
    }

    /// The sender's former rule, kept here to show the storm it made: once no answer had come for a
    /// retry interval, every unanswered command up to the last one due was sent again, at each scan.
    struct Former: Policy {
        struct Pending { var firstSent: ContinuousClock.Instant; var nextAttempt: ContinuousClock.Instant; var interval: Duration }
        /// By number − 1 (numbers are 1, 2, 3, …); nil once answered or given up.
        var outstanding: [Pending?] = []
        var lowest = 0
        var lastAnswer: ContinuousClock.Instant
        var highestHandled: UInt64 = 0
        var nextScan: ContinuousClock.Instant
        let policy = CommandRetriesTests.policy

        mutating func sent(_ number: UInt64, now: ContinuousClock.Instant) {
            outstanding.append(Pending(firstSent: now, nextAttempt: now + policy.retryInterval, interval: policy.retryInterval))
        }
        mutating func answered(_ number: UInt64, now: ContinuousClock.Instant) -> Bool {
            let index = Int(number) - 1
            guard outstanding[index] != nil else { return false }
            outstanding[index] = nil
            lastAnswer = now
            highestHandled = max(highestHandled, number)
            return true
        }
        mutating func due(now: ContinuousClock.Instant) -> [UInt64] {
            guard now >= nextScan else { return [] }
            nextScan = now + .milliseconds(5)
            while lowest < outstanding.count && outstanding[lowest] == nil { lowest += 1 }
            let stalled = now - lastAnswer >= policy.retryInterval
            var lastDue = -1
            for index in stride(from: outstanding.count - 1, through: lowest, by: -1) {
                guard let pending = outstanding[index], pending.nextAttempt <= now, stalled || UInt64(index + 1) < highestHandled else { continue }
                lastDue = index
                break
            }
            guard lastDue >= lowest else { return [] }
            var resend: [UInt64] = []
            for index in lowest...lastDue {
                guard var pending = outstanding[index] else { continue }
                if now - pending.firstSent >= policy.giveUpAfter {
                    outstanding[index] = nil
                    continue
                }
                resend.append(UInt64(index + 1))
                pending.interval = min(pending.interval * 2, policy.maximumRetryInterval)
                pending.nextAttempt = now + pending.interval
                outstanding[index] = pending
            }
            return resend
        }
    }

    func stormRun<P: Policy>(rate: Int, seconds: Int, policy retries: inout P) -> (duplicates: Int, commands: Int, medianMillisecondsBySecond: [Int: Double]) {
        // 250 µs per command: the queue has four times the capacity the load needs.
        var queue = SimulatedQueue(serviceMicroseconds: 1_000_000 / rate / 4, stalledFromMilliseconds: 8_000, stalledUntilMilliseconds: 10_000)
        var sentAt: [UInt64: Int] = [:]
        var latencies: [Int: [Int]] = [:]
        var number: UInt64 = 0
        let stepMicroseconds = 1_000
        let endMicroseconds = (seconds + 5) * 1_000_000
        var now = 0
        while now <= endMicroseconds {
            // Arrivals in this millisecond.
            if now < seconds * 1_000_000 {
                let due = (now + stepMicroseconds) * rate / 1_000_000 - now * rate / 1_000_000
                for _ in 0..<due {
                    number += 1
                    retries.sent(number, now: start + .microseconds(now))
                    queue.send(number, at: now)
                    sentAt[number] = now
                }
            }
            for (answered, when) in queue.answers(through: now) {
                if retries.answered(answered, now: start + .microseconds(when)), let sent = sentAt[answered] {
                    latencies[sent / 1_000_000, default: []].append(when - sent)
                }
            }
            for resent in retries.due(now: start + .microseconds(now)) { queue.send(resent, at: now) }
            now += stepMicroseconds
        }
        let medians = latencies.mapValues { values in Double(values.sorted()[values.count / 2]) / 1_000 }
        return (queue.duplicates, Int(number), medians)
    }

    @Test("issue 30: a queue stalled for 2 s under open load recovers: latency returns to its level before the stall and duplicates stay under 2 %")
    func stallUnderOpenLoadRecovers() {
        let run = stormRun(rate: 1_000, seconds: 20)
        let before = run.medianMillisecondsBySecond[5]!
        let after = (14...18).map { run.medianMillisecondsBySecond[$0]! }.max()!
        // What the queue saw during the stall is a few probes, not a copy of every command per retry
        // interval: after the stall it works off the 2,000 commands that waited, and nothing more.
        #expect(after <= max(3 * before, 50), "median before \(before) ms, after \(after) ms")
        #expect(run.duplicates * 100 <= run.commands * 2, "\(run.duplicates) duplicates of \(run.commands) commands")
    }

    @Test("the former rule (every unanswered command up to the last one due, at each scan) turns the same 2 s stall into a lasting overload")
    func formerRuleStorms() {
        var former = Former(lastAnswer: start, nextScan: start)
        let run = stormRun(rate: 1_000, seconds: 20, policy: &former)
        let before = run.medianMillisecondsBySecond[5]!
        // Seconds with no command answered at all count as never.
        let after = (14...18).map { run.medianMillisecondsBySecond[$0] ?? .infinity }.max()!
        #expect(after > max(3 * before, 50), "median before \(before) ms, after \(after) ms")
        #expect(run.duplicates * 100 > run.commands * 2, "\(run.duplicates) duplicates of \(run.commands) commands")
    }

    @Test("while the queue is silent only the oldest command is sent again, at doubling intervals")
    func silenceProbesOldest() {
        var retries = retries()
        for number in 1...100 as ClosedRange<UInt64> { retries.sent(number, payload: [UInt8(number)], now: at(0)) }
        var resent: [(Int, UInt64)] = []
        for millisecond in stride(from: 0, through: 4_000, by: 5) {
            for (number, _) in retries.due(now: at(millisecond)).resend { resent.append((millisecond, number)) }
        }
        #expect(resent.map(\.1) == [1, 1, 1, 1], "\(resent)")
        // Probes at 500 ms, then after 3/4 of 500, 1,000 and 2,000 ms (the middle of the jitter range).
        #expect(resent.map(\.0) == [500, 875, 1_625, 3_125], "\(resent)")
        #expect(retries.probesSent == 4)
    }

    @Test("after a reconnection every outstanding command is sent again once, in number order")
    func reconnectionResendsAllInOrder() {
        var retries = retries()
        for number in 1...5 as ClosedRange<UInt64> { retries.sent(number, payload: [], now: at(number == 1 ? 0 : 100)) }
        #expect(retries.answered(2, status: .accepted, now: at(150)) == .completed(sentOnce: true))
        retries.reconnected(now: at(200))
        #expect(retries.nextWake(now: at(200)) == at(200))
        #expect(retries.due(now: at(200)).resend.map(\.number) == [1, 3, 4, 5])
        // Once only: the next ones wait for answers or silence.
        #expect(retries.due(now: at(201)).resend.isEmpty)
    }

    @Test("a command whose answer was lost is sent again once newer ones are answered, after its interval")
    func lostInTheMiddle() {
        var retries = retries()
        for number in 1...3 as ClosedRange<UInt64> { retries.sent(number, payload: [], now: at(0)) }
        _ = retries.answered(1, status: .accepted, now: at(10))
        _ = retries.answered(3, status: .accepted, now: at(20))
        #expect(retries.due(now: at(100)).resend.isEmpty, "not before its own interval")
        // Answers keep coming from other commands, so the queue is not silent.
        retries.sent(4, payload: [], now: at(400))
        _ = retries.answered(4, status: .accepted, now: at(450))
        #expect(retries.due(now: at(500)).resend.map(\.number) == [2])
    }

    @Test("a command answered unavailable is sent again after its interval, and an answer to a copy is late")
    func unavailableRetried() {
        var retries = retries()
        retries.sent(1, payload: [], now: at(0))
        retries.sent(2, payload: [], now: at(0))
        #expect(retries.answered(2, status: .unavailable, now: at(5)) == .retryLater)
        _ = retries.answered(1, status: .accepted, now: at(10))
        #expect(retries.due(now: at(400)).resend.isEmpty)
        #expect(retries.due(now: at(505)).resend.map(\.number) == [2])
        #expect(retries.answered(2, status: .accepted, now: at(510)) == .completed(sentOnce: false))
        #expect(retries.answered(2, status: .duplicate, now: at(511)) == .late)
    }

    @Test("a command unanswered for giveUpAfter is given up")
    func givenUp() {
        var retries = retries()
        retries.sent(1, payload: [], now: at(0))
        let work = retries.due(now: at(10_000))
        #expect(work.expired.map(\.number) == [1])
        #expect(retries.outstandingCount == 0)
    }
}
