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
        /// Not applied and not recorded; the sender should send it again later (ACK `unavailable`).
        case retryLater(reason: String)
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

    public static func retryLater(_ reason: String) -> CommandOutcome {
        CommandOutcome(decision: .retryLater(reason: reason), appended: [], lastSequence: 0)
    }
}

/// Settings of a `QueueEndpoint`. Defaults suit one queue process serving a few dozen clients,
/// and bound what any client can make the queue hold (docs/reliability.md).
public struct QueueEndpointConfiguration: Sendable {
    /// Where the PUB socket binds (`tcp://127.0.0.1:*` picks a free port).
    public var eventsEndpoint: String
    /// Where the ROUTER socket binds.
    public var requestsEndpoint: String
    /// Messages queued per subscriber before PUB drops (subscribers recover drops by FETCH).
    /// Payloads are shared between subscribers; each queued message costs a stalled subscriber
    /// about 200 bytes of its own, so 10,000 bound one to about 2 MB.
    public var sendHighWaterMark: Int = 10_000
    /// Replies (ACK, BATCH, PONG) queued in libzmq per requesting peer. One group commit can make
    /// a whole window of a sender's commands durable at once, a burst of that many ACKs, and a
    /// dropped ACK costs its sender a retry interval: so it holds the largest window our clients
    /// use (16,384, a load driver's; 4,096 by default). A peer that stops reading costs at most
    /// this many ACKs of about 450 bytes (7 frames of libzmq's 64-byte message), about 7 MB,
    /// and `maximumQueuedReplyBytes` bounds all peers together.
    /// Beyond it replies are dropped and counted; the sender retries.
    public var replyHighWaterMark: Int = 16_384
    /// Requests queued per peer before libzmq stops reading its connection (back-pressure,
    /// nothing lost): at most this many requests of `maximumCommandBytes` wait per peer.
    public var requestHighWaterMark: Int = 256
    /// Bytes of replies one peer may have waiting unread before its FETCHes are dropped
    /// unanswered (and counted); it fetches again once it reads.
    public var maximumQueuedFetchBytesPerPeer: Int = 4 << 20
    /// Bytes of replies (ACK, PONG, BATCH, counted with libzmq's 64 bytes per frame) all peers
    /// together may have waiting unread. Past it, replies go only to peers holding less than
    /// this divided by `maximumPeers` (128 KiB by default), and a BATCH to such a peer holds at
    /// most that many bytes (at least one record): the peers that do not read lose their replies,
    /// the others are served. So all peers together hold at most about three times this.
    public var maximumQueuedReplyBytes: Int = 32 << 20
    /// Connections accepted on each socket; more are refused during their handshake. TCP connections
    /// that have not sent a byte do not count, so silent ones cannot lock honest clients out.
    public var maximumPeers: Int = 256
    /// With more than `maximumPeers` connections open on a socket, its TCP connections that have sent
    /// nothing this long after they were accepted are closed (an honest client sends its ZMTP greeting
    /// at once).
    public var silentConnectionTimeout: Duration = .seconds(1)
    /// How long a connection may take to complete its handshake before libzmq closes it.
    public var handshakeTimeout: Duration = .seconds(5)
    /// Subscriptions one connection to the events socket may hold at once. A client needs 2 (`evt.`
    /// and `hb`), or one per device it follows; a connection that asks for more is closed.
    public var maximumSubscriptionsPerSubscriber: Int = 256
    /// At most one `onRefused` report per reason per interval; the next says how many it skipped.
    public var refusalReportInterval: Duration = .seconds(1)
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
    /// With a writer whose `ownerRequestsSyncs` is set: a step that handled fewer commands than this
    /// (a lightly loaded queue) makes them durable itself and publishes them in the same step, with
    /// no thread hand-off; at this many commands in one step it hands the sync to the log's flusher
    /// and goes on deciding while it runs (group commit under load). 256, not 16 as before: on
    /// the 2-core VM, at 20,000 lifecycles/s offered, steps of 16 to 255 commands handed off cost
    /// a thread hop and a wake-up each, and the half-load median doubled (docs/performance.md).
    public var synchronousSyncBelowCommands: Int = 256
    /// Set to make both sockets CURVE servers; clients then need the matching public key.
    public var curveServerSecretKey: CurveKey?
    /// With CURVE: the client public keys let in; any other key is refused during the
    /// handshake. nil lets in every client that knows the server's public key.
    public var allowedClientKeys: Set<CurveKey>?
    /// With CURVE: what each client key may send (docs/reliability.md, "Roles"). A command outside
    /// its sender's permissions is answered `rejected` and reported (`onRefused`, `roleRefused`),
    /// never handed to the handler. A key not listed here (but allowed) may send everything; nil
    /// checks nothing.
    public var clientPermissions: [CurveKey: ClientPermissions]?
    /// Signalled by the writer's `onDurable` hook, so `step` wakes as soon as records become
    /// durable instead of polling every millisecond while they wait (see `QueueEndpoint.init`).
    public var durabilityWakeup: PollWakeup?

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
    /// Commands refused because their role is not among their sender's key's (`clientPermissions`).
    public var commandsRefusedForRole = 0
    public var eventsPublished = 0
    public var heartbeatsSent = 0
    public var fetchesServed = 0
    /// Well-formed PINGs handled (answered, or dropped as a reply would be).
    public var pingsHandled = 0
    /// FETCHes that had to read the log because the records were no longer in memory.
    public var fetchesReadFromLog = 0
    /// FETCHes answered with an empty batch because reading the log failed.
    public var fetchReadFailures = 0
    /// FETCHes dropped unanswered because the peer (or all peers) had too many reply bytes unread.
    public var fetchesDroppedForUnreadReplies = 0
    /// ACKs and PONGs dropped because all peers together had `maximumQueuedReplyBytes` unread and
    /// this peer more than its share; its sender retries.
    public var repliesDroppedForUnreadReplies = 0
    /// Replies dropped because the peer's reply queue was at `replyHighWaterMark`.
    public var repliesDropped = 0
    /// Replies to peers that had disconnected meanwhile.
    public var repliesToDepartedPeers = 0
    /// Connections refused during the handshake: over `maximumPeers`, or a client key not allowed.
    public var connectionsRefused = 0
    /// TCP connections closed for having sent nothing (`silentConnectionTimeout`).
    public var silentConnectionsClosed = 0
    /// Subscriber connections closed for a refused subscription (a topic never published, more than
    /// `maximumSubscriptionsPerSubscriber`, or a message that is no subscription).
    public var subscribersClosed = 0
    /// `onRefused` reports skipped by the rate limit (the refusals themselves are in `refused`).
    public var refusalReportsSkipped = 0
    /// Version 2: CMDS requests read, ACKS replies sent and event batches published (`all`).
    public var commandBatchesReceived = 0
    public var acknowledgementBatchesSent = 0
    public var eventBatchesPublished = 0
    /// Topic-group messages published (`grp.<prefix>/`, heartbeats not counted).
    public var groupBatchesPublished = 0
    /// Refused inbound messages and connections by reason.
    public var refused = WireFailureCounts()

    public init() {}
}

