import EventLog
import StoreKitModel
import ZeroMQ

/// What the queue's command handler did with one command: the decision and the records it
/// appended to the log (in order). The endpoint publishes those records and acknowledges the
/// command only once the log says they are durable.
public struct CommandOutcome: Sendable, Hashable {
    public enum Decision: Sendable, Hashable {
        case accepted
        /// The domain refused the command; `reason` goes back in the ACK.
        case rejected(reason: String)
        /// The id was applied before; nothing new was appended.
        case duplicate
    }

    public var decision: Decision
    /// Records appended for this command, ascending; empty for duplicates.
    public var appended: [BusRecord]
    /// The last sequence the command produced (for a duplicate: what the original produced).
    public var lastSequence: UInt64

    public init(decision: Decision, appended: [BusRecord], lastSequence: UInt64) {
        self.decision = decision
        self.appended = appended
        self.lastSequence = lastSequence
    }

    public static func accepted(_ appended: [BusRecord]) -> CommandOutcome {
        CommandOutcome(decision: .accepted, appended: appended, lastSequence: appended.last?.sequence ?? 0)
    }

    public static func rejected(_ reason: String, appended: [BusRecord]) -> CommandOutcome {
        CommandOutcome(decision: .rejected(reason: reason), appended: appended, lastSequence: appended.last?.sequence ?? 0)
    }

    public static func duplicate(lastSequence: UInt64) -> CommandOutcome {
        CommandOutcome(decision: .duplicate, appended: [], lastSequence: lastSequence)
    }
}

/// Settings of a `QueueEndpoint`. Defaults suit one queue process serving a few dozen clients.
public struct QueueEndpointConfiguration: Sendable {
    /// Where the PUB socket binds (`tcp://127.0.0.1:*` picks a free port).
    public var eventsEndpoint: String
    /// Where the ROUTER socket binds.
    public var requestsEndpoint: String
    /// Messages queued per subscriber before PUB drops (subscribers recover drops by FETCH).
    public var sendHighWaterMark: Int = 100_000
    /// How often a heartbeat announces the last published sequence.
    public var heartbeatInterval: Duration = .milliseconds(250)
    /// Published records kept in memory for FETCH; older ones are read from the log.
    public var recentRecordCapacity: Int = 65_536
    /// Most records in one BATCH.
    public var maximumFetchRecords: Int = 1_000
    /// Most payload bytes in one BATCH (a batch holds at least one record).
    public var maximumFetchBytes: Int = 1 << 20
    /// Largest accepted command payload.
    public var maximumCommandBytes: Int = 64 << 10
    /// Above this many records awaiting durability, commands are answered `unavailable`.
    public var maximumUnpublishedRecords: Int = 200_000
    /// Most requests handled per `step`, so publishing and heartbeats are never starved.
    public var requestsPerStep: Int = 4_096
    /// Set to make both sockets CURVE servers; clients then need the matching public key.
    public var curveServerSecretKey: CurveKey?

    public init(eventsEndpoint: String, requestsEndpoint: String) {
        self.eventsEndpoint = eventsEndpoint
        self.requestsEndpoint = requestsEndpoint
    }
}

/// What a `QueueEndpoint` has done so far.
public struct QueueEndpointCounters: Sendable, Hashable {
    /// Commands passed to the handler.
    public var commandsHandled = 0
    /// Commands answered `unavailable` (overload or a throwing handler).
    public var commandsRefusedAsUnavailable = 0
    public var eventsPublished = 0
    public var heartbeatsSent = 0
    public var fetchesServed = 0
    /// FETCHes that had to read the log because the records were no longer in memory.
    public var fetchesReadFromLog = 0
    /// FETCHes answered with an empty batch because reading the log failed.
    public var fetchReadFailures = 0
    /// Refused inbound messages by reason.
    public var refused = WireFailureCounts()

    public init() {}
}

/// The queue side of the bus: publishes durable events on PUB and serves commands, FETCH and
/// PING on ROUTER. Single-threaded by design: the owner calls `step(timeout:)` from one
/// thread, which also runs the command handler, so the handler needs no locking.
///
/// Not Sendable: its sockets belong to the thread that steps it.
public final class QueueEndpoint {
    /// Decides and appends one command; runs on the stepping thread. A throw answers the
    /// command `unavailable` with the error's description (the sender retries).
    public typealias CommandHandler = (Command) throws -> CommandOutcome

