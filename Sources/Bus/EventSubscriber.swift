import StoreKitModel
import ZeroMQ

/// Settings of an `EventSubscriber`.
public struct EventSubscriberConfiguration: Sendable {
    /// The queue's PUB endpoint.
    public var eventsEndpoint: String
    /// The queue's ROUTER endpoint, used for FETCH.
    public var requestsEndpoint: String
    /// First sequence to deliver; 0 and 1 both mean from the beginning of the partition.
    public var startSequence: UInt64 = 1
    /// Without any event or heartbeat for this long the publisher is reported silent.
    public var silenceTimeout: Duration = .seconds(2)
    /// An unanswered FETCH is sent again after this long.
    public var fetchRetryInterval: Duration = .seconds(1)
    /// Records asked for per FETCH (the queue may send fewer).
    public var fetchBatchSize: UInt32 = 1_000
    /// Messages the SUB socket queues before the publisher drops (drops are recovered by FETCH).
    public var receiveHighWaterMark: Int = 100_000
    /// Live events held while an earlier gap is filled; beyond it they are dropped and fetched later.
    public var maximumBufferedEvents: Int = 200_000
    /// Largest event payload accepted; bounds every inbound message.
    public var maximumEventPayloadBytes: Int = 1 << 20
    /// Most messages read per socket in one `receive` call before returning what is deliverable.
    public var messagesPerReceive: Int = 8_192
    /// Set when the queue is a CURVE server.
    public var curve: CurveClientKeys?
    /// The newest wire version to use: with 2 the subscriber asks the queue (HELLO) and, if it speaks
    /// version 2, hears the events as one batch per publishing round (`all`, docs/wire-format.md).
    public var newestWireVersion: UInt8 = BusWire.clientWireVersion
    /// Follow only the devices whose names start with this prefix (topic `grp.<prefix>/`, group FETCH):
    /// per-group gap detection, and none of the other devices' events to read. Nil: the whole partition.
    public var topicGroup: String?
    /// Follow only these devices, each as a topic group of its own (`grp.<device>/`, ordered and gap-filled
    /// on its own, `FollowedDevices`): what a client key bound to its devices may subscribe to. FETCHes are
    /// plain (the queue answers such a key with its devices' records and the run-wide ones); records of other
    /// devices a group also carries are dropped. Nil: the whole partition (or `topicGroup`).
    public var followedDevices: [String]?

    public init(eventsEndpoint: String, requestsEndpoint: String) {
        self.eventsEndpoint = eventsEndpoint
        self.requestsEndpoint = requestsEndpoint
    }
}

/// What an `EventSubscriber` has done so far.
public struct EventSubscriberCounters: Sendable, Hashable {
    public var delivered = 0
    /// Gaps in the live stream (drops, late subscription) that were filled by FETCH.
    public var gapsRecovered = 0
    /// Records received more than once (live and fetched) and delivered once.
    public var duplicatesDropped = 0
    public var fetchesSent = 0
    /// Version-2 event batches received.
    public var eventBatchesReceived = 0
    /// Records whose payload EventCodec refused; counted and skipped by `receive`.
    public var undecodableEvents = 0
    /// Refused inbound messages by reason.
    public var malformed = WireFailureCounts()

    public init() {}
}

extension BusRecord: SequencedRecord {}

