import Foundation
import StoreKitRuntime

/// The wall clock of a timed replay, injected so tests and benchmarks can drive it.
public protocol ReplayClock: AnyObject {
    /// Monotonic nanoseconds.
    func nanoseconds() -> Int64
    /// Returns at `deadline` (monotonic nanoseconds) or as soon after it as it can.
    func wait(until deadline: Int64)
    /// The timed replay is over: give back what waiting took (a real-time priority).
    func finish()
}

extension ReplayClock {
    public func finish() {}
}

/// The machine's monotonic clock. Waits sleep until an absolute time (never "for the gap
/// since the last command", so errors do not add up), waking a little early and spinning
/// the last stretch, because a sleep overshoots by the kernel's timer slack.
///
/// On a loaded machine most lateness is not the sleep's overshoot but the wait for a
/// processor after waking: every runnable process shares the cores, so a woken replay can
/// wait milliseconds for its turn, and a spinning one is preempted at the end of its time
/// slice. So the thread that waits asks for the lowest real-time priority (SCHED_FIFO 1)
/// where the system allows it: woken, it runs at once. It sleeps between commands, so it
/// takes a core only for its own work (and the kernel caps real-time threads at 95 % of
/// each second); `finish()` gives the priority back. Where it is refused (no
/// CAP_SYS_NICE), the replay runs at normal priority and says so (`scheduling`).
public final class SystemReplayClock: ReplayClock {
    public enum Scheduling: String, Sendable {
        /// SCHED_FIFO 1 while the timed replay runs.
        case realTime
        /// The normal scheduler (real-time priority not asked for, or refused).
        case normal
    }

    /// How long before a deadline the sleep ends and the spin begins.
    public var spinNanoseconds: Int64 = 150_000
    /// Whether to ask for a real-time priority at the first wait.
    public let asksForRealTime: Bool
    /// What the waits ran under (known after the first wait).
    public private(set) var scheduling: Scheduling = .normal
    private var asked = false
    private var previous: (policy: Int32, parameters: sched_param)?

    public init(realTime: Bool = true) {
        asksForRealTime = realTime
    }

    public func nanoseconds() -> Int64 { MonotonicClock.nanoseconds() }

    public func wait(until deadline: Int64) {
        if !asked { raisePriority() }
        let wake = deadline - spinNanoseconds
        if wake > nanoseconds() {
            // A signal does not end a replay's wait: sleep again.
            while !MonotonicClock.sleep(until: wake) {}
        }
        // Busy: a yield would hand the processor to another process for a whole time slice.
        while nanoseconds() < deadline {}
    }

    public func finish() {
        guard var previous else { return }
        pthread_setschedparam(pthread_self(), previous.policy, &previous.parameters)
        self.previous = nil
    }

    private func raisePriority() {
        asked = true
        guard asksForRealTime else { return }
        var policy: Int32 = 0
        var parameters = sched_param()
        guard pthread_getschedparam(pthread_self(), &policy, &parameters) == 0 else { return }
        var realTime = sched_param()
        realTime.sched_priority = 1
        if pthread_setschedparam(pthread_self(), Int32(SCHED_FIFO), &realTime) == 0 {
            previous = (policy, parameters)
            scheduling = .realTime
        }
    }
}