    public let configuration: QueueEndpointConfiguration
    /// The bound events endpoint, wildcard ports resolved.
    public let eventsEndpoint: String
    /// The bound requests endpoint, wildcard ports resolved.
    public let requestsEndpoint: String
    /// The partition name, sent in heartbeats and PONG.
    public let partition: String
    /// Highest sequence published (and thus fetchable).
    public private(set) var publishedSequence: UInt64
    public private(set) var counters = QueueEndpointCounters()
    /// Called for every refused inbound message, so the owner can log it.
    public var onRefused: ((WireFailure) -> Void)?
    /// Called when serving a FETCH from the log failed (the reply is an empty batch).
    public var onLogReadFailure: ((String) -> Void)?

    private let writer: PartitionWriter
    private let handler: CommandHandler
    private let publisher: Socket
    private let router: Socket
    private let poller = Poller()
    private var reader: PartitionReader?
    private var recent: RecentRecords
    private var unpublished = FirstInFirstOut<BusRecord>()
    private var pendingAcknowledgements = FirstInFirstOut<PendingAcknowledgement>()
    private var lastEnqueuedSequence: UInt64
    private var lastPublishedTimestamp: Int64 = 0
    private var nextHeartbeat: ContinuousClock.Instant
    private let partitionBytes: [UInt8]

    private struct PendingAcknowledgement {
        var routingID: [UInt8]
        var acknowledgement: CommandAcknowledgement
    }

    /// Binds both sockets. Everything already in the partition is flushed first and counts as
    /// published, so it is served by FETCH from the start.
    ///
    /// - Parameters:
    ///   - writer: the partition the handler appends to, with `.always` or `.groupCommit`
    ///     durability (under `.operatingSystem` nothing would ever be published).
    public init(
        context: ZeroMQContext, configuration: QueueEndpointConfiguration, writer: PartitionWriter,
        handler: @escaping CommandHandler
    ) throws {
        self.configuration = configuration
        self.writer = writer
        self.handler = handler
        partition = writer.partition
        partitionBytes = Array(writer.partition.utf8)
        try writer.flush()
        publishedSequence = writer.durableSequence
        lastEnqueuedSequence = publishedSequence
        recent = RecentRecords(capacity: max(1, configuration.recentRecordCapacity))

        publisher = try context.socket(.publisher)
        router = try context.socket(.router)
        if let secretKey = configuration.curveServerSecretKey {
            try publisher.becomeCurveServer(secretKey: secretKey)
            try router.becomeCurveServer(secretKey: secretKey)
        }
        try publisher.set(.sendHighWaterMark, configuration.sendHighWaterMark)
        try router.set(.sendHighWaterMark, configuration.sendHighWaterMark)
        try router.set(.receiveHighWaterMark, configuration.sendHighWaterMark)
        // Routing id, verb and body; a few spare frames so a wrong count can be answered.
        router.receiveLimits = MessageLimits(maximumFrameCount: 8, maximumByteCount: configuration.maximumCommandBytes + 1_024)
        try publisher.bind(configuration.eventsEndpoint)
        try router.bind(configuration.requestsEndpoint)
        eventsEndpoint = try publisher.lastEndpoint
        requestsEndpoint = try router.lastEndpoint
        poller.register(router, for: .readable)
        nextHeartbeat = .now
    }

    /// Closes both sockets; idempotent.
    public func close() {
        publisher.close()
        router.close()
    }

    /// Number of appended records still waiting for durability before they are published.
    public var unpublishedCount: Int { unpublished.count }

    /// Queues records appended outside a command (such as `runStarted`) for publication once
    /// durable. Records must be ascending and newer than everything handed over before;
    /// older ones are ignored (they are already published or fetchable).
    public func publishWhenDurable(_ records: [BusRecord]) {
        for record in records where record.sequence > lastEnqueuedSequence {
            unpublished.append(record)
            lastEnqueuedSequence = record.sequence
        }
    }

