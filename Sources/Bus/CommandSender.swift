import StoreKitModel
import ZeroMQ

/// Settings of a `CommandSender`.
public struct CommandSenderConfiguration: Sendable {
    /// The origin of every command id. The queue applies each id once, so a sender that
    /// restarts must use a new origin or continue numbering after its last id (`firstNumber`).
    public var origin: String
    /// The queue's ROUTER endpoint.
    public var requestsEndpoint: String
    /// Number of the first command.
    public var firstNumber: UInt64 = 1
    /// Most commands awaiting an ACK; `submit` refuses more (back-pressure).
    public var window: Int = 4_096
    /// First retry after this long without an ACK; doubles per attempt up to `maximumRetryInterval`.
    /// A command is not retried while the queue is still acknowledging this sender's earlier
    /// commands (it is queued behind them); see `CommandSender`.
    public var retryInterval: Duration = .milliseconds(500)
    public var maximumRetryInterval: Duration = .seconds(2)
    /// A command still unacknowledged this long after its first send is given up.
    public var giveUpAfter: Duration = .seconds(10)
    /// Set when the queue is a CURVE server.
    public var curve: CurveClientKeys?

    public init(origin: String, requestsEndpoint: String) {
        self.origin = origin
        self.requestsEndpoint = requestsEndpoint
    }
}

/// Why a command could not be submitted or completed.
public enum CommandSenderError: Error, Sendable, Equatable, CustomStringConvertible {
    /// `window` commands await ACKs; poll for completions, then submit again.
    case windowFull(window: Int)
    /// No ACK after every retry.
    case notAcknowledged(commandID: CommandID, endpoint: String, attempts: Int, elapsed: Duration)
    /// The queue answered "duplicate" for a command this sender sent only once: another client
    /// used this sender's id (a forged or colliding origin), so the log holds a command this
    /// sender never sent. Not retryable: the run can no longer be trusted.
    case duplicateOfUnsentCommand(commandID: CommandID, endpoint: String)
    /// The socket failed.
    case transport(ZeroMQError)

    public var description: String {
        switch self {
        case .windowFull(let window):
            "\(window) commands await acknowledgement; poll for completions before submitting more"
        case .notAcknowledged(let commandID, let endpoint, let attempts, let elapsed):
            "the queue at \(endpoint) did not acknowledge command \(commandID) after \(attempts) attempts over "
                + "\(Self.seconds(elapsed)) s; is it running?"
        case .duplicateOfUnsentCommand(let commandID, let endpoint):
            "the queue at \(endpoint) answered command \(commandID) \"duplicate\" although this sender sent it only once: "
                + "another client sent a command under this sender's id (a forged or colliding origin), so the log holds "
                + "a command this sender never sent; the run cannot be trusted (check who can reach the queue's requests endpoint)"
        case .transport(let error):
            "sending a command failed: \(error)"
        }
    }

    private static func seconds(_ duration: Duration) -> String {
        let milliseconds = duration.components.seconds * 1_000 + duration.components.attoseconds / 1_000_000_000_000_000
        return "\(milliseconds / 1_000).\(String(milliseconds % 1_000 / 100))"
    }
}

/// The end of one submitted command.
public enum CommandCompletion: Sendable, Equatable {
    /// The queue answered (accepted, rejected, duplicate or malformed).
    case acknowledged(CommandAcknowledgement)
    /// Every retry went unanswered, or the answer showed that another client used this id.
    case failed(CommandID, CommandSenderError)

    public var commandID: CommandID? {
        switch self {
        case .acknowledged(let acknowledgement): acknowledgement.commandID
        case .failed(let commandID, _): commandID
        }
    }
}

/// Sends commands to the queue with at-least-once delivery and exactly-once effect: each gets
/// a fresh id, stays outstanding until its ACK, and is re-sent with the same id on timeout
/// (the queue dedupes by id). Many commands are in flight at once, which is what makes the
/// bus fast; the window bounds them.
///
/// Poll-loop friendly and single-threaded: `submit` and `poll` from the owning thread. Not Sendable.
public final class CommandSender {
    public let configuration: CommandSenderConfiguration
    /// Number the next command gets.
    public private(set) var nextNumber: UInt64
    /// ACKs for commands no longer outstanding (answers to retries that crossed an ACK).
    public private(set) var lateAcknowledgements = 0
    public private(set) var retriesSent = 0
    /// Refused inbound messages by reason.
    public private(set) var malformed = WireFailureCounts()

