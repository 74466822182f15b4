import CZeroMQ

/// The raw form libzmq uses for an option value.
enum OptionValue {
    case int32(Int32)
    case int64(Int64)
    case bytes([UInt8])
}

/// How to read an option back from libzmq.
enum OptionRepresentation: Sendable {
    case int32
    case int64
    /// Binary value of at most `capacity` bytes.
    case bytes(capacity: Int)
    /// NUL-terminated string of at most `capacity` bytes including the NUL.
    case text(capacity: Int)
}

/// A typed socket option, used with `Socket.set(_:_:)` and `Socket.get(_:)`:
///
///     try socket.set(.receiveTimeout, .milliseconds(200))
///     let more = try socket.get(.receiveMore)
///
/// Durations are sent to libzmq as whole milliseconds, rounded up.
public struct SocketOption<Value>: Sendable {
    /// libzmq's name for the option without the `ZMQ_` prefix, used in error messages.
    public let name: String
    let code: Int32
    let isReadable: Bool
    let isWritable: Bool
    let representation: OptionRepresentation
    let encode: @Sendable (Value) throws(ZeroMQError) -> OptionValue
    let decode: @Sendable (OptionValue) -> Value

    init(
        _ name: String,
        _ code: Int32,
        readable: Bool = true,
        writable: Bool = true,
        representation: OptionRepresentation,
        encode: @escaping @Sendable (Value) throws(ZeroMQError) -> OptionValue,
        decode: @escaping @Sendable (OptionValue) -> Value
    ) {
        self.name = name
        self.code = code
        self.isReadable = readable
        self.isWritable = writable
        self.representation = representation
        self.encode = encode
        self.decode = decode
    }
}

// MARK: Conversions shared by the option definitions

private func int32(_ name: String, _ value: Int) throws(ZeroMQError) -> OptionValue {
    guard let number = Int32(exactly: value) else {
        throw ZeroMQError.invalidArgument("set \(name)", "\(value) does not fit the 32-bit \(name) option")
    }
    return .int32(number)
}

private func integer(_ value: OptionValue) -> Int64 {
    switch value {
    case .int32(let number): Int64(number)
    case .int64(let number): number
    case .bytes: 0
    }
}

private func bytes(_ value: OptionValue) -> [UInt8] {
    if case .bytes(let bytes) = value { return bytes }
    return []
}

extension SocketOption where Value == Int {
    private static func integerOption(_ name: String, _ code: Int32, writable: Bool = true) -> Self {
        Self(
            name, code, writable: writable, representation: .int32,
            encode: { value throws(ZeroMQError) in try int32(name, value) },
            decode: { Int(integer($0)) }
        )
    }

    /// `ZMQ_SNDHWM`: most messages queued per peer for sending (0: no limit; default 1,000).
    public static var sendHighWaterMark: Self { integerOption("SNDHWM", ZMQ_SNDHWM) }
    /// `ZMQ_RCVHWM`: most messages queued per peer for receiving (0: no limit; default 1,000).
    public static var receiveHighWaterMark: Self { integerOption("RCVHWM", ZMQ_RCVHWM) }
    /// `ZMQ_FD` (read-only): a file descriptor that becomes readable when `events` may have
    /// changed; edge-triggered, so always re-check `events` afterwards.
    public static var fileDescriptor: Self { integerOption("FD", ZMQ_FD, writable: false) }
}

extension SocketOption where Value == Duration? {
    /// A duration where libzmq uses -1 for "forever" (nil here).
    private static func optionalDurationOption(_ name: String, _ code: Int32) -> Self {
        Self(
            name, code, representation: .int32,
            encode: { value in .int32(value.map(\.roundedUpMilliseconds) ?? -1) },
            decode: { value in
                let milliseconds = integer(value)
                return milliseconds < 0 ? nil : .milliseconds(milliseconds)
            }
        )
    }

