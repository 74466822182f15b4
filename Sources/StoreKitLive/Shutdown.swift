import Foundation
import StoreKitRuntime
import Synchronization

/// Set by SIGTERM or SIGINT; every poll loop checks it between rounds, so a process
/// stops within one round, flushing its log first.
public enum Shutdown {
    private static let requested = Atomic<Bool>(false)

    /// The supervisor's pid when this process was started by `sksim run` (0 otherwise).
    private static let supervisor = Atomic<Int32>(0)

    /// True once a signal asked to stop, or once the supervisor that started this process is gone
    /// (its children are re-parented), so no child outlives `sksim run`, however it ends.
    public static var isRequested: Bool {
        if requested.load(ordering: .relaxed) { return true }
        let parent = supervisor.load(ordering: .relaxed)
        if parent != 0 && getppid() != parent {
            request()
            return true
        }
        return false
    }

    public static func request() { requested.store(true, ordering: .relaxed) }

    /// Installs the handlers; call once, early in `main`.
    public static func installSignalHandlers() {
        signal(SIGTERM) { _ in Shutdown.request() }
        signal(SIGINT) { _ in Shutdown.request() }
        signal(SIGPIPE, SIG_IGN)
    }

    /// The environment variable through which `sksim run` tells its children its pid.
    public static let supervisorVariable = "SKSIM_SUPERVISOR_PID"

    /// For a process started by `sksim run`: stop (as on SIGTERM, so the log is flushed) when the
    /// supervisor is gone. Every poll loop checks `isRequested` at least every 50 ms.
    public static func followSupervisor() {
        guard let text = ProcessInfo.processInfo.environment[supervisorVariable], let pid = pid_t(text) else { return }
        supervisor.store(pid, ordering: .relaxed)
    }
}

/// Real time for live roles: nanoseconds on the monotonic clock, and wall-clock
/// nanoseconds for log timestamps.
public enum LiveClock {
    public static func monotonicNanoseconds() -> Int64 { MonotonicClock.nanoseconds() }

    public static func wallNanoseconds() -> Int64 {
        var time = timespec()
        clock_gettime(CLOCK_REALTIME, &time)
        return Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
    }
    /// Sleeps until `deadline` on the monotonic clock (`MonotonicClock.sleep(until:)`); a signal ends the
    /// sleep early, so that the caller sees a shutdown request.
    public static func sleep(untilMonotonic deadline: Int64) {
        MonotonicClock.sleep(until: deadline)
    }
}