    /// Runs one round: waits up to `timeout` for requests, handles them, publishes what
    /// became durable, acknowledges the commands it covers and sends a heartbeat when due.
    /// The wait is shortened while records await durability (group commit takes ~1 ms).
    public func step(timeout: Duration) throws(ZeroMQError) {
        var wait = min(timeout, max(.zero, nextHeartbeat - .now))
        if !unpublished.isEmpty || !pendingAcknowledgements.isEmpty { wait = min(wait, .milliseconds(1)) }
        try poller.poll(timeout: wait)
        var handled = 0
        while handled < configuration.requestsPerStep {
            let frames: [[UInt8]]
            do {
                guard let received = try router.receive(timeout: .zero) else { break }
                frames = received
            } catch {
                guard case .messageTooLarge(let frameCount, let byteCount) = error.kind else { throw error }
                refuse(nil, WireFailure(.oversized, "request of \(frameCount) frames and \(byteCount) bytes exceeds the limits"))
                handled += 1
                continue
            }
            try handleRequest(frames)
            handled += 1
            // Publish as durability advances, so subscribers are not held up by a long burst.
            if handled % 256 == 0 { try releaseDurable() }
        }
        try releaseDurable()
        if ContinuousClock.now >= nextHeartbeat { try sendHeartbeat() }
    }

    // MARK: Requests

    private func handleRequest(_ frames: [[UInt8]]) throws(ZeroMQError) {
        guard frames.count >= 2 else {
            refuse(nil, WireFailure(.wrongFrameCount, "request has \(frames.count) frames; expected a routing id and a verb"))
            return
        }
        let routingID = frames[0]
        guard let verbText = String(validating: frames[1], as: UTF8.self), let verb = BusWire.RequestVerb(rawValue: verbText) else {
            refuse(routingID, WireFailure(.unknownVerb, "unknown request verb (\(frames[1].count) bytes); expected CMD, FETCH or PING"))
            return
        }
        switch verb {
        case .command:
            guard frames.count == 3 else {
                refuse(routingID, WireFailure(.wrongFrameCount, "CMD has \(frames.count - 1) frames, expected 2"))
                return
            }
            try handleCommand(routingID: routingID, payload: frames[2])
        case .fetch:
            guard frames.count == 3, frames[2].count == BusWire.fetchRequestByteCount else {
                refuse(routingID, WireFailure(.malformedBody, "FETCH needs one \(BusWire.fetchRequestByteCount)-byte frame"))
                return
            }
            try serveFetch(routingID: routingID, body: frames[2])
        case .ping:
            guard frames.count == 2 else {
                refuse(routingID, WireFailure(.wrongFrameCount, "PING has no body frames"))
                return
            }
            try reply(routingID, [Array(BusWire.ReplyVerb.pong.rawValue.utf8), partitionBytes, BusWire.littleEndianBytes(publishedSequence)])
        }
    }

    private func handleCommand(routingID: [UInt8], payload: [UInt8]) throws(ZeroMQError) {
        guard payload.count <= configuration.maximumCommandBytes else {
            refuse(routingID, WireFailure(.commandTooLarge, "command of \(payload.count) bytes exceeds \(configuration.maximumCommandBytes) bytes"),
                   commandID: BusWire.leadingCommandID(payload))
            return
        }
        let command: Command
        do {
            command = try EventCodec.decodeCommand(payload)
        } catch {
            let reason: WireFailureReason = payload.first.map { $0 != EventCodec.formatVersion } ?? false
                ? .unsupportedVersion : .undecodablePayload
            refuse(routingID, WireFailure(reason, error.description), commandID: BusWire.leadingCommandID(payload))
            return
        }
        if unpublished.count >= configuration.maximumUnpublishedRecords {
            counters.commandsRefusedAsUnavailable += 1
            try acknowledge(routingID, CommandAcknowledgement(
                status: .unavailable, commandID: command.id, lastSequence: 0,
                message: "the queue is busy: \(unpublished.count) records await durability; retry later"))
            return
        }
        let outcome: CommandOutcome
        do {
            counters.commandsHandled += 1
            outcome = try handler(command)
        } catch {
            counters.commandsRefusedAsUnavailable += 1
            try acknowledge(routingID, CommandAcknowledgement(
                status: .unavailable, commandID: command.id, lastSequence: 0, message: "the queue could not apply the command: \(error)"))
            return
        }
        publishWhenDurable(outcome.appended)
        let status: AcknowledgementStatus
        let message: String
        switch outcome.decision {
        case .accepted: (status, message) = (.accepted, "")
        case .rejected(let reason): (status, message) = (.rejected, reason)
        case .duplicate: (status, message) = (.duplicate, "")
        }
        let acknowledgement = CommandAcknowledgement(status: status, commandID: command.id, lastSequence: outcome.lastSequence, message: message)
        if outcome.lastSequence <= publishedSequence && pendingAcknowledgements.isEmpty {
            try acknowledge(routingID, acknowledgement)
        } else {
            pendingAcknowledgements.append(PendingAcknowledgement(routingID: routingID, acknowledgement: acknowledgement))
        }
    }