/// Receives a queue's events in order, without gaps or duplicates, whatever the network or
/// the subscriber's own speed did: live events come over SUB, and anything missed (late join,
/// PUB drops at the high-water mark, a restart) is fetched from the queue over DEALER. The
/// ordering, gap and catch-up logic is `SubscriberState`'s; this class owns the sockets and the clock.
///
/// Poll-loop friendly and single-threaded: call `receive(timeout:)` or
/// `receiveRecords(timeout:)` from the thread that owns it. Not Sendable.
public final class EventSubscriber {
    public let configuration: EventSubscriberConfiguration
    /// The ordering, gaps and catch-up, with no socket and no clock.
    public private(set) var machine: SubscriberState<BusRecord>
    /// With `followedDevices`: one stream per device (then `machine` is unused).
    private var followed: FollowedDevices<BusRecord>?
    /// The next sequence to deliver (with `followedDevices`: after the lowest stream's `deliveredThrough`).
    public var nextSequence: UInt64 { deliveredThrough + 1 }
    /// Every record this subscriber follows up to this sequence has been delivered.
    public var deliveredThrough: UInt64 { followed?.deliveredThrough ?? machine.deliveredThrough }
    public var state: EventSubscriberState { followed?.state ?? machine.state }
    /// Highest sequence the queue is known to have published.
    public var knownPublishedSequence: UInt64 { followed?.knownPublishedSequence ?? machine.knownPublishedSequence }
    /// Heard from, live, and delivered through everything announced (every device's stream, with `followedDevices`).
    public var isCaughtUp: Bool {
        followed?.isCaughtUp ?? (machine.state == .live && machine.knownPublishedSequence > 0 && machine.deliveredThrough >= machine.knownPublishedSequence)
    }
    public var counters: EventSubscriberCounters {
        var counters = wireCounters
        let stateCounters = followed?.counters ?? machine.counters
        counters.delivered = stateCounters.delivered
        counters.gapsRecovered = stateCounters.gapsRecovered
        counters.duplicatesDropped = stateCounters.duplicatesDropped
        counters.fetchesSent = followed == nil ? machine.counters.fetchesSent : wireCounters.fetchesSent
        return counters
    }

    /// Whether every record this subscriber follows up to `sequence` (one an acknowledgement named, so the
    /// queue published it) was delivered. With `followedDevices`, a device whose stream has been quiet is
    /// brought up to it by a FETCH, so ask again.
    public func hasDelivered(through sequence: UInt64) -> Bool {
        followed?.want(through: sequence)
        return deliveredThrough >= sequence
    }

    private var isFetchOutstanding: Bool { followed?.isFetchOutstanding ?? machine.isFetchOutstanding }
    /// Called on every state change (for example to log a silent publisher).
    public var onStateChange: ((EventSubscriberState) -> Void)?
    /// Called for every refused inbound message or undecodable payload.
    public var onMalformed: ((WireFailure) -> Void)?

    private var wireCounters = EventSubscriberCounters()
    private let subscriber: Socket
    private let dealer: Socket
    /// Both sockets: polled while a FETCH awaits its BATCH.
    private let poller = Poller()
    /// The events socket alone: polled while no FETCH is outstanding, the usual live state. A request
    /// socket in a zmq_poll costs two system calls per check, two checks per poll, and reading it to
    /// EAGAIN two more, on every round of a role's loop, for replies that only come after a FETCH.
    private let eventsPoller = Poller()
    /// When the request socket was last read to EAGAIN without a FETCH outstanding: a late BATCH (the
    /// answer to a FETCH sent again) is read at least this often, so it never waits long in libzmq.
    private var repliesSweptAt: ContinuousClock.Instant
    private static let repliesSweepInterval: Duration = .milliseconds(100)
    /// Set by a `PartitionedSubscriber`, whose own poll includes the request socket: read it every round.
    var readsRepliesEveryRound = false
    /// A HELLO awaits its reply (a version-1 queue answers it with a `malformed` ACK).
    private var helloPending = false
    /// Subscribed to the version-2 batches; `evt.` is given up once the first batch arrived, so the
    /// switch from one stream to the other leaves no gap (records heard twice are dropped by sequence).
    private var subscribedToBatches = false
    private var subscribedToEvents = true

