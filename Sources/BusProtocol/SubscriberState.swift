/// A record a `SubscriberState` orders: only its position in the partition's log matters here.
public protocol SequencedRecord {
    var sequence: UInt64 { get }
}

/// Where an `EventSubscriber` stands.
public enum EventSubscriberState: Sendable, Hashable, CustomStringConvertible {
    /// Fetching records the queue has but this subscriber has not delivered yet.
    case catchingUp
    /// Caught up and hearing the publisher.
    case live
    /// Nothing (not even a heartbeat) arrived for the silence timeout; the sockets keep
    /// reconnecting and delivery resumes, gap-free, when the queue is back.
    case publisherSilent

    public var description: String {
        switch self {
        case .catchingUp: "catching up"
        case .live: "live"
        case .publisherSilent: "publisher silent"
        }
    }
}

/// The subscriber's logic with no socket and no clock of its own (the caller passes `now` to every
/// call), so a test drives it through losses, stalls and silences in simulated time
/// (`SubscriberStateTests`); `EventSubscriber` runs it over ZeroMQ.
///
/// It follows one *stream* of a partition's log: the whole partition (version 1's `evt.`, version 2's
/// `all`), or a topic group (version 2's `grp.<prefix>/`, only the devices whose names start with the
/// prefix). Records keep the log's sequence, so a group's records are not consecutive: each arrives
/// with its `previous`, the sequence of the stream's record before it (for the whole partition,
/// `sequence - 1`). `deliveredThrough` says that every record of the stream up to it was delivered,
/// once each and in order:
/// - a record at or below it is a duplicate, dropped;
/// - one whose `previous` is at or below it is delivered, then any held ones that now follow;
/// - one whose `previous` is above it is held: the records in between were lost (a PUB drop, a late
///   subscription), and a FETCH from `deliveredThrough + 1` fills them.
/// Announcements (heartbeats, a FETCH reply's `published`) say how far the stream goes; while that is
/// beyond `deliveredThrough` a FETCH is due, one at a time, sent again after `fetchRetryInterval`.
public struct SubscriberState<Record: SequencedRecord> {
    public struct Configuration: Sendable {
        /// Without any message for this long the publisher is reported silent.
        public var silenceTimeout: Duration
        /// An unanswered FETCH is sent again after this long.
        public var fetchRetryInterval: Duration
        /// Records held while an earlier gap is filled; beyond it they are dropped and fetched later.
        public var maximumHeldRecords: Int

        public init(silenceTimeout: Duration = .seconds(2), fetchRetryInterval: Duration = .seconds(1), maximumHeldRecords: Int = 200_000) {
            self.silenceTimeout = silenceTimeout
            self.fetchRetryInterval = fetchRetryInterval
            self.maximumHeldRecords = max(1, maximumHeldRecords)
        }
    }

    public struct Counters: Sendable, Hashable {
        public var delivered = 0
        /// Gaps in the live stream (drops, late subscription) that were filled.
        public var gapsRecovered = 0
        /// Records received more than once (live and fetched) and delivered once.
        public var duplicatesDropped = 0
        public var fetchesSent = 0

        public init() {}
    }

    // The live path (`receivedLive`, `receivedHeartbeat` and what they call) is inlinable, with the state
    // it touches, so that it is specialised for the caller's record type in the caller's module: run
    // unspecialised, each record cost run-time type metadata lookups and witness calls (7 % of a busy
    // store's samples; 1.4 % specialised).

    public let configuration: Configuration
    /// Every record of the stream up to this sequence has been delivered (the last delivered
    /// sequence of a whole-partition stream).
    public var deliveredThrough: UInt64 { _deliveredThrough }
    /// How far the stream is known to go (a heartbeat, a FETCH reply, a live record).
    public var knownPublishedSequence: UInt64 { _knownPublishedSequence }
    public var state: EventSubscriberState { _state }
    public var counters: Counters { _counters }
    @usableFromInline var _deliveredThrough: UInt64
    @usableFromInline var _knownPublishedSequence: UInt64 = 0
    @usableFromInline var _state: EventSubscriberState = .catchingUp
    @usableFromInline var _counters = Counters()
    /// State changes not yet taken by `takeStateChanges`, in order.
    @usableFromInline var stateChanges: [EventSubscriberState] = []
    /// Records ahead of a gap, by sequence.
    @usableFromInline var held: [UInt64: HeldRecord] = [:]
    /// The held records' sequences by `previous`: the next one to deliver after `deliveredThrough`.
    @usableFromInline var heldByPrevious: [UInt64: UInt64] = [:]
    private var fetchSentAt: ContinuousClock.Instant?
    /// No FETCH was sent yet: the first one (catch-up from the start) is due at once.
    private var hasFetched = false
    @usableFromInline var lastHeard: ContinuousClock.Instant
    @usableFromInline var hasCaughtUpOnce = false
    /// End of the newest detected gap; cleared once delivery passes it.
    @usableFromInline var openGapEnd: UInt64?

