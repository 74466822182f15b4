import CZeroMQ
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The ZeroMQ socket patterns.
public enum SocketType: Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// `ZMQ_PUB`: fans messages out to every matching subscriber; drops when a subscriber is slow.
    case publisher
    /// `ZMQ_SUB`: receives messages whose first frame starts with a subscribed prefix.
    case subscriber
    /// `ZMQ_XPUB`: a publisher that also receives subscription messages.
    case extendedPublisher
    /// `ZMQ_XSUB`: a subscriber that sends subscriptions as messages.
    case extendedSubscriber
    /// `ZMQ_REQ`: strict send/receive alternation, load-balanced over peers.
    case request
    /// `ZMQ_REP`: strict receive/send alternation, replies to the requester.
    case reply
    /// `ZMQ_DEALER`: asynchronous, load-balanced request side.
    case dealer
    /// `ZMQ_ROUTER`: asynchronous reply side; prefixes inbound messages with the peer's routing id.
    case router
    /// `ZMQ_PUSH`: load-balances messages to pullers.
    case push
    /// `ZMQ_PULL`: fair-queues messages from pushers.
    case pull
    /// `ZMQ_PAIR`: exclusive connection to one peer.
    case pair

    var libraryValue: Int32 {
        switch self {
        case .publisher: ZMQ_PUB
        case .subscriber: ZMQ_SUB
        case .extendedPublisher: ZMQ_XPUB
        case .extendedSubscriber: ZMQ_XSUB
        case .request: ZMQ_REQ
        case .reply: ZMQ_REP
        case .dealer: ZMQ_DEALER
        case .router: ZMQ_ROUTER
        case .push: ZMQ_PUSH
        case .pull: ZMQ_PULL
        case .pair: ZMQ_PAIR
        }
    }

    public var description: String {
        switch self {
        case .publisher: "PUB"
        case .subscriber: "SUB"
        case .extendedPublisher: "XPUB"
        case .extendedSubscriber: "XSUB"
        case .request: "REQ"
        case .reply: "REP"
        case .dealer: "DEALER"
        case .router: "ROUTER"
        case .push: "PUSH"
        case .pull: "PULL"
        case .pair: "PAIR"
        }
    }
}

/// How `Socket.send` behaves when the message cannot be queued right away.
public enum SendMode: Sendable, Hashable {
    /// Waits for room (up to the socket's send timeout, forever by default).
    case blocking
    /// Gives up immediately (`ZMQ_DONTWAIT`); `send` then returns false.
    case nonBlocking
}

/// Upper bounds on one inbound multipart message, checked while receiving so a
/// misbehaving peer cannot make the receiver build an arbitrarily large message.
///
/// libzmq's `maximumMessageSize` option bounds single frames and disconnects the
/// sender; these limits bound the whole message and keep the connection.
public struct MessageLimits: Sendable, Hashable {
    /// Most frames accepted in one message.
    public var maximumFrameCount: Int
    /// Most payload bytes accepted in one message, all frames together.
    public var maximumByteCount: Int
    /// Frames at the start of a message that neither limit counts, such as the routing id a
    /// ROUTER puts in front: its size is chosen by libzmq or the peer's socket options, not by
    /// the request the limits describe.
    public var uncountedLeadingFrames: Int

    public init(maximumFrameCount: Int, maximumByteCount: Int, uncountedLeadingFrames: Int = 0) {
        self.maximumFrameCount = maximumFrameCount
        self.maximumByteCount = maximumByteCount
        self.uncountedLeadingFrames = uncountedLeadingFrames
    }

    /// 1,024 frames and 64 MiB per message.
    public static let standard = MessageLimits(maximumFrameCount: 1_024, maximumByteCount: 64 << 20)
    /// No bound beyond available memory.
    public static let unlimited = MessageLimits(maximumFrameCount: .max, maximumByteCount: .max)
}

