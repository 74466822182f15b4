/// A record that names the device it concerns (nil for a run-wide one): what `FollowedDevices` sorts into streams.
public protocol DeviceRecord: SequencedRecord {
    var device: String? { get }
}

/// The ordering of an `EventSubscriber` that follows a few devices, each as a topic group of its own
/// (`grp.<device>/`): what a client key bound to its devices may hear (docs/reliability.md, "Roles").
/// No socket and no clock: each device's stream is a `SubscriberState`, fed its group's messages. The
/// live subscriber runs it over ZeroMQ, the deterministic runtime over simulated links.
///
/// One FETCH at a time serves every stream: the queue answers a key bound to its devices with all of
/// its devices' records (and the run-wide ones) from `from` through `scanned_through`, so a reply is
/// complete over that range for each stream that had delivered up to `from - 1`. A group also carries
/// the devices whose names merely start with its device's (`device-0001` and `device-00010`): a stream
/// orders them (its group's previous-chain runs through them) but delivers only its own device's.
public struct FollowedDevices<Record: DeviceRecord> {
    public let devices: [String]
    public private(set) var streams: [SubscriberState<Record>]
    /// Each device's stream, and the streams whose device a record's device begins with (the groups that carry it).
    private let streamOfDevice: PrefixIndex
    private let fetchRetryInterval: Duration
    /// Every run-wide record (no device) up to this sequence was delivered.
    public private(set) var runWideThrough: UInt64
    private var fetchSentAt: ContinuousClock.Instant?
    /// A caller needs every stream delivered through this (an acknowledgement named it): a FETCH brings
    /// a stream whose device has been quiet up to it.
    private var wantedThrough: UInt64 = 0
    public private(set) var state: EventSubscriberState = .catchingUp
    private var stateChanges: [EventSubscriberState] = []
    /// Records of other devices that a group carried, ordered and dropped.
    public private(set) var othersDropped = 0
    private var runWideDelivered = 0
    /// Scratch for one stream's deliveries.
    private var scratch: [Record] = []

    public init(devices: [String], startSequence: UInt64, configuration: SubscriberState<Record>.Configuration, now: ContinuousClock.Instant) {
        let unique = Array(Set(devices)).sorted()
        self.devices = unique
        streams = unique.map { _ in SubscriberState(startSequence: startSequence, configuration: configuration, now: now) }
        streamOfDevice = PrefixIndex(unique)
        fetchRetryInterval = configuration.fetchRetryInterval
        runWideThrough = max(1, startSequence) - 1
    }

    /// Every record of every followed device up to this sequence was delivered (the lowest over the streams).
    public var deliveredThrough: UInt64 { streams.lazy.map(\.deliveredThrough).min() ?? 0 }
    /// The furthest any stream is known to go; 0 until something was heard.
    public var knownPublishedSequence: UInt64 { streams.lazy.map(\.knownPublishedSequence).max() ?? 0 }
    public var isFetchOutstanding: Bool { fetchSentAt != nil }
    /// Every stream heard from, live, and delivered through what it announced.
    public var isCaughtUp: Bool {
        streams.allSatisfy { $0.state == .live && $0.knownPublishedSequence > 0 && $0.deliveredThrough >= $0.knownPublishedSequence }
    }

    public var counters: SubscriberState<Record>.Counters {
        var total = SubscriberState<Record>.Counters()
        for stream in streams {
            total.delivered += stream.counters.delivered
            total.gapsRecovered += stream.counters.gapsRecovered
            total.duplicatesDropped += stream.counters.duplicatesDropped
        }
        total.delivered += runWideDelivered - othersDropped
        return total
    }

    /// A group's records of one round, ascending, with `previous`, the group's record before the first.
    public mutating func receivedRecords(group: String, previous: UInt64, _ records: [Record], now: ContinuousClock.Instant,
                                         into delivered: inout [Record]) {
        guard let index = streamOfDevice.position(of: group) else { return }
        var before = previous
        for record in records {
            streams[index].receivedLive(record, previous: before, now: now, into: &scratch)
            before = record.sequence
        }
        takeDelivered(of: index, into: &delivered)
    }

    /// A group's heartbeat: its last published sequence.
    public mutating func receivedHeartbeat(group: String, last: UInt64, now: ContinuousClock.Instant) {
        guard let index = streamOfDevice.position(of: group) else { return }
        streams[index].receivedHeartbeat(through: last, now: now)
    }