    /// `ZMQ_LINGER`: how long close and context termination wait to deliver queued
    /// messages; nil waits forever. Sockets from `ZeroMQContext.socket` start at zero.
    public static var linger: Self { optionalDurationOption("LINGER", ZMQ_LINGER) }
    /// `ZMQ_RCVTIMEO`: how long a blocking receive waits; nil (the default) waits forever.
    public static var receiveTimeout: Self { optionalDurationOption("RCVTIMEO", ZMQ_RCVTIMEO) }
    /// `ZMQ_SNDTIMEO`: how long a blocking send waits; nil (the default) waits forever.
    public static var sendTimeout: Self { optionalDurationOption("SNDTIMEO", ZMQ_SNDTIMEO) }
    /// `ZMQ_RECONNECT_IVL`: delay before reconnecting a lost connection (default 100 ms);
    /// nil disables reconnection.
    public static var reconnectInterval: Self { optionalDurationOption("RECONNECT_IVL", ZMQ_RECONNECT_IVL) }
}

extension SocketOption where Value == Duration {
    private static func durationOption(_ name: String, _ code: Int32) -> Self {
        Self(
            name, code, representation: .int32,
            encode: { value in .int32(value.roundedUpMilliseconds) },
            decode: { value in .milliseconds(integer(value)) }
        )
    }

    /// `ZMQ_HANDSHAKE_IVL`: how long a new connection may take to complete its ZMTP handshake
    /// before libzmq closes it (default 30 s; zero: forever).
    public static var handshakeInterval: Self { durationOption("HANDSHAKE_IVL", ZMQ_HANDSHAKE_IVL) }
    /// `ZMQ_HEARTBEAT_IVL`: interval between ZMTP PING heartbeats; zero (the default) disables them.
    public static var heartbeatInterval: Self { durationOption("HEARTBEAT_IVL", ZMQ_HEARTBEAT_IVL) }
    /// `ZMQ_HEARTBEAT_TTL`: how long the remote peer should wait for traffic before
    /// dropping this connection; libzmq keeps it in tenths of a second (up to 6553.5 s).
    public static var heartbeatTimeToLive: Self { durationOption("HEARTBEAT_TTL", ZMQ_HEARTBEAT_TTL) }
    /// `ZMQ_HEARTBEAT_TIMEOUT`: how long to wait for any traffic after a PING before
    /// closing the connection as dead (defaults to the heartbeat interval).
    public static var heartbeatTimeout: Self { durationOption("HEARTBEAT_TIMEOUT", ZMQ_HEARTBEAT_TIMEOUT) }
}

extension SocketOption where Value == Bool {
    private static func flagOption(_ name: String, _ code: Int32, readable: Bool = true, writable: Bool = true) -> Self {
        Self(
            name, code, readable: readable, writable: writable, representation: .int32,
            encode: { value in .int32(value ? 1 : 0) },
            decode: { integer($0) != 0 }
        )
    }

    /// `ZMQ_ROUTER_MANDATORY` (write-only): a ROUTER fails with `EHOSTUNREACH` instead of
    /// silently dropping messages for unknown routing ids.
    public static var routerMandatory: Self { flagOption("ROUTER_MANDATORY", ZMQ_ROUTER_MANDATORY, readable: false) }
    /// `ZMQ_IMMEDIATE`: queue messages only to completed connections.
    public static var immediate: Self { flagOption("IMMEDIATE", ZMQ_IMMEDIATE) }
    /// `ZMQ_XPUB_VERBOSE` (write-only): an XPUB passes on every subscription, not just new ones.
    public static var extendedPublisherVerbose: Self {
        flagOption("XPUB_VERBOSE", ZMQ_XPUB_VERBOSE, readable: false)
    }
    /// `ZMQ_XPUB_VERBOSER` (write-only): an XPUB passes on every subscription and every
    /// unsubscription of every peer, so a reader can account for each peer's own.
    public static var extendedPublisherVerboser: Self {
        flagOption("XPUB_VERBOSER", ZMQ_XPUB_VERBOSER, readable: false)
    }
    /// `ZMQ_CURVE_SERVER`: act as CURVE server (requires `curveSecretKey`).
    public static var curveServer: Self { flagOption("CURVE_SERVER", ZMQ_CURVE_SERVER) }
    /// `ZMQ_RCVMORE` (read-only): whether the last received frame has more frames after it.
    public static var receiveMore: Self { flagOption("RCVMORE", ZMQ_RCVMORE, writable: false) }
}

