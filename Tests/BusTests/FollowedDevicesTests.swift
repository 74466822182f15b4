@testable import Bus
import Testing

/// `FollowedDevices` with an injected clock: one stream per device, one FETCH for all, others' devices dropped.
struct FollowedDevicesTests {
    static func record(_ sequence: UInt64, _ device: String?) -> BusRecord {
        BusRecord(sequence: sequence, timestamp: Int64(sequence), payload: [], device: device)
    }

    @Test("each device's stream is caught up and gap-filled by one FETCH for all; a group's other devices are dropped; a quiet stream is brought up to a wanted sequence")
    func streamsOrderedAndFilled() {
        let start = ContinuousClock.now
        var streams = FollowedDevices<BusRecord>(devices: ["d2", "d1"], startSequence: 1, configuration: .init(), now: start)
        var delivered: [BusRecord] = []
        // The first FETCH (from 1) is due at once, and only one is in flight.
        #expect(streams.due(now: start) == 1)
        streams.fetchSent(from: 1, now: start, sent: true)
        #expect(streams.due(now: start) == nil)
        streams.receivedFetchReply(from: 1, records: [Self.record(1, nil), Self.record(2, "d1"), Self.record(3, "d2")],
                                   completeThrough: 4, published: 4, now: start, into: &delivered)
        #expect(delivered.map(\.sequence) == [1, 2, 3])
        #expect(streams.deliveredThrough == 4 && streams.isCaughtUp)
        // Live: group d1 also carries d10, ordered with it and dropped.
        delivered.removeAll()
        streams.received(group: "d1", .records(previous: 4, [Self.record(5, "d1"), Self.record(6, "d10")]), now: start, into: &delivered)
        #expect(delivered.map(\.sequence) == [5])
        // Group d1 lost record 9: 10 is held, a FETCH from 7 is due; its reply fills d1 (d2 had not delivered up to 6: not for it).
        streams.received(group: "d1", .records(previous: 9, [Self.record(10, "d1")]), now: start, into: &delivered)
        #expect(delivered.map(\.sequence) == [5])
        let from = streams.due(now: start)
        #expect(from == 7)
        streams.fetchSent(from: 7, now: start, sent: true)
        streams.receivedFetchReply(from: 7, records: [Self.record(8, "d2"), Self.record(9, "d1")], completeThrough: 10, published: 10,
                                   now: start, into: &delivered)
        #expect(delivered.map(\.sequence) == [5, 9, 10])
        // d2 heard 8 live; then nothing: an acknowledgement naming 12 brings it up by a FETCH from 9.
        streams.received(group: "d2", .records(previous: 3, [Self.record(8, "d2")]), now: start, into: &delivered)
        #expect(delivered.map(\.sequence) == [5, 9, 10, 8])
        #expect(streams.deliveredThrough == 8)
        streams.want(through: 12)
        #expect(streams.due(now: start) == 9)
        streams.fetchSent(from: 9, now: start, sent: true)
        streams.receivedFetchReply(from: 9, records: [], completeThrough: 12, published: 12, now: start, into: &delivered)
        #expect(streams.deliveredThrough == 12)
        #expect(streams.due(now: start) == nil)
        #expect(streams.counters.delivered == 7)  // 1 (run-wide), 2, 3, 5, 9, 10, 8
    }

    @Test("a FETCH reply gives each record to every stream whose device's name begins its device's, names of any length; only the stream of its own device delivers it")
    func fetchReplyByNamePrefix() {
        let start = ContinuousClock.now
        var streams = FollowedDevices<BusRecord>(devices: ["d10", "d2", "d1"], startSequence: 1, configuration: .init(), now: start)
        var delivered: [BusRecord] = []
        #expect(streams.due(now: start) == 1)
        streams.fetchSent(from: 1, now: start, sent: true)
        // d100 is nobody's: the groups d1 and d10 both carry it, and both streams drop it. x1 is in no group at all.
        let records = [Self.record(1, "d100"), Self.record(2, "d10"), Self.record(3, "d1"), Self.record(4, "x1"), Self.record(5, "d2")]
        streams.receivedFetchReply(from: 1, records: records, completeThrough: 5, published: 5, now: start, into: &delivered)
        #expect(delivered.map(\.sequence).sorted() == [2, 3, 5])
        #expect(streams.othersDropped == 3)  // d100 by d1's and d10's streams, d10 by d1's
        #expect(streams.deliveredThrough == 5 && streams.isCaughtUp)
    }

    @Test("an unanswered FETCH is sent again after the retry interval, not before; silence is reported once every stream's group is quiet")
    func fetchRetriedAndSilenceReported() {
        let start = ContinuousClock.now
        var streams = FollowedDevices<BusRecord>(devices: ["d1"], startSequence: 1, configuration: .init(silenceTimeout: .seconds(2), fetchRetryInterval: .seconds(1)), now: start)
        #expect(streams.due(now: start) == 1)
        streams.fetchSent(from: 1, now: start, sent: true)
        #expect(streams.due(now: start + .milliseconds(999)) == nil)
        #expect(streams.due(now: start + .seconds(1)) == 1)
        streams.fetchSent(from: 1, now: start + .seconds(1), sent: true)
        _ = streams.due(now: start + .seconds(3))
        #expect(streams.state == .publisherSilent)
        #expect(streams.takeStateChanges() == [.publisherSilent])
    }
}
