import Foundation

/// The machine's monotonic clock, for the runtimes that run in real time (live roles, load drivers,
/// timed replay): one reading and one sleep, so they wait alike. Never read inside a deterministic run.
public enum MonotonicClock {
    /// Nanoseconds on CLOCK_MONOTONIC.
    public static func nanoseconds() -> Int64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
    }

    /// Sleeps until `deadline` (monotonic nanoseconds), to the nanosecond: an absolute deadline, so
    /// errors do not add up over a run (a poll's timeout is whole milliseconds, and relative). Returns
    /// false when a signal ended the sleep early: a live loop then looks for a shutdown request, a
    /// timed replay sleeps again.
    @discardableResult
    public static func sleep(until deadline: Int64) -> Bool {
        var target = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
        return clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &target, nil) != EINTR
    }
}