    /// Connects both sockets and asks for the records from `startSequence` on right away.
    public init(context: ZeroMQContext, configuration: EventSubscriberConfiguration) throws(ZeroMQError) {
        self.configuration = configuration
        let now = ContinuousClock.now
        machine = SubscriberState(
            startSequence: configuration.startSequence,
            configuration: .init(silenceTimeout: configuration.silenceTimeout, fetchRetryInterval: configuration.fetchRetryInterval,
                                 maximumHeldRecords: configuration.maximumBufferedEvents),
            now: now)
        subscriber = try context.socket(.subscriber)
        dealer = try context.socket(.dealer)
        if let curve = configuration.curve {
            try curve.apply(to: subscriber)
            try curve.apply(to: dealer)
        }
        try subscriber.set(.receiveHighWaterMark, configuration.receiveHighWaterMark)
        let recordBytes = configuration.maximumEventPayloadBytes + BusWire.headerByteCount
        // One event, or a batch of about 256 KiB whose last record may overshoot it.
        subscriber.receiveLimits = MessageLimits(maximumFrameCount: 3, maximumByteCount: BusWire.maximumEventBatchBytes + recordBytes + 1_024)
        // A BATCH holds up to 1 MiB of payload plus one record that may overshoot it.
        dealer.receiveLimits = MessageLimits(
            maximumFrameCount: Int(configuration.fetchBatchSize) + 2, maximumByteCount: (2 << 20) + 2 * recordBytes)
        if let devices = configuration.followedDevices {
            let streams = FollowedDevices(devices: devices, startSequence: configuration.startSequence, configuration: machine.configuration, now: now)
            for device in streams.devices { try subscriber.subscribe(to: BusWire.groupTopic(device)) }
            followed = streams
            subscribedToEvents = false
        } else if let topicGroup = configuration.topicGroup {
            // The group's messages and its heartbeats come on its own topic; nothing else is heard.
            try subscriber.subscribe(to: BusWire.groupTopic(topicGroup))
            subscribedToEvents = false
        } else {
            try subscriber.subscribe(to: BusWire.eventTopicPrefix)
            try subscriber.subscribe(to: BusWire.heartbeatTopic)
        }
        try subscriber.connect(configuration.eventsEndpoint)
        try dealer.connect(configuration.requestsEndpoint)
        poller.register(subscriber, for: .readable)
        poller.register(dealer, for: .readable)
        eventsPoller.register(subscriber, for: .readable)
        repliesSweptAt = now
        try maintain()
        if configuration.newestWireVersion >= 2, configuration.topicGroup == nil, configuration.followedDevices == nil {
            helloPending = try dealer.send([Array(BusWire.RequestVerb.hello.rawValue.utf8)], mode: .nonBlocking)
        }
    }

    /// Closes both sockets; idempotent.
    public func close() {
        subscriber.close()
        dealer.close()
    }

    /// The sockets to wait on, for a loop that polls several subscribers at once
    /// (`PartitionedSubscriber`); `receiveRecords(timeout: .zero)` then reads what arrived.
    public var pollItems: [PollItem] { [.socket(subscriber, .readable), .socket(dealer, .readable)] }

    /// The next in-order records, as soon as any are deliverable, or an empty array when
    /// `timeout` passes first. Payloads are not decoded.
    public func receiveRecords(timeout: Duration) throws(ZeroMQError) -> [BusRecord] {
        let deadline = ContinuousClock.now + timeout
        var delivered: [BusRecord] = []
        while true {
            try drainSubscriber(into: &delivered)
            if readsRepliesEveryRound || isFetchOutstanding || ContinuousClock.now - repliesSweptAt >= Self.repliesSweepInterval {
                try drainDealer(into: &delivered)
                if !isFetchOutstanding { repliesSweptAt = .now }
            }
            try maintain()
            if !delivered.isEmpty {
                // Each device's stream is in order; across devices, the log's order within one call.
                if followed != nil { delivered.sort { $0.sequence < $1.sequence } }
                return delivered
            }
            let now = ContinuousClock.now
            if now >= deadline { return delivered }
            var wait = deadline - now
            if let timer = followed?.nextDeadline() ?? machine.nextDeadline() { wait = min(wait, max(.milliseconds(1), timer - now)) }
            if isFetchOutstanding {
                try poller.poll(timeout: wait)
            } else {
                try eventsPoller.poll(timeout: min(wait, max(.zero, repliesSweptAt + Self.repliesSweepInterval - .now)))
            }
        }
    }