extension SocketOption where Value == Bool? {
    /// `ZMQ_TCP_KEEPALIVE`: enable or disable TCP keep-alive; nil keeps the OS default.
    public static var tcpKeepAlive: Self {
        Self(
            "TCP_KEEPALIVE", ZMQ_TCP_KEEPALIVE, representation: .int32,
            encode: { value in .int32(value.map { $0 ? 1 : 0 } ?? -1) },
            decode: { value in
                let number = integer(value)
                return number < 0 ? nil : number != 0
            }
        )
    }
}

extension SocketOption where Value == Int64? {
    /// `ZMQ_MAXMSGSIZE`: largest inbound frame in bytes; a peer sending a bigger one is
    /// disconnected. nil (the default) means no limit.
    public static var maximumMessageSize: Self {
        Self(
            "MAXMSGSIZE", ZMQ_MAXMSGSIZE, representation: .int64,
            encode: { value in .int64(value ?? -1) },
            decode: { value in
                let number = integer(value)
                return number < 0 ? nil : number
            }
        )
    }
}

extension SocketOption where Value == [UInt8] {
    /// `ZMQ_ROUTING_ID`: the identity a ROUTER peer sees for this socket; 1 to 255
    /// bytes, not starting with a zero byte; set before connecting.
    public static var routingID: Self {
        Self(
            "ROUTING_ID", ZMQ_ROUTING_ID, representation: .bytes(capacity: 255),
            encode: { value throws(ZeroMQError) in
                guard (1...255).contains(value.count), value.first != 0 else {
                    throw ZeroMQError.invalidArgument(
                        "set ROUTING_ID", "a routing id has 1 to 255 bytes and does not start with a zero byte")
                }
                return .bytes(value)
            },
            decode: bytes
        )
    }
}

extension SocketOption where Value == String {
    private static func textOption(_ name: String, _ code: Int32, writable: Bool = true) -> Self {
        Self(
            name, code, writable: writable, representation: .text(capacity: 1_024),
            encode: { value in .bytes(Array(value.utf8)) },
            decode: { String(decoding: bytes($0), as: UTF8.self) }
        )
    }

    /// `ZMQ_ZAP_DOMAIN`: the authentication domain passed to a ZAP handler.
    public static var zapDomain: Self { textOption("ZAP_DOMAIN", ZMQ_ZAP_DOMAIN) }
    /// `ZMQ_LAST_ENDPOINT` (read-only): see `Socket.lastEndpoint`.
    public static var lastEndpoint: Self { textOption("LAST_ENDPOINT", ZMQ_LAST_ENDPOINT, writable: false) }
}

extension SocketOption where Value == CurveKey {
    private static func keyOption(_ name: String, _ code: Int32) -> Self {
        Self(
            name, code, representation: .text(capacity: CurveKey.z85Length + 1),
            // A 40-byte value tells libzmq the key is Z85 text rather than 32 raw bytes.
            encode: { key in .bytes(Array(key.z85.utf8)) },
            decode: { CurveKey(validatedZ85: String(decoding: bytes($0), as: UTF8.self)) }
        )
    }

    /// `ZMQ_CURVE_PUBLICKEY`: this client's long-term public key.
    public static var curvePublicKey: Self { keyOption("CURVE_PUBLICKEY", ZMQ_CURVE_PUBLICKEY) }
    /// `ZMQ_CURVE_SECRETKEY`: this socket's long-term secret key (clients and servers).
    public static var curveSecretKey: Self { keyOption("CURVE_SECRETKEY", ZMQ_CURVE_SECRETKEY) }
    /// `ZMQ_CURVE_SERVERKEY`: the server's public key; setting it makes the socket a CURVE client.
    public static var curveServerKey: Self { keyOption("CURVE_SERVERKEY", ZMQ_CURVE_SERVERKEY) }
}

extension SocketOption where Value == PollEvents {
    /// `ZMQ_EVENTS` (read-only): whether the socket can be read and/or written right now.
    public static var events: Self {
        Self(
            "EVENTS", ZMQ_EVENTS, writable: false, representation: .int32,
            encode: { value in .int32(Int32(value.rawValue)) },
            decode: { PollEvents(rawValue: Int16(truncatingIfNeeded: integer($0))) }
        )
    }
}
