import Bus
import StoreKitModel
import StoreKitRuntime
import Testing

/// The live queue's per-sender order with no patience timer (issue 30 item 1, issue 32 item 1): the
/// gate waits only for numbers that are still coming. A sender (`CommandPipeline`) and a queue
/// (`QueueAdmission` and `QueueEngine` over one log) run as state machines with an injected clock;
/// the test moves each command between them by hand, so it can lose, refuse and reorder them.
@Suite struct SenderOrderGateTests {
    struct MiddleRandom: RandomNumberGenerator {
        mutating func next() -> UInt64 { 1 << 63 }
    }

    /// One sender and one queue whose log survives a restart.
    struct Rig {
        let start = ContinuousClock.now
        var elapsed: Duration = .zero
        var pipeline: CommandPipeline
        let storage = MemoryLogStorage()
        var engine: QueueEngine
        var admission = Rig.admission()
        /// The numbers the queue handled (decided, or marked as refused), in the order it handled them.
        var handled: [UInt64] = []
        /// Copies answered "unavailable" because they skipped ahead.
        var waited: [UInt64] = []

        init() throws {
            pipeline = CommandPipeline(origin: "app.1", window: 64, policy: .standard, now: start, random: MiddleRandom())
            engine = try QueueEngine(catalog: .sample, storage: storage)
        }

        /// The sender's key may act for device d1 only, so a command for d2 is refused before its decision.
        static func admission() -> QueueAdmission {
            QueueAdmission(permissions: ["app-key": ClientPermissions(roles: [.app], devices: ["d1"])])
        }

        var now: ContinuousClock.Instant { start + elapsed }

        /// What the sender reports with a copy it sends now.
        mutating func report() -> SenderReport {
            SenderReport(lowestUnanswered: pipeline.lowestUnanswered())
        }

        mutating func submit(_ body: CommandBody) throws -> Command {
            let submitted = pipeline.submit(body, now: now)
            return try #require(submitted).command
        }

        /// The queue takes one copy, as `QueueEndpoint` and `QueueProcess` do, and the sender gets the answer.
        @discardableResult
        mutating func deliver(_ command: Command, report: SenderReport) throws -> AcknowledgementStatus {
            let timestamp = Int64(elapsed.components.seconds) * 1_000_000_000
            let status: AcknowledgementStatus
            if let refusal = admission.atEndpoint(command, sender: "app-key", unpublishedRecords: 0)
                ?? admission.beforeEngine(command, report: report, projection: engine.projection) {
                if refusal.reason == .outOfOrder {
                    waited.append(command.id.number)
                } else {
                    try engine.noteRefused(command.id, heard: report.heard, timestamp: timestamp)
                    handled.append(command.id.number)
                }
                status = refusal.status
            } else {
                let outcome = try engine.handle(command, timestamp: timestamp, heard: report.heard)
                switch outcome.decision {
                case .accepted: status = .accepted
                case .rejected: status = .rejected
                case .duplicate: status = .duplicate
                }
                if status != .duplicate { handled.append(command.id.number) }
            }
            _ = pipeline.answered(command.id, status: status, now: now)
            return status
        }

        /// The queue process starts again on the same log: its projection is read back from it.
        mutating func restartQueue() throws {
            engine = try QueueEngine(catalog: .sample, storage: storage)
            admission = Self.admission()
            pipeline.reconnected(now: now)
        }

        /// Moves the clock on and delivers (or, with `lose`, drops) what the sender sends again then;
        /// returns the numbers given up.
        mutating func advance(to offset: Duration, lose: Bool = false) throws -> [UInt64] {
            elapsed = offset
            let work = pipeline.due(now: now)
            for (_, payload) in work.resend where !lose {
                try deliver(try EventCodec.decodeCommand(payload), report: report())
            }
            return work.completions.compactMap {
                if case .gaveUp(let id, _, _) = $0 { return id.number }
                return nil
            }
        }
    }

    @Test("a number refused before its decision leaves a mark: a restarted queue applies the next command at once, even from a sender that reports nothing")
    func refusedNumberDoesNotStallAfterRestart() throws {
        var rig = try Rig()
        let commands = [
            try rig.submit(.registerDevice(device: "d1", account: "a1")),
            try rig.submit(.launchApp(device: "d1")),
            try rig.submit(.launchApp(device: "d1")),  // a no-op: its input alone
            try rig.submit(.launchApp(device: "d2")),  // outside the key's devices: refused, marked
        ]
        for command in commands { try rig.deliver(command, report: rig.report()) }
        #expect(rig.handled == [1, 2, 3, 4])
        try rig.restartQueue()
        #expect(rig.engine.projection.recentCommands.highest(of: "app.1") == 4, "the mark of number 4 is read back from the log")
        let next = try rig.submit(.terminateApp(device: "d1"))
        // As a Python client sends it: no report, so only the log can tell that number 4 is not coming.
        let status = try rig.deliver(next, report: .unknown)
        #expect(status == .accepted)
        #expect(rig.waited.isEmpty)
    }