    /// The next in-order events, decoded with EventCodec, or an empty array when `timeout`
    /// passes first. A payload EventCodec refuses is counted, reported and skipped.
    public func receive(timeout: Duration) throws(ZeroMQError) -> [RecordedEvent] {
        let records = try receiveRecords(timeout: timeout)
        var events: [RecordedEvent] = []
        events.reserveCapacity(records.count)
        for record in records {
            do {
                events.append(try record.decoded())
            } catch {
                wireCounters.undecodableEvents += 1
                onMalformed?(WireFailure(.undecodablePayload, "event \(record.sequence): \(error)"))
            }
        }
        return events
    }

    // MARK: Inbound

    private func drainSubscriber(into delivered: inout [BusRecord]) throws(ZeroMQError) {
        for _ in 0..<configuration.messagesPerReceive {
            // Read where libzmq received it: only the payload is copied (a record keeps it).
            let outcome: Result<Published, WireFailure>
            do {
                let namesGroups = followed != nil
                guard let received = try subscriber.receiveMessage(timeout: .zero, { message in
                    Result { () throws(WireFailure) in try Self.decodePublished(message, namingGroups: namesGroups) }
                }) else { return }
                outcome = received
            } catch {
                guard case .messageTooLarge(let frameCount, let byteCount) = error.kind else { throw error }
                refuse(WireFailure(.oversized, "published message of \(frameCount) frames and \(byteCount) bytes exceeds the limits"))
                continue
            }
            let now = ContinuousClock.now
            if followed != nil {
                switch outcome {
                case .success(.group(let prefix?, let message)): followed!.received(group: prefix, message, now: now, into: &delivered)
                case .success: followed!.heard(now: now)
                case .failure(let failure):
                    followed!.heard(now: now)
                    refuse(failure)
                }
                continue
            }
            switch outcome {
            case .success(.heartbeat(let sequence)):
                machine.receivedHeartbeat(through: sequence, now: now)
            case .success(.event(let record)):
                machine.receivedLive(record, previous: record.sequence - 1, now: now, into: &delivered)
            case .success(.batch(let records)):
                wireCounters.eventBatchesReceived += 1
                for record in records { machine.receivedLive(record, previous: record.sequence - 1, now: now, into: &delivered) }
                if subscribedToEvents {
                    try subscriber.unsubscribe(from: BusWire.eventTopicPrefix)
                    subscribedToEvents = false
                }
            case .success(.group(_, .records(let previous, let records))):
                wireCounters.eventBatchesReceived += 1
                var before = previous
                for record in records {
                    machine.receivedLive(record, previous: before, now: now, into: &delivered)
                    before = record.sequence
                }
            case .success(.group(_, .heartbeat(let last))):
                machine.receivedHeartbeat(through: last, now: now)
            case .failure(let failure):
                machine.heard(now: now)
                refuse(failure)
            }
        }
    }

    /// What one published message says.
    private enum Published {
        case heartbeat(through: UInt64)
        case event(BusRecord)
        /// Version 2: the records of one publishing round.
        case batch([BusRecord])
        /// A topic group's records of one round, or its heartbeat, with the group's prefix when asked for.
        case group(String?, GroupMessage)
    }

