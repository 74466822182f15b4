import StoreKitModel
import ZeroMQ

/// The bus wire format: frame layouts, verbs and limits shared by the queue endpoint,
/// subscribers and command senders. docs/wire-format.md is the normative description;
/// every constant here appears there, so a client in another language can follow it.
public enum BusWire {
    /// Byte 0 of every record header. A receiver refuses other versions rather than guess.
    public static let version: UInt8 = 1
    /// Size of the fixed record header (events, heartbeats, fetched records).
    public static let headerByteCount = 24

    /// Byte 1 of a record header.
    public enum MessageKind: UInt8, Sendable, Hashable {
        case event = 1
        case heartbeat = 2
    }

    /// Topic (first frame) of heartbeats.
    public static let heartbeatTopic: [UInt8] = Array("hb".utf8)
    /// Prefix of every event topic; subscribing to it receives every event of the partition.
    public static let eventTopicPrefix: [UInt8] = Array("evt.".utf8)
    /// Device part of the topic of events that concern no device (such as `runStarted`).
    public static let deviceLessTopicSuffix = "*"

    /// The topic of an event: `evt.<device>`, or `evt.*` for device-less events.
    public static func eventTopic(device: String?) -> [UInt8] {
        eventTopicPrefix + Array((device ?? deviceLessTopicSuffix).utf8)
    }

    /// Appends an event's three frames (topic, header, payload) to `message`, for the hot publish
    /// path: the same bytes as `eventTopic`, `encodeHeader` and the payload, without allocating.
    public static func appendEvent(_ record: BusRecord, to message: inout OutgoingMessage) {
        message.appendFrame { bytes in
            bytes.append(contentsOf: eventTopicPrefix)
            bytes.append(contentsOf: (record.device ?? deviceLessTopicSuffix).utf8)
        }
        message.appendFrame { appendHeader(Header(kind: .event, sequence: record.sequence, timestamp: record.timestamp), to: &$0) }
        message.appendFrame(record.payload)
    }

    /// Request verbs (first frame a DEALER sends).
    public enum RequestVerb: String, Sendable, CaseIterable {
        case command = "CMD"
        case fetch = "FETCH"
        case ping = "PING"
        /// Version 2: which wire versions the queue speaks (docs/wire-format.md, "Version 2").
        case hello = "HELLO"
        /// Version 2: several commands in one request.
        case commands = "CMDS"

        /// The verb a received frame spells, compared in place.
        init?(frame: UnsafeRawBufferPointer) {
            guard let verb = Self.allCases.first(where: { $0.rawValue.utf8.elementsEqual(frame) }) else { return nil }
            self = verb
        }
    }

    /// Reply verbs (first frame the ROUTER sends back).
    public enum ReplyVerb: String, Sendable, CaseIterable {
        case acknowledgement = "ACK"
        case batch = "BATCH"
        case pong = "PONG"
        /// Version 2: the answer to HELLO.
        case hello = "HELLO"
        /// Version 2: the answers to commands sent in CMDS.
        case acknowledgements = "ACKS"

        /// The verb frame.
        var bytes: [UInt8] { Array(rawValue.utf8) }
    }

    /// Size of the FETCH body: from sequence (u64 LE) and maximum count (u32 LE).
    public static let fetchRequestByteCount = 12
    /// Size of the BATCH header frame: first sequence (u64), count (u32), durable sequence (u64), all LE.
    public static let batchHeaderByteCount = 20

    // MARK: Record header

    /// The decoded 24-byte record header.
    public struct Header: Sendable, Hashable {
        public var kind: MessageKind
        public var sequence: UInt64
        public var timestamp: Int64

        public init(kind: MessageKind, sequence: UInt64, timestamp: Int64) {
            self.kind = kind
            self.sequence = sequence
            self.timestamp = timestamp
        }
    }

    /// Appends the 24-byte header to `bytes`.
    public static func appendHeader(_ header: Header, to bytes: inout [UInt8]) {
        bytes.append(version)
        bytes.append(header.kind.rawValue)
        bytes.append(contentsOf: repeatElement(0, count: 6))
        appendLittleEndian(header.sequence, to: &bytes)
        appendLittleEndian(UInt64(bitPattern: header.timestamp), to: &bytes)
    }

