import StoreKitModel

/// The sender side of the bus as a state machine with no socket and no clock: it numbers each
/// command under its origin, holds at most `window` of them unanswered, and says when to send one
/// again (`CommandRetries`). The caller passes `now` to every call and moves the bytes: the live
/// `CommandSender` over a ZeroMQ DEALER, the deterministic runtime over a simulated link. So both
/// run the same window and the same retries.
public struct CommandPipeline {
    /// How a command ended, as the pipeline sees it.
    public enum Completion: Equatable {
        /// The queue answered (accepted, rejected, duplicate or malformed).
        case answered(CommandID, AcknowledgementStatus)
        /// The queue answered "duplicate" for a command sent only once: another client used this id.
        case duplicateOfUnsentCommand(CommandID)
        /// Unanswered after every retry (`CommandRetries.Policy.giveUpAfter`).
        case gaveUp(CommandID, attempts: Int, elapsed: Duration)
    }

    /// What `due(now:)` asks the caller to do: send these again, in order, and report these.
    public struct Work {
        public var resend: [(number: UInt64, payload: [UInt8])] = []
        public var completions: [Completion] = []
    }

    /// The window a sender has unless it asks for another (`CommandSenderConfiguration.window`).
    public static let standardWindow = 4_096

    public let origin: String
    /// Most commands awaiting an answer; `submit` takes no more.
    public let window: Int
    /// Number the next command gets.
    public private(set) var nextNumber: UInt64
    /// Answers for commands no longer outstanding (answers to retries that crossed an answer).
    public private(set) var lateAnswers = 0
    /// Highest number answered other than `unavailable`.
    public private(set) var highestAnswered: UInt64 = 0
    public private(set) var retries: CommandRetries

    public init(origin: String, firstNumber: UInt64 = 1, window: Int, policy: CommandRetries.Policy, now: ContinuousClock.Instant,
                random: any RandomNumberGenerator = SystemRandomNumberGenerator()) {
        precondition(window > 0, "a sender's window holds at least one command")
        self.origin = origin
        self.window = window
        nextNumber = firstNumber
        retries = CommandRetries(policy: policy, now: now, random: random)
    }

    public var outstandingCount: Int { retries.outstandingCount }

    /// Every number below this one was answered or given up: what a sender reports with its commands
    /// (`SenderReport.lowestUnanswered`), so the queue waits for none of them.
    public mutating func lowestUnanswered() -> UInt64 {
        retries.lowestOutstanding() ?? nextNumber
    }

    /// Whether `submit` would take another command now.
    public var hasCapacity: Bool { retries.outstandingCount < window }

    /// Numbers `body` and records its first send; `encode` makes the bytes kept for retries (the
    /// deterministic runtime, which moves `Command` values, keeps none). Nil when the window is full.
    public mutating func submit(_ body: CommandBody, now: ContinuousClock.Instant,
                                encode: (Command) -> [UInt8] = { EventCodec.encode($0) }) -> (command: Command, payload: [UInt8])? {
        guard hasCapacity else { return nil }
        let command = Command(id: CommandID(origin: origin, number: nextNumber), body: body)
        let payload = encode(command)
        retries.sent(nextNumber, payload: payload, now: now)
        nextNumber += 1
        return (command, payload)
    }

    /// Takes the queue's answer to `commandID`; nil when it ends nothing (a late answer to a copy,
    /// another origin's, or `unavailable`, after which the command is sent again later).
    public mutating func answered(_ commandID: CommandID, status: AcknowledgementStatus, now: ContinuousClock.Instant) -> Completion? {
        guard commandID.origin == origin else {
            lateAnswers += 1
            return nil
        }
        switch retries.answered(commandID.number, status: status, now: now) {
        case .late:
            lateAnswers += 1
            return nil
        case .retryLater:
            return nil
        case .completed(let sentOnce):
            if status != .malformed { highestAnswered = max(highestAnswered, commandID.number) }
            // Sent once, so no earlier copy of ours can have been applied: someone else's was.
            if status == .duplicate && sentOnce { return .duplicateOfUnsentCommand(commandID) }
            return .answered(commandID, status)
        }
    }

    /// The connection to the queue was made again (the queue restarted): everything unanswered is
    /// sent again at the next `due`, in number order.
    public mutating func reconnected(now: ContinuousClock.Instant) {
        retries.reconnected(now: now)
    }

    /// The earliest time `due(now:)` has work, or nil with nothing outstanding.
    public mutating func nextWake(now: ContinuousClock.Instant) -> ContinuousClock.Instant? {
        retries.nextWake(now: now)
    }

    /// What to send again now and what to give up.
    public mutating func due(now: ContinuousClock.Instant) -> Work {
        var work = Work()
        guard let wake = retries.nextWake(now: now), wake <= now else { return work }
        let due = retries.due(now: now)
        work.resend = due.resend
        for (number, attempts, elapsed) in due.expired {
            work.completions.append(.gaveUp(CommandID(origin: origin, number: number), attempts: attempts, elapsed: elapsed))
        }
        return work
    }
}