    /// A FETCH reply: `records` (each with its device, nil for a run-wide one) are all of the followed
    /// devices' from `from` through `completeThrough`; the queue has published through `published`.
    public mutating func receivedFetchReply(from: UInt64, records: [Record], completeThrough: UInt64, published: UInt64,
                                            now: ContinuousClock.Instant, into delivered: inout [Record]) {
        fetchSentAt = nil
        let from = max(1, from)
        var perStream = Array(repeating: [Record](), count: streams.count)
        for record in records {
            guard let device = record.device else {
                if runWideThrough >= from - 1, record.sequence > runWideThrough {
                    delivered.append(record)
                    runWideThrough = record.sequence
                    runWideDelivered += 1
                }
                continue
            }
            // A group holds the devices its device's name is a prefix of: each such stream orders the record.
            streamOfDevice.forEachPosition(prefixing: device) { perStream[$0].append(record) }
        }
        if runWideThrough >= from - 1 { runWideThrough = max(runWideThrough, completeThrough) }
        for index in streams.indices {
            if streams[index].deliveredThrough >= from - 1 {
                streams[index].receivedFetchReply(from: from, records: perStream[index], completeThrough: completeThrough,
                                                  published: published, now: now, into: &scratch)
                takeDelivered(of: index, into: &delivered)
            } else {
                streams[index].heard(now: now)
                streams[index].fetchReplyLost()
            }
        }
    }

    /// The outstanding FETCH's reply could not be read: the next may go at once.
    public mutating func fetchReplyLost() {
        fetchSentAt = nil
        for index in streams.indices { streams[index].fetchReplyLost() }
    }

    /// Some message without records arrived: the publisher is alive.
    public mutating func heard(now: ContinuousClock.Instant) {
        for index in streams.indices { streams[index].heard(now: now) }
    }

    /// Every stream is to be delivered through `sequence` (an acknowledgement named it, so the queue published it).
    public mutating func want(through sequence: UInt64) {
        wantedThrough = max(wantedThrough, sequence)
    }

    /// Advances every stream's timers: the sequence to FETCH from when one is due (the caller sends it,
    /// then calls `fetchSent`); one FETCH at a time, sent again after the retry interval.
    public mutating func due(now: ContinuousClock.Instant) -> UInt64? {
        var from: UInt64?
        for index in streams.indices {
            if let due = streams[index].due(now: now) { from = min(from ?? .max, due) }
        }
        let lowest = deliveredThrough
        if lowest < wantedThrough { from = min(from ?? .max, lowest + 1) }
        updateState()
        if let fetchSentAt, now - fetchSentAt < fetchRetryInterval { return nil }
        return from
    }

    /// The FETCH `due` asked for was handed to the socket (`sent`), or the socket could not take it now.
    public mutating func fetchSent(from: UInt64, now: ContinuousClock.Instant, sent: Bool) {
        fetchSentAt = now
        for index in streams.indices where streams[index].deliveredThrough >= from - 1 { streams[index].fetchSent(now: now, sent: sent) }
    }

    public func nextDeadline() -> ContinuousClock.Instant? {
        let deadline = streams.lazy.compactMap { $0.nextDeadline() }.min()
        guard let fetchSentAt else { return deadline }
        let retry = fetchSentAt + fetchRetryInterval
        return deadline.map { min($0, retry) } ?? retry
    }

    public mutating func takeStateChanges() -> [EventSubscriberState] {
        for index in streams.indices { _ = streams[index].takeStateChanges() }
        defer { stateChanges.removeAll(keepingCapacity: true) }
        return stateChanges
    }

    /// The one state of all streams: silent when one is, catching up while one is, else live.
    private mutating func updateState() {
        let newState: EventSubscriberState = streams.contains { $0.state == .publisherSilent } ? .publisherSilent
            : streams.contains { $0.state == .catchingUp } ? .catchingUp : .live
        guard newState != state else { return }
        state = newState
        stateChanges.append(newState)
    }

    /// Moves what stream `index` delivered to `delivered`, its own device's records only.
    private mutating func takeDelivered(of index: Int, into delivered: inout [Record]) {
        guard !scratch.isEmpty else { return }
        let own = devices[index]
        for record in scratch {
            // A fetched record's device is known; a live one's is its topic's.
            if record.device == own { delivered.append(record) } else { othersDropped += 1 }
        }
        scratch.removeAll(keepingCapacity: true)
    }
}