/// A ZeroMQ socket.
///
/// Thread-safety: libzmq sockets are not thread-safe. A `Socket` may be created on
/// one thread and handed to another (for example into the closure of the dedicated
/// thread that runs its poll loop), but it must be used by only one thread at a
/// time, and every hand-off must go through something that synchronizes memory
/// (thread start, a lock, a queue, `Thread.join`-like waits). It is marked
/// `@unchecked Sendable` so that such a hand-off compiles in Swift 6 strict mode;
/// the compiler cannot check the one-thread-at-a-time rule, the owner must.
/// `ZeroMQContext.shutdown()` is the thread-safe way to interrupt a socket that is
/// blocked in another thread (its calls then fail with `ETERM`).
///
/// Closing: `close()` is idempotent and also happens on deinit. Any call on a closed
/// socket throws a `ZeroMQError` of kind `.socketClosed` instead of crashing.
public final class Socket: @unchecked Sendable {
    /// The pattern of this socket.
    public let type: SocketType
    /// The context the socket belongs to; kept alive as long as the socket.
    public let context: ZeroMQContext
    /// Bounds for inbound messages; an oversized message is drained and reported as
    /// `ZeroMQError.Kind.messageTooLarge`.
    public var receiveLimits: MessageLimits = .standard

    private(set) var handle: UnsafeMutableRawPointer?
    /// One reusable libzmq message so frames of any size are received without a fixed buffer.
    private let frame: UnsafeMutablePointer<zmq_msg_t>
    /// The frames of the message being received, kept in libzmq's buffers until it is known
    /// to fit the limits; grown to the largest message seen, reused afterwards.
    private var heldFrames: [UnsafeMutablePointer<zmq_msg_t>] = []

    init(handle: UnsafeMutableRawPointer, type: SocketType, context: ZeroMQContext) {
        self.handle = handle
        self.type = type
        self.context = context
        frame = .allocate(capacity: 1)
        zmq_msg_init(frame)
    }

    deinit {
        close()
        zmq_msg_close(frame)
        frame.deallocate()
        for held in heldFrames {
            zmq_msg_close(held)
            held.deallocate()
        }
    }

    /// Whether `close()` was called.
    public var isClosed: Bool { handle == nil }

    /// Closes the socket; idempotent. Queued outbound messages are delivered for at
    /// most the socket's linger in the background.
    public func close() {
        guard let handle else { return }
        self.handle = nil
        zmq_close(handle)
    }

    func openHandle(_ operation: @autoclosure () -> String) throws(ZeroMQError) -> UnsafeMutableRawPointer {
        guard let handle else { throw ZeroMQError.closed(operation()) }
        return handle
    }

    // MARK: Endpoints

    /// Binds to an endpoint such as `tcp://127.0.0.1:*`, `ipc:///tmp/name` or `inproc://name`.
    /// For wildcard ports read the chosen endpoint back with `lastEndpoint`.
    public func bind(_ endpoint: String) throws(ZeroMQError) {
        let handle = try openHandle("bind \(endpoint)")
        if retryingOnInterrupt({ zmq_bind(handle, endpoint) }) == -1 { throw ZeroMQError.last("bind \(endpoint)") }
    }

    /// Connects to an endpoint. For tcp and ipc this succeeds before the peer exists;
    /// libzmq keeps reconnecting in the background.
    public func connect(_ endpoint: String) throws(ZeroMQError) {
        let handle = try openHandle("connect \(endpoint)")
        if retryingOnInterrupt({ zmq_connect(handle, endpoint) }) == -1 {
            throw ZeroMQError.last("connect \(endpoint)")
        }
    }

    /// Stops listening on an endpoint previously bound (use the resolved endpoint for wildcard binds).
    public func unbind(_ endpoint: String) throws(ZeroMQError) {
        let handle = try openHandle("unbind \(endpoint)")
        if retryingOnInterrupt({ zmq_unbind(handle, endpoint) }) == -1 {
            throw ZeroMQError.last("unbind \(endpoint)")
        }
    }

    /// Disconnects from an endpoint previously connected.
    public func disconnect(_ endpoint: String) throws(ZeroMQError) {
        let handle = try openHandle("disconnect \(endpoint)")
        if retryingOnInterrupt({ zmq_disconnect(handle, endpoint) }) == -1 {
            throw ZeroMQError.last("disconnect \(endpoint)")
        }
    }

    /// The endpoint of the last bind or connect, with wildcard ports resolved
    /// (for example `tcp://127.0.0.1:41234`).
    public var lastEndpoint: String {
        get throws(ZeroMQError) { try get(.lastEndpoint) }
    }

    // MARK: Subscriptions

