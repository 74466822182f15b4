import StoreKitModel
import ZeroMQ

/// Where one queue partition publishes its events and takes requests.
public struct PartitionEndpoints: Sendable, Hashable {
    /// The log partition its queue writes (docs/load-testing.md, "Partitions").
    public var partition: String
    public var eventsEndpoint: String
    public var requestsEndpoint: String

    public init(partition: String, eventsEndpoint: String, requestsEndpoint: String) {
        self.partition = partition
        self.eventsEndpoint = eventsEndpoint
        self.requestsEndpoint = requestsEndpoint
    }
}

/// Which partition each device's commands go to: its account's (`PartitionRouting`). A device's
/// account is learned from its registration, sent (apps, load drivers) or heard (the store and the
/// downloader hear every partition's `deviceRegistered` events, in catch-up too). A command for a
/// device never registered goes to the first partition, whose queue rejects it as unknown.
public final class DeviceRoutes {
    public let partitionCount: Int
    private var partitionOfDevice: [String: Int] = [:]

    public init(partitionCount: Int) {
        self.partitionCount = max(1, partitionCount)
    }

    public func learn(device: String, account: String) {
        guard partitionCount > 1 else { return }
        partitionOfDevice[device] = PartitionRouting.partitionIndex(account: account, partitionCount: partitionCount)
    }

    public func learn(_ event: Event) {
        if case .deviceRegistered(let device, let account) = event { learn(device: device, account: account) }
    }

    public func partitionIndex(of body: CommandBody) -> Int {
        guard partitionCount > 1 else { return 0 }
        if case .registerDevice(let device, let account) = body { learn(device: device, account: account) }
        return partitionOfDevice[body.device] ?? 0
    }
}

/// One `CommandSender` per partition behind the interface of one: each command goes to its
/// device's partition. Each partition's sender numbers its commands on its own (a queue applies
/// one origin's commands in number order), so with several partitions the origins are
/// `ORIGIN@PARTITION`; with one, the origin is unchanged.
public final class PartitionedSender {
    public let senders: [CommandSender]
    public let routes: DeviceRoutes
    private let poller = Poller()
    /// Per partition, the highest last sequence any acknowledgement named. An answer can arrive
    /// before the events it names (they may be on their way through catch-up after a queue
    /// restart, or dropped by a full PUB pipe and fetched later): a client that judges its state
    /// from events waits until its subscriber has delivered through these.
    public private(set) var acknowledgedThrough: [UInt64]

    public init(context: ZeroMQContext, partitions: [PartitionEndpoints], configuration: CommandSenderConfiguration,
                routes: DeviceRoutes) throws(ZeroMQError) {
        precondition(!partitions.isEmpty && routes.partitionCount == partitions.count)
        var senders: [CommandSender] = []
        for endpoints in partitions {
            var own = configuration
            own.requestsEndpoint = endpoints.requestsEndpoint
            if partitions.count > 1 { own.origin = "\(configuration.origin)@\(endpoints.partition)" }
            do {
                senders.append(try CommandSender(context: context, configuration: own))
            } catch {
                senders.forEach { $0.close() }
                throw error
            }
        }
        self.senders = senders
        self.routes = routes
        acknowledgedThrough = Array(repeating: 0, count: senders.count)
        for sender in senders { sender.pollItems.forEach { poller.register($0) } }
    }

    public func close() { senders.forEach { $0.close() } }

    /// Each command then carries what `subscriber` had delivered per partition when it was sent, and the
    /// queue records it with the command (docs/log-format.md, "The unit's input").
    public func hears(_ subscriber: PartitionedSubscriber) {
        for sender in senders { sender.heard = { [weak subscriber] in subscriber?.lastDelivered ?? [] } }
    }

    /// The origins of this sender's commands, one per partition.
    public var origins: Set<String> { Set(senders.map(\.configuration.origin)) }
    public var outstandingCount: Int { senders.reduce(0) { $0 + $1.outstandingCount } }
    /// Room in every partition's window, so a caller that checks it never meets a full window.
    public var hasCapacity: Bool { senders.allSatisfy(\.hasCapacity) }
    public var requestsEndpoints: String { senders.map(\.configuration.requestsEndpoint).joined(separator: ", ") }

    @discardableResult
    public func submit(_ body: CommandBody) throws(CommandSenderError) -> CommandID {
        try senders[routes.partitionIndex(of: body)].submit(body)
    }

    /// Completions from every partition, waiting up to `timeout` for the first.
    public func poll(timeout: Duration) throws(ZeroMQError) -> [CommandCompletion] {
        if senders.count == 1 {
            let completions = try senders[0].poll(timeout: timeout)
            noteAcknowledged(completions, partition: 0)
            return completions
        }
        let deadline = ContinuousClock.now + timeout
        while true {
            var completions: [CommandCompletion] = []
            for (partition, sender) in senders.enumerated() {
                let answered = try sender.poll(timeout: .zero)
                noteAcknowledged(answered, partition: partition)
                completions += answered
            }
            let now = ContinuousClock.now
            if !completions.isEmpty || now >= deadline { return completions }
            // Retries are due on a schedule, so the wait is short enough to keep it.
            try poller.poll(timeout: min(deadline - now, .milliseconds(5)))
        }
    }
}

