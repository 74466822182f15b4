import CZeroMQ
import Foundation

/// Socket lifecycle events reported by `zmq_socket_monitor`.
public struct MonitorEvents: OptionSet, Sendable, Hashable {
    public let rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    public static let connected = MonitorEvents(rawValue: UInt16(ZMQ_EVENT_CONNECTED))
    public static let connectDelayed = MonitorEvents(rawValue: UInt16(ZMQ_EVENT_CONNECT_DELAYED))
    public static let connectRetried = MonitorEvents(rawValue: UInt16(ZMQ_EVENT_CONNECT_RETRIED))
    public static let listening = MonitorEvents(rawValue: UInt16(ZMQ_EVENT_LISTENING))
    public static let bindFailed = MonitorEvents(rawValue: UInt16(ZMQ_EVENT_BIND_FAILED))
    public static let accepted = MonitorEvents(rawValue: UInt16(ZMQ_EVENT_ACCEPTED))
    public static let acceptFailed = MonitorEvents(rawValue: UInt16(ZMQ_EVENT_ACCEPT_FAILED))
    public static let closed = MonitorEvents(rawValue: UInt16(ZMQ_EVENT_CLOSED))
    public static let closeFailed = MonitorEvents(rawValue: UInt16(ZMQ_EVENT_CLOSE_FAILED))
    /// The connection was lost, including a heartbeat timeout.
    public static let disconnected = MonitorEvents(rawValue: UInt16(ZMQ_EVENT_DISCONNECTED))
    public static let monitorStopped = MonitorEvents(rawValue: UInt16(ZMQ_EVENT_MONITOR_STOPPED))
    public static let handshakeFailedNoDetail = MonitorEvents(rawValue: UInt16(ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL))
    public static let handshakeSucceeded = MonitorEvents(rawValue: UInt16(ZMQ_EVENT_HANDSHAKE_SUCCEEDED))
    public static let handshakeFailedProtocol = MonitorEvents(rawValue: UInt16(ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL))
    /// Authentication failed, for example a CURVE client with the wrong server key.
    public static let handshakeFailedAuthentication = MonitorEvents(rawValue: UInt16(ZMQ_EVENT_HANDSHAKE_FAILED_AUTH))
    public static let all = MonitorEvents(rawValue: UInt16(ZMQ_EVENT_ALL))
}

/// One monitor event.
public struct MonitorEvent: Sendable, Hashable {
    /// The single event that happened.
    public let event: MonitorEvents
    /// Event-specific value: a file descriptor, an errno or a reconnect interval.
    public let value: UInt32
    /// The endpoint the event concerns.
    public let endpoint: String
}

/// Receives lifecycle events of one socket over a private `inproc://` PAIR connection.
///
/// Same threading rule as `Socket`: one thread at a time. Close it (or let it go)
/// before terminating the context.
public final class SocketMonitor: @unchecked Sendable {
    /// The PAIR socket events arrive on; it can be registered with a `Poller`.
    public let socket: Socket

    init(socket: Socket) {
        self.socket = socket
    }

    /// The next event, or nil when none arrived within `timeout` (nil waits forever).
    public func receive(timeout: Duration?) throws(ZeroMQError) -> MonitorEvent? {
        guard let frames = try socket.receive(timeout: timeout) else { return nil }
        guard frames.count == 2, frames[0].count == 6 else {
            throw ZeroMQError.invalidArgument("receive monitor event", "unexpected monitor message layout")
        }
        // libzmq copies both numbers in native byte order.
        let (event, value) = frames[0].withUnsafeBytes { header in
            (header.loadUnaligned(as: UInt16.self), header.loadUnaligned(fromByteOffset: 2, as: UInt32.self))
        }
        return MonitorEvent(
            event: MonitorEvents(rawValue: event),
            value: value,
            endpoint: String(decoding: frames[1], as: UTF8.self))
    }

    /// Stops receiving events; idempotent.
    public func close() {
        socket.close()
    }
}

extension Socket {
    /// Starts reporting `events` of this socket (`zmq_socket_monitor`). Only one monitor
    /// per socket is active at a time; a new one replaces the previous one.
    public func monitor(_ events: MonitorEvents = .all) throws(ZeroMQError) -> SocketMonitor {
        let operation = "monitor socket"
        let handle = try openHandle(operation)
        let endpoint = "inproc://zeromq-monitor-\(UUID().uuidString)"
        if zmq_socket_monitor(handle, endpoint, Int32(events.rawValue)) == -1 { throw ZeroMQError.last(operation) }
        let pair = try context.socket(.pair)
        try pair.connect(endpoint)
        return SocketMonitor(socket: pair)
    }
}