    /// Subscribes a SUB socket to messages whose first frame starts with `prefix`
    /// (empty: every message). On XSUB send `[[1] + prefix]` instead.
    public func subscribe(to prefix: [UInt8]) throws(ZeroMQError) {
        try setRaw(ZMQ_SUBSCRIBE, name: "SUBSCRIBE", .bytes(prefix))
    }

    /// Subscribes to messages whose first frame starts with the UTF-8 bytes of `topic`.
    public func subscribe(to topic: String) throws(ZeroMQError) {
        try subscribe(to: Array(topic.utf8))
    }

    /// Removes one earlier subscription to exactly `prefix`.
    public func unsubscribe(from prefix: [UInt8]) throws(ZeroMQError) {
        try setRaw(ZMQ_UNSUBSCRIBE, name: "UNSUBSCRIBE", .bytes(prefix))
    }

    /// Removes one earlier subscription to exactly the UTF-8 bytes of `topic`.
    public func unsubscribe(from topic: String) throws(ZeroMQError) {
        try unsubscribe(from: Array(topic.utf8))
    }

    // MARK: Messages

    /// Sends a multipart message (all frames but the last carry `ZMQ_SNDMORE`).
    ///
    /// Returns false when the message could not be queued: in `.nonBlocking` mode when
    /// the high water mark is reached or no peer is available, in `.blocking` mode when
    /// the send timeout expired. libzmq delivers multipart messages atomically, and
    /// once the first frame is accepted the rest always is, so a false result means
    /// nothing was sent.
    @discardableResult
    public func send(_ frames: [[UInt8]], mode: SendMode = .blocking) throws(ZeroMQError) -> Bool {
        guard !frames.isEmpty else {
            throw ZeroMQError.invalidArgument("send", "a message needs at least one frame")
        }
        let handle = try openHandle("send")
        let lastIndex = frames.count - 1
        for index in 0...lastIndex {
            var flags: Int32 = index == lastIndex ? 0 : ZMQ_SNDMORE
            if index == 0, mode == .nonBlocking { flags |= ZMQ_DONTWAIT }
            let result = frames[index].withUnsafeBytes { bytes in
                retryingOnInterrupt { zmq_send(handle, bytes.baseAddress, bytes.count, flags) }
            }
            if result == -1 {
                if index == 0, zmq_errno() == EAGAIN { return false }
                throw ZeroMQError.last("send frame \(index + 1) of \(frames.count)")
            }
        }
        return true
    }

    /// Receives one whole multipart message.
    ///
    /// - Parameter timeout: nil waits until a message arrives (or the socket's receive
    ///   timeout expires); `.zero` does not wait; otherwise waits at most this long.
    /// - Returns: the frames, or nil when no message arrived in time.
    /// - Throws: `ZeroMQError` with kind `.messageTooLarge` when the message exceeds
    ///   `receiveLimits` (it is fully drained first, so the next receive gets the next
    ///   message, and none of it is copied); other errors as reported by libzmq.
    public func receive(timeout: Duration? = nil) throws(ZeroMQError) -> [[UInt8]]? {
        try receiveMessage(timeout: timeout) { message in
            (0..<message.count).map { Array(message[$0]) }
        }
    }