extension PartitionedSender {
    private func noteAcknowledged(_ completions: [CommandCompletion], partition: Int) {
        for case .acknowledged(let acknowledgement) in completions where acknowledgement.lastSequence > acknowledgedThrough[partition] {
            acknowledgedThrough[partition] = acknowledgement.lastSequence
        }
    }
}

/// One `EventSubscriber` per partition behind the interface of one: each partition's events in
/// its own order (gap-free, caught up from its log); there is no order across partitions, and
/// none is needed, since each account's events are all in one partition.
public final class PartitionedSubscriber {
    public let subscribers: [EventSubscriber]
    public let partitions: [PartitionEndpoints]
    public let routes: DeviceRoutes
    private let poller = Poller()
    private var nextFirst = 0

    public init(context: ZeroMQContext, partitions: [PartitionEndpoints], configuration: EventSubscriberConfiguration,
                routes: DeviceRoutes) throws(ZeroMQError) {
        precondition(!partitions.isEmpty && routes.partitionCount == partitions.count)
        var subscribers: [EventSubscriber] = []
        for endpoints in partitions {
            var own = configuration
            own.eventsEndpoint = endpoints.eventsEndpoint
            own.requestsEndpoint = endpoints.requestsEndpoint
            do {
                subscribers.append(try EventSubscriber(context: context, configuration: own))
            } catch {
                subscribers.forEach { $0.close() }
                throw error
            }
        }
        self.subscribers = subscribers
        self.partitions = partitions
        self.routes = routes
        for subscriber in subscribers {
            subscriber.pollItems.forEach { poller.register($0) }
            // This poll includes each request socket, so each is read every round (else a reply would keep it ready).
            subscriber.readsRepliesEveryRound = subscribers.count > 1
        }
    }

    public func close() { subscribers.forEach { $0.close() } }

    public var onStateChange: ((EventSubscriberState) -> Void)? {
        get { subscribers[0].onStateChange }
        set { subscribers.forEach { $0.onStateChange = newValue } }
    }

    public var onMalformed: ((WireFailure) -> Void)? {
        get { subscribers[0].onMalformed }
        set { subscribers.forEach { $0.onMalformed = newValue } }
    }

    /// Live once every partition is live.
    public var isLive: Bool { subscribers.allSatisfy { $0.state == .live } }

    /// Every partition heard from (a heartbeat or an event) and delivered through what it announced.
    public var isCaughtUp: Bool { subscribers.allSatisfy(\.isCaughtUp) }

    /// True when every partition has delivered at least through its given sequence (e.g. a
    /// sender's `acknowledgedThrough`): everything those answers named has been heard.
    public func hasDelivered(through sequences: [UInt64]) -> Bool {
        precondition(sequences.count == subscribers.count, "one sequence per partition")
        // Every partition asked (one following devices fetches what it still lacks), not only up to the first behind.
        return zip(subscribers, sequences).map { $0.hasDelivered(through: $1) }.allSatisfy { $0 }
    }

    /// Per partition (in the topology's order), the last sequence delivered, 0 when none was.
    public var lastDelivered: [UInt64] {
        // The same array while nothing new was delivered: a sender asks before every command.
        if lastDeliveredCache.count == subscribers.count,
           zip(lastDeliveredCache, subscribers).allSatisfy({ $0 == $1.nextSequence - 1 }) { return lastDeliveredCache }
        lastDeliveredCache = subscribers.map { $0.nextSequence - 1 }
        return lastDeliveredCache
    }
    private var lastDeliveredCache: [UInt64] = []

    /// The partitions not heard from yet, for an error message.
    public var silentPartitions: [PartitionEndpoints] {
        zip(partitions, subscribers).filter { $0.1.knownPublishedSequence == 0 }.map(\.0)
    }

    /// The next in-order records of every partition, as soon as any are deliverable. Records are
    /// not decoded, so devices' accounts are not learned here (senders learn them from registering).
    public func receiveRecords(timeout: Duration) throws(ZeroMQError) -> [BusRecord] {
        try receiveBatches(timeout: timeout) { subscriber, wait throws(ZeroMQError) in try subscriber.receiveRecords(timeout: wait) }
    }

    /// The next in-order events of every partition, decoded; learns each device's account.
    public func receive(timeout: Duration) throws(ZeroMQError) -> [RecordedEvent] {
        let events = try receiveBatches(timeout: timeout) { subscriber, wait throws(ZeroMQError) in try subscriber.receive(timeout: wait) }
        for recorded in events { routes.learn(recorded.event) }
        return events
    }

    private func receiveBatches<Item>(timeout: Duration, _ read: (EventSubscriber, Duration) throws(ZeroMQError) -> [Item]) throws(ZeroMQError) -> [Item] {
        if subscribers.count == 1 { return try read(subscribers[0], timeout) }
        let deadline = ContinuousClock.now + timeout
        while true {
            var items: [Item] = []
            // Start with another partition each round, so a busy one cannot starve the rest.
            for offset in subscribers.indices {
                items += try read(subscribers[(nextFirst + offset) % subscribers.count], .zero)
            }
            nextFirst = (nextFirst + 1) % subscribers.count
            let now = ContinuousClock.now
            if !items.isEmpty || now >= deadline { return items }
            // Each subscriber keeps its own timers (silence, FETCH retry): the wait is short enough for them.
            try poller.poll(timeout: min(deadline - now, .milliseconds(10)))
        }
    }
}
