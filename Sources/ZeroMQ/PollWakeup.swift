#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Wakes a poll loop from another thread: `signal()` makes `fileDescriptor` readable until
/// the loop calls `drain()`. Register `fileDescriptor` with a `Poller` for `.readable`.
///
/// A non-blocking pipe: signalling never blocks (a full pipe already means "woken"), and a
/// signal that arrives between `drain()` and the next poll keeps the pipe readable, so no
/// wake-up is lost.
public final class PollWakeup: Sendable {
    /// The read end, to poll.
    public let fileDescriptor: Int32
    private let writeDescriptor: Int32

    public init() throws(ZeroMQError) {
        var descriptors: [Int32] = [0, 0]
        guard pipe(&descriptors) == 0 else {
            throw ZeroMQError(code: errno, operation: "create a wake-up pipe", message: "pipe() failed", hint: "check the file descriptor limit (ulimit -n)")
        }
        for descriptor in descriptors {
            _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) | O_NONBLOCK)
            _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC)
        }
        fileDescriptor = descriptors[0]
        writeDescriptor = descriptors[1]
    }

    deinit {
        close(fileDescriptor)
        close(writeDescriptor)
    }

    /// Makes the poll loop wake up; safe from any thread, never blocks.
    public func signal() {
        var byte: UInt8 = 1
        _ = write(writeDescriptor, &byte, 1)
    }

    /// Consumes every pending signal; call after waking, before looking at what changed.
    public func drain() {
        var buffer = [UInt8](repeating: 0, count: 64)
        while read(fileDescriptor, &buffer, buffer.count) > 0 {}
    }
}
