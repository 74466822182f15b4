import Foundation

/// The wall clock of a timed replay, injected so tests and benchmarks can drive it.
public protocol ReplayClock: AnyObject {
    /// Monotonic nanoseconds.
    func nanoseconds() -> Int64
    /// Returns at `deadline` (monotonic nanoseconds) or as soon after it as it can.
    func wait(until deadline: Int64)
}

/// The machine's monotonic clock. Waits sleep until an absolute time (never "for the gap
/// since the last command", so errors do not add up), waking a little early and spinning
/// the last stretch, because a sleep overshoots by the kernel's timer slack.
public final class SystemReplayClock: ReplayClock {
    /// How long before a deadline the sleep ends and the spin begins.
    public var spinNanoseconds: Int64 = 150_000

    public init() {}

    public func nanoseconds() -> Int64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
    }

    public func wait(until deadline: Int64) {
        let wake = deadline - spinNanoseconds
        if wake > nanoseconds() {
            var target = timespec(tv_sec: Int(wake / 1_000_000_000), tv_nsec: Int(wake % 1_000_000_000))
            while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &target, nil) == EINTR {}
        }
        // Busy: a yield would hand the processor to another process for a whole time slice.
        while nanoseconds() < deadline {}
    }
}
