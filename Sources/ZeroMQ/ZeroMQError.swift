import CZeroMQ
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An error from the ZeroMQ wrapper: every libzmq `-1` return becomes one of these.
///
/// `code` is always an errno value (libzmq's own numbers such as `ETERM` or `EFSM`
/// included), so callers can match on it; `kind` says whether the error came from
/// libzmq itself or from a check made by this wrapper before calling libzmq.
public struct ZeroMQError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Where the error was detected.
    public enum Kind: Sendable, Equatable {
        /// libzmq returned -1; `code` is its errno.
        case library
        /// The socket was already closed (`code` is `ENOTSOCK`).
        case socketClosed
        /// An inbound message exceeded the socket's `MessageLimits`; it was drained
        /// and discarded, the socket stays usable (`code` is `EMSGSIZE`).
        case messageTooLarge(frameCount: Int, byteCount: Int)
        /// A CURVE key was not 40 characters of the Z85 alphabet (`code` is `EINVAL`).
        case invalidCurveKey
        /// An argument was rejected before reaching libzmq (`code` is `EINVAL`).
        case invalidArgument
    }

    /// Where the error was detected.
    public let kind: Kind
    /// The errno value (`EADDRINUSE`, `ETERM`, `EAGAIN`, ...).
    public let code: Int32
    /// libzmq's text for `code` (`zmq_strerror`) or the wrapper's own explanation.
    public let message: String
    /// The failed operation, such as `"bind tcp://127.0.0.1:5555"`.
    public let operation: String
    /// What to do about it, when there is something useful to say.
    public let hint: String?

    /// Creates an error; `message` defaults to `zmq_strerror(code)` and `hint` to a
    /// suggestion derived from the code and the operation.
    public init(
        kind: Kind = .library,
        code: Int32,
        operation: String,
        message: String? = nil,
        hint: String? = nil
    ) {
        self.kind = kind
        self.code = code
        self.operation = operation
        self.message = message ?? String(cString: zmq_strerror(code))
        self.hint = hint ?? Self.suggestion(code: code, operation: operation)
    }

    public var description: String {
        var text = "ZeroMQ error \(code) during \(operation): \(message)"
        if let hint { text += " (\(hint))" }
        return text
    }

    /// libzmq's own errno values, which have no name in Glibc.
    public enum LibraryCode {
        /// `ETERM`: the context was shut down or terminated.
        public static let contextTerminated: Int32 = ETERM
        /// `EFSM`: a REQ/REP socket was used out of its send/receive order.
        public static let invalidStateForOperation: Int32 = EFSM
        /// `ENOCOMPATPROTO`: the transport does not fit the socket type.
        public static let incompatibleProtocol: Int32 = ENOCOMPATPROTO
        /// `EMTHREAD`: the context has no I/O thread.
        public static let noInputOutputThread: Int32 = EMTHREAD
    }

    /// Whether the context was shut down or terminated: the signal for a poll loop to
    /// close its sockets and stop.
    public var isContextTerminated: Bool { code == ETERM }

    /// The error for the current `zmq_errno()` after a libzmq call returned -1.
    static func last(_ operation: @autoclosure () -> String) -> ZeroMQError {
        ZeroMQError(code: zmq_errno(), operation: operation())
    }

    static func closed(_ operation: String) -> ZeroMQError {
        ZeroMQError(
            kind: .socketClosed,
            code: ENOTSOCK,
            operation: operation,
            message: "the socket is closed",
            hint: "create a new socket; a closed socket cannot be reused"
        )
    }

    static func invalidArgument(_ operation: String, _ message: String) -> ZeroMQError {
        ZeroMQError(kind: .invalidArgument, code: EINVAL, operation: operation, message: message, hint: nil)
    }

    private static func suggestion(code: Int32, operation: String) -> String? {
        let isIPC = operation.contains("ipc://")
        let isEndpointOperation = ["bind ", "connect ", "unbind ", "disconnect "].contains { operation.hasPrefix($0) }
        switch code {
        case EADDRINUSE:
            return "another process or socket is bound to this endpoint; pick another port "
                + "(tcp://127.0.0.1:* picks a free one, read it back with lastEndpoint) or stop it"
        case EADDRNOTAVAIL:
            return "the address is not local to this machine; use 127.0.0.1 or a local interface"
        case EPROTONOSUPPORT:
            return "unsupported transport; use tcp://, ipc:// or inproc://"
        case ENOCOMPATPROTO:
            return "this transport cannot be used with this socket type"
        case ENAMETOOLONG:
            return "ipc paths are limited to about 107 bytes; use a shorter directory such as /tmp"
        case ENOENT where isIPC && (operation.hasPrefix("bind ") || operation.hasPrefix("connect ")):
            return "the directory of the ipc path does not exist; create it first"
        case ENOENT where operation.hasPrefix("unbind ") || operation.hasPrefix("disconnect "):
            return "this endpoint is not bound or connected on this socket; "
                + "for wildcard binds pass the resolved lastEndpoint"
        case EACCES:
            return isIPC ? "no permission to create or open the ipc path" : "permission denied for this endpoint"
        case EINVAL where isEndpointOperation:
            return "malformed endpoint; expected tcp://127.0.0.1:port, ipc:///absolute/path or inproc://name"
        case EINVAL:
            return "libzmq rejected an argument (option value, flag or size)"
        case ETERM:
            return "the context was terminated; close this socket"
        case ENOTSOCK:
            return "the socket was closed"
        case EFSM:
            return "REQ/REP sockets must strictly alternate send and receive"
        case EHOSTUNREACH:
            return "ROUTER_MANDATORY is set and no connected peer has this routing id"
        case EMFILE:
            return "too many open sockets or file descriptors; close some or raise the limit"
        case EMTHREAD:
            return "the context has no I/O thread; create it with at least one"
        default:
            return nil
        }
    }
}

/// Runs a libzmq call, retrying while it fails with `EINTR` (a signal arrived).
@inline(__always)
func retryingOnInterrupt(_ call: () -> Int32) -> Int32 {
    while true {
        let result = call()
        if result != -1 || zmq_errno() != EINTR { return result }
    }
}
