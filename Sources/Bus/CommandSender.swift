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
    /// How long the queue may stay silent before the sender probes it, and a command's first
    /// interval after an `unavailable` answer; doubles up to `maximumRetryInterval`. A command is
    /// not retried while the queue is still answering this sender's earlier commands (it is queued
    /// behind them); see `CommandRetries`.
    public var retryInterval: Duration = .milliseconds(500)
    public var maximumRetryInterval: Duration = .seconds(2)
    /// A command still unacknowledged this long after its first send is given up.
    public var giveUpAfter: Duration = .seconds(10)
    /// Set when the queue is a CURVE server.
    public var curve: CurveClientKeys?
    /// The newest wire version to use: with 2 the sender asks the queue (HELLO) and, if it speaks
    /// version 2, sends the commands submitted between two polls in one CMDS (docs/wire-format.md).
    public var newestWireVersion: UInt8 = BusWire.clientWireVersion

    /// The retry settings as `CommandRetries` takes them.
    public var retryPolicy: CommandRetries.Policy {
        CommandRetries.Policy(retryInterval: retryInterval, maximumRetryInterval: maximumRetryInterval, giveUpAfter: giveUpAfter)
    }

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
/// a fresh id, stays outstanding until its ACK, and is re-sent with the same id when its answers
/// show it lost (the queue dedupes by id). When it is re-sent is `CommandRetries`' decision: this
/// class only owns the socket and the clock. Many commands are in flight at once, which is what
/// makes the bus fast; the window bounds them.
///
/// Poll-loop friendly and single-threaded: `submit` and `poll` from the owning thread. Not Sendable.
public final class CommandSender {
    public let configuration: CommandSenderConfiguration
    /// Number the next command gets.
    public var nextNumber: UInt64 { pipeline.nextNumber }
    /// ACKs for commands no longer outstanding (answers to retries that crossed an ACK).
    public var lateAcknowledgements: Int { pipeline.lateAnswers + unidentifiedAcknowledgements }
    private var unidentifiedAcknowledgements = 0
    public var retriesSent: Int { pipeline.retries.retriesSent }
    /// Retries sent as probes while the queue was silent (`CommandRetries`).
    public var probesSent: Int { pipeline.retries.probesSent }
    /// Retries of lost commands held back because the retry budget was spent.
    public var retriesDeferredByBudget: Int { pipeline.retries.retriesDeferredByBudget }
    /// Refused inbound messages by reason.
    public private(set) var malformed = WireFailureCounts()
    /// Connections to the queue made again after the first (a restarted queue).
    public private(set) var reconnections = 0
    /// The wire version in use: 1 until the queue's HELLO reply offers 2 (and `newestWireVersion` allows it).
    public private(set) var wireVersion: UInt8 = 1
    /// CMDS requests sent (version 2).
    public private(set) var commandBatchesSent = 0

    private let dealer: Socket
    /// Reports each completed handshake: after the first, the queue restarted and lost what it had not answered.
    private let connections: SocketMonitor
    private var handshakes = 0
    private let poller = Poller()
    private var pipeline: CommandPipeline
    private let commandVerb = Array(BusWire.RequestVerb.command.rawValue.utf8)
    private let acknowledgementVerb = Array(BusWire.ReplyVerb.acknowledgement.rawValue.utf8)
    private let acknowledgementsVerb = Array(BusWire.ReplyVerb.acknowledgements.rawValue.utf8)
    private let helloVerb = Array(BusWire.ReplyVerb.hello.rawValue.utf8)
    /// Per partition, the last sequence this process's subscriber has delivered (`PartitionedSender.hears`):
    /// sent with each command in version 2's report frame, so the queue records what the sender had heard.
    /// Nil reports nothing heard (the queue records it as unknown).
    public var heard: (() -> [UInt64])?
    /// A HELLO awaits its reply (a version-1 queue answers it with a `malformed` ACK).
    private var helloPending = false
    /// What the sender had heard at each command of `batch`, sent as the CMDS's report frame.
    private var report = SenderReportComposer()
    /// Commands submitted since the last poll, sent as one CMDS when it comes (version 2).
    private var batch = BatchComposer()
    private var outgoing = OutgoingMessage()