    /// The 24-byte header alone.
    public static func encodeHeader(_ header: Header) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(headerByteCount)
        appendHeader(header, to: &bytes)
        return bytes
    }

    /// Decodes the header at the start of `bytes` (which may hold more, as fetched records do).
    public static func decodeHeader(_ bytes: [UInt8]) throws(WireFailure) -> Header {
        try bytes.withUnsafeBytes { buffer in Result { () throws(WireFailure) in try decodeHeader(buffer) } }.get()
    }

    /// Decodes the header at the start of `bytes`, borrowed where they were received.
    public static func decodeHeader(_ bytes: UnsafeRawBufferPointer) throws(WireFailure) -> Header {
        guard bytes.count >= headerByteCount else {
            throw WireFailure(.truncatedHeader, "record header has \(bytes.count) bytes, expected \(headerByteCount)")
        }
        guard bytes[0] == version else {
            throw WireFailure(.unsupportedVersion, "wire version \(bytes[0]) is not supported (this build speaks version \(version))")
        }
        guard let kind = MessageKind(rawValue: bytes[1]) else {
            throw WireFailure(.unknownKind, "message kind \(bytes[1]) is unknown")
        }
        guard bytes[2..<8].allSatisfy({ $0 == 0 }) else {
            throw WireFailure(.malformedHeader, "reserved header bytes 2-7 are not zero")
        }
        return Header(
            kind: kind,
            sequence: bytes.loadUnaligned(fromByteOffset: 8, as: UInt64.self).littleEndian,
            timestamp: Int64(bitPattern: bytes.loadUnaligned(fromByteOffset: 16, as: UInt64.self).littleEndian))
    }

    // MARK: Integers

    /// Appends `value` as 8 little-endian bytes.
    public static func appendLittleEndian(_ value: UInt64, to bytes: inout [UInt8]) {
        var remaining = value
        for _ in 0..<8 {
            bytes.append(UInt8(truncatingIfNeeded: remaining))
            remaining >>= 8
        }
    }

    /// Appends `value` as 4 little-endian bytes.
    public static func appendLittleEndian(_ value: UInt32, to bytes: inout [UInt8]) {
        var remaining = value
        for _ in 0..<4 {
            bytes.append(UInt8(truncatingIfNeeded: remaining))
            remaining >>= 8
        }
    }

    /// 8 little-endian bytes.
    public static func littleEndianBytes(_ value: UInt64) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(8)
        appendLittleEndian(value, to: &bytes)
        return bytes
    }

    /// Reads 8 little-endian bytes at `offset`; the caller checked the length.
    public static func readLittleEndian(_ bytes: [UInt8], at offset: Int) -> UInt64 {
        var value: UInt64 = 0
        for index in 0..<8 { value |= UInt64(bytes[offset + index]) << (8 * UInt64(index)) }
        return value
    }

    /// Reads 4 little-endian bytes at `offset`; the caller checked the length.
    static func readLittleEndian32(_ bytes: [UInt8], at offset: Int) -> UInt32 {
        var value: UInt32 = 0
        for index in 0..<4 { value |= UInt32(bytes[offset + index]) << (8 * UInt32(index)) }
        return value
    }

    // MARK: Requests

    /// A FETCH body.
    public static func encodeFetch(from sequence: UInt64, maximumCount: UInt32) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(fetchRequestByteCount)
        appendLittleEndian(sequence, to: &bytes)
        appendLittleEndian(maximumCount, to: &bytes)
        return bytes
    }

    /// The command id at the start of an EventCodec command payload, when that much of it is
    /// well formed; lets the queue echo the id of a command whose body is malformed.
    static func leadingCommandID(_ payload: UnsafeRawBufferPointer) -> CommandID? {
        var reader = BinaryReader(payload)
        guard (try? reader.readByte()) == EventCodec.formatVersion, (try? reader.readBool()) == true,
            let origin = try? reader.readString(), let number = try? reader.readVarint()
        else { return nil }
        return CommandID(origin: origin, number: number)
    }
}