/// The queue side of the bus: publishes durable events on PUB and serves commands, FETCH and
/// PING on ROUTER. Single-threaded by design: the owner calls `step(timeout:)` from one
/// thread, which also runs the command handler, so the handler needs no locking.
///
/// It also authenticates every connection (a ZAP handler on its context: the peer limit,
/// and with CURVE the client key allow-list), so a context holds at most one endpoint.
///
/// Not Sendable: its sockets belong to the thread that steps it.
public final class QueueEndpoint {
    /// Decides and appends one command, with what its sender reported (what it had heard, its lowest
    /// unanswered number: `SenderReport.unknown` when it said nothing); runs on the stepping thread. A
    /// throw answers the command `unavailable` with the error's description (the sender retries).
    public typealias CommandHandler = (Command, SenderReport) throws -> CommandOutcome

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
    /// Called for refused inbound messages and connections, at most once per reason per
    /// `refusalReportInterval` (the detail then says how many were skipped), and once per
    /// refused client key; so the owner can log every call.
    public var onRefused: ((WireFailure) -> Void)?
    /// Called when serving a FETCH from the log failed (the reply is an empty batch).
    public var onLogReadFailure: ((String) -> Void)?
    /// Records a command refused here before its decision (outside its sender's roles) as handled
    /// (`QueueEngine.noteRefused`), so its sender's next command does not wait for its number. A throw
    /// stops the endpoint as a handler's does.
    public var recordRefused: ((Command, SenderReport) throws -> Void)?

    private let writer: PartitionWriter
    private let handler: CommandHandler
    private let publisher: Socket
    private let router: Socket
    private let authentication: AuthenticationHandler
    private let peerWatch: [PeerWatch]
    private let poller: Poller
    /// Where the poller reports each socket: a step reads only those it found readable.
    private let routerIndex: Int
    private let publisherIndex: Int
    private let authenticationIndex: Int
    private let watchIndices: [Int]
    private let wakeupIndex: Int?
    private var reader: PartitionReader?
    private var recent: RecentRecords
    private var unpublished = FirstInFirstOut<BusRecord>()
    private var pendingAcknowledgements = FirstInFirstOut<PendingAcknowledgement>()
    /// Where every event and ACK is composed before it is sent: one buffer, reused.
    private var outgoing = OutgoingMessage()
    private var lastRoutingID: [UInt8] = []
    private var lastEnqueuedSequence: UInt64
    private var lastPublishedTimestamp: Int64 = 0
    private var nextHeartbeat: ContinuousClock.Instant
    private let partitionBytes: [UInt8]
    private let unreadReplies: UnreadReplies
    private var refusalReports: RefusalReportLimiter
    private var reportedClientKeys = Set<CurveKey>()
    /// The endpoint's half of the queue's rules (`QueueAdmission.atEndpoint`), with `clientPermissions`
    /// by the user id each connection is let in with (the key's Z85 text).
    private var admission: QueueAdmission
    /// What each subscriber connection subscribed to, by descriptor (docs/wire-format.md, "Subscriptions").
    private var subscriptions: SubscriptionLedger
    /// The last read of the events socket stopped at `subscriptionMessagesPerRead`: more may wait unsignalled.
    private var subscriptionBacklog = false
    private static let subscriptionMessagesPerRead = 4_096
    static let subscriptionHighWaterMark = 64
    /// The last step answered `authenticationsPerStep` ZAP requests: more may wait unsignalled.
    private var authenticationBacklog = false
    private static let authenticationsPerStep = 256
    /// The first error the command handler threw (the log refused a write). The owner stops and
    /// reports it: a queue that cannot write must not go on answering "unavailable" forever.
    public private(set) var handlerFailure: (any Error)?

    /// Answers to commands that came in CMDS, per connection, each sent as one ACKS at the end of the
    /// publishing round (sooner when full, or when a version-1 answer to the same connection must follow them).
    /// In the order their connections were first answered. An array, not a dictionary: a round answers a
    /// few connections, most answers go to the same one as the answer before, and hashing the routing id
    /// three times per answer showed in the queue's profile.
    private var acknowledgementBatches: [(routingID: [UInt8], batch: BatchComposer)] = []
    /// Where the last answer went in `acknowledgementBatches` (-1: look it up).
    private var lastAcknowledgementBatch = -1
    /// The records of this publishing round, for the version-2 subscribers: one `all` message.
    private var eventBatch = BatchComposer()
    /// The topic groups subscribed (`grp.<prefix>/`), each with this round's records of its devices.
    private var publishedGroups: [PublishedGroup] = []
    /// The published groups by prefix: a record finds its groups in one probe per prefix length, however many there are.
    private var groupOfPrefix = PrefixIndex([])

    private struct PendingAcknowledgement {
        var routingID: [UInt8]
        var acknowledgement: CommandAcknowledgement
        /// The command came in CMDS: its answer goes in an ACKS.
        var batched: Bool
    }

    /// The ZAP domains that tell the two sockets apart in authentication requests.
    private static let eventsDomain = "storekitsim.events"
    private static let requestsDomain = "storekitsim.requests"

    /// Binds both sockets. Everything already in the partition is flushed first and counts as
    /// published, so it is served by FETCH from the start.
    ///
    /// - Parameters:
    ///   - writer: the partition the handler appends to, with `.always` or `.groupCommit`
    ///     durability (under `.operatingSystem` nothing would ever be published). For the
    ///     lowest latency create it with `onDurable: { _ in wakeup.signal() }` and pass the
    ///     same `wakeup` as `configuration.durabilityWakeup`.
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
        refusalReports = RefusalReportLimiter(interval: configuration.refusalReportInterval)
        admission = QueueAdmission(
            permissions: Dictionary(uniqueKeysWithValues: (configuration.clientPermissions ?? [:]).map { ($0.key.z85, $0.value) }),
            maximumUnpublishedRecords: configuration.maximumUnpublishedRecords)
        subscriptions = SubscriptionLedger(maximumPerConnection: max(1, configuration.maximumSubscriptionsPerSubscriber))
        unreadReplies = UnreadReplies(totalLimit: configuration.maximumQueuedReplyBytes, maximumPeers: configuration.maximumPeers)

