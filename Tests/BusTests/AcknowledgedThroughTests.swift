import Bus
import Foundation
import StoreKitModel
import Testing
import ZeroMQ

/// An answer can outrun the events it names: after a queue restart a resent command is answered
/// "duplicate" at once, with its original's last sequence, while the subscriber is still catching
/// up. A client that judges "settled" from events must wait for them (found by PartitionRunTests:
/// an observer declared its devices settled before hearing its last purchase, leaving it pending).
@Suite struct AcknowledgedThroughTests {
    @Test("a sender remembers the highest sequence its answers named, and the subscriber says when it has delivered through it", .timeLimit(.minutes(10)))
    func answersAheadOfEvents() throws {
        let context = try ZeroMQContext()
        let queue = try QueueHarness(context: context) { command, appender in
            .accepted([try appender.append(.appLaunched(device: command.body.device), commandID: command.id, timestamp: 7)])
        }
        queue.appendEvents(300)
        #expect(queue.wait { $0.eventsPublished == 300 })
        let partitions = [PartitionEndpoints(partition: "queue", eventsEndpoint: queue.eventsEndpoint, requestsEndpoint: queue.requestsEndpoint)]
        let routes = DeviceRoutes(partitionCount: 1)
        let sender = try PartitionedSender(context: context, partitions: partitions,
                                           configuration: CommandSenderConfiguration(origin: "app.1", requestsEndpoint: queue.requestsEndpoint), routes: routes)
        defer { sender.close() }
        // The subscriber joins late and has delivered nothing yet: everything it will hear is catch-up.
        let subscriber = try PartitionedSubscriber(context: context, partitions: partitions,
                                                   configuration: EventSubscriberConfiguration(eventsEndpoint: queue.eventsEndpoint, requestsEndpoint: queue.requestsEndpoint),
                                                   routes: routes)
        defer { subscriber.close() }
        #expect(sender.acknowledgedThrough == [0])
        #expect(subscriber.hasDelivered(through: sender.acknowledgedThrough))

        _ = try sender.submit(.launchApp(device: "device-1"))
        var answers: [CommandCompletion] = []
        let deadline = ContinuousClock.now + .seconds(10)
        while answers.isEmpty, ContinuousClock.now < deadline { answers += try sender.poll(timeout: .milliseconds(20)) }
        #expect(answers.count == 1)
        #expect(sender.acknowledgedThrough == [301])
        #expect(!subscriber.hasDelivered(through: sender.acknowledgedThrough), "nothing was delivered yet")

        var delivered = 0
        while delivered < 301, ContinuousClock.now < deadline {
            delivered += try subscriber.receive(timeout: .milliseconds(20)).count
            if delivered < 301 { #expect(!subscriber.hasDelivered(through: sender.acknowledgedThrough), "only \(delivered) of 301 delivered") }
        }
        #expect(delivered == 301)
        #expect(subscriber.hasDelivered(through: sender.acknowledgedThrough))
        queue.stop()
    }
}