    @Test("a lost number is waited for until its retry comes, then both apply in the sender's order")
    func lostNumberIsWaitedForThenOrderHolds() throws {
        var rig = try Rig()
        try rig.deliver(try rig.submit(.registerDevice(device: "d1", account: "a1")), report: rig.report())
        _ = try rig.submit(.launchApp(device: "d1"))  // number 2: lost on the link
        let third = try rig.submit(.terminateApp(device: "d1"))
        let ahead = try rig.deliver(third, report: rig.report())
        #expect(ahead == .unavailable, "number 2 is still unanswered at its sender, so it is coming")
        // The sender's schedule sends both again, in number order; no timer at the queue is involved.
        var given: [UInt64] = []
        var offset = Duration.zero
        while rig.pipeline.outstandingCount > 0 && offset < .seconds(5) {
            offset += .milliseconds(100)
            given += try rig.advance(to: offset)
        }
        #expect(given.isEmpty)
        #expect(rig.pipeline.outstandingCount == 0, "both commands were answered within the sender's retry schedule")
        #expect(rig.handled == [1, 2, 3])
        #expect(rig.waited == [3])
    }

    @Test("a number its sender gave up never stalls the gate, across a queue restart: the sender's lowest unanswered number says it is not coming")
    func givenUpNumberDoesNotStall() throws {
        var rig = try Rig()
        try rig.deliver(try rig.submit(.registerDevice(device: "d1", account: "a1")), report: rig.report())
        _ = try rig.submit(.launchApp(device: "d1"))  // number 2: every copy lost while the queue is away
        var given: [UInt64] = []
        var offset = Duration.zero
        while given.isEmpty && offset < .seconds(20) {
            offset += .milliseconds(250)
            given += try rig.advance(to: offset, lose: true)
        }
        #expect(given == [2], "the sender gives number 2 up after its give-up time")
        try rig.restartQueue()
        let next = try rig.submit(.launchApp(device: "d1"))
        let report = rig.report()
        #expect(report.lowestUnanswered == 3)
        let status = try rig.deliver(next, report: report)
        #expect(status == .accepted, "number 3 waits for nothing")
        // Without the report (a client that does not send it) the same gap would be waited for.
        let gate = SenderOrderGate()
        #expect(gate.mustWait(CommandID(origin: "other", number: 3), lowestUnanswered: nil, skipsAhead: true))
        #expect(rig.handled == [1, 3])
    }

    @Test("the gate holds no state: the same question gets the same answer however long it waits")
    func noPatience() {
        let gate = SenderOrderGate()
        let id = CommandID(origin: "observer-1.77", number: 12)
        // The old gate let a gap go after 3 s; this one has no clock, so a gap holds until its number comes.
        #expect(gate.mustWait(id, lowestUnanswered: nil, skipsAhead: true))
        #expect(gate.mustWait(id, lowestUnanswered: 11, skipsAhead: true))
        #expect(!gate.mustWait(id, lowestUnanswered: 12, skipsAhead: true))
        #expect(!gate.mustWait(id, lowestUnanswered: nil, skipsAhead: false))
    }

    @Test("a sender's first command must be number 1: a higher one from an origin the queue never saw waits (its earlier ones were lost with a restarted queue)")
    func unknownOriginStartsAtOne() {
        let gate = SenderOrderGate()
        var window = CommandWindow(capacity: 64)
        let late = CommandID(origin: "observer-1.23938@queue-2", number: 9)
        #expect(gate.mustWait(late, lowestUnanswered: nil, window: window))
        #expect(!gate.mustWait(CommandID(origin: late.origin, number: 1), lowestUnanswered: nil, window: window))
        window.insert(CommandID(origin: late.origin, number: 1), sequence: 1)
        #expect(gate.mustWait(late, lowestUnanswered: 2, window: window), "numbers 2 to 8 are still on their way")
        for number in UInt64(2)...8 { window.insert(CommandID(origin: late.origin, number: number), sequence: number) }
        #expect(!gate.mustWait(late, lowestUnanswered: nil, window: window))
        // An id beyond the window's reach is not held here (the engine refuses it as forged).
        #expect(!gate.mustWait(CommandID(origin: "stranger", number: 1_000_000), lowestUnanswered: nil, window: window))
    }
}
