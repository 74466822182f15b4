import CZeroMQ
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Readiness conditions for polling.
public struct PollEvents: OptionSet, Sendable, Hashable {
    public let rawValue: Int16
    public init(rawValue: Int16) { self.rawValue = rawValue }

    /// At least one whole message can be received (`ZMQ_POLLIN`).
    public static let readable = PollEvents(rawValue: Int16(ZMQ_POLLIN))
    /// At least one message can be sent without blocking (`ZMQ_POLLOUT`).
    public static let writable = PollEvents(rawValue: Int16(ZMQ_POLLOUT))
    /// An error condition on a plain file descriptor (`ZMQ_POLLERR`).
    public static let error = PollEvents(rawValue: Int16(ZMQ_POLLERR))
}

/// Something to poll: a socket, or a plain file descriptor (for example the read end
/// of a pipe used to wake a poll loop).
public enum PollItem {
    case socket(Socket, PollEvents)
    case fileDescriptor(Int32, PollEvents)
}

/// Polls a fixed set of sockets and file descriptors, reusing its storage between
/// calls; meant for the poll loop of one thread.
///
/// Not Sendable: it is used by the thread that owns the sockets it polls. It keeps
/// the registered sockets alive and throws `.socketClosed` if one was closed, rather
/// than handing libzmq a dangling socket.
public final class Poller {
    private var items: [PollItem] = []
    private var libraryItems: [zmq_pollitem_t] = []

    public init() {}

    /// Number of registered items.
    public var count: Int { items.count }

    /// Adds a socket; returns its index for `readyEvents(at:)`.
    @discardableResult
    public func register(_ socket: Socket, for events: PollEvents) -> Int {
        register(.socket(socket, events))
    }

    /// Adds a file descriptor; returns its index for `readyEvents(at:)`.
    @discardableResult
    public func register(fileDescriptor: Int32, for events: PollEvents) -> Int {
        register(.fileDescriptor(fileDescriptor, events))
    }

    /// Adds an item; returns its index for `readyEvents(at:)`.
    @discardableResult
    public func register(_ item: PollItem) -> Int {
        items.append(item)
        libraryItems.append(zmq_pollitem_t(socket: nil, fd: 0, events: 0, revents: 0))
        return items.count - 1
    }

    /// Removes every item.
    public func removeAll() {
        items.removeAll()
        libraryItems.removeAll()
    }

    /// Waits until at least one item is ready or `timeout` passes (nil waits forever,
    /// `.zero` checks without waiting); returns how many items are ready.
    /// Signals (`EINTR`) do not cut the wait short.
    @discardableResult
    public func poll(timeout: Duration?) throws(ZeroMQError) -> Int {
        for index in items.indices {
            switch items[index] {
            case .socket(let socket, let events):
                // Re-read the handle each time: a socket may have been closed since registration.
                let handle = try socket.openHandle("poll")
                libraryItems[index] = zmq_pollitem_t(socket: handle, fd: 0, events: events.rawValue, revents: 0)
            case .fileDescriptor(let descriptor, let events):
                libraryItems[index] = zmq_pollitem_t(socket: nil, fd: descriptor, events: events.rawValue, revents: 0)
            }
        }
        let deadline = timeout.map { ContinuousClock.now + $0 }
        while true {
            let milliseconds = deadline.map { Int(($0 - ContinuousClock.now).roundedUpMilliseconds) } ?? -1
            let result = zmq_poll(&libraryItems, Int32(libraryItems.count), milliseconds)
            if result >= 0 { return Int(result) }
            if zmq_errno() != EINTR { throw ZeroMQError.last("poll \(items.count) items") }
        }
    }

    /// The events found ready for the item at `index` by the last `poll`.
    public func readyEvents(at index: Int) -> PollEvents {
        PollEvents(rawValue: libraryItems[index].revents)
    }

    /// Whether the item at `index` was readable at the last `poll`.
    public func isReadable(at index: Int) -> Bool {
        readyEvents(at: index).contains(.readable)
    }

    /// Whether the item at `index` was writable at the last `poll`.
    public func isWritable(at index: Int) -> Bool {
        readyEvents(at: index).contains(.writable)
    }
}