    private func serveFetch(routingID: [UInt8], body: [UInt8]) throws(ZeroMQError) {
        let from = max(1, BusWire.readLittleEndian(body, at: 0))
        let requested = Int(BusWire.readLittleEndian32(body, at: 8))
        let limit = requested == 0 ? configuration.maximumFetchRecords : min(requested, configuration.maximumFetchRecords)
        var frames: [[UInt8]] = [Array(BusWire.ReplyVerb.batch.rawValue.utf8), []]
        counters.fetchesServed += 1
        if from <= publishedSequence {
            let through = min(publishedSequence, from + UInt64(limit) - 1)
            var byteCount = 0
            func add(sequence: UInt64, timestamp: Int64, payload: UnsafeRawBufferPointer) -> Bool {
                if frames.count > 2 && byteCount + payload.count > configuration.maximumFetchBytes { return false }
                var frame: [UInt8] = []
                frame.reserveCapacity(BusWire.headerByteCount + payload.count)
                BusWire.appendHeader(BusWire.Header(kind: .event, sequence: sequence, timestamp: timestamp), to: &frame)
                frame.append(contentsOf: payload)
                frames.append(frame)
                byteCount += payload.count
                return true
            }
            if let oldest = recent.oldestSequence, from >= oldest {
                var sequence = from
                while sequence <= through, let record = recent.record(sequence) {
                    let added = record.payload.withUnsafeBytes { add(sequence: sequence, timestamp: record.timestamp, payload: $0) }
                    if !added { break }
                    sequence += 1
                }
            } else {
                readFromLog(from: from, through: through, add)
            }
        }
        var header: [UInt8] = []
        header.reserveCapacity(BusWire.batchHeaderByteCount)
        BusWire.appendLittleEndian(from, to: &header)
        BusWire.appendLittleEndian(UInt32(frames.count - 2), to: &header)
        BusWire.appendLittleEndian(publishedSequence, to: &header)
        frames[1] = header
        try reply(routingID, frames)
    }

    private struct StopReading: Error {}

    private func readFromLog(from: UInt64, through: UInt64, _ add: (UInt64, Int64, UnsafeRawBufferPointer) -> Bool) {
        counters.fetchesReadFromLog += 1
        do {
            if reader == nil { reader = try PartitionReader(directory: writer.directory, partition: writer.partition) }
            guard let reader else { return }
            try reader.forEachRecord(from: from, through: through) { view in
                guard add(view.sequence, view.timestampNanoseconds, view.payload) else { throw StopReading() }
            }
        } catch is StopReading {
            return
        } catch {
            counters.fetchReadFailures += 1
            onLogReadFailure?("reading \(partition) from sequence \(from) for FETCH failed: \(error)")
        }
    }

    // MARK: Publishing