        authentication = try AuthenticationHandler(context: context)
        // An XPUB, not a PUB, only to read each connection's (un)subscriptions (libzmq applies them
        // itself, as a PUB does): VERBOSER reports every one of every peer, duplicates included, with the
        // connection's metadata, so `subscriptions` can count each connection's own. (Not XPUB_MANUAL:
        // libzmq 4.3.4 keeps a manual subscription of every peer in a trie of its own anyway, and applies
        // one read after its peer disconnected to the freed pipe, fixed only in 4.3.5.)
        publisher = try context.socket(.extendedPublisher)
        try publisher.set(.extendedPublisherVerboser, true)
        // Subscriptions libzmq takes from one connection before this endpoint reads them (back-pressure
        // beyond, nothing lost): a flood is seen, and its connection closed, after a few hundred, not
        // after the tens of thousands a default pipe lets in while a step publishes.
        try publisher.set(.receiveHighWaterMark, Self.subscriptionHighWaterMark)
        router = try context.socket(.router)
        if let secretKey = configuration.curveServerSecretKey {
            try publisher.becomeCurveServer(secretKey: secretKey)
            try router.becomeCurveServer(secretKey: secretKey)
        }
        // A ZAP domain makes libzmq ask the handler about NULL-mechanism connections too.
        try publisher.set(.zapDomain, Self.eventsDomain)
        try router.set(.zapDomain, Self.requestsDomain)
        try publisher.set(.handshakeInterval, configuration.handshakeTimeout)
        try router.set(.handshakeInterval, configuration.handshakeTimeout)
        try publisher.set(.sendHighWaterMark, configuration.sendHighWaterMark)
        try router.set(.sendHighWaterMark, configuration.replyHighWaterMark)
        try router.set(.receiveHighWaterMark, configuration.requestHighWaterMark)
        // Report a full or departed peer instead of dropping its reply silently, so it is counted.
        try router.set(.routerMandatory, true)
        // The verb and body of a request; a few spare frames so a wrong count can be answered.
        // The routing id is not part of the request, so the limits do not count it.
        let requestBytes = configuration.maximumCommandBytes + 1_024 + BusWire.maximumSenderReportBytes
        router.receiveLimits = MessageLimits(maximumFrameCount: 7, maximumByteCount: requestBytes, uncountedLeadingFrames: 1)
        // One frame far beyond any request closes the connection before libzmq allocates it.
        try router.set(.maximumMessageSize, Int64(Self.connectionClosingFrameBytes(requestBytes: requestBytes)))
        // A subscriber sends nothing but subscriptions, the longest a client needs being `evt.` and a
        // device name (at most 128 bytes); libzmq keeps each in its subscription tree. A longer one
        // closes its connection before it is kept, so a stranger cannot grow the queue's memory by
        // kilobytes per message (100,000 subscriptions of 2 KB once took 65 MB).
        try publisher.set(.maximumMessageSize, Int64(Self.maximumSubscriptionBytes))
        let watches = [try PeerWatch(publisher), try PeerWatch(router)]
        peerWatch = watches
        try publisher.bind(configuration.eventsEndpoint)
        try router.bind(configuration.requestsEndpoint)
        eventsEndpoint = try publisher.lastEndpoint
        requestsEndpoint = try router.lastEndpoint
        let poller = Poller()
        routerIndex = poller.register(router, for: .readable)
        // By descriptor like the two below: read to EAGAIN whenever it signals, after every step that sent
        // on the socket (a send handles the socket's commands and may take the signal), and at every heartbeat.
        publisherIndex = poller.register(fileDescriptor: Int32(try publisher.get(.fileDescriptor)), for: .readable)
        // The authentication and monitor sockets are polled by their ZMQ_FD as plain descriptors: as
        // sockets, zmq_poll would check each one's events twice per call (two system calls each time),
        // 12 of the 18 a step's poll made. Safe because this endpoint only ever reads them to EAGAIN
        // (their descriptors then signal the next message) and sweeps them at every heartbeat anyway.
        authenticationIndex = poller.register(fileDescriptor: Int32(try authentication.socket.get(.fileDescriptor)), for: .readable)
        watchIndices = try watches.map { watch throws(ZeroMQError) in
            poller.register(fileDescriptor: Int32(try watch.monitor.socket.get(.fileDescriptor)), for: .readable)
        }
        wakeupIndex = configuration.durabilityWakeup.map { poller.register(fileDescriptor: $0.fileDescriptor, for: .readable) }
        self.poller = poller
        nextHeartbeat = .now
    }

    /// Above this size a single request frame makes libzmq close the connection unread.
    static func connectionClosingFrameBytes(requestBytes: Int) -> Int { max(1 << 20, requestBytes) }

    /// The longest subscription message the events socket takes (with ZMTP's subscribe prefix and a
    /// CURVE handshake's commands, which libzmq limits the same way): longer closes the connection.
    public static let maximumSubscriptionBytes = 1_024

    /// Closes both sockets; idempotent.
    public func close() {
        for watch in peerWatch { watch.monitor.close() }
        publisher.close()
        router.close()
        authentication.close()
    }

    /// Number of appended records still waiting for durability before they are published.
    public var unpublishedCount: Int { unpublished.count }

    /// Connections currently open on the events (PUB) and requests (ROUTER) sockets.
    public var connectedPeers: (subscribers: Int, requesters: Int) { (peerWatch[0].openCount, peerWatch[1].openCount) }

    /// Bytes of replies (ACK, PONG, BATCH) sent and not yet taken by the peers' connections.
    public var queuedReplyByteCount: Int { unreadReplies.total.value }

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
    /// With a `durabilityWakeup` the log wakes the wait as soon as records are durable;
    /// without one the wait is shortened to 1 ms while records await durability.
    public func step(timeout: Duration) throws(ZeroMQError) {
        var wait = min(timeout, max(.zero, nextHeartbeat - .now))
        if wakeupIndex == nil, !unpublished.isEmpty || !pendingAcknowledgements.isEmpty { wait = min(wait, .milliseconds(1)) }
        try poller.poll(timeout: wait)
        if let wakeupIndex, poller.isReadable(at: wakeupIndex) { configuration.durabilityWakeup?.drain() }
        // Only the sockets the poll found readable: a receive on an idle libzmq socket still costs a
        // system call (it processes the socket's command mailbox), several per step on a lone lifecycle.
        // Connections first: counts must be current before the handler judges new ones.
        // A connection to judge reads every watch (an accept may have landed since the poll).
        // At every heartbeat all three are read whatever their descriptors said (a safety net), and after
        // a step that left ZAP requests unanswered (its descriptor will not signal them again).
        let sweep = ContinuousClock.now >= nextHeartbeat || authenticationBacklog
        let judging = sweep || poller.isReadable(at: authenticationIndex)
        for (watch, index) in zip(peerWatch, watchIndices) where judging || poller.isReadable(at: index) {
            try watch.update(closedOrReused: watch === peerWatch[0] ? { self.subscriptions.forget(Int32(bitPattern: $0)) } : nil)
            guard watch.openCount > configuration.maximumPeers else { continue }
            let endpoint = watch === peerWatch[0] ? eventsEndpoint : requestsEndpoint
            let closed = watch.closeSilentConnections(olderThan: configuration.silentConnectionTimeout, endpoint: endpoint)
            if closed > 0 {
                counters.silentConnectionsClosed += closed
                refuse(nil, WireFailure(.tooManyPeers, "closed \(closed) connections to \(endpoint) that sent nothing for "
                    + "\(configuration.silentConnectionTimeout) while more than \(configuration.maximumPeers) were open"))
            }
        }
        if sweep || subscriptionBacklog || poller.isReadable(at: publisherIndex) { try readSubscriptions(updatingWatch: false) }
        if judging { authenticationBacklog = try authentication.answerPending(limit: Self.authenticationsPerStep, authenticate) == Self.authenticationsPerStep }
        var handled = 0
        var releasedAt = 0
        var syncRequested = false
        let commandsBefore = counters.commandsHandled
        while handled < configuration.requestsPerStep, poller.isReadable(at: routerIndex) {
            let received: Bool
            let commandsBeforeRequest = counters.commandsHandled
            do {
                received = try router.receiveMessage(timeout: .zero) { message in handleRequest(message) } != nil
            } catch {
                guard case .messageTooLarge(let frameCount, let byteCount) = error.kind else { throw error }
                refuse(nil, WireFailure(.oversized, "request of \(frameCount) frames and \(byteCount) bytes (routing id not counted) exceeds the limits"))
                handled += 1
                continue
            }
            guard received else { break }
            // A CMDS counts as its commands, so a step's work stays bounded whatever the batches hold.
            handled += max(1, counters.commandsHandled - commandsBeforeRequest)
            // Under load the flusher syncs while this thread goes on.
            if !syncRequested, counters.commandsHandled - commandsBefore >= configuration.synchronousSyncBelowCommands {
                writer.requestSync()
                syncRequested = true
            }
            // Publish as durability advances, so subscribers are not held up by a long burst.
            if handled - releasedAt >= 256 {
                releasedAt = handled
                try releaseDurable()
            }
        }
        let commands = counters.commandsHandled - commandsBefore
        if commands > 0, commands < configuration.synchronousSyncBelowCommands, writer.configuration.ownerRequestsSyncs, handlerFailure == nil {
            do {
                // While the flusher syncs an earlier batch, these records join its next round: waiting here
                // for its sync and then syncing again would stall every command behind two syncs.
                try writer.flushUnlessSyncing()
            } catch {
                // The log refused the fsync: the owner stops and reports it, as for a failed append.
                handlerFailure = error
            }
        } else if commands > 0 {
            // Appends after the flusher's last wake-up in this step.
            writer.requestSync()
        }
        // With CURVE roles, subscriptions that came during the step are judged before its records are
        // published: libzmq applies a subscription before this endpoint reads it (docs/reliability.md, "Roles").
        if admission.checksSenders, !unpublished.isEmpty { try readSubscriptions(updatingWatch: true) }
        let sentBefore = counters.eventsPublished + counters.heartbeatsSent
        try releaseDurable()
        if ContinuousClock.now >= nextHeartbeat { try sendHeartbeat() }
        if counters.eventsPublished + counters.heartbeatsSent != sentBefore || subscriptionBacklog { try readSubscriptions(updatingWatch: true) }
        reportSkippedRefusals()
    }

    // MARK: Subscriptions

    /// Reads the (un)subscriptions the events socket reported (at most `subscriptionMessagesPerRead`)
    /// and closes each connection whose subscription is refused. The events socket's monitor is read
    /// first (unless the caller just did), so a connection's accept is known before its subscriptions.
    private func readSubscriptions(updatingWatch: Bool) throws(ZeroMQError) {
        if updatingWatch { try peerWatch[0].update(closedOrReused: { self.subscriptions.forget(Int32(bitPattern: $0)) }) }
        var read = 0
        while read < Self.subscriptionMessagesPerRead {
            // With CURVE roles each subscription is judged by its connection's key (the ZAP handler's User-Id).
            let verdict = try publisher.receiveFrame(readingUserID: admission.checksSenders) { bytes, _, descriptor, key -> (Int32, SubscriptionLedger.Verdict) in
                // libzmq's own unsubscriptions of a connection that closed carry no metadata: nothing to count.
                guard let descriptor else { return (-1, .accepted) }
                return (descriptor, subscriptions.apply(bytes, from: descriptor, key: key, permissions: key.flatMap { admission.permissions[$0] }))
            }
            guard let verdict else {
                subscriptionBacklog = false
                if subscriptions.groupsChanged { followGroups() }
                return
            }
            let (connection, outcome) = verdict
            read += 1
            if case .refused(let failure) = outcome { closeSubscriber(connection, failure) }
            if subscriptions.groupsChanged { followGroups() }
        }
        subscriptionBacklog = true
    }

    /// Publishes for the groups subscribed now: a new one starts at the published sequence (an upper
    /// bound of its last record, so its first subscriber's FETCH covers everything before).
    private func followGroups() {
        subscriptions.groupsChanged = false
        let subscribed = subscriptions.groups
        publishedGroups.removeAll { subscribed[String(decoding: $0.prefix, as: UTF8.self)] == nil }
        let known = Set(publishedGroups.map { String(decoding: $0.prefix, as: UTF8.self) })
        for prefix in subscribed.keys.sorted() where !known.contains(prefix) {
            publishedGroups.append(PublishedGroup(prefix: prefix, publishedSequence: publishedSequence))
        }
        groupOfPrefix = PrefixIndex(publishedGroups.map { String(decoding: $0.prefix, as: UTF8.self) })
    }

    /// Counts and reports (rate-limited) a refused subscription and closes its connection: libzmq keeps
    /// a subscription as soon as it reads it, and only a closed connection gives all of its back.
    private func closeSubscriber(_ connection: Int32, _ failure: WireFailure) {
        // Named before it is shut down (a closed connection has no peer).
        let peer = AcceptedConnection.peerAddress(fileDescriptor: connection).map { " from \($0)" } ?? ""
        let closed = AcceptedConnection.shutDown(fileDescriptor: connection, boundTo: eventsEndpoint)
        if closed {
            counters.subscribersClosed += 1
            subscriptions.ignore(connection)
        }
        refuse(nil, WireFailure(failure.reason, failure.detail + (closed ? "; the connection\(peer) was closed" : "")))
    }

    // MARK: Connections

    private func authenticate(_ request: AuthenticationRequest) -> AuthenticationDecision {
        let watch = request.domain == Self.eventsDomain ? peerWatch[0] : peerWatch[1]
        // The connection asking is already counted as open. Silent ones (no byte sent: no greeting) are
        // not, so they cannot lock clients out; counted only when the limit is in sight.
        if watch.openCount > configuration.maximumPeers, watch.openCount - watch.silentCount() > configuration.maximumPeers {
            counters.connectionsRefused += 1
            refuse(nil, WireFailure(.tooManyPeers, "refused a connection from \(request.address) to \(request.domain): "
                + "\(watch.openCount - 1) peers are connected, the limit is \(configuration.maximumPeers)"))
            return .deny(reason: "too many peers")
        }
        if request.mechanism == "CURVE", let allowed = configuration.allowedClientKeys {
            guard let key = request.curvePublicKey, allowed.contains(key) else {
                counters.connectionsRefused += 1
                let key = request.curvePublicKey
                counters.refused.record(.unknownClientKey)
                // Logged once per key: a misconfigured client reconnects every 100 ms.
                if let key, reportedClientKeys.count < 1_024, reportedClientKeys.insert(key).inserted {
                    onRefused?(WireFailure(.unknownClientKey, "refused CURVE client key \(key.z85) from \(request.address): "
                        + "not among the topology's allowedClientKeys"))
                }
                return .deny(reason: "client key not allowed")
            }
            // Every message of the connection then names its key, so a command is judged by its sender's roles.
            if configuration.clientPermissions != nil { return .allowAs(userID: key.z85) }
        }
        return .allow
    }

    // MARK: Requests

    private func handleRequest(_ message: borrowing ReceivedMessage) {
        guard message.count >= 2 else {
            refuse(nil, WireFailure(.wrongFrameCount, "request has \(message.count) frames; expected a routing id and a verb"))
            return
        }
        let routingID = routingID(message[0])
        let verbFrame = message[1]
        guard let verb = BusWire.RequestVerb(frame: verbFrame) else {
            refuse(routingID, WireFailure(.unknownVerb, "unknown request verb (\(verbFrame.count) bytes); expected CMD, CMDS, FETCH, PING or HELLO"))
            return
        }
        switch verb {
        case .command:
            guard message.count == 3 else {
                refuse(routingID, WireFailure(.wrongFrameCount, "CMD has \(message.count - 1) frames, expected 2"))
                return
            }
            handleCommand(routingID: routingID, payload: message[2], report: .unknown,
                          sender: admission.checksSenders ? message.userID(ofFrame: 2) : nil, batched: false)
        case .commands:
            guard message.count == 3 || message.count == 4 else {
                refuse(routingID, WireFailure(.wrongFrameCount, "CMDS has \(message.count - 1) frames, expected 2, or 3 with a report"), batched: true)
                return
            }
            let sender = admission.checksSenders ? message.userID(ofFrame: 2) : nil
            do {
                // Each command as if it came alone in a CMD, in order; a batch whose framing is wrong has no effect.
                try BusWire.forEachBatchedCommand(message[2], report: message.count == 4 ? message[3] : nil) { payload, report in
                    handleCommand(routingID: routingID, payload: payload, report: report, sender: sender, batched: true)
                }
                counters.commandBatchesReceived += 1
            } catch {
                refuse(routingID, error, batched: true)
            }
        case .hello:
            guard message.count == 2 else {
                refuse(routingID, WireFailure(.wrongFrameCount, "HELLO has no body frames"))
                return
            }
            outgoing.removeAll()
            outgoing.appendFrame(routingID)
            outgoing.appendFrame(BusWire.ReplyVerb.hello.bytes)
            outgoing.appendFrame(BusWire.supportedVersions)
            sendOutgoingReply(to: routingID)
        case .fetch:
            let prefixBytes = message.count == 3 ? message[2].count - BusWire.fetchRequestByteCount : -1
            guard prefixBytes >= 0, prefixBytes <= SubscriptionLedger.maximumDeviceNameBytes else {
                refuse(routingID, WireFailure(.malformedBody, "FETCH needs one frame of \(BusWire.fetchRequestByteCount) bytes "
                    + "(a group FETCH: then a device prefix of at most \(SubscriptionLedger.maximumDeviceNameBytes) bytes)"))
                return
            }
            let body = Array(message[2])
            let prefix: [UInt8]? = prefixBytes > 0 ? Array(body[BusWire.fetchRequestByteCount...]) : nil
            if let prefix, prefix.contains(0) || prefix.contains(UInt8(ascii: "/")) {
                refuse(routingID, WireFailure(.malformedBody, "a group FETCH's device prefix holds a NUL byte or `/`"))
                return
            }
            // A key bound to devices (an observer's, a load driver's) fetches only their events (docs/reliability.md, "Roles").
            if let hearer = limitedHearer(admission.checksSenders ? message.userID(ofFrame: 2) : nil) {
                serveFetch(routingID: routingID, body: body, prefix: prefix ?? [], hearer: hearer)
                return
            }
            serveFetch(routingID: routingID, body: body, prefix: prefix)
        case .ping:
            guard message.count == 2 else {
                refuse(routingID, WireFailure(.wrongFrameCount, "PING has no body frames"))
                return
            }
            counters.pingsHandled += 1
            outgoing.removeAll()
            outgoing.appendFrame(routingID)
            outgoing.appendFrame(BusWire.ReplyVerb.pong.bytes)
            outgoing.appendFrame(partitionBytes)
            outgoing.appendFrame(littleEndian: publishedSequence)
            sendOutgoingReply(to: routingID)
        }
    }

    /// The routing id as an array, shared with the previous request's when the same peer sent it
    /// (the usual case in a burst), so a request costs no allocation for it.
    private func routingID(_ frame: UnsafeRawBufferPointer) -> [UInt8] {
        if lastRoutingID.count == frame.count, lastRoutingID.elementsEqual(frame) { return lastRoutingID }
        lastRoutingID = Array(frame)
        return lastRoutingID
    }

    private func handleCommand(routingID: [UInt8], payload: UnsafeRawBufferPointer, report: SenderReport, sender: String?, batched: Bool) {
        guard payload.count <= configuration.maximumCommandBytes else {
            refuse(routingID, WireFailure(.commandTooLarge, "command of \(payload.count) bytes exceeds \(configuration.maximumCommandBytes) bytes"),
                   commandID: BusWire.leadingCommandID(payload), batched: batched)
            return
        }
        let command: Command
        do {
            command = try EventCodec.decodeCommand(payload)
        } catch {
            let reason: WireFailureReason = payload.first.map { $0 != EventCodec.formatVersion } ?? false
                ? .unsupportedVersion : .undecodablePayload
            refuse(routingID, WireFailure(reason, error.description), commandID: BusWire.leadingCommandID(payload), batched: batched)
            return
        }
        if let refusal = admission.atEndpoint(command, sender: sender, unpublishedRecords: unpublished.count) {
            switch refusal.reason {
            case .role:
                // Refused before the handler: only its mark is recorded (`recordRefused`), and retrying cannot help.
                counters.commandsRefusedForRole += 1
                let detail = "refused command \(command.id) from client key \(sender ?? "?"): \(refusal.detail)"
                counters.refused.record(.roleRefused)
                if let report = refusalReports.admit(WireFailure(.roleRefused, detail), at: .now) { onRefused?(report) } else { counters.refusalReportsSkipped += 1 }
                do {
                    try recordRefused?(command, report)
                } catch {
                    if handlerFailure == nil { handlerFailure = error }
                }
            default:
                counters.commandsRefusedAsUnavailable += 1
            }
            acknowledge(routingID, CommandAcknowledgement(status: refusal.status, commandID: command.id, lastSequence: 0, message: refusal.message), batched: batched)
            return
        }
        let outcome: CommandOutcome
        do {
            counters.commandsHandled += 1
            outcome = try handler(command, report)
        } catch {
            // The handler failed (the log refused a write: a full disk, an I/O error). The sender may retry
            // elsewhere; this endpoint stops at the end of the step, so the process exits with the cause.
            counters.commandsRefusedAsUnavailable += 1
            acknowledge(routingID, CommandAcknowledgement(
                status: .unavailable, commandID: command.id, lastSequence: 0, message: "the queue could not apply the command: \(error)"),
                batched: batched)
            if handlerFailure == nil { handlerFailure = error }
            return
        }
        let status: AcknowledgementStatus
        let message: String
        switch outcome.decision {
        case .accepted: (status, message) = (.accepted, "")
        case .rejected(let reason): (status, message) = (.rejected, reason)
        case .duplicate: (status, message) = (.duplicate, "")
        case .retryLater(let reason):
            // Nothing was recorded: answered at once, the sender sends it again.
            counters.commandsRefusedAsUnavailable += 1
            acknowledge(routingID, CommandAcknowledgement(status: .unavailable, commandID: command.id, lastSequence: 0, message: reason),
                        batched: batched)
            return
        }
        publishWhenDurable(outcome.appended)
        // A duplicate carries what the original produced, so its ACK waits for that to be published too.
        let acknowledgement = CommandAcknowledgement(status: status, commandID: command.id, lastSequence: outcome.lastSequence, message: message)
        if outcome.lastSequence <= publishedSequence && pendingAcknowledgements.isEmpty {
            acknowledge(routingID, acknowledgement, batched: batched)
        } else {
            pendingAcknowledgements.append(PendingAcknowledgement(routingID: routingID, acknowledgement: acknowledgement, batched: batched))
        }
    }

    /// The permissions of a key that may fetch only its own devices' events (an app key bound to its
    /// devices or a load driver's prefix: `ClientPermissions.hears(device:)`), or nil for one that hears
    /// every device (no CURVE roles, a key allowed every role, the store's, the downloader's, any device's).
    private func limitedHearer(_ sender: String?) -> ClientPermissions? {
        guard let sender, let permissions = admission.permissions[sender], !permissions.hearsEveryDevice else { return nil }
        return permissions
    }

    /// A FETCH read and admitted: nil (not answered) when an answer would add to what the peer is not
    /// reading; a subscriber asks again after its FETCH retry interval.
    private func admitFetch(routingID: [UInt8], body: [UInt8]) -> (peerQueued: QueuedByteCounter, from: UInt64, limit: Int, maximumBytes: Int)? {
        let peerQueued = unreadReplies.counter(for: routingID)
        guard peerQueued.value < configuration.maximumQueuedFetchBytesPerPeer, unreadReplies.admits(peerQueued) else {
            counters.fetchesDroppedForUnreadReplies += 1
            return nil
        }
        let from = max(1, BusWire.readLittleEndian(body, at: 0))
        let requested = Int(BusWire.readLittleEndian32(body, at: 8))
        let limit = requested == 0 ? configuration.maximumFetchRecords : min(requested, configuration.maximumFetchRecords)
        // Past the total, a batch is at most the peer's share (still at least one record).
        let maximumBytes = unreadReplies.isOverLimit ? min(configuration.maximumFetchBytes, unreadReplies.fairShare) : configuration.maximumFetchBytes
        counters.fetchesServed += 1
        return (peerQueued, from, limit, maximumBytes)
    }

    /// One event of a FETCH's reply: its header, then its payload.
    private static func eventFrame(sequence: UInt64, timestamp: Int64, payload: UnsafeRawBufferPointer) -> [UInt8] {
        var frame: [UInt8] = []
        frame.reserveCapacity(BusWire.headerByteCount + payload.count)
        BusWire.appendHeader(BusWire.Header(kind: .event, sequence: sequence, timestamp: timestamp), to: &frame)
        frame.append(contentsOf: payload)
        return frame
    }

    private func serveFetch(routingID: [UInt8], body: [UInt8], prefix: [UInt8]?, hearer: ClientPermissions? = nil) {
        if prefix != nil || hearer != nil {
            serveGroupFetch(routingID: routingID, body: body, prefix: prefix ?? [], hearer: hearer)
            return
        }
        guard let (peerQueued, from, limit, maximumBytes) = admitFetch(routingID: routingID, body: body) else { return }
        var frames: [[UInt8]] = [routingID, BusWire.ReplyVerb.batch.bytes, []]
        if from <= publishedSequence {
            let through = min(publishedSequence, from + UInt64(limit) - 1)
            var byteCount = 0
            func add(sequence: UInt64, timestamp: Int64, payload: UnsafeRawBufferPointer) -> Bool {
                if frames.count > 3 && byteCount + payload.count > maximumBytes { return false }
                frames.append(Self.eventFrame(sequence: sequence, timestamp: timestamp, payload: payload))
                byteCount += payload.count
                return true
            }
            if let oldest = recent.oldestSequence, from >= oldest {
                var sequence = from
                while sequence <= through, let added = recent.withRecord(sequence, { timestamp, _, payload in add(sequence: sequence, timestamp: timestamp, payload: payload) }) {
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
        BusWire.appendLittleEndian(UInt32(frames.count - 3), to: &header)
        BusWire.appendLittleEndian(publishedSequence, to: &header)
        frames[2] = header
        send(frames, countingIn: peerQueued)
    }

    /// A group FETCH: the records from `from` on whose device starts with `prefix` (and, for a key that
    /// hears only its own devices, is one of them), looking at most `maximumGroupFetchScan` records; the reply's header says
    /// how far it looked (`scanned_through`), so the subscriber knows the group complete through there. A plain FETCH
    /// of such a key (no prefix) also carries the run-wide events (`runStarted`: no device, nothing of another's).
    private func serveGroupFetch(routingID: [UInt8], body: [UInt8], prefix: [UInt8], hearer: ClientPermissions?) {
        guard let (peerQueued, from, limit, maximumBytes) = admitFetch(routingID: routingID, body: body) else { return }
        var frames: [[UInt8]] = [routingID, BusWire.ReplyVerb.batch.bytes, []]
        var scannedThrough = from - 1
        if from <= publishedSequence {
            let through = min(publishedSequence, from + BusWire.maximumGroupFetchScan - 1)
            var byteCount = 0
            func add(sequence: UInt64, timestamp: Int64, device: String?, payload: UnsafeRawBufferPointer) -> Bool {
                let matches = device.map { $0.utf8.starts(with: prefix) && (hearer?.hears(device: $0) ?? true) } ?? (prefix.isEmpty && hearer != nil)
                if matches {
                    if frames.count > 3 && (byteCount + payload.count > maximumBytes || frames.count - 3 >= limit) { return false }
                    frames.append(Self.eventFrame(sequence: sequence, timestamp: timestamp, payload: payload))
                    byteCount += payload.count
                }
                scannedThrough = sequence
                return true
            }
            if let oldest = recent.oldestSequence, from >= oldest {
                var sequence = from
                while sequence <= through, let added = recent.withRecord(sequence, { timestamp, device, payload in
                    add(sequence: sequence, timestamp: timestamp, device: device, payload: payload)
                }) {
                    if !added { break }
                    sequence += 1
                }
            } else {
                readFromLog(from: from, through: through) { sequence, timestamp, payload in
                    // The log holds no topics: the event names its device.
                    let device = (try? EventCodec.decodeEvent(Array(payload)))?.1.device
                    return add(sequence: sequence, timestamp: timestamp, device: device, payload: payload)
                }
            }
        }
        var header: [UInt8] = []
        header.reserveCapacity(BusWire.groupBatchHeaderByteCount)
        BusWire.appendLittleEndian(from, to: &header)
        BusWire.appendLittleEndian(UInt32(frames.count - 3), to: &header)
        BusWire.appendLittleEndian(publishedSequence, to: &header)
        BusWire.appendLittleEndian(scannedThrough, to: &header)
        frames[2] = header
        send(frames, countingIn: peerQueued)
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
            // One message per record for version-1 subscribers, one per round for version-2 ones: only
            // what someone subscribed to is composed.
            let perRecord = subscriptions.hearsVersion1Events
            let batched = subscriptions.hearsBatches
            while let record = unpublished.first, record.sequence <= durable {
                unpublished.removeFirst()
                if perRecord {
                    outgoing.removeAll()
                    BusWire.appendEvent(record, to: &outgoing)
                    try publisher.send(outgoing, mode: .nonBlocking)
                }
                if batched {
                    eventBatch.add { BusWire.appendBatchedRecord(record, to: &$0) }
                    if eventBatch.count >= BusWire.maximumRecordsPerEventBatch || eventBatch.byteCount >= BusWire.maximumEventBatchBytes {
                        try publishEventBatch()
                    }
                }
                if !publishedGroups.isEmpty, let device = record.device {
                    var full: [Int] = []
                    groupOfPrefix.forEachPosition(prefixing: device) { index in
                        publishedGroups[index].batch.add { BusWire.appendBatchedRecord(record, to: &$0) }
                        publishedGroups[index].last = record.sequence
                        if publishedGroups[index].batch.count >= BusWire.maximumRecordsPerEventBatch
                            || publishedGroups[index].batch.byteCount >= BusWire.maximumEventBatchBytes {
                            full.append(index)
                        }
                    }
                    for index in full { try publishGroupBatch(index) }
                }
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
        if !eventBatch.isEmpty { try publishEventBatch() }
        for index in publishedGroups.indices where !publishedGroups[index].batch.isEmpty { try publishGroupBatch(index) }
        while let pending = pendingAcknowledgements.first, pending.acknowledgement.lastSequence <= publishedSequence {
            pendingAcknowledgements.removeFirst()
            acknowledge(pending.routingID, pending.acknowledgement, batched: pending.batched)
        }
        sendAcknowledgementBatches()
    }

    /// Publishes the records gathered in `eventBatch` as one `all` message.
    private func publishEventBatch() throws(ZeroMQError) {
        outgoing.removeAll()
        outgoing.appendFrame(BusWire.batchedEventsTopic)
        eventBatch.finish(into: &outgoing)
        try publisher.send(outgoing, mode: .nonBlocking)
        counters.eventBatchesPublished += 1
    }

    /// Publishes a group's records of this round: `[grp.<prefix>/, previous, body]`.
    private func publishGroupBatch(_ index: Int) throws(ZeroMQError) {
        outgoing.removeAll()
        outgoing.appendFrame(publishedGroups[index].topic)
        outgoing.appendFrame(littleEndian: publishedGroups[index].batchPrevious)
        publishedGroups[index].batch.finish(into: &outgoing)
        try publisher.send(outgoing, mode: .nonBlocking)
        publishedGroups[index].batchPrevious = publishedGroups[index].last
        counters.groupBatchesPublished += 1
    }

    private func sendHeartbeat() throws(ZeroMQError) {
        let header = BusWire.encodeHeader(BusWire.Header(kind: .heartbeat, sequence: publishedSequence, timestamp: lastPublishedTimestamp))
        try publisher.send([BusWire.heartbeatTopic, header, partitionBytes], mode: .nonBlocking)
        // Each group's last sequence, so a subscriber of the group notices a lost last message.
        for group in publishedGroups {
            outgoing.removeAll()
            outgoing.appendFrame(group.topic)
            outgoing.appendFrame(littleEndian: group.last)
            try publisher.send(outgoing, mode: .nonBlocking)
        }
        counters.heartbeatsSent += 1
        nextHeartbeat = .now + configuration.heartbeatInterval
    }

    // MARK: Replies

    private func acknowledge(_ routingID: [UInt8], _ acknowledgement: CommandAcknowledgement, batched: Bool = false) {
        if batched {
            let index: Int
            if let found = acknowledgementBatchIndex(of: routingID) {
                index = found
            } else {
                acknowledgementBatches.append((routingID, BatchComposer()))
                index = acknowledgementBatches.count - 1
                lastAcknowledgementBatch = index
            }
            acknowledgementBatches[index].batch.add { BusWire.appendAcknowledgementEntry(acknowledgement, to: &$0) }
            if acknowledgementBatches[index].batch.count >= BusWire.maximumAcknowledgementsPerBatch
                || acknowledgementBatches[index].batch.byteCount >= BusWire.maximumAcknowledgementBatchBytes {
                sendAcknowledgementBatch(at: index)
            }
            return
        }
        // A sender's answers keep their order: batched ones gathered for the same connection go first.
        if let index = acknowledgementBatchIndex(of: routingID) { sendAcknowledgementBatch(at: index) }
        outgoing.removeAll()
        outgoing.appendFrame(routingID)
        acknowledgement.appendFrames(to: &outgoing)
        sendOutgoingReply(to: routingID)
    }

    /// Where the answers gathered for `routingID` are, if any.
    private func acknowledgementBatchIndex(of routingID: [UInt8]) -> Int? {
        if lastAcknowledgementBatch >= 0, lastAcknowledgementBatch < acknowledgementBatches.count,
           acknowledgementBatches[lastAcknowledgementBatch].routingID == routingID {
            return lastAcknowledgementBatch
        }
        guard let index = acknowledgementBatches.firstIndex(where: { $0.routingID == routingID }) else { return nil }
        lastAcknowledgementBatch = index
        return index
    }

    /// Sends the answers gathered at `index` as one ACKS, now.
    private func sendAcknowledgementBatch(at index: Int) {
        var gathered = acknowledgementBatches.remove(at: index)
        lastAcknowledgementBatch = -1
        sendGatheredAcknowledgements(to: gathered.routingID, &gathered.batch)
    }

    /// Sends every gathered ACKS, in the order their connections were first answered.
    private func sendAcknowledgementBatches() {
        for index in acknowledgementBatches.indices {
            let routingID = acknowledgementBatches[index].routingID
            sendGatheredAcknowledgements(to: routingID, &acknowledgementBatches[index].batch)
        }
        acknowledgementBatches.removeAll(keepingCapacity: true)
        lastAcknowledgementBatch = -1
    }

    private func sendGatheredAcknowledgements(to routingID: [UInt8], _ batch: inout BatchComposer) {
        guard !batch.isEmpty else { return }
        outgoing.removeAll()
        outgoing.appendFrame(routingID)
        outgoing.appendFrame(BusWire.ReplyVerb.acknowledgements.bytes)
        batch.finish(into: &outgoing)
        counters.acknowledgementBatchesSent += 1
        sendOutgoingReply(to: routingID)
    }

    /// Sends the ACK or PONG composed in `outgoing` (its first frame `routingID`) without waiting,
    /// counted among the unread replies (`UnreadReplies`). A peer that is not reading, or gone,
    /// loses it: it retries, and retries are idempotent. Only a closed socket or context is an
    /// error, and `step` reports that at its next poll.
    private func sendOutgoingReply(to routingID: [UInt8]) {
        let peer = unreadReplies.counter(for: routingID)
        guard unreadReplies.admits(peer) else {
            counters.repliesDroppedForUnreadReplies += 1
            return
        }
        // The routing id is consumed by the ROUTER socket, not queued.
        let footprint = QueuedByteCounter.footprint(frameCount: outgoing.frameCount - 1, byteCount: outgoing.byteCount - routingID.count)
        do {
            if try !router.send(outgoing, mode: .nonBlocking, countingIn: peer, footprint: footprint) { counters.repliesDropped += 1 }
        } catch {
            counters.repliesToDepartedPeers += 1
        }
    }

    /// Sends a BATCH without waiting, its bytes counted for `peer`; as `sendOutgoingReply`.
    private func send(_ frames: [[UInt8]], countingIn peer: QueuedByteCounter) {
        do {
            if try !router.send(frames, mode: .nonBlocking, countingIn: peer) { counters.repliesDropped += 1 }
        } catch {
            counters.repliesToDepartedPeers += 1
        }
    }

    /// Counts a refused request, reports it within the rate limit and answers it with a
    /// `malformed` ACK when the sender is known.
    private func refuse(_ routingID: [UInt8]?, _ failure: WireFailure, commandID: CommandID? = nil, batched: Bool = false) {
        counters.refused.record(failure.reason)
        if let report = refusalReports.admit(failure, at: .now) {
            onRefused?(report)
        } else {
            counters.refusalReportsSkipped += 1
        }
        guard let routingID else { return }
        acknowledge(routingID, CommandAcknowledgement(status: .malformed, commandID: commandID, lastSequence: 0, message: failure.description),
                    batched: batched)
    }

    /// Reports the refusals the rate limit held back once their interval is over, so a burst
    /// that stops is still accounted for in the log.
    private func reportSkippedRefusals() {
        for report in refusalReports.overdueSummaries(at: .now) { onRefused?(report) }
    }
}

/// Counts the open connections of one bound socket from its monitor events.
private final class PeerWatch {
    let monitor: SocketMonitor
    /// Descriptors of accepted connections not yet seen disconnecting, with when they were accepted.
    /// Keyed by descriptor, not counted, so a lost event heals when its descriptor is reused.
    private var open: [UInt32: ContinuousClock.Instant] = [:]

    init(_ socket: Socket) throws(ZeroMQError) {
        monitor = try socket.monitor([.accepted, .disconnected])
    }

    var openCount: Int { open.count }

    /// Open TCP connections whose peer has not sent a byte (one system call each), counted again at
    /// most every 50 ms: a flood of connections is judged hundreds at a time.
    func silentCount() -> Int {
        let now = ContinuousClock.now
        if let cached = silentCache, now - cached.at < .milliseconds(50) { return cached.count }
        let count = open.keys.count { AcceptedConnection.hasReceivedData(fileDescriptor: Int32(bitPattern: $0)) == false }
        silentCache = (now, count)
        return count
    }
    private var silentCache: (at: ContinuousClock.Instant, count: Int)?

    /// Shuts down the TCP connections that have sent nothing for `age` since they were accepted; returns how many.
    func closeSilentConnections(olderThan age: Duration, endpoint: String) -> Int {
        let now = ContinuousClock.now
        var closed = 0
        for (descriptor, accepted) in open where now - accepted >= age {
            let fileDescriptor = Int32(bitPattern: descriptor)
            guard AcceptedConnection.hasReceivedData(fileDescriptor: fileDescriptor) == false else { continue }
            // Forgotten at once: its disconnect event follows.
            open[descriptor] = nil
            if AcceptedConnection.shutDown(fileDescriptor: fileDescriptor, boundTo: endpoint) { closed += 1 }
        }
        return closed
    }

    /// Reads the monitor's events; `closedOrReused` hears each descriptor accepted or disconnected.
    func update(closedOrReused: ((UInt32) -> Void)? = nil) throws(ZeroMQError) {
        while let event = try monitor.receive(timeout: .zero) {
            if event.event == .accepted { open[event.value] = .now } else if event.event == .disconnected { open[event.value] = nil }
            closedOrReused?(event.value)
        }
    }
}

/// At most one report per refusal reason per interval; the first refusal after a quiet
/// interval is reported at once, the rest are counted and summed into the next report.
/// At most one report per reason per interval, the next one saying how many were held back: the
/// queue's refusals, and the role processes' malformed published frames.
public struct RefusalReportLimiter: Sendable {
    let interval: Duration
    private var lastReport: [WireFailureReason: ContinuousClock.Instant] = [:]
    private var skipped: [WireFailureReason: Int] = [:]

    public init(interval: Duration) {
        self.interval = interval
    }

    /// The report to make for `failure` now, or nil when this reason was reported too recently.
    public mutating func admit(_ failure: WireFailure, at now: ContinuousClock.Instant) -> WireFailure? {
        if let last = lastReport[failure.reason], now - last < interval {
            skipped[failure.reason, default: 0] += 1
            return nil
        }
        lastReport[failure.reason] = now
        guard let count = skipped.removeValue(forKey: failure.reason) else { return failure }
        return WireFailure(failure.reason, failure.detail + " (and \(count) more refused for this reason since the last report)")
    }

    /// Summaries of skipped refusals whose interval has passed without a new report.
    mutating func overdueSummaries(at now: ContinuousClock.Instant) -> [WireFailure] {
        guard !skipped.isEmpty else { return [] }
        var summaries: [WireFailure] = []
        for (reason, count) in skipped where now - (lastReport[reason] ?? now) >= interval {
            summaries.append(WireFailure(reason, "\(count) more refused for this reason since the last report"))
            skipped[reason] = nil
            lastReport[reason] = now
        }
        return summaries
    }
}

/// The most recent published records, contiguous by sequence, for FETCH without disk reads.
///
/// The payloads are copied into one ring of bytes rather than kept as one array each: an array per
/// record meant one free of long-untouched memory for every record that aged out, on the queue's
/// thread, at every record it published. A record is kept while it is among the last `capacity` and its
/// bytes were not written over; one larger than the whole ring is not kept (FETCH reads it from the log).
struct RecentRecords {
    private struct Entry {
        var timestamp: Int64
        var device: String?
        /// Where the payload starts in the ring's unbounded byte count (its offset is this modulo the ring's size).
        var start: UInt64
        var count: Int
    }

    private var entries: [Entry?]
    private var bytes: [UInt8]
    /// The unbounded byte count's end: where the next payload goes (or the ring's next lap, if it does not fit before the end).
    private var end: UInt64 = 0
    private(set) var oldestSequence: UInt64?
    private var newestSequence: UInt64 = 0

    /// Average payload bytes the ring holds per record before records age out by size rather than by count.
    static let bytesPerRecord = 128

    init(capacity: Int, byteCapacity: Int? = nil) {
        entries = Array(repeating: nil, count: max(1, capacity))
        let byteCount = max(1, byteCapacity ?? capacity * Self.bytesPerRecord)
        // Not filled: every byte is written before it is read, and untouched pages cost no memory.
        bytes = [UInt8](unsafeUninitializedCapacity: byteCount) { _, initialized in initialized = byteCount }
    }

    mutating func append(_ record: BusRecord) {
        if oldestSequence == nil || record.sequence != newestSequence + 1 {
            // A discontinuity (records handed over out of line): start again from here.
            oldestSequence = record.sequence
        }
        newestSequence = record.sequence
        let count = record.payload.count
        let ringBytes = UInt64(bytes.count)
        guard count <= bytes.count else {
            oldestSequence = nil
            return
        }
        var start = end
        if start % ringBytes + UInt64(count) > ringBytes { start += ringBytes - start % ringBytes }
        end = start + UInt64(count)
        let offset = Int(start % ringBytes)
        bytes.withUnsafeMutableBytes { ring in
            record.payload.withUnsafeBytes { payload in
                if let source = payload.baseAddress { (ring.baseAddress! + offset).copyMemory(from: source, byteCount: count) }
            }
        }
        entries[slot(record.sequence)] = Entry(timestamp: record.timestamp, device: record.device, start: start, count: count)
        // Age out by count (the newest took the oldest's slot) and by bytes (written over).
        while let oldest = oldestSequence, oldest < newestSequence,
              newestSequence - oldest >= UInt64(entries.count) || entries[slot(oldest)]!.start + ringBytes < end {
            oldestSequence = oldest + 1
        }
    }

    /// Hands `body` the record's timestamp, device and payload (valid only during the call); nil when it is not kept.
    func withRecord<Result>(_ sequence: UInt64, _ body: (Int64, String?, UnsafeRawBufferPointer) -> Result) -> Result? {
        guard let oldest = oldestSequence, sequence >= oldest, sequence <= newestSequence, let entry = entries[slot(sequence)] else { return nil }
        let offset = Int(entry.start % UInt64(bytes.count))
        return bytes.withUnsafeBytes { ring in
            body(entry.timestamp, entry.device, UnsafeRawBufferPointer(rebasing: ring[offset..<(offset + entry.count)]))
        }
    }

    private func slot(_ sequence: UInt64) -> Int { Int(sequence % UInt64(entries.count)) }
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