    /// A record held ahead of a gap, with its `previous`. A struct, not a tuple: a dictionary of tuples
    /// looks their type metadata up at run time.
    @usableFromInline struct HeldRecord {
        @usableFromInline var record: Record
        @usableFromInline var previous: UInt64
        @inlinable init(record: Record, previous: UInt64) {
            self.record = record
            self.previous = previous
        }
    }

    /// Starts before `startSequence` (0 and 1 both mean from the beginning); a FETCH is due at once.
    public init(startSequence: UInt64, configuration: Configuration = Configuration(), now: ContinuousClock.Instant) {
        self.configuration = configuration
        _deliveredThrough = max(1, startSequence) - 1
        lastHeard = now
    }

    /// The next sequence a whole-partition stream delivers.
    public var nextSequence: UInt64 { _deliveredThrough + 1 }
    /// A FETCH was sent and not answered yet.
    public var isFetchOutstanding: Bool { fetchSentAt != nil }
    /// Records held ahead of a gap.
    public var heldCount: Int { held.count }
    /// Caught up once, and delivered through everything announced.
    @inlinable public var isCaughtUp: Bool { hasCaughtUpOnce && _deliveredThrough >= _knownPublishedSequence }

    // MARK: Inputs

    /// A live record (published event, or one record of a published batch).
    @inlinable public mutating func receivedLive(_ record: Record, previous: UInt64, now: ContinuousClock.Instant, into delivered: inout [Record]) {
        heard(now: now)
        accept(record, previous: previous, into: &delivered)
        if previous > _deliveredThrough { announced(through: previous) }
        _knownPublishedSequence = max(_knownPublishedSequence, record.sequence)
    }

    /// A heartbeat: the stream goes at least through `sequence` (whatever of it is not delivered is a gap).
    @inlinable public mutating func receivedHeartbeat(through sequence: UInt64, now: ContinuousClock.Instant) {
        heard(now: now)
        announced(through: sequence)
    }

    /// A FETCH reply: `records` are every record of the stream from `from` through `completeThrough`,
    /// ascending; the queue has published through `published`.
    public mutating func receivedFetchReply(from: UInt64, records: [Record], completeThrough: UInt64, published: UInt64,
                                            now: ContinuousClock.Instant, into delivered: inout [Record]) {
        heard(now: now)
        fetchSentAt = nil
        var previous = max(1, from) - 1
        for record in records {
            accept(record, previous: previous, into: &delivered)
            previous = record.sequence
        }
        if _deliveredThrough >= max(1, from) - 1, completeThrough > _deliveredThrough {
            _deliveredThrough = completeThrough
            closeGapIfPassed()
            releaseHeldAfterJump(into: &delivered)
        }
        _knownPublishedSequence = max(_knownPublishedSequence, published)
        if _deliveredThrough >= _knownPublishedSequence {
            hasCaughtUpOnce = true
            if _state == .catchingUp { change(to: .live) }
        }
    }

    /// Some message arrived that carries no record (a refused one, a handshake reply): the publisher is alive.
    @inlinable public mutating func heard(now: ContinuousClock.Instant) {
        lastHeard = max(lastHeard, now)
        if _state == .publisherSilent { change(to: isCaughtUp ? .live : .catchingUp) }
    }

    /// An answer to the outstanding FETCH could not be read: the next one may go at once.
    public mutating func fetchReplyLost() {
        fetchSentAt = nil
    }

    // MARK: Timers

    /// Advances the timers to `now`: returns the sequence to FETCH from when a FETCH is due (the
    /// caller sends it, then calls `fetchSent`), and reports a silent publisher.
    public mutating func due(now: ContinuousClock.Instant) -> UInt64? {
        var fetchFrom: UInt64?
        if !hasFetched {
            fetchFrom = nextSequence
        } else if _knownPublishedSequence > _deliveredThrough {
            if fetchSentAt.map({ now - $0 >= configuration.fetchRetryInterval }) ?? true { fetchFrom = nextSequence }
        } else if let fetchSentAt, now - fetchSentAt >= configuration.fetchRetryInterval {
            // The initial FETCH (or one to a restarted queue) went unanswered: ask again.
            fetchFrom = nextSequence
        }
        if _state == .catchingUp, isCaughtUp { change(to: .live) }
        if _state != .publisherSilent, now - lastHeard >= configuration.silenceTimeout { change(to: .publisherSilent) }
        return fetchFrom
    }

