/// What each subscriber connection of the queue's events socket has subscribed to, so one
/// connection cannot make libzmq keep an unbounded number of topics (a stranger once registered
/// 300,000 distinct ones). Pure bookkeeping: the endpoint feeds it every (un)subscription the
/// XPUB reports, keyed by the connection's descriptor, and closes a connection it refuses.
struct SubscriptionLedger {
    /// The longest device name the queue registers (QueueDecisions' name check), so the longest
    /// topic a client needs is `evt.` and 128 bytes.
    static let maximumDeviceNameBytes = 128

    enum Verdict: Equatable {
        /// Kept (or removed, for an unsubscription): nothing to do.
        case accepted
        /// The connection must be closed, for this reason.
        case refused(WireFailure)
    }

    let maximumPerConnection: Int
    /// Most distinct topic groups over all connections: the queue composes one message per group per round.
    let maximumGroups: Int
    /// Each connection's topics by hash, with what each hears: counting needs no copy of a topic (two distinct
    /// topics of one connection sharing a 64-bit hash would count once, which no client can aim for: the seed is random).
    private var topicsByConnection: [Int32: [Int: Kept]] = [:]
    /// The topic groups subscribed (`grp.<prefix>/`), by prefix, with how many subscriptions name each.
    private(set) var groups: [String: Int] = [:]
    /// Set when a group was added or removed; the endpoint clears it once it followed.
    var groupsChanged = false

    /// One kept subscription: what it hears, and its group's prefix for a group topic.
    private struct Kept {
        var hears: Hears
        var group: String?
    }
    /// Subscriptions over all connections that hear version-1 event messages, and the version-2 event batches.
    private(set) var version1EventTopics = 0
    private(set) var batchTopics = 0

    /// What a subscription hears of the messages the queue publishes.
    struct Hears: OptionSet {
        let rawValue: UInt8
        static let version1Events = Hears(rawValue: 1)
        static let eventBatches = Hears(rawValue: 2)
    }

    /// Whether someone subscribed to the version-2 event batches (`all`).
    var hearsBatches: Bool { batchTopics > 0 }
    /// Whether version-1 event messages are to be published: a subscription hears them, or none hears
    /// batches (a subscription not read yet is then served as before: by libzmq's own filter).
    var hearsVersion1Events: Bool { version1EventTopics > 0 || batchTopics == 0 }
    /// Connections being closed: what they still send is ignored until their descriptor is closed or reused.
    private var closing = Set<Int32>()

    init(maximumPerConnection: Int, maximumGroups: Int = 256) {
        self.maximumPerConnection = maximumPerConnection
        self.maximumGroups = maximumGroups
    }

    /// Connections with at least one topic recorded.
    var connectionCount: Int { topicsByConnection.count }

    /// Topics recorded for one connection.
    func topicCount(_ connection: Int32) -> Int { topicsByConnection[connection]?.count ?? 0 }

    /// Applies one (un)subscription message: a first byte of 1 (subscribe) or 0 (unsubscribe), then
    /// the topic prefix. With CURVE roles, `permissions` are those of the connection's client key
    /// (`key`, its Z85 text): a subscription that would hear events of devices not its own is refused
    /// (`ClientPermissions.refusal(ofSubscription:)`). A refused connection's record is forgotten (it is
    /// about to be closed).
    mutating func apply(_ message: UnsafeRawBufferPointer, from connection: Int32, key: String? = nil,
                        permissions: ClientPermissions? = nil) -> Verdict {
        if closing.contains(connection) { return .accepted }
        guard let kind = message.first, kind <= 1 else {
            forget(connection)
            return .refused(WireFailure(.notASubscription,
                "a subscriber sent a message of \(message.count) bytes that is not a subscription (first byte must be 0 or 1)"))
        }
        let topic = UnsafeRawBufferPointer(rebasing: message[1...])
        var hasher = Hasher()
        hasher.combine(bytes: topic)
        let hash = hasher.finalize()
        if kind == 0 {
            if let kept = topicsByConnection[connection]?.removeValue(forKey: hash) { count(kept, -1) }
            if topicsByConnection[connection]?.isEmpty == true { topicsByConnection[connection] = nil }
            return .accepted
        }
        guard Self.isLegitimate(topic) else {
            forget(connection)
            return .refused(WireFailure(.subscriptionRefused,
                "subscription to \(Self.describe(topic)) refused: topics are `evt.`, `evt.<device>` (device names of at most "
                + "\(Self.maximumDeviceNameBytes) bytes, no `/` or NUL), `hb`, `all`, `grp.<device prefix>/`, or prefixes of these"))
        }
        if let permissions, let refusal = permissions.refusal(ofSubscription: topic) {
            forget(connection)
            return .refused(WireFailure(.roleRefused, "refused subscription to \(Self.describe(topic)) from client key \(key ?? "?"): \(refusal)"))
        }
        let group = BusWire.groupPrefix(ofTopic: topic)
        var topics = topicsByConnection[connection, default: [:]]
        let isNew = topics.updateValue(Kept(hears: Self.hears(topic), group: group), forKey: hash) == nil
        if isNew, let group, groups[group] == nil, groups.count >= maximumGroups {
            forget(connection)
            return .refused(WireFailure(.tooManySubscriptions,
                "subscribers registered more than \(maximumGroups) topic groups; share a group prefix, or subscribe to `all`"))
        }
        guard topics.count <= maximumPerConnection else {
            forget(connection)
            return .refused(WireFailure(.tooManySubscriptions,
                "a subscriber connection registered more than \(maximumPerConnection) subscriptions; "
                + "subscribe to `evt.` for every device's events instead of one topic per device"))
        }
        topicsByConnection[connection] = topics
        if isNew, let kept = topics[hash] { count(kept, 1) }
        return .accepted
    }