    public init(context: ZeroMQContext, configuration: CommandSenderConfiguration) throws(ZeroMQError) {
        self.configuration = configuration
        pipeline = CommandPipeline(origin: configuration.origin, firstNumber: configuration.firstNumber, window: max(1, configuration.window),
                                   policy: configuration.retryPolicy, now: .now)
        dealer = try context.socket(.dealer)
        if let curve = configuration.curve { try curve.apply(to: dealer) }
        // Room for the whole window plus its retries in both directions.
        try dealer.set(.sendHighWaterMark, max(1_000, configuration.window * 4))
        try dealer.set(.receiveHighWaterMark, max(1_000, configuration.window * 4))
        // An ACK, or an ACKS of up to about 256 KiB whose last answer may overshoot it.
        dealer.receiveLimits = MessageLimits(maximumFrameCount: 6, maximumByteCount: BusWire.maximumAcknowledgementBatchBytes + (64 << 10))
        connections = try dealer.monitor([.handshakeSucceeded])
        try dealer.connect(configuration.requestsEndpoint)
        poller.register(dealer, for: .readable)
        poller.register(connections.socket, for: .readable)
        try sendHello()
    }

    /// Asks the queue which wire versions it speaks; until it answers, commands go as version 1.
    private func sendHello() throws(ZeroMQError) {
        guard configuration.newestWireVersion >= 2 else { return }
        helloPending = try dealer.send([Array(BusWire.RequestVerb.hello.rawValue.utf8)], mode: .nonBlocking)
    }

    /// Closes the socket; outstanding commands are abandoned.
    public func close() {
        connections.close()
        dealer.close()
    }

    /// The sockets to wait on, for a loop that polls several senders at once (`PartitionedSender`).
    public var pollItems: [PollItem] { [.socket(dealer, .readable), .socket(connections.socket, .readable)] }

    /// Commands awaiting an ACK.
    public var outstandingCount: Int { pipeline.outstandingCount }

    /// Whether `submit` would accept another command now.
    public var hasCapacity: Bool { pipeline.hasCapacity }

    /// Assigns the next id to `body`, sends it and keeps it outstanding until its ACK.
    /// Throws `.windowFull` instead of blocking when the window is full.
    @discardableResult
    public func submit(_ body: CommandBody) throws(CommandSenderError) -> CommandID {
        guard let (command, payload) = pipeline.submit(body, now: .now) else { throw .windowFull(window: configuration.window) }
        do {
            try send(payload)
        } catch {
            throw .transport(error)
        }
        return command.id
    }

    /// Sends a command now (version 1) or adds it to the batch the next poll sends (version 2). A
    /// refused send (no connection yet, or full) is simply retried on schedule.
    private func send(_ payload: [UInt8]) throws(ZeroMQError) {
        let entryBytes = BusWire.batchEntryByteCount(payload)
        guard wireVersion >= 2, entryBytes + 16 <= BusWire.maximumCommandBatchBytes else {
            // The batch first: one sender's commands reach the queue in number order.
            try sendBatch()
            try dealer.send([commandVerb, payload], mode: .nonBlocking)
            return
        }
        // Heard from more partitions than a report holds: reported as unknown.
        var heardNow = heard?() ?? []
        if heardNow.count * 10 + 32 > BusWire.maximumSenderReportBytes { heardNow = [] }
        if batch.count >= BusWire.maximumCommandsPerBatch || batch.byteCount + entryBytes + 16 > BusWire.maximumCommandBatchBytes
            || report.byteCount + report.addedBytes(heardNow) + 32 > BusWire.maximumSenderReportBytes {
            try sendBatch()
        }
        batch.add { BusWire.appendBatchEntry(payload, to: &$0) }
        report.add(heardNow)
    }

    /// Sends the commands gathered since the last poll as one CMDS.
    private func sendBatch() throws(ZeroMQError) {
        guard !batch.isEmpty else { return }
        outgoing.removeAll()
        outgoing.appendFrame(BusWire.RequestVerb.commands.rawValue.utf8)
        batch.finish(into: &outgoing)
        report.finish(lowestUnanswered: pipeline.lowestUnanswered(), into: &outgoing)
        if try dealer.send(outgoing, mode: .nonBlocking) { commandBatchesSent += 1 }
    }

    /// Sends what was submitted since the last poll (version 2 gathers it in one CMDS), waits up to
    /// `timeout` for ACKs, re-sends what `CommandRetries` finds due and gives up on expired commands;
    /// returns the commands that completed (possibly none).
    public func poll(timeout: Duration) throws(ZeroMQError) -> [CommandCompletion] {
        var completions: [CommandCompletion] = []
        let deadline = ContinuousClock.now + timeout
        try sendBatch()
        while true {
            try noteReconnections()
            try drainAcknowledgements(into: &completions)
            try retryDue(into: &completions)
            let now = ContinuousClock.now
            if !completions.isEmpty || now >= deadline { return completions }
            var wait = deadline - now
            if let wake = pipeline.nextWake(now: now) { wait = min(wait, max(.milliseconds(1), wake - now)) }
            try poller.poll(timeout: wait)
        }
    }

