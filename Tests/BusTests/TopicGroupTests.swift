import Bus
import EventLog
import Foundation
import StoreKitModel
import Testing
import ZeroMQ

/// Topic groups (docs/wire-format.md, "Topic groups"): a subscriber takes only the devices whose names
/// start with its prefix, detects its own group's losses, and fills them with a group FETCH (issue 31, item 6).
@Suite("Topic groups over real ZeroMQ sockets", .serialized)
struct TopicGroupTests {
    let context: ZeroMQContext

    init() throws {
        context = try ZeroMQContext()
    }

    /// The sample events of `indices` whose device starts with `device-1` (device-1 and device-10 … device-15).
    func groupEvents(_ indices: Range<Int>) -> [Event] {
        indices.map(sampleEvent).filter { $0.device?.hasPrefix("device-1") == true }
    }

    func groupSubscriber(_ queue: QueueHarness, prefix: String = "device-1", configure: (inout EventSubscriberConfiguration) -> Void = { _ in })
        throws -> EventSubscriber {
        var configuration = EventSubscriberConfiguration(eventsEndpoint: queue.eventsEndpoint, requestsEndpoint: queue.requestsEndpoint)
        configuration.topicGroup = prefix
        configure(&configuration)
        return try EventSubscriber(context: context, configuration: configuration)
    }

    @Test("a group subscriber catches up from the log and from memory, then follows live, with only its devices' events", .timeLimit(.minutes(10)))
    func catchUpAndLive() throws {
        let queue = try QueueHarness(context: context, configure: { $0.recentRecordCapacity = 100 }) { _, _ in .duplicate(lastSequence: 0) }
        queue.appendEvents(1_000)
        try #require(queue.wait(within: .seconds(30)) { $0.eventsPublished == 1_000 })
        let subscriber = try groupSubscriber(queue)
        let caughtUp = try collect(subscriber, count: groupEvents(0..<1_000).count)
        #expect(caughtUp.map(\.event) == groupEvents(0..<1_000))
        #expect(queue.counters.fetchesReadFromLog >= 1)
        #expect(try wait(for: subscriber) { subscriber.state == .live })

        for round in 0..<3 {
            queue.appendEvents(200, startingAt: 1_000 + 200 * round)
            try #require(queue.wait { $0.eventsPublished == 1_200 + 200 * round })
        }
        let live = try collect(subscriber, count: groupEvents(1_000..<1_600).count)
        #expect(live.map(\.event) == groupEvents(1_000..<1_600))
        #expect(live.allSatisfy { $0.sequence > caughtUp.last!.sequence })
        #expect(queue.counters.groupBatchesPublished >= 3)
        #expect(subscriber.counters.gapsRecovered == 0)
        #expect(subscriber.counters.duplicatesDropped == 0)
        // Following live costs no FETCH: only the catch-up fetched (from the log, then up to the group's start).
        #expect(subscriber.counters.fetchesSent <= 3, "\(subscriber.counters.fetchesSent) FETCHes")
        #expect(subscriber.counters.malformed.total == 0)
    }

    @Test("groups that nest (device-, device-1, device-10) beside 200 that no device is in: each subscriber gets exactly its devices' events live, in order", .timeLimit(.minutes(10)))
    func nestedAmongManyGroups() throws {
        let queue = try QueueHarness(context: context) { _, _ in .duplicate(lastSequence: 0) }
        let others = try context.socket(.subscriber)
        defer { others.close() }
        try others.connect(queue.eventsEndpoint)
        for index in 0..<200 { try others.subscribe(to: BusWire.groupTopic("other-\(index)")) }
        let prefixes = ["device-", "device-1", "device-10"]
        let subscribers = try prefixes.map { try groupSubscriber(queue, prefix: $0) }
        for subscriber in subscribers { #expect(try wait(for: subscriber) { subscriber.state == .live }) }
        queue.appendEvents(400)
        try #require(queue.wait { $0.eventsPublished == 400 })
        let events = (0..<400).map(sampleEvent)
        for (prefix, subscriber) in zip(prefixes, subscribers) {
            let expected = events.filter { $0.device?.hasPrefix(prefix) == true }
            #expect(try collect(subscriber, count: expected.count).map(\.event) == expected, "group \(prefix)")
            #expect(subscriber.counters.gapsRecovered == 0, "group \(prefix)")
        }
    }

    @Test("a group subscriber whose messages were dropped at the high-water marks detects it and fills it by group FETCH", .timeLimit(.minutes(10)))
    func droppedMessagesAreFetched() throws {
        let queue = try QueueHarness(context: context, transport: .ipc, configure: { $0.sendHighWaterMark = 1 }) { _, _ in
            .duplicate(lastSequence: 0)
        }
        let subscriber = try groupSubscriber(queue) { $0.receiveHighWaterMark = 1 }
        #expect(try wait(for: subscriber) { subscriber.state == .live })
        // Forty rounds, about 50 KB of the group's events each, published while the subscriber reads nothing.
        for round in 0..<40 {
            queue.appendEvents(400, startingAt: 400 * round)
            try #require(queue.wait { $0.eventsPublished == 400 * (round + 1) })
        }
        let events = try collect(subscriber, count: groupEvents(0..<16_000).count, within: .seconds(30))
        #expect(events.map(\.event) == groupEvents(0..<16_000))
        #expect(subscriber.counters.gapsRecovered > 0)
        #expect(subscriber.counters.fetchesSent > 1)
    }

    @Test("a group FETCH with a NUL in its prefix is refused as malformed, and one with no match says how far it looked")
    func groupFetchOnTheWire() throws {
        let queue = try QueueHarness(context: context) { _, _ in .duplicate(lastSequence: 0) }
        queue.appendEvents(50)
        try #require(queue.wait { $0.eventsPublished == 50 })
        let dealer = try context.socket(.dealer)
        defer { dealer.close() }
        try dealer.connect(queue.requestsEndpoint)
        let refused = try #require(try request(dealer, [Array("FETCH".utf8), BusWire.encodeFetch(from: 1, maximumCount: 0) + [0x64, 0]]))
        #expect(refused.first == Array("ACK".utf8) && refused[1] == [3])
        let empty = try #require(try request(dealer, [Array("FETCH".utf8), BusWire.encodeGroupFetch(from: 1, maximumCount: 0, prefix: "nobody")]))
        #expect(empty.count == 2 && empty[1].count == BusWire.groupBatchHeaderByteCount)
        let scanned = empty[1][20..<28].enumerated().reduce(UInt64(0)) { $0 | UInt64($1.element) << (8 * UInt64($1.offset)) }
        #expect(scanned == 50)
        let some = try #require(try request(dealer, [Array("FETCH".utf8), BusWire.encodeGroupFetch(from: 1, maximumCount: 0, prefix: "device-3")]))
        #expect(some.count == 2 + 3, "device-3's events among the first 50: sequences 4, 20 and 36")
    }
}