    /// The FETCH `due` asked for was handed to the socket (`sent`), or the socket could not take it now.
    public mutating func fetchSent(now: ContinuousClock.Instant, sent: Bool = true) {
        fetchSentAt = now
        hasFetched = true
        if sent { _counters.fetchesSent += 1 }
    }

    /// When `due` next has something to do without any input (a silence or a FETCH retry), if ever.
    public func nextDeadline() -> ContinuousClock.Instant? {
        var deadline: ContinuousClock.Instant?
        if _state != .publisherSilent { deadline = lastHeard + configuration.silenceTimeout }
        if let fetchSentAt {
            let retry = fetchSentAt + configuration.fetchRetryInterval
            deadline = deadline.map { min($0, retry) } ?? retry
        }
        return deadline
    }

    /// The state changes since the last call, in order (for a callback).
    public mutating func takeStateChanges() -> [EventSubscriberState] {
        defer { stateChanges.removeAll(keepingCapacity: true) }
        return stateChanges
    }

    // MARK: Ordering

    @inlinable mutating func accept(_ record: Record, previous: UInt64, into delivered: inout [Record]) {
        if record.sequence <= _deliveredThrough {
            _counters.duplicatesDropped += 1
            return
        }
        if previous > _deliveredThrough {
            if held.count >= configuration.maximumHeldRecords {
                held.removeAll(keepingCapacity: true)
                heldByPrevious.removeAll(keepingCapacity: true)
            }
            if let earlier = held.updateValue(HeldRecord(record: record, previous: previous), forKey: record.sequence) {
                _counters.duplicatesDropped += 1
                heldByPrevious[earlier.previous] = nil
            }
            heldByPrevious[previous] = record.sequence
            return
        }
        deliver(record, into: &delivered)
        releaseHeld(into: &delivered)
    }

    @inlinable mutating func deliver(_ record: Record, into delivered: inout [Record]) {
        delivered.append(record)
        _deliveredThrough = record.sequence
        _counters.delivered += 1
        closeGapIfPassed()
    }

    /// Delivers the held records that follow `deliveredThrough` exactly (the usual case after a gap).
    @inlinable mutating func releaseHeld(into delivered: inout [Record]) {
        while !held.isEmpty, let sequence = heldByPrevious.removeValue(forKey: _deliveredThrough),
              let next = held.removeValue(forKey: sequence) {
            deliver(next.record, into: &delivered)
        }
    }

    /// After `deliveredThrough` jumped past records (a FETCH reply complete beyond its last record):
    /// held records at or below it are duplicates, and those whose `previous` it passed follow in order.
    private mutating func releaseHeldAfterJump(into delivered: inout [Record]) {
        guard !held.isEmpty else { return }
        for sequence in held.keys.sorted() {
            guard let entry = held[sequence] else { continue }
            if sequence <= _deliveredThrough {
                _counters.duplicatesDropped += 1
            } else if entry.previous <= _deliveredThrough {
                deliver(entry.record, into: &delivered)
            } else {
                break
            }
            held[sequence] = nil
            heldByPrevious[entry.previous] = nil
        }
        releaseHeld(into: &delivered)
    }

    @inlinable mutating func closeGapIfPassed() {
        if let gapEnd = openGapEnd, _deliveredThrough >= gapEnd {
            _counters.gapsRecovered += 1
            openGapEnd = nil
        }
    }

    /// Notes that the stream goes through `sequence`; what of it is not delivered is a gap. Gaps are
    /// only counted once caught up: before that, missing records are plain catch-up.
    @inlinable mutating func announced(through sequence: UInt64) {
        _knownPublishedSequence = max(_knownPublishedSequence, sequence)
        guard hasCaughtUpOnce, sequence > _deliveredThrough else { return }
        openGapEnd = max(openGapEnd ?? 0, sequence)
    }

    @inlinable mutating func change(to newState: EventSubscriberState) {
        guard _state != newState else { return }
        _state = newState
        stateChanges.append(newState)
    }
}
