import Bus
import Foundation
import StoreKitModel
import Testing
import ZeroMQ

/// A sender's retries reach a restarted queue in command order: a payment must never arrive
/// before the registration of its device (found by scripts/soak: after a queue kill, retries in
/// hash order were rejected as `unknownDevice` and the run stalled).
@Suite struct RetryOrderTests {
    @Test("a queue that restarts (a new connection) gets every unacknowledged command again at once, in number order")
    func retriesInOrderAfterRestart() throws {
        // The first queue takes commands and never answers; then it is gone and another binds the
        // same endpoint. The retry interval is far longer than the test: only the reconnection
        // can make the sender send again.
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sksim-retry-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let context = try ZeroMQContext()
        defer { context.terminate() }
        let endpoint = "ipc://\(directory.path)/r.ipc"
        var configuration = CommandSenderConfiguration(origin: "app.1", requestsEndpoint: endpoint)
        configuration.retryInterval = .seconds(60)
        configuration.maximumRetryInterval = .seconds(60)
        configuration.giveUpAfter = .seconds(120)
        let first = try context.socket(.router)
        try first.bind(endpoint)
        let sender = try CommandSender(context: context, configuration: configuration)
        defer { sender.close() }
        func receive(from router: Socket, count: Int) throws -> [UInt64] {
            var received: [UInt64] = []
            let deadline = ContinuousClock.now + .seconds(10)
            while received.count < count && ContinuousClock.now < deadline {
                _ = try sender.poll(timeout: .zero)
                if let message = try router.receive(timeout: .milliseconds(5)), message.count == 3 {
                    received.append(try EventCodec.decodeCommand(message[2]).id.number)
                }
            }
            return received
        }
        _ = try sender.submit(.registerDevice(device: "d", account: "a"))
        _ = try sender.submit(.launchApp(device: "d"))
        _ = try sender.submit(.addPayment(device: "d", payment: Payment(productIdentifier: "p")))
        #expect(try receive(from: first, count: 3) == [1, 2, 3])
        first.close()
        let second = try context.socket(.router)
        defer { second.close() }
        try second.bind(endpoint)
        #expect(try receive(from: second, count: 3) == [1, 2, 3], "retries must keep the sender's order")
        #expect(sender.reconnections == 1)
    }

    /// A queue in simulated time that takes every copy it is sent and answers them in order, one per
    /// `paceMilliseconds` (a slow queue working through a backlog), except the copies `ignoring` names;
    /// the sender is the `CommandPipeline` `CommandSender` runs, driven with an injected clock, so
    /// nothing depends on how fast the machine runs.
    static func pacedRun(commands: Int, paceMilliseconds: Int, ignoring: (UInt64, Int) -> Bool = { _, _ in false })
        -> (received: [UInt64], acknowledged: Int, retries: Int) {
        let start = ContinuousClock.now
        var policy = CommandRetries.Policy.standard
        policy.retryInterval = .milliseconds(200)
        policy.maximumRetryInterval = .seconds(1)
        var pipeline = CommandPipeline(origin: "app.1", window: 4_096, policy: policy, now: start)
        var waiting: [UInt64] = []
        var received: [UInt64] = []
        func receive(_ number: UInt64) {
            received.append(number)
            if !ignoring(number, received.filter { $0 == number }.count) { waiting.append(number) }
        }
        for index in 0..<commands {
            let (command, _) = pipeline.submit(.registerDevice(device: "d\(index)", account: "a"), now: start)!
            receive(command.id.number)
        }
        var acknowledged = 0
        var nextAnswer = 0
        for millisecond in 0...30_000 where acknowledged < commands {
            let now = start + .milliseconds(millisecond)
            if !waiting.isEmpty, millisecond >= nextAnswer {
                let number = waiting.removeFirst()
                if pipeline.answered(CommandID(origin: "app.1", number: number), status: .accepted, now: now) != nil { acknowledged += 1 }
                nextAnswer = millisecond + paceMilliseconds
            }
            for (number, _) in pipeline.due(now: now).resend { receive(number) }
        }
        return (received, acknowledged, pipeline.retries.retriesSent)
    }

    @Test("commands queued behind ones the queue is still answering are not retried, however long the backlog takes")
    func noRetryWhileAnswersCome() {
        // 150 answers 4 ms apart: the last waits about 600 ms, three retry intervals, yet answers never pause for one.
        let run = Self.pacedRun(commands: 150, paceMilliseconds: 4)
        #expect(run.acknowledged == 150)
        #expect(run.retries == 0, "retried \(run.retries) commands that were only queued")
        #expect(run.received == Array(1...150), "each command sent once, in order")
    }

    @Test("a command whose answer was lost is sent again while newer ones are answered")
    func lostAnswerRetried() {
        // The queue takes command 2 but its first answer is lost; every other command is answered.
        let run = Self.pacedRun(commands: 20, paceMilliseconds: 1) { number, copy in number == 2 && copy == 1 }
        #expect(run.acknowledged == 20)
        #expect(run.received.filter { $0 == 2 }.count == 2, "\(run.received)")
        #expect(run.retries >= 1)
    }
}