/// Why an inbound message was refused. Each reason has its own counter so an operator can
/// tell a misconfigured client (wrong version) from a hostile or broken one (garbage).
public enum WireFailureReason: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// More frames or bytes than the receiver's limits; drained without being read.
    case oversized
    /// A message with the wrong number of frames for its verb or kind.
    case wrongFrameCount
    /// A first frame that is not a known verb or topic.
    case unknownVerb
    /// A record header shorter than 24 bytes.
    case truncatedHeader
    /// A wire or payload format version this build does not speak.
    case unsupportedVersion
    /// A header kind other than event or heartbeat.
    case unknownKind
    /// A header whose reserved bytes are not zero, or whose kind does not fit its topic.
    case malformedHeader
    /// A FETCH, BATCH, ACK or PONG frame of the wrong size or content.
    case malformedBody
    /// A command payload above the configured maximum.
    case commandTooLarge
    /// A payload that EventCodec refused.
    case undecodablePayload
    /// A connection refused during its handshake: the socket already has `maximumPeers`.
    case tooManyPeers
    /// A CURVE connection refused during its handshake: its client key is not allowed.
    case unknownClientKey
    /// A subscription to a topic the queue never publishes (docs/wire-format.md); its connection is closed.
    case subscriptionRefused
    /// A subscriber connection holding more subscriptions than the queue keeps per connection; it is closed.
    case tooManySubscriptions
    /// A message on the events socket that is neither a subscription nor an unsubscription; its connection is closed.
    case notASubscription
    /// A command outside the roles of its sender's CURVE key (docs/reliability.md, "Roles"); answered `rejected`.
    case roleRefused

    public var description: String { rawValue }
}

/// A refused inbound message: the reason (for counting) and a sentence for the log.
public struct WireFailure: Error, Sendable, Hashable, CustomStringConvertible {
    public var reason: WireFailureReason
    public var detail: String

    public init(_ reason: WireFailureReason, _ detail: String) {
        self.reason = reason
        self.detail = detail
    }

    public var description: String { "\(reason): \(detail)" }
}

/// Per-reason counts of refused inbound messages.
public struct WireFailureCounts: Sendable, Hashable {
    public private(set) var byReason: [WireFailureReason: Int] = [:]

    public init() {}

    /// All refused messages.
    public var total: Int { byReason.values.reduce(0, +) }

    public subscript(reason: WireFailureReason) -> Int { byReason[reason, default: 0] }

    mutating func record(_ reason: WireFailureReason) { byReason[reason, default: 0] += 1 }
}

/// One log record as the bus carries it: its sequence, its (injected) timestamp and the
/// EventCodec payload, byte for byte the log record's payload.
public struct BusRecord: Sendable, Hashable {
    public var sequence: UInt64
    public var timestamp: Int64
    public var payload: [UInt8]
    /// The device the event concerns, which picks the topic; nil for device-less events, and for
    /// records caught up by FETCH (a BATCH carries no topics): filter those by the decoded event's device.
    public var device: String?

    public init(sequence: UInt64, timestamp: Int64, payload: [UInt8], device: String?) {
        self.sequence = sequence
        self.timestamp = timestamp
        self.payload = payload
        self.device = device
    }

    /// Decodes the payload with EventCodec.
    public func decoded() throws(DecodingFailure) -> RecordedEvent {
        let (commandID, event) = try EventCodec.decodeEvent(payload)
        return RecordedEvent(sequence: sequence, timestamp: timestamp, commandID: commandID, event: event)
    }
}

/// A decoded ACK reply.
public struct CommandAcknowledgement: Sendable, Hashable {
    public var status: AcknowledgementStatus
    /// The echoed id; nil when the queue could not read it from the request.
    public var commandID: CommandID?
    /// The last sequence the command produced (0 if none).
    public var lastSequence: UInt64
    /// The rejection or malformation reason; empty otherwise.
    public var message: String

    public init(status: AcknowledgementStatus, commandID: CommandID?, lastSequence: UInt64, message: String) {
        self.status = status
        self.commandID = commandID
        self.lastSequence = lastSequence
        self.message = message
    }

