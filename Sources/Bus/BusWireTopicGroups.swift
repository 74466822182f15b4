import StoreKitModel
import ZeroMQ

/// Topic groups (docs/wire-format.md, "Topic groups"): a subscriber that follows only the devices
/// whose names start with a prefix subscribes to `grp.<prefix>/`. The queue publishes, per publishing
/// round, that group's records as one message with the sequence of the group's record before them,
/// and every heartbeat interval the group's last sequence; so a subscriber detects a lost message of
/// its own group without hearing the others, and fills it with a prefix FETCH. The log's sequence
/// stays the only numbering.
extension BusWire {
    /// Topics of group messages: `grp.`, the prefix, then `/` (no device name holds one, so no group's
    /// topic is a prefix of another's).
    public static let groupTopicPrefix: [UInt8] = Array("grp.".utf8)
    static let groupTopicEnd = UInt8(ascii: "/")
    /// A group FETCH's reply header: the BATCH header, then `scanned_through` u64.
    public static let groupBatchHeaderByteCount = 28
    /// Most records a group FETCH looks at (matching or not) before it answers with what it found.
    static let maximumGroupFetchScan: UInt64 = 50_000

    /// The topic a subscriber to `prefix` subscribes to, and the group's messages carry.
    public static func groupTopic(_ prefix: String) -> [UInt8] {
        groupTopicPrefix + Array(prefix.utf8) + [groupTopicEnd]
    }

    /// The group prefix of a topic `grp.<prefix>/`, or nil for any other topic or a malformed prefix
    /// (empty, longer than a device name, holding `/` or NUL).
    static func groupPrefix(ofTopic topic: UnsafeRawBufferPointer) -> String? {
        guard topic.count > groupTopicPrefix.count + 1, topic.starts(with: groupTopicPrefix), topic.last == groupTopicEnd else { return nil }
        let prefix = UnsafeRawBufferPointer(rebasing: topic[groupTopicPrefix.count..<(topic.count - 1)])
        guard prefix.count <= SubscriptionLedger.maximumDeviceNameBytes, !prefix.contains(0), !prefix.contains(groupTopicEnd) else { return nil }
        return String(decoding: prefix, as: UTF8.self)
    }

    /// A group FETCH body: the 12-byte FETCH body, then the prefix (1–128 bytes).
    public static func encodeGroupFetch(from: UInt64, maximumCount: UInt32, prefix: String) -> [UInt8] {
        encodeFetch(from: from, maximumCount: maximumCount) + Array(prefix.utf8)
    }
}

/// What one group message says (`[topic, previous or last (8 bytes), body?]`).
enum GroupMessage {
    /// A round's records of the group, ascending; `previous` is the group's record before the first.
    case records(previous: UInt64, [BusRecord])
    /// Every heartbeat interval: the group's last published sequence (an upper bound, see the doc).
    case heartbeat(last: UInt64)

    static func decode(_ message: borrowing ReceivedMessage) throws(WireFailure) -> GroupMessage {
        guard message.count == 2 || message.count == 3 else {
            throw WireFailure(.wrongFrameCount, "group message has \(message.count) frames, expected 2 or 3")
        }
        guard message[1].count == 8 else { throw WireFailure(.malformedHeader, "group message's sequence frame is not 8 bytes") }
        var sequence: UInt64 = 0
        for (index, byte) in message[1].enumerated() { sequence |= UInt64(byte) << (8 * UInt64(index)) }
        guard message.count == 3 else { return .heartbeat(last: sequence) }
        let records = try BusWire.decodeEventBatch(message[2])
        guard let first = records.first, first.sequence > sequence else {
            throw WireFailure(.malformedBody, "group message's records do not follow its previous sequence \(sequence)")
        }
        return .records(previous: sequence, records)
    }
}

/// The queue's side of one topic group: its last published sequence and this round's records.
struct PublishedGroup {
    let prefix: [UInt8]
    let topic: [UInt8]
    /// The group's last published record, or (until one is) the partition's published sequence when the
    /// group was first subscribed: an upper bound, so a subscriber's FETCH covers whatever came before.
    var last: UInt64
    /// `last` when this round's batch began.
    var batchPrevious: UInt64
    var batch = BatchComposer()

    init(prefix: String, publishedSequence: UInt64) {
        self.prefix = Array(prefix.utf8)
        topic = BusWire.groupTopic(prefix)
        last = publishedSequence
        batchPrevious = publishedSequence
    }
}

extension BusRecord: DeviceRecord {}

extension FollowedDevices<BusRecord> {
    /// A group's message as it came off the wire: its records of one round, or its heartbeat.
    mutating func received(group: String, _ message: GroupMessage, now: ContinuousClock.Instant, into delivered: inout [BusRecord]) {
        switch message {
        case .records(let previous, let records): receivedRecords(group: group, previous: previous, records, now: now, into: &delivered)
        case .heartbeat(let last): receivedHeartbeat(group: group, last: last, now: now)
        }
    }
}
