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

    @Test("issue 30: a key bound to devices may subscribe only to topics that carry only its devices' events; the store's and any-device keys to every topic")
    func subscriptionsByRole() {
        let observer = ClientPermissions(roles: [.app], devices: ["device-0001", "device-0002"])
        let driver = ClientPermissions(roles: [.app], devices: [], devicePrefixes: ["driver-1-"])
        func allowed(_ permissions: ClientPermissions, _ topic: String) -> Bool {
            Array(topic.utf8).withUnsafeBytes { permissions.refusal(ofSubscription: $0) } == nil
        }
        for topic in ["evt.device-0001", "evt.device-0002", "grp.device-0001/", "hb", "h"] { #expect(allowed(observer, topic), "\(topic) refused") }
        for topic in ["", "e", "evt", "evt.", "evt.device-000", "evt.device-0003", "evt.*", "all", "a", "grp.", "grp.device-/", "grp.device-0003/", "hbx"] {
            #expect(!allowed(observer, topic), "\(topic) kept")
        }
        for topic in ["grp.driver-1-/", "grp.driver-1-7/", "evt.driver-1-7", "hb"] { #expect(allowed(driver, topic), "\(topic) refused") }
        for topic in ["grp.driver-1/", "grp.driver-2-/", "evt.driver-2-0", "evt.", "all"] { #expect(!allowed(driver, topic), "\(topic) kept") }
        for permissions in [ClientPermissions(roles: [.store]), ClientPermissions(roles: [.downloader], devices: []), ClientPermissions(roles: [.app])] {
            for topic in ["", "evt.", "all", "grp.device-/", "evt.device-0003"] { #expect(allowed(permissions, topic), "\(topic) refused to \(permissions)") }
        }
        // The ledger refuses with the key named, and forgets the connection.
        var ledger = SubscriptionLedger(maximumPerConnection: 8)
        func apply(_ topic: String) -> SubscriptionLedger.Verdict {
            ([1] + Array(topic.utf8)).withUnsafeBytes { ledger.apply($0, from: 7, key: "KEY", permissions: observer) }
        }
        #expect(apply("evt.device-0001") == .accepted)
        guard case .refused(let failure) = apply("all") else { Issue.record("`all` was kept"); return }
        #expect(failure.reason == .roleRefused)
        #expect(failure.detail.contains("KEY") && failure.detail.contains("roles are app for its 2 devices"))
        #expect(ledger.topicCount(7) == 0)
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
          .timeLimit(.minutes(10)), arguments: Transport.allCases)
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

    @Test("a subscription to a topic the queue never publishes closes its connection", .timeLimit(.minutes(10)),
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
