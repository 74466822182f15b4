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

    /// A sender (origin `app.1`) connected to a ROUTER socket the test scripts as the queue.
    static func withScriptedQueue<Result>(retryInterval: Duration, _ body: (Socket, CommandSender) throws -> Result) throws -> Result {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sksim-retry-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let context = try ZeroMQContext()
        defer { context.terminate() }
        let router = try context.socket(.router)
        defer { router.close() }
        let endpoint = "ipc://\(directory.path)/r.ipc"
        try router.bind(endpoint)
        var configuration = CommandSenderConfiguration(origin: "app.1", requestsEndpoint: endpoint)
        configuration.retryInterval = retryInterval
        configuration.maximumRetryInterval = .seconds(1)
        let sender = try CommandSender(context: context, configuration: configuration)
        defer { sender.close() }
        return try body(router, sender)
    }

    /// A scripted queue on a real ROUTER socket: it takes every command and answers them in order,
    /// one per `pace` (a slow queue working through a backlog), except the copies `ignoring` names.
    struct PacedQueue {
        let router: Socket
        var waiting: [(routingID: [UInt8], number: UInt64)] = []
        var received: [UInt64] = []
        var nextAnswer: ContinuousClock.Instant = .now

        mutating func step(pace: Duration, ignoring: (UInt64, Int) -> Bool = { _, _ in false }) throws {
            while let message = try router.receive(timeout: .zero), message.count == 3 {
                let number = try EventCodec.decodeCommand(message[2]).id.number
                received.append(number)
                if !ignoring(number, received.filter { $0 == number }.count) { waiting.append((message[0], number)) }
            }
            guard !waiting.isEmpty, ContinuousClock.now >= nextAnswer else { return }
            let (routingID, number) = waiting.removeFirst()
            let acknowledgement = CommandAcknowledgement(status: .accepted, commandID: CommandID(origin: "app.1", number: number),
                                                         lastSequence: number, message: "")
            _ = try router.send([routingID] + acknowledgement.encodedFrames(), mode: .nonBlocking)
            nextAnswer = ContinuousClock.now + pace
        }
    }

    static func pacedRun(commands: Int, pace: Duration, ignoring: @escaping (UInt64, Int) -> Bool = { _, _ in false })
        throws -> (received: [UInt64], acknowledged: Int, retries: Int) {
        try withScriptedQueue(retryInterval: .milliseconds(200)) { router, sender in
            var queue = PacedQueue(router: router)
            for index in 0..<commands { _ = try sender.submit(.registerDevice(device: "d\(index)", account: "a")) }
            var acknowledged = 0
            let deadline = ContinuousClock.now + .seconds(30)
            while acknowledged < commands && ContinuousClock.now < deadline {
                try queue.step(pace: pace, ignoring: ignoring)
                acknowledged += try sender.poll(timeout: .milliseconds(1)).count
            }
            return (queue.received, acknowledged, sender.retriesSent)
        }
    }

    @Test("commands queued behind ones the queue is still answering are not retried, however long the backlog takes")
    func noRetryWhileAnswersCome() throws {
        // 150 answers 4 ms apart: the last waits about 600 ms, three retry intervals, yet answers never pause for one.
        let run = try Self.pacedRun(commands: 150, pace: .milliseconds(4))
        #expect(run.acknowledged == 150)
        #expect(run.retries == 0, "retried \(run.retries) commands that were only queued")
        #expect(run.received == Array(1...150), "each command sent once, in order")
    }

    @Test("a command whose answer was lost is sent again while newer ones are answered")
    func lostAnswerRetried() throws {
        // The queue takes command 2 but its first answer is lost; every other command is answered.
        let run = try Self.pacedRun(commands: 20, pace: .milliseconds(1)) { number, copy in number == 2 && copy == 1 }
        #expect(run.acknowledged == 20)
        #expect(run.received.filter { $0 == 2 }.count == 2, "\(run.received)")
        #expect(run.retries >= 1)
    }
}