    private static func decodePublished(_ message: borrowing ReceivedMessage, namingGroups: Bool) throws(WireFailure) -> Published {
        if message.count == 2, message[0].elementsEqual(BusWire.batchedEventsTopic) {
            return .batch(try BusWire.decodeEventBatch(message[1]))
        }
        if message.count >= 1, message[0].starts(with: BusWire.groupTopicPrefix) {
            let prefix = namingGroups ? message[0].withUnsafeBytes { BusWire.groupPrefix(ofTopic: $0) } : nil
            return .group(prefix, try GroupMessage.decode(message))
        }
        guard message.count == 3 else { throw WireFailure(.wrongFrameCount, "published message has \(message.count) frames, expected 3") }
        let topic = message[0]
        let headerFrame = message[1]
        let header = try BusWire.decodeHeader(headerFrame)
        guard headerFrame.count == BusWire.headerByteCount else {
            throw WireFailure(.malformedHeader, "published header has \(headerFrame.count) bytes, expected \(BusWire.headerByteCount)")
        }
        switch header.kind {
        case .heartbeat:
            guard topic.elementsEqual(BusWire.heartbeatTopic) else { throw WireFailure(.malformedHeader, "heartbeat on an event topic") }
            return .heartbeat(through: header.sequence)
        case .event:
            guard topic.starts(with: BusWire.eventTopicPrefix) else { throw WireFailure(.malformedHeader, "event on a non-event topic") }
            let device = String(decoding: UnsafeRawBufferPointer(rebasing: topic[BusWire.eventTopicPrefix.count...]), as: UTF8.self)
            return .event(BusRecord(
                sequence: header.sequence, timestamp: header.timestamp, payload: Array(message[2]),
                device: device == BusWire.deviceLessTopicSuffix ? nil : device))
        }
    }

    private func drainDealer(into delivered: inout [BusRecord]) throws(ZeroMQError) {
        for _ in 0..<configuration.messagesPerReceive {
            let frames: [[UInt8]]
            do {
                guard let received = try dealer.receive(timeout: .zero) else { return }
                frames = received
            } catch {
                guard case .messageTooLarge(let frameCount, let byteCount) = error.kind else { throw error }
                refuse(WireFailure(.oversized, "reply of \(frameCount) frames and \(byteCount) bytes exceeds the limits"))
                if followed != nil { followed!.fetchReplyLost() } else { machine.fetchReplyLost() }
                continue
            }
            if followed != nil { followed!.heard(now: .now) } else { machine.heard(now: .now) }
            do {
                try handleReply(frames, into: &delivered)
            } catch {
                refuse(error)
            }
        }
    }

