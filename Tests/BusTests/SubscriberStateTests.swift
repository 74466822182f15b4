import Bus
import Testing

/// `SubscriberState` in simulated time: the subscriber's ordering, gaps, catch-up and silence with
/// no socket and no clock (issue 30, item 1).
struct SubscriberStateTests {
    struct Record: SequencedRecord, Equatable {
        var sequence: UInt64
    }

    let start = ContinuousClock.now

    func records(_ sequences: UInt64...) -> [Record] { sequences.map(Record.init) }

    /// A subscriber that caught up through `through` with the first FETCH.
    func caughtUp(through: UInt64, maximumHeld: Int = 1_000) -> SubscriberState<Record> {
        var state = SubscriberState<Record>(startSequence: 1, configuration: .init(maximumHeldRecords: maximumHeld), now: start)
        #expect(state.due(now: start) == 1)
        state.fetchSent(now: start)
        var delivered: [Record] = []
        state.receivedFetchReply(from: 1, records: (1...through).map(Record.init), completeThrough: through, published: through,
                                 now: start, into: &delivered)
        #expect(delivered.count == Int(through))
        #expect(state.state == .live)
        return state
    }

    @Test func aLiveGapIsHeldFetchedAndFilledInOrder() {
        var state = caughtUp(through: 3)
        var delivered: [Record] = []
        let now = start + .milliseconds(10)
        state.receivedLive(Record(sequence: 6), previous: 5, now: now, into: &delivered)
        state.receivedLive(Record(sequence: 7), previous: 6, now: now, into: &delivered)
        #expect(delivered.isEmpty)
        #expect(state.heldCount == 2)
        #expect(state.due(now: now) == 4, "the gap 4...5 is fetched at once")
        state.fetchSent(now: now)
        #expect(state.due(now: now + .milliseconds(500)) == nil, "one FETCH at a time")
        state.receivedFetchReply(from: 4, records: records(4, 5, 6), completeThrough: 6, published: 7, now: now, into: &delivered)
        #expect(delivered == records(4, 5, 6, 7))
        #expect(state.counters.gapsRecovered == 1)
        #expect(state.counters.duplicatesDropped == 1, "6 came live and fetched")
        #expect(state.deliveredThrough == 7)
        #expect(state.due(now: now + .seconds(1)) == nil)
    }

    @Test func aHeartbeatAheadIsALostTailAndAnUnansweredFetchIsSentAgain() {
        var state = caughtUp(through: 2)
        let heartbeat = start + .milliseconds(250)
        state.receivedHeartbeat(through: 5, now: heartbeat)
        #expect(state.due(now: heartbeat) == 3)
        state.fetchSent(now: heartbeat)
        #expect(state.due(now: heartbeat + .milliseconds(999)) == nil)
        #expect(state.nextDeadline() == heartbeat + .seconds(1))
        #expect(state.due(now: heartbeat + .seconds(1)) == 3, "the FETCH went unanswered: sent again")
        #expect(state.counters.fetchesSent == 2)
    }

    @Test func silenceIsReportedAndEndsWithTheNextMessage() {
        var state = caughtUp(through: 1)
        _ = state.takeStateChanges()
        #expect(state.due(now: start + .milliseconds(1_999)) == nil)
        #expect(state.state == .live)
        _ = state.due(now: start + .seconds(2))
        #expect(state.state == .publisherSilent)
        state.receivedHeartbeat(through: 1, now: start + .seconds(5))
        #expect(state.state == .live)
        #expect(state.takeStateChanges() == [.publisherSilent, .live])
    }

    @Test func duplicatesAreDeliveredOnce() {
        var state = caughtUp(through: 2)
        var delivered: [Record] = []
        for _ in 0..<3 { state.receivedLive(Record(sequence: 3), previous: 2, now: start, into: &delivered) }
        state.receivedLive(Record(sequence: 1), previous: 0, now: start, into: &delivered)
        #expect(delivered == records(3))
        #expect(state.counters.duplicatesDropped == 3)
    }

    /// A topic group's records are not consecutive: each names its predecessor in the group.
    @Test func aGroupStreamFollowsItsOwnChainAndAFetchFillsAGapBetweenOtherDevicesRecords() {
        var state = caughtUp(through: 10)
        var delivered: [Record] = []
        state.receivedLive(Record(sequence: 14), previous: 10, now: start, into: &delivered)
        #expect(delivered == records(14), "11...13 were other devices' events")
        // 17 (after 14) was lost; 20 names it.
        state.receivedLive(Record(sequence: 20), previous: 17, now: start, into: &delivered)
        #expect(delivered == records(14))
        #expect(state.due(now: start) == 15)
        state.fetchSent(now: start)
        // The group FETCH scanned 15...19 and found only 17.
        state.receivedFetchReply(from: 15, records: records(17), completeThrough: 19, published: 20, now: start, into: &delivered)
        #expect(delivered == records(14, 17, 20))
        #expect(state.counters.gapsRecovered == 1)
        #expect(state.isCaughtUp)
    }

    /// A predecessor that is only an upper bound (a group the queue started to track late) costs one FETCH.
    @Test func aFetchCompleteBeyondItsLastRecordReleasesHeldRecordsWhosePredecessorItPassed() {
        var state = caughtUp(through: 5)
        var delivered: [Record] = []
        state.receivedLive(Record(sequence: 30), previous: 25, now: start, into: &delivered)
        state.fetchSent(now: start)
        state.receivedFetchReply(from: 6, records: [], completeThrough: 29, published: 30, now: start, into: &delivered)
        #expect(delivered == records(30))
        #expect(state.deliveredThrough == 30)
    }

    @Test func heldRecordsAreBoundedAndWhatWasDroppedIsFetchedLater() {
        var state = caughtUp(through: 1, maximumHeld: 4)
        var delivered: [Record] = []
        for sequence in UInt64(3)...10 { state.receivedLive(Record(sequence: sequence), previous: sequence - 1, now: start, into: &delivered) }
        #expect(state.heldCount <= 4)
        state.fetchSent(now: start)
        state.receivedFetchReply(from: 2, records: (2...10).map(Record.init), completeThrough: 10, published: 10, now: start, into: &delivered)
        #expect(delivered == (2...10).map(Record.init))
        #expect(state.heldCount == 0)
    }

    @Test func beforeTheFirstCatchUpMissingRecordsAreNotCountedAsGaps() {
        var state = SubscriberState<Record>(startSequence: 1, now: start)
        var delivered: [Record] = []
        state.receivedLive(Record(sequence: 9), previous: 8, now: start, into: &delivered)
        state.fetchSent(now: start)
        state.receivedFetchReply(from: 1, records: (1...8).map(Record.init), completeThrough: 8, published: 9, now: start, into: &delivered)
        #expect(delivered.count == 9)
        #expect(state.counters.gapsRecovered == 0)
        #expect(state.state == .live)
    }
}
