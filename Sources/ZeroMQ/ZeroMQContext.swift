import CZeroMQ
import Foundation

/// Owns a libzmq context: the I/O threads and the `inproc://` namespace shared by its sockets.
///
/// Sendable because libzmq contexts are thread-safe; the only mutable state here
/// (whether the context was terminated) is guarded by a lock.
///
/// Lifetime: every `Socket` keeps its context alive, so the context is only
/// terminated on deinit after all of its sockets were closed and released; that
/// termination cannot block on them. An explicit `terminate()` blocks until every
/// socket of this context is closed (this is how `zmq_ctx_term` works), and any
/// message still queued on a socket whose linger is not zero is flushed first.
/// Sockets are created with an explicit linger (zero by default) so that shutdown is
/// never held up by peers that went away.
public final class ZeroMQContext: @unchecked Sendable {
    private let handle: UnsafeMutableRawPointer
    private let lock = NSLock()
    private var isTerminated = false

    /// Creates a context with `ioThreads` background I/O threads (one is enough for
    /// roughly a gigabyte per second of traffic).
    public init(ioThreads: Int = 1) throws(ZeroMQError) {
        guard let handle = zmq_ctx_new() else { throw ZeroMQError.last("create context") }
        if zmq_ctx_set(handle, ZMQ_IO_THREADS, Int32(clamping: ioThreads)) == -1 {
            let error = ZeroMQError.last("set context I/O threads to \(ioThreads)")
            zmq_ctx_term(handle)
            throw error
        }
        self.handle = handle
    }

    deinit {
        terminate()
    }

    /// Creates a socket of `type`.
    ///
    /// - Parameter linger: how long closing the socket (and terminating the context)
    ///   may wait to deliver queued outbound messages; nil waits forever, which can
    ///   hang shutdown when a peer is gone. Zero, the default, drops them.
    public func socket(_ type: SocketType, linger: Duration? = .zero) throws(ZeroMQError) -> Socket {
        let created: Result<UnsafeMutableRawPointer, ZeroMQError> = lock.withLock {
            // zmq_socket on a terminated (freed) context would be a use-after-free.
            if isTerminated { return .failure(ZeroMQError(code: ETERM, operation: "create \(type) socket")) }
            guard let created = zmq_socket(handle, type.libraryValue) else {
                return .failure(ZeroMQError.last("create \(type) socket"))
            }
            return .success(created)
        }
        let socketHandle = try created.get()
        let socket = Socket(handle: socketHandle, type: type, context: self)
        try socket.set(.linger, linger)
        return socket
    }

    /// Makes blocking calls on this context's sockets, in any thread, fail with `ETERM`
    /// right away, without waiting for anything. Use it to stop poll loops before
    /// closing their sockets and calling `terminate()`.
    public func shutdown() {
        lock.lock()
        defer { lock.unlock() }
        if !isTerminated { zmq_ctx_shutdown(handle) }
    }

    /// Terminates the context. Blocks until every socket created from it is closed
    /// (each waiting at most its linger); idempotent. Afterwards creating sockets
    /// fails with `ETERM`.
    public func terminate() {
        lock.lock()
        if isTerminated {
            lock.unlock()
            return
        }
        isTerminated = true
        lock.unlock()
        _ = retryingOnInterrupt { zmq_ctx_term(handle) }
    }
}