    private func handleReply(_ frames: [[UInt8]], into delivered: inout [BusRecord]) throws(WireFailure) {
        if frames.count == 2, frames[0] == BusWire.ReplyVerb.hello.bytes {
            helloPending = false
            let versions = try frames[1].withUnsafeBytes { body in Result { () throws(WireFailure) in try BusWire.decodeHelloVersions(body) } }.get()
            if versions.contains(2), !subscribedToBatches {
                do {
                    try subscriber.subscribe(to: BusWire.batchedEventsTopic)
                    subscribedToBatches = true
                } catch {
                    throw WireFailure(.malformedBody, "subscribing to the event batches failed: \(error)")
                }
            }
            return
        }
        if helloPending, frames.first == BusWire.ReplyVerb.acknowledgement.bytes, frames.count == 6, frames[3].isEmpty,
           frames[5].starts(with: WireFailureReason.unknownVerb.rawValue.utf8) {
            // A version-1 queue does not know HELLO: this subscriber goes on hearing `evt.`.
            helloPending = false
            return
        }
        guard frames.first == Array(BusWire.ReplyVerb.batch.rawValue.utf8) else {
            throw WireFailure(.unknownVerb, "unexpected reply to a subscriber (expected BATCH)")
        }
        // Whatever the BATCH holds, it answers the FETCH: a refused one is asked for again at once.
        if followed != nil { followed!.fetchReplyLost() } else { machine.fetchReplyLost() }
        var headerBytes = configuration.topicGroup == nil ? BusWire.batchHeaderByteCount : BusWire.groupBatchHeaderByteCount
        // Followed devices' plain FETCH: group-shaped for a key bound to them, whole for one that hears every device.
        if followed != nil, frames.count >= 2, frames[1].count == BusWire.groupBatchHeaderByteCount { headerBytes = BusWire.groupBatchHeaderByteCount }
        guard frames.count >= 2, frames[1].count == headerBytes else {
            throw WireFailure(.malformedBody, "BATCH header frame is not \(headerBytes) bytes")
        }
        let first = BusWire.readLittleEndian(frames[1], at: 0)
        let count = Int(BusWire.readLittleEndian32(frames[1], at: 8))
        let durable = BusWire.readLittleEndian(frames[1], at: 12)
        guard frames.count == count + 2 else {
            throw WireFailure(.wrongFrameCount, "BATCH announces \(count) records but carries \(frames.count - 2)")
        }
        // A group FETCH's records ascend up to how far it looked; a whole one's are consecutive.
        let scannedThrough = headerBytes == BusWire.batchHeaderByteCount ? nil : Optional(BusWire.readLittleEndian(frames[1], at: 20))
        var records: [BusRecord] = []
        records.reserveCapacity(count)
        var expected = max(1, first)
        for frame in frames.dropFirst(2) {
            let header = try BusWire.decodeHeader(frame)
            guard header.kind == .event else { throw WireFailure(.unknownKind, "BATCH record is not an event") }
            if let scannedThrough {
                guard header.sequence >= expected, header.sequence <= scannedThrough else {
                    throw WireFailure(.malformedBody, "group BATCH record \(header.sequence) is out of order or beyond \(scannedThrough)")
                }
            } else if header.sequence != expected {
                throw WireFailure(.malformedBody, "BATCH record \(header.sequence) where \(expected) was due (records are consecutive)")
            }
            expected = header.sequence + 1
            var record = BusRecord(sequence: header.sequence, timestamp: header.timestamp,
                                   payload: Array(frame.dropFirst(BusWire.headerByteCount)), device: nil)
            if followed != nil {
                // A BATCH names no topics: the followed streams sort records by the event's device.
                do {
                    record.device = try EventCodec.decodeEvent(record.payload).event.device
                } catch {
                    throw WireFailure(.undecodablePayload, "BATCH record \(header.sequence): \(error)")
                }
            }
            records.append(record)
        }
        if followed != nil {
            followed!.receivedFetchReply(from: max(1, first), records: records, completeThrough: scannedThrough ?? (expected - 1), published: durable,
                                         now: .now, into: &delivered)
            return
        }
        machine.receivedFetchReply(from: max(1, first), records: records, completeThrough: scannedThrough ?? (expected - 1), published: durable,
                                   now: .now, into: &delivered)
    }

    // MARK: Fetching and liveness

    private func maintain() throws(ZeroMQError) {
        let now = ContinuousClock.now
        if followed != nil {
            if let from = followed!.due(now: now) { try sendFetch(from: from, now: now) }
        } else if let from = machine.due(now: now) {
            try sendFetch(from: from, now: now)
        }
        reportStateChanges()
    }

    private func sendFetch(from: UInt64, now: ContinuousClock.Instant) throws(ZeroMQError) {
        let body = configuration.topicGroup.map { BusWire.encodeGroupFetch(from: from, maximumCount: configuration.fetchBatchSize, prefix: $0) }
            ?? BusWire.encodeFetch(from: from, maximumCount: configuration.fetchBatchSize)
        let sent = try dealer.send([Array(BusWire.RequestVerb.fetch.rawValue.utf8), body], mode: .nonBlocking)
        if followed != nil {
            followed!.fetchSent(from: from, now: now, sent: sent)
            if sent { wireCounters.fetchesSent += 1 }
        } else {
            machine.fetchSent(now: now, sent: sent)
        }
    }

    private func reportStateChanges() {
        let changes = followed != nil ? followed!.takeStateChanges() : machine.takeStateChanges()
        guard let onStateChange else { return }
        for change in changes { onStateChange(change) }
    }

    private func refuse(_ failure: WireFailure) {
        wireCounters.malformed.record(failure.reason)
        onMalformed?(failure)
    }
}