    private let dealer: Socket
    private let poller = Poller()
    private var outstanding: [UInt64: Outstanding] = [:]
    private var nextRetryScan: ContinuousClock.Instant = .now
    /// When the queue last answered one of this sender's commands as handled (accepted, rejected or
    /// duplicate), and the highest number so answered: the queue handles a sender's commands in number
    /// order and answers them in that order, so an older command still unanswered while a newer one
    /// was answered is lost, and one newer than every answer is waiting its turn while answers come.
    private var lastHandledAnswer: ContinuousClock.Instant = .now
    private var highestHandled: UInt64 = 0
    private let commandVerb = Array(BusWire.RequestVerb.command.rawValue.utf8)
    private let acknowledgementVerb = Array(BusWire.ReplyVerb.acknowledgement.rawValue.utf8)

    private struct Outstanding {
        var payload: [UInt8]
        var firstSent: ContinuousClock.Instant
        var nextAttempt: ContinuousClock.Instant
        var interval: Duration
        var attempts: Int
        /// The queue answered `unavailable`: nothing was recorded, so it is retried when due whatever
        /// else is answered meanwhile.
        var refused = false
    }

    public init(context: ZeroMQContext, configuration: CommandSenderConfiguration) throws(ZeroMQError) {
        self.configuration = configuration
        nextNumber = configuration.firstNumber
        dealer = try context.socket(.dealer)
        if let curve = configuration.curve { try curve.apply(to: dealer) }
        // Room for the whole window plus its retries in both directions.
        try dealer.set(.sendHighWaterMark, max(1_000, configuration.window * 4))
        try dealer.set(.receiveHighWaterMark, max(1_000, configuration.window * 4))
        dealer.receiveLimits = MessageLimits(maximumFrameCount: 6, maximumByteCount: 64 << 10)
        try dealer.connect(configuration.requestsEndpoint)
        poller.register(dealer, for: .readable)
    }

    /// Closes the socket; outstanding commands are abandoned.
    public func close() { dealer.close() }

    /// The socket to wait on, for a loop that polls several senders at once (`PartitionedSender`).
    public var pollItems: [PollItem] { [.socket(dealer, .readable)] }

    /// Commands awaiting an ACK.
    public var outstandingCount: Int { outstanding.count }

    /// Whether `submit` would accept another command now.
    public var hasCapacity: Bool { outstanding.count < configuration.window }

    /// Assigns the next id to `body`, sends it and keeps it outstanding until its ACK.
    /// Throws `.windowFull` instead of blocking when the window is full.
    @discardableResult
    public func submit(_ body: CommandBody) throws(CommandSenderError) -> CommandID {
        guard hasCapacity else { throw .windowFull(window: configuration.window) }
        let command = Command(id: CommandID(origin: configuration.origin, number: nextNumber), body: body)
        let payload = EventCodec.encode(command)
        let now = ContinuousClock.now
        do {
            // A refused send (no connection yet, or full) is simply retried on schedule.
            try dealer.send([commandVerb, payload], mode: .nonBlocking)
        } catch {
            throw .transport(error)
        }
        outstanding[nextNumber] = Outstanding(
            payload: payload, firstSent: now, nextAttempt: now + configuration.retryInterval,
            interval: configuration.retryInterval, attempts: 1)
        nextRetryScan = min(nextRetryScan, now + configuration.retryInterval)
        nextNumber += 1
        return command.id
    }

    /// Waits up to `timeout` for ACKs, re-sends overdue commands and gives up on expired ones;
    /// returns the commands that completed (possibly none).
    public func poll(timeout: Duration) throws(ZeroMQError) -> [CommandCompletion] {
        var completions: [CommandCompletion] = []
        let deadline = ContinuousClock.now + timeout
        while true {
            try drainAcknowledgements(into: &completions)
            try retryOverdue(into: &completions)
            let now = ContinuousClock.now
            if !completions.isEmpty || now >= deadline { return completions }
            var wait = deadline - now
            if !outstanding.isEmpty { wait = min(wait, max(.milliseconds(1), nextRetryScan - now)) }
            try poller.poll(timeout: wait)
        }
    }