    /// Receives one whole multipart message and hands it to `body` without copying it: the
    /// frames stay in libzmq's buffers, valid only during `body`. The hot paths use this to
    /// decode in place instead of building `[[UInt8]]`.
    ///
    /// Limits are checked on frame sizes before anything is read, so an oversized message
    /// is drained (its frames released one by one) without ever being copied.
    public func receiveMessage<Result>(
        timeout: Duration? = nil, _ body: (borrowing ReceivedMessage) -> Result
    ) throws(ZeroMQError) -> Result? {
        let handle = try openHandle("receive")
        guard try receiveFirstFrame(handle, timeout: timeout) else { return nil }
        let limits = receiveLimits
        var frameCount = 0
        var countedFrames = 0
        var byteCount = 0
        var isOversized = false
        defer {
            // Release every held frame's buffer now rather than at the next receive.
            for index in 0..<min(frameCount, heldFrames.count) {
                zmq_msg_close(heldFrames[index])
                zmq_msg_init(heldFrames[index])
            }
            zmq_msg_close(frame)
            zmq_msg_init(frame)
        }
        while true {
            let size = zmq_msg_size(frame)
            let isCounted = frameCount >= limits.uncountedLeadingFrames
            frameCount += 1
            if isCounted {
                countedFrames += 1
                byteCount = byteCount > Int.max - size ? Int.max : byteCount + size
            }
            if !isOversized, countedFrames > limits.maximumFrameCount || byteCount > limits.maximumByteCount {
                isOversized = true
            }
            let hasMore = zmq_msg_more(frame) != 0
            if !isOversized {
                if heldFrames.count < frameCount {
                    let held = UnsafeMutablePointer<zmq_msg_t>.allocate(capacity: 1)
                    zmq_msg_init(held)
                    heldFrames.append(held)
                }
                zmq_msg_move(heldFrames[frameCount - 1], frame)
            } else {
                zmq_msg_close(frame)
                zmq_msg_init(frame)
            }
            guard hasMore else { break }
            // The remaining frames of a message are already queued, so a blocking read returns at once.
            if retryingOnInterrupt({ zmq_msg_recv(frame, handle, 0) }) == -1 {
                throw ZeroMQError.last("receive frame \(frameCount + 1)")
            }
        }
        if isOversized {
            throw ZeroMQError(
                kind: .messageTooLarge(frameCount: countedFrames, byteCount: byteCount),
                code: EMSGSIZE,
                operation: "receive",
                message: "inbound message of \(countedFrames) frames and \(byteCount) bytes exceeds the limits of "
                    + "\(limits.maximumFrameCount) frames and \(limits.maximumByteCount) bytes",
                hint: "the message was discarded unread; raise receiveLimits if such messages are legitimate"
            )
        }
        return body(ReceivedMessage(frames: heldFrames, count: frameCount))
    }