    /// Publishes every handed-over record the log now holds durably, then releases the ACKs
    /// those records cover.
    private func releaseDurable() throws(ZeroMQError) {
        if !unpublished.isEmpty {
            let durable = writer.durableSequence
            while let record = unpublished.first, record.sequence <= durable {
                unpublished.removeFirst()
                let header = BusWire.encodeHeader(BusWire.Header(kind: .event, sequence: record.sequence, timestamp: record.timestamp))
                try publisher.send([BusWire.eventTopic(device: record.device), header, record.payload], mode: .nonBlocking)
                recent.append(record)
                publishedSequence = max(publishedSequence, record.sequence)
                lastPublishedTimestamp = record.timestamp
                counters.eventsPublished += 1
            }
        } else if lastEnqueuedSequence == publishedSequence {
            // Records appended without being handed over still become fetchable (and announced by
            // heartbeats), so subscribers recover them from the log instead of waiting forever.
            let durable = writer.durableSequence
            if durable > publishedSequence {
                publishedSequence = durable
                lastEnqueuedSequence = durable
            }
        }
        while let pending = pendingAcknowledgements.first, pending.acknowledgement.lastSequence <= publishedSequence {
            pendingAcknowledgements.removeFirst()
            try acknowledge(pending.routingID, pending.acknowledgement)
        }
    }

    private func sendHeartbeat() throws(ZeroMQError) {
        let header = BusWire.encodeHeader(BusWire.Header(kind: .heartbeat, sequence: publishedSequence, timestamp: lastPublishedTimestamp))
        try publisher.send([BusWire.heartbeatTopic, header, partitionBytes], mode: .nonBlocking)
        counters.heartbeatsSent += 1
        nextHeartbeat = .now + configuration.heartbeatInterval
    }

    // MARK: Replies

    private func acknowledge(_ routingID: [UInt8], _ acknowledgement: CommandAcknowledgement) throws(ZeroMQError) {
        try reply(routingID, acknowledgement.encodedFrames())
    }

    private func reply(_ routingID: [UInt8], _ frames: [[UInt8]]) throws(ZeroMQError) {
        // A full or vanished peer loses the reply; it retries, and retries are idempotent.
        try router.send([routingID] + frames, mode: .nonBlocking)
    }

    /// Counts and reports a refused request; answers it with a `malformed` ACK when the sender is known.
    private func refuse(_ routingID: [UInt8]?, _ failure: WireFailure, commandID: CommandID? = nil) {
        counters.refused.record(failure.reason)
        onRefused?(failure)
        guard let routingID else { return }
        _ = try? acknowledge(routingID, CommandAcknowledgement(status: .malformed, commandID: commandID, lastSequence: 0, message: failure.description))
    }
}

/// The most recent published records, contiguous by sequence, for FETCH without disk reads.
struct RecentRecords {
    private var storage: [BusRecord?]
    private(set) var oldestSequence: UInt64?
    private var newestSequence: UInt64 = 0

    init(capacity: Int) {
        storage = Array(repeating: nil, count: capacity)
    }

    mutating func append(_ record: BusRecord) {
        if oldestSequence == nil || record.sequence != newestSequence + 1 {
            // A discontinuity (records handed over out of line): start again from here.
            oldestSequence = record.sequence
        }
        storage[Int(record.sequence % UInt64(storage.count))] = record
        newestSequence = record.sequence
        if let oldest = oldestSequence, newestSequence - oldest >= UInt64(storage.count) {
            oldestSequence = newestSequence - UInt64(storage.count) + 1
        }
    }

    func record(_ sequence: UInt64) -> BusRecord? {
        guard let oldest = oldestSequence, sequence >= oldest, sequence <= newestSequence else { return nil }
        return storage[Int(sequence % UInt64(storage.count))]
    }
}

/// A queue on an array with a moving head; amortized O(1) without per-element allocation.
struct FirstInFirstOut<Element> {
    private var elements: [Element] = []
    private var head = 0

    var isEmpty: Bool { head == elements.count }
    var count: Int { elements.count - head }
    var first: Element? { isEmpty ? nil : elements[head] }

    mutating func append(_ element: Element) { elements.append(element) }

    mutating func removeFirst() {
        head += 1
        if head == elements.count {
            elements.removeAll(keepingCapacity: true)
            head = 0
        } else if head >= 4_096 && head * 2 >= elements.count {
            elements.removeFirst(head)
            head = 0
        }
    }
}