    private func drainAcknowledgements(into completions: inout [CommandCompletion]) throws(ZeroMQError) {
        while true {
            // Decoded where libzmq received it: no array per frame.
            let decoded: Result<CommandAcknowledgement, WireFailure>
            do {
                let verb = acknowledgementVerb
                guard let received = try dealer.receiveMessage(timeout: .zero, { message -> Result<CommandAcknowledgement, WireFailure> in
                    guard message.count > 0, message[0].elementsEqual(verb) else {
                        return .failure(WireFailure(.unknownVerb, "reply is not an ACK"))
                    }
                    return Result { () throws(WireFailure) in
                        try CommandAcknowledgement.decode(frameCount: message.count) { message[$0] }
                    }
                }) else { return }
                decoded = received
            } catch {
                guard case .messageTooLarge = error.kind else { throw error }
                malformed.record(.oversized)
                continue
            }
            let acknowledgement: CommandAcknowledgement
            switch decoded {
            case .success(let value): acknowledgement = value
            case .failure(let failure):
                malformed.record(failure.reason)
                continue
            }
            guard let commandID = acknowledgement.commandID, commandID.origin == configuration.origin,
                var pending = outstanding[commandID.number]
            else {
                lateAcknowledgements += 1
                continue
            }
            if acknowledgement.status == .unavailable {
                // The queue is alive but could not take it now: retry on the usual schedule.
                pending.nextAttempt = min(pending.nextAttempt, .now + pending.interval)
                pending.refused = true
                outstanding[commandID.number] = pending
                nextRetryScan = min(nextRetryScan, pending.nextAttempt)
                continue
            }
            outstanding[commandID.number] = nil
            if acknowledgement.status != .malformed {
                lastHandledAnswer = .now
                highestHandled = max(highestHandled, commandID.number)
            }
            if acknowledgement.status == .duplicate && pending.attempts == 1 {
                // Sent once, so no earlier copy of ours can have been applied: someone else's was.
                completions.append(.failed(commandID, .duplicateOfUnsentCommand(
                    commandID: commandID, endpoint: configuration.requestsEndpoint)))
                continue
            }
            completions.append(.acknowledged(acknowledgement))
        }
    }

    private func retryOverdue(into completions: inout [CommandCompletion]) throws(ZeroMQError) {
        let now = ContinuousClock.now
        guard now >= nextRetryScan, !outstanding.isEmpty else { return }
        // The next scan is due when the earliest outstanding attempt is (at least 5 ms on),
        // so a full window of commands that are acknowledged in time is never scanned.
        var earliest = now + configuration.maximumRetryInterval
        var expired: [UInt64] = []
        // A command waiting behind older ones that the queue is still answering is not lost, only
        // queued: a window of thousands of commands can take longer than a retry interval to go
        // through, and re-sending it then would feed the queue duplicates of all of it, slowing it
        // further (congestion collapse). It is due only once no answer has come for a retry
        // interval (the queue stalled, restarted or lost it), or when the queue answered a newer
        // command (this one or its answer was lost), or after the queue refused it.
        let stalled = now - lastHandledAnswer >= configuration.retryInterval
        func isDue(_ number: UInt64, _ pending: Outstanding) -> Bool {
            pending.nextAttempt <= now && (stalled || pending.refused || number < highestHandled || now - pending.firstSent >= configuration.giveUpAfter)
        }
        // A retry means the queue may have lost what it was sent (a restart). Commands of one sender
        // must reach it in order (a payment after its device's registration), so every unacknowledged
        // command up to the last one due is sent again, in number order; duplicates are harmless.
        let lastDue = outstanding.lazy.filter { isDue($0.key, $0.value) }.map(\.key).max() ?? 0
        if !stalled, outstanding.values.contains(where: { $0.nextAttempt <= now }) {
            // Held back while answers come: look again when they would have stopped for an interval.
            earliest = min(earliest, lastHandledAnswer + configuration.retryInterval)
        }
        for number in outstanding.keys.sorted() {
            let pending = outstanding[number]!
            guard number <= lastDue else {
                // One held back (its time has come) is looked at again with the answers, above.
                if pending.nextAttempt > now { earliest = min(earliest, pending.nextAttempt) }
                continue
            }
            if now - pending.firstSent >= configuration.giveUpAfter {
                expired.append(number)
                continue
            }
            var updated = pending
            try dealer.send([commandVerb, pending.payload], mode: .nonBlocking)
            retriesSent += 1
            updated.refused = false
            updated.attempts += 1
            updated.interval = min(updated.interval * 2, configuration.maximumRetryInterval)
            updated.nextAttempt = min(now + updated.interval, pending.firstSent + configuration.giveUpAfter)
            earliest = min(earliest, updated.nextAttempt)
            outstanding[number] = updated
        }
        nextRetryScan = max(earliest, now + .milliseconds(5))
        for number in expired.sorted() {
            guard let pending = outstanding.removeValue(forKey: number) else { continue }
            let commandID = CommandID(origin: configuration.origin, number: number)
            completions.append(.failed(commandID, .notAcknowledged(
                commandID: commandID, endpoint: configuration.requestsEndpoint, attempts: pending.attempts,
                elapsed: now - pending.firstSent)))
        }
    }
}