    /// The reply frames after the ROUTER's routing id: `ACK, status, origin, number, lastSequence, message`.
    public func encodedFrames() -> [[UInt8]] {
        [
            Array(BusWire.ReplyVerb.acknowledgement.rawValue.utf8),
            [status.rawValue],
            Array((commandID?.origin ?? "").utf8),
            commandID.map { BusWire.littleEndianBytes($0.number) } ?? [],
            BusWire.littleEndianBytes(lastSequence),
            Array(message.utf8),
        ]
    }

    /// Appends the reply frames (as `encodedFrames`) to `outgoing`, without allocating.
    public func appendFrames(to outgoing: inout OutgoingMessage) {
        outgoing.appendFrame(BusWire.ReplyVerb.acknowledgement.rawValue.utf8)
        outgoing.appendFrame(CollectionOfOne(status.rawValue))
        outgoing.appendFrame((commandID?.origin ?? "").utf8)
        if let commandID {
            outgoing.appendFrame(littleEndian: commandID.number)
        } else {
            outgoing.appendFrame(EmptyCollection<UInt8>())
        }
        outgoing.appendFrame(littleEndian: lastSequence)
        outgoing.appendFrame(message.utf8)
    }

    /// Decodes the frames of an ACK reply (verb included).
    public static func decode(_ frames: [[UInt8]]) throws(WireFailure) -> CommandAcknowledgement {
        // The frames are only read during the call, so their storage may be borrowed.
        var result: Result<CommandAcknowledgement, WireFailure>!
        withFrameBuffers(frames) { buffers in
            result = Result { () throws(WireFailure) in try decode(frameCount: buffers.count) { buffers[$0] } }
        }
        return try result.get()
    }

    /// Decodes an ACK from frames borrowed where they were received (`Socket.receiveMessage`),
    /// without copying them into arrays; `frame(i)` is frame `i` of `frameCount` (verb included).
    public static func decode(frameCount: Int, frame: (Int) -> UnsafeRawBufferPointer) throws(WireFailure) -> CommandAcknowledgement {
        guard frameCount == 6 else { throw WireFailure(.wrongFrameCount, "ACK has \(frameCount) frames, expected 6") }
        let statusFrame = frame(1)
        guard statusFrame.count == 1, let status = AcknowledgementStatus(rawValue: statusFrame[0]) else {
            throw WireFailure(.malformedBody, "ACK status frame is not one known status byte")
        }
        guard let origin = String(validating: frame(2), as: UTF8.self) else {
            throw WireFailure(.malformedBody, "ACK origin is not UTF-8")
        }
        let numberFrame = frame(3)
        let commandID: CommandID?
        switch numberFrame.count {
        case 0: commandID = nil
        case 8: commandID = CommandID(origin: origin, number: numberFrame.loadUnaligned(as: UInt64.self).littleEndian)
        default: throw WireFailure(.malformedBody, "ACK command number has \(numberFrame.count) bytes, expected 8 or 0")
        }
        let sequenceFrame = frame(4)
        guard sequenceFrame.count == 8 else { throw WireFailure(.malformedBody, "ACK last sequence is not 8 bytes") }
        let messageFrame = frame(5)
        return CommandAcknowledgement(
            status: status, commandID: commandID, lastSequence: sequenceFrame.loadUnaligned(as: UInt64.self).littleEndian,
            message: messageFrame.isEmpty ? "" : String(decoding: messageFrame, as: UTF8.self))
    }
}

/// Calls `body` with raw buffers over each array's storage (valid only during the call).
private func withFrameBuffers(_ frames: [[UInt8]], _ body: ([UnsafeRawBufferPointer]) -> Void) {
    func nest(_ index: Int, _ buffers: inout [UnsafeRawBufferPointer]) {
        guard index < frames.count else { return body(buffers) }
        frames[index].withUnsafeBytes { buffer in
            buffers.append(buffer)
            nest(index + 1, &buffers)
        }
    }
    var buffers: [UnsafeRawBufferPointer] = []
    buffers.reserveCapacity(frames.count)
    nest(0, &buffers)
}
