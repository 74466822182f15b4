import Foundation
import Synchronization

/// Set by SIGTERM or SIGINT; every poll loop checks it between rounds, so a process
/// stops within one round, flushing its log first.
public enum Shutdown {
    private static let requested = Atomic<Bool>(false)

    public static var isRequested: Bool { requested.load(ordering: .relaxed) }

    public static func request() { requested.store(true, ordering: .relaxed) }

    /// Installs the handlers; call once, early in `main`.
    public static func installSignalHandlers() {
        signal(SIGTERM) { _ in Shutdown.request() }
        signal(SIGINT) { _ in Shutdown.request() }
        signal(SIGPIPE, SIG_IGN)
    }
}

/// Real time for live roles: nanoseconds on the monotonic clock, and wall-clock
/// nanoseconds for log timestamps.
public enum LiveClock {
    public static func monotonicNanoseconds() -> Int64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
    }

    public static func wallNanoseconds() -> Int64 {
        var time = timespec()
        clock_gettime(CLOCK_REALTIME, &time)
        return Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
    }
}