    private func noteReconnections() throws(ZeroMQError) {
        while let event = try connections.receive(timeout: .zero) {
            guard event.event == .handshakeSucceeded else { continue }
            handshakes += 1
            if handshakes > 1 {
                reconnections += 1
                pipeline.reconnected(now: .now)
                // The queue that answers now may be another build: version 1 until it says otherwise.
                wireVersion = 1
                try sendHello()
            }
        }
    }

    /// What one reply to this sender says.
    private enum Reply {
        case acknowledgements([CommandAcknowledgement])
        case versions([UInt8])
    }

    private func drainAcknowledgements(into completions: inout [CommandCompletion]) throws(ZeroMQError) {
        while true {
            // Decoded where libzmq received it: no array per frame.
            let decoded: Result<Reply, WireFailure>
            do {
                let (acknowledgementVerb, acknowledgementsVerb, helloVerb) = (acknowledgementVerb, acknowledgementsVerb, helloVerb)
                guard let received = try dealer.receiveMessage(timeout: .zero, { message -> Result<Reply, WireFailure> in
                    Result { () throws(WireFailure) -> Reply in
                        guard message.count > 0 else { throw WireFailure(.unknownVerb, "reply has no frames") }
                        if message[0].elementsEqual(acknowledgementVerb) {
                            return .acknowledgements([try CommandAcknowledgement.decode(frameCount: message.count) { message[$0] }])
                        }
                        guard message.count == 2 else { throw WireFailure(.unknownVerb, "reply is not an ACK, ACKS or HELLO") }
                        if message[0].elementsEqual(acknowledgementsVerb) { return .acknowledgements(try BusWire.decodeAcknowledgements(message[1])) }
                        if message[0].elementsEqual(helloVerb) { return .versions(try BusWire.decodeHelloVersions(message[1])) }
                        throw WireFailure(.unknownVerb, "reply is not an ACK, ACKS or HELLO")
                    }
                }) else { return }
                decoded = received
            } catch {
                guard case .messageTooLarge = error.kind else { throw error }
                malformed.record(.oversized)
                continue
            }
            switch decoded {
            case .success(.acknowledgements(let acknowledgements)):
                // One clock read per message, not per acknowledgement: an ACKS carries a round's worth.
                let now = ContinuousClock.now
                for acknowledgement in acknowledgements { take(acknowledgement, now: now, into: &completions) }
            case .success(.versions(let versions)):
                helloPending = false
                if configuration.newestWireVersion >= 2, versions.contains(2) { wireVersion = 2 }
            case .failure(let failure):
                malformed.record(failure.reason)
            }
        }
    }

    private func take(_ acknowledgement: CommandAcknowledgement, now: ContinuousClock.Instant, into completions: inout [CommandCompletion]) {
        if helloPending, acknowledgement.commandID == nil, acknowledgement.status == .malformed,
           acknowledgement.message.hasPrefix(WireFailureReason.unknownVerb.rawValue) {
            // A version-1 queue does not know HELLO: this sender goes on with version 1.
            helloPending = false
            return
        }
        guard let commandID = acknowledgement.commandID else {
            unidentifiedAcknowledgements += 1
            return
        }
        switch pipeline.answered(commandID, status: acknowledgement.status, now: now) {
        case nil, .gaveUp?:
            return
        case .duplicateOfUnsentCommand?:
            completions.append(.failed(commandID, .duplicateOfUnsentCommand(
                commandID: commandID, endpoint: configuration.requestsEndpoint)))
        case .answered?:
            completions.append(.acknowledged(acknowledgement))
        }
    }

    private func retryDue(into completions: inout [CommandCompletion]) throws(ZeroMQError) {
        let work = pipeline.due(now: .now)
        for (_, payload) in work.resend { try send(payload) }
        try sendBatch()
        for case .gaveUp(let commandID, let attempts, let elapsed) in work.completions {
            completions.append(.failed(commandID, .notAcknowledged(
                commandID: commandID, endpoint: configuration.requestsEndpoint, attempts: attempts, elapsed: elapsed)))
        }
    }
}