    /// Receives one frame without waiting, by itself rather than as part of a whole message (an
    /// XPUB hands each subscription over as one frame, and a peer's other frames in any grouping),
    /// and hands `body` its bytes, whether more frames follow, and the file descriptor of the
    /// connection it came from (libzmq's private "__fd" metadata, which its deprecated `ZMQ_SRCFD`
    /// reads; nil for frames libzmq made itself, such as an XPUB's unsubscriptions of a closed
    /// connection), and with `readingUserID` the `User-Id` the authentication handler gave that
    /// connection (`AuthenticationDecision.allowAs`; nil when it gave none or was not asked).
    /// Nothing is copied. nil when no frame is waiting.
    public func receiveFrame<Result>(
        readingUserID: Bool = false,
        _ body: (_ bytes: UnsafeRawBufferPointer, _ hasMore: Bool, _ connectionDescriptor: Int32?, _ userID: String?) -> Result
    ) throws(ZeroMQError) -> Result? {
        let handle = try openHandle("receive")
        guard try receiveFrame(handle, flags: ZMQ_DONTWAIT) else { return nil }
        defer {
            zmq_msg_close(frame)
            zmq_msg_init(frame)
        }
        let bytes = UnsafeRawBufferPointer(start: zmq_msg_data(frame), count: zmq_msg_size(frame))
        let userID = readingUserID ? zmq_msg_gets(frame, "User-Id").map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 } : nil
        return body(bytes, zmq_msg_more(frame) != 0, zmq_msg_gets(frame, "__fd").flatMap(Self.decimal), userID)
    }

    /// A non-negative decimal number of at most 9 digits, read without building a String.
    private static func decimal(_ text: UnsafePointer<CChar>) -> Int32? {
        var value: Int32 = 0
        var index = 0
        while text[index] != 0 {
            let digit = Int32(text[index]) - 48
            guard digit >= 0, digit <= 9, index < 9 else { return nil }
            value = value * 10 + digit
            index += 1
        }
        return index == 0 ? nil : value
    }

    /// Receives the first frame of a message into `frame`; false when none arrived in time.
    private func receiveFirstFrame(_ handle: UnsafeMutableRawPointer, timeout: Duration?) throws(ZeroMQError) -> Bool {
        guard let timeout else {
            return try receiveFrame(handle, flags: 0)
        }
        let deadline = ContinuousClock.now + timeout
        while true {
            if try receiveFrame(handle, flags: ZMQ_DONTWAIT) { return true }
            let remaining = deadline - ContinuousClock.now
            if remaining <= .zero { return false }
            var item = zmq_pollitem_t(socket: handle, fd: 0, events: Int16(ZMQ_POLLIN), revents: 0)
            let result = zmq_poll(&item, 1, Int(remaining.roundedUpMilliseconds))
            if result == -1, zmq_errno() != EINTR { throw ZeroMQError.last("poll before receive") }
        }
    }

    private func receiveFrame(_ handle: UnsafeMutableRawPointer, flags: Int32) throws(ZeroMQError) -> Bool {
        if retryingOnInterrupt({ zmq_msg_recv(frame, handle, flags) }) != -1 { return true }
        if zmq_errno() == EAGAIN { return false }
        throw ZeroMQError.last("receive")
    }

    // MARK: Options

    /// Sets a socket option, for example `try socket.set(.sendHighWaterMark, 1_000)`.
    public func set<Value>(_ option: SocketOption<Value>, _ value: Value) throws(ZeroMQError) {
        guard option.isWritable else {
            throw ZeroMQError.invalidArgument("set \(option.name)", "\(option.name) is read-only")
        }
        try setRaw(option.code, name: option.name, option.encode(value))
    }

    /// Reads a socket option, for example `try socket.get(.receiveMore)`.
    public func get<Value>(_ option: SocketOption<Value>) throws(ZeroMQError) -> Value {
        guard option.isReadable else {
            throw ZeroMQError.invalidArgument("get \(option.name)", "\(option.name) is write-only")
        }
        let operation = "get \(option.name)"
        let handle = try openHandle(operation)
        switch option.representation {
        case .int32:
            var value: Int32 = 0
            var size = MemoryLayout<Int32>.size
            if zmq_getsockopt(handle, option.code, &value, &size) == -1 { throw ZeroMQError.last(operation) }
            return option.decode(.int32(value))
        case .int64:
            var value: Int64 = 0
            var size = MemoryLayout<Int64>.size
            if zmq_getsockopt(handle, option.code, &value, &size) == -1 { throw ZeroMQError.last(operation) }
            return option.decode(.int64(value))
        case .bytes(let capacity), .text(let capacity):
            var buffer = [UInt8](repeating: 0, count: capacity)
            var size = capacity
            if zmq_getsockopt(handle, option.code, &buffer, &size) == -1 { throw ZeroMQError.last(operation) }
            var bytes = Array(buffer.prefix(size))
            if case .text = option.representation, bytes.last == 0 { bytes.removeLast() }
            return option.decode(.bytes(bytes))
        }
    }

    private func setRaw(_ code: Int32, name: String, _ value: OptionValue) throws(ZeroMQError) {
        let operation = "set \(name)"
        let handle = try openHandle(operation)
        let result: Int32
        switch value {
        case .int32(var number):
            result = zmq_setsockopt(handle, code, &number, MemoryLayout<Int32>.size)
        case .int64(var number):
            result = zmq_setsockopt(handle, code, &number, MemoryLayout<Int64>.size)
        case .bytes(let bytes):
            result = bytes.withUnsafeBytes { zmq_setsockopt(handle, code, $0.baseAddress, $0.count) }
        }
        if result == -1 { throw ZeroMQError.last(operation) }
    }
}

/// The frames of one received message, borrowed from libzmq for the duration of a
/// `Socket.receiveMessage` call.
public struct ReceivedMessage: ~Copyable {
    private let frames: [UnsafeMutablePointer<zmq_msg_t>]
    /// Number of frames.
    public let count: Int

    init(frames: [UnsafeMutablePointer<zmq_msg_t>], count: Int) {
        self.frames = frames
        self.count = count
    }

    /// The user id the authentication handler gave the connection frame `index` came in on
    /// (`AuthenticationDecision.allowAs`), or nil when it gave none.
    public func userID(ofFrame index: Int) -> String? {
        precondition(index >= 0 && index < count, "frame \(index) of a \(count)-frame message")
        guard let value = zmq_msg_gets(frames[index], "User-Id") else { return nil }
        let text = String(cString: value)
        return text.isEmpty ? nil : text
    }

    /// The bytes of frame `index`; valid only inside the `receiveMessage` body.
    public subscript(index: Int) -> UnsafeRawBufferPointer {
        precondition(index >= 0 && index < count, "frame \(index) of a \(count)-frame message")
        return UnsafeRawBufferPointer(start: zmq_msg_data(frames[index]), count: zmq_msg_size(frames[index]))
    }
}
