@testable import Bus
import Foundation
import Testing
import ZeroMQ

/// A subscriber connection can hold only topics the queue publishes, and only so many of them
/// (docs/wire-format.md, "Subscriptions"): the queue closes a connection that asks for more,
/// while honest subscribers go on hearing every event.
@Suite("Subscriptions are bounded per connection")
struct SubscriptionLimitTests {
    let context: ZeroMQContext

    init() throws {
        context = try ZeroMQContext()
    }

    @Test("legitimate topics and their prefixes are kept; anything else is refused")
    func legitimateShapes() {
        func legitimate(_ topic: String) -> Bool { Array(topic.utf8).withUnsafeBytes(SubscriptionLedger.isLegitimate) }
        for topic in ["", "e", "ev", "evt", "evt.", "evt.*", "evt.device-1", "evt." + String(repeating: "d", count: 128), "h", "hb"] {
            #expect(legitimate(topic), "\(topic) refused")
        }
        for topic in ["x", "hbx", "evtx", "evt./etc", "evt.a\u{0}b", "evt." + String(repeating: "d", count: 129), "E", " hb"] {
            #expect(!legitimate(topic), "\(topic) kept")
        }
    }

    @Test("the count is per connection; unsubscribing gives room back; a refused connection is forgotten")
    func ledgerCounts() {
        var ledger = SubscriptionLedger(maximumPerConnection: 3)
        func apply(_ kind: UInt8, _ topic: String, _ connection: Int32) -> SubscriptionLedger.Verdict {
            ([kind] + Array(topic.utf8)).withUnsafeBytes { ledger.apply($0, from: connection) }
        }
        for topic in ["evt.", "hb", "evt.a", "evt."] { #expect(apply(1, topic, 7) == .accepted) }
        #expect(apply(1, "evt.a", 8) == .accepted)
        #expect(ledger.topicCount(7) == 3 && ledger.topicCount(8) == 1)
        #expect(apply(0, "evt.a", 7) == .accepted)
        #expect(apply(1, "evt.b", 7) == .accepted)
        guard case .refused(let failure) = apply(1, "evt.c", 7) else { Issue.record("a fourth topic was kept"); return }
        #expect(failure.reason == .tooManySubscriptions)
        #expect(ledger.topicCount(7) == 0)
        guard case .refused(let other) = ([2, 1] as [UInt8]).withUnsafeBytes({ ledger.apply($0, from: 8) }) else {
            Issue.record("a message that is no subscription was accepted"); return
        }
        #expect(other.reason == .notASubscription)
    }

    @Test("a connection registering thousands of topics is closed; an honest subscriber keeps hearing events",
          .timeLimit(.minutes(1)), arguments: Transport.allCases)
    func subscriptionFlood(transport: Transport) throws {
        let queue = try QueueHarness(context: context, transport: transport, configure: { $0.maximumSubscriptionsPerSubscriber = 64 }) { _, _ in
            .duplicate(lastSequence: 0)
        }
        let honest = try context.socket(.subscriber)
        try honest.subscribe(to: BusWire.eventTopicPrefix)
        try honest.subscribe(to: BusWire.heartbeatTopic)
        try honest.connect(queue.eventsEndpoint)
        #expect(try receive(honest, topic: BusWire.heartbeatTopic), "the honest subscriber heard no heartbeat")

        let hostile = try context.socket(.extendedSubscriber)
        let monitor = try hostile.monitor([.disconnected])
        try hostile.connect(queue.eventsEndpoint)
        for index in 0..<10_000 { try hostile.send([[1] + BusWire.eventTopic(device: "device-\(index)")]) }
        #expect(try monitor.receive(timeout: .seconds(10)) != nil, "the queue did not close a connection of 10,000 subscriptions")
        hostile.close()
        #expect(queue.wait { $0.subscribersClosed >= 1 && $0.refused[.tooManySubscriptions] >= 1 })
        #expect(queue.refusals.contains { $0.reason == .tooManySubscriptions && $0.detail.contains("closed") })

        // The honest subscriber still hears new events, on its own connection, which was never closed.
        queue.appendEvents(1)
        #expect(try receive(honest, topic: BusWire.eventTopic(device: "device-0")), "the honest subscriber heard no event")
        #expect(queue.connectedPeers.subscribers == 1)
    }

    @Test("a subscription to a topic the queue never publishes closes its connection", .timeLimit(.minutes(1)),
          arguments: [Array("zz".utf8), Array("evt./etc/passwd".utf8), [0x02, 0x03]])
    func refusedShape(message: [UInt8]) throws {
        let queue = try QueueHarness(context: context) { _, _ in .duplicate(lastSequence: 0) }
        let hostile = try context.socket(.extendedSubscriber)
        let monitor = try hostile.monitor([.disconnected])
        try hostile.connect(queue.eventsEndpoint)
        // [0x02, 0x03] is no subscription at all; the others subscribe (first byte 1).
        try hostile.send([message.first == 0x02 ? message : [1] + message])
        #expect(try monitor.receive(timeout: .seconds(10)) != nil, "the queue kept the connection")
        hostile.close()
        #expect(queue.wait { $0.subscribersClosed >= 1 })
        let reasons: Set<WireFailureReason> = [.subscriptionRefused, .notASubscription]
        #expect(queue.counters.refused.byReason.keys.contains { reasons.contains($0) })
    }

    /// Receives until a message on `topic` arrives, up to 5 s.
    private func receive(_ socket: Socket, topic: [UInt8]) throws -> Bool {
        let deadline = ContinuousClock.now + .seconds(5)
        while ContinuousClock.now < deadline {
            if let frames = try socket.receive(timeout: .milliseconds(100)), frames.first == topic { return true }
        }
        return false
    }
}
