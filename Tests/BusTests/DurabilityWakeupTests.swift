import Bus
import EventLog
import Foundation
import StoreKitModel
import Testing
import ZeroMQ

/// `step` is woken by the log's durability hook, not by a short poll timer.
@Suite("The queue endpoint wakes on durability")
struct DurabilityWakeupTests {
    @Test("a command is acknowledged within a few steps whose timeout is 20 s, woken by onDurable", .timeLimit(.minutes(10)))
    func wokenByDurability() throws {
        let context = try ZeroMQContext()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("wakeup-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let wakeup = try PollWakeup()
        let writer = try PartitionWriter(
            directory: directory, partition: "queue",
            configuration: PartitionWriterConfiguration(durability: .defaultGroupCommit, onDurable: { _ in wakeup.signal() }))
        defer { try? writer.close() }
        var configuration = QueueEndpointConfiguration(eventsEndpoint: "tcp://127.0.0.1:*", requestsEndpoint: "tcp://127.0.0.1:*")
        configuration.heartbeatInterval = .seconds(60)
        configuration.durabilityWakeup = wakeup
        let appender = EventLogAppender(writer: writer)
        let endpoint = try QueueEndpoint(context: context, configuration: configuration, writer: writer) { command, _ in
            .accepted([try appender.append(.appLaunched(device: command.body.device), commandID: command.id, timestamp: 1)])
        }
        defer { endpoint.close() }
        let dealer = try context.socket(.dealer)
        defer { dealer.close() }
        try dealer.connect(endpoint.requestsEndpoint)
        let command = Command(id: CommandID(origin: "wake", number: 1), body: .launchApp(device: "d"))
        try dealer.send(["CMD".bytes, EventCodec.encode(command)])

        // Each step waits up to 20 s; only events (the handshake, the request, durability) end it.
        var steps = 0
        while steps < 10, !(endpoint.counters.commandsHandled == 1 && endpoint.unpublishedCount == 0) {
            try endpoint.step(timeout: .seconds(20))
            steps += 1
        }
        #expect(endpoint.counters.commandsHandled == 1)
        #expect(endpoint.unpublishedCount == 0)
        #expect(steps < 10)
        let reply = try #require(try dealer.receive(timeout: .seconds(5)))
        #expect(try CommandAcknowledgement.decode(reply).status == .accepted)
    }
}
