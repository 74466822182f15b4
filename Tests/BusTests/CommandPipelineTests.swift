import Bus
import StoreKitModel
import Testing

/// The sender as a state machine (issue 30, item 1): numbering, window and retries with an injected
/// clock, no socket. Each test passes `now` as `start + offset`.
@Suite struct CommandPipelineTests {
    struct MiddleRandom: RandomNumberGenerator {
        mutating func next() -> UInt64 { 1 << 63 }
    }

    let start = ContinuousClock.now

    func at(_ milliseconds: Int) -> ContinuousClock.Instant { start + .milliseconds(milliseconds) }

    func pipeline(window: Int = 4) -> CommandPipeline {
        CommandPipeline(origin: "app.1", window: window, policy: .standard, now: start, random: MiddleRandom())
    }

    static let body = CommandBody.registerDevice(device: "d", account: "a")

    @Test("commands are numbered from 1 under the origin, the window holds at most its size, and an answer makes room")
    func windowBoundsOutstanding() throws {
        var pipeline = pipeline(window: 3)
        let numbers = (0..<3).compactMap { _ in pipeline.submit(Self.body, now: at(0))?.command.id.number }
        #expect(numbers == [1, 2, 3])
        let fourth = pipeline.submit(Self.body, now: at(0))
        #expect(fourth == nil, "a fourth command must not fit a window of 3")
        let completion = pipeline.answered(CommandID(origin: "app.1", number: 2), status: .accepted, now: at(1))
        #expect(completion == .answered(CommandID(origin: "app.1", number: 2), .accepted))
        let afterAnswer = pipeline.submit(Self.body, now: at(1))
        #expect(afterAnswer?.command.id.number == 4)
        #expect(pipeline.outstandingCount == 3)
    }

    @Test("the payload kept for retries is the command's encoding, and a retry sends those bytes again")
    func retriesResendTheEncodedCommand() throws {
        var pipeline = pipeline()
        let submitted = pipeline.submit(Self.body, now: at(0))
        let (command, payload) = try #require(submitted)
        #expect(try EventCodec.decodeCommand(payload) == command)
        // Silent queue: the oldest command is probed after the retry interval.
        let early = pipeline.due(now: at(100))
        #expect(early.resend.isEmpty)
        let work = pipeline.due(now: at(500))
        #expect(work.resend.map(\.number) == [1])
        #expect(work.resend.first?.payload == payload)
    }

    @Test("after a reconnection every unanswered command is sent again at once, in number order")
    func reconnectionResendsInOrder() {
        var pipeline = pipeline(window: 8)
        for _ in 0..<5 { _ = pipeline.submit(Self.body, now: at(0)) }
        _ = pipeline.answered(CommandID(origin: "app.1", number: 3), status: .accepted, now: at(2))
        pipeline.reconnected(now: at(10))
        let resent = pipeline.due(now: at(10)).resend.map(\.number)
        #expect(resent == [1, 2, 4, 5])
        // Once each: nothing more until the queue stays silent for a retry interval.
        let next = pipeline.due(now: at(11)).resend
        #expect(next.isEmpty)
    }

    @Test("\"duplicate\" for a command sent once means another client used this id; for a retried one it is the answer")
    func duplicateOfUnsentCommand() {
        var pipeline = pipeline()
        _ = pipeline.submit(Self.body, now: at(0))
        _ = pipeline.submit(Self.body, now: at(0))
        let forged = pipeline.answered(CommandID(origin: "app.1", number: 1), status: .duplicate, now: at(1))
        #expect(forged == .duplicateOfUnsentCommand(CommandID(origin: "app.1", number: 1)))
        _ = pipeline.due(now: at(600))  // command 2 probed: sent twice now
        let retried = pipeline.answered(CommandID(origin: "app.1", number: 2), status: .duplicate, now: at(601))
        #expect(retried == .answered(CommandID(origin: "app.1", number: 2), .duplicate))
        let late = pipeline.answered(CommandID(origin: "app.1", number: 2), status: .accepted, now: at(602))
        #expect(late == nil)
        #expect(pipeline.lateAnswers == 1)
    }

    @Test("\"unavailable\" keeps the command outstanding and sends it again after its interval")
    func unavailableRetriedLater() {
        var pipeline = pipeline()
        _ = pipeline.submit(Self.body, now: at(0))
        let answer = pipeline.answered(CommandID(origin: "app.1", number: 1), status: .unavailable, now: at(1))
        #expect(answer == nil)
        #expect(pipeline.outstandingCount == 1)
        let early = pipeline.due(now: at(100)).resend
        #expect(early.isEmpty)
        let due = pipeline.due(now: at(501)).resend.map(\.number)
        #expect(due == [1])
    }

    @Test("a command unanswered past giveUpAfter is given up, with its attempts and age")
    func givesUp() {
        var pipeline = pipeline()
        _ = pipeline.submit(Self.body, now: at(0))
        var gaveUp: [CommandPipeline.Completion] = []
        for millisecond in stride(from: 0, through: 10_000, by: 10) {
            gaveUp += pipeline.due(now: at(millisecond)).completions
        }
        guard case .gaveUp(let id, let attempts, let elapsed)? = gaveUp.first else {
            Issue.record("nothing given up: \(gaveUp)")
            return
        }
        #expect(gaveUp.count == 1)
        #expect(id == CommandID(origin: "app.1", number: 1))
        #expect(attempts > 1)
        #expect(elapsed == .seconds(10))
        #expect(pipeline.outstandingCount == 0)
    }
}