    /// Drops what a connection subscribed (it closed, or its descriptor now names a new one).
    mutating func forget(_ connection: Int32) {
        drop(connection)
        closing.remove(connection)
    }

    /// Ignores what a connection being closed still sends, until `forget`.
    mutating func ignore(_ connection: Int32) {
        drop(connection)
        closing.insert(connection)
    }

    private mutating func drop(_ connection: Int32) {
        guard let topics = topicsByConnection.removeValue(forKey: connection) else { return }
        for kept in topics.values { count(kept, -1) }
    }

    private mutating func count(_ kept: Kept, _ change: Int) {
        if kept.hears.contains(.version1Events) { version1EventTopics += change }
        if kept.hears.contains(.eventBatches) { batchTopics += change }
        if let group = kept.group {
            let remaining = groups[group, default: 0] + change
            if remaining <= 0 { groups[group] = nil } else { groups[group] = remaining }
            if remaining <= 0 || remaining == change { groupsChanged = true }
        }
    }

    /// What a kept subscription hears: a prefix of `evt.` or a device topic hears version-1 events, a
    /// prefix of `all` the batches (the empty one both).
    static func hears(_ topic: UnsafeRawBufferPointer) -> Hears {
        var hears: Hears = []
        if topic.starts(with: BusWire.eventTopicPrefix) || BusWire.eventTopicPrefix.starts(with: topic) { hears.insert(.version1Events) }
        if BusWire.batchedEventsTopic.starts(with: topic) { hears.insert(.eventBatches) }
        return hears
    }

    /// Whether a subscription can match a topic the queue publishes: `evt.<device>`, `evt.*`,
    /// `hb`, `all`, `grp.<device prefix>/`, or a prefix of one of these but a group's (the empty prefix
    /// matches everything).
    static func isLegitimate(_ topic: UnsafeRawBufferPointer) -> Bool {
        let event = BusWire.eventTopicPrefix
        if BusWire.groupTopicPrefix.starts(with: topic) || BusWire.groupPrefix(ofTopic: topic) != nil { return true }
        if topic.count <= event.count, topic.elementsEqual(event.prefix(topic.count)) { return true }
        if topic.count <= BusWire.heartbeatTopic.count, topic.elementsEqual(BusWire.heartbeatTopic.prefix(topic.count)) { return true }
        if BusWire.batchedEventsTopic.starts(with: topic) { return true }
        guard topic.starts(with: event) else { return false }
        let device = topic.dropFirst(event.count)
        return device.count <= maximumDeviceNameBytes && !device.contains(0) && !device.contains(UInt8(ascii: "/"))
    }

    /// The topic for a log line: its first bytes, printable ones as they are.
    static func describe(_ topic: UnsafeRawBufferPointer) -> String {
        let shown = topic.prefix(40).map { $0 >= 0x20 && $0 < 0x7f ? String(UnicodeScalar($0)) : "\\x" + String($0, radix: 16) }.joined()
        return "\"\(shown)\"" + (topic.count > 40 ? " (\(topic.count) bytes)" : "")
    }
}

extension ClientPermissions {
    /// Why a connection with these permissions may not subscribe to `topic`, or nil when it may
    /// (docs/reliability.md, "Roles"). A key that hears every device (`hearsEveryDevice`) may subscribe
    /// to any topic; another only to topics that carry only its devices' events: `evt.<device>` and
    /// `grp.<prefix>/` of a device or prefix it plays, and the heartbeats (`hb`). A subscription is a
    /// prefix, so `evt.` (or `e`, or the empty one) would hear every device.
    func refusal(ofSubscription topic: UnsafeRawBufferPointer) -> String? {
        if hearsEveryDevice { return nil }
        if !topic.isEmpty, BusWire.heartbeatTopic.starts(with: topic) { return nil }
        let device: String?
        if let group = BusWire.groupPrefix(ofTopic: topic) {
            device = group
        } else if topic.count > BusWire.eventTopicPrefix.count, topic.starts(with: BusWire.eventTopicPrefix) {
            device = String(decoding: topic.dropFirst(BusWire.eventTopicPrefix.count), as: UTF8.self)
        } else {
            device = nil
        }
        if let device, hears(device: device) { return nil }
        return "it would hear events of devices not its own, and this key's roles are \(rolesText) for its \(devicesText); "
            + "subscribe to `evt.<device>` or `grp.<device>/` of its own devices, and `hb`"
    }
}
