import Foundation
import Testing
@testable import StoreKitReplay

/// The timed replay's clock: the real-time priority it asks for while waiting is given back.
@Suite struct ReplayClockTests {
    /// Runs `body` on a thread of its own, so a changed priority never leaks into the test pool.
    func onOwnThread(_ body: @escaping @Sendable () -> (Int32, Int32, Int32, String)) -> (Int32, Int32, Int32, String) {
        nonisolated(unsafe) var outcome: (Int32, Int32, Int32, String) = (0, 0, 0, "")
        let done = DispatchSemaphore(value: 0)
        let thread = Thread {
            outcome = body()
            done.signal()
        }
        thread.start()
        done.wait()
        return outcome
    }

    static func policy() -> Int32 {
        var policy: Int32 = -1
        var parameters = sched_param()
        pthread_getschedparam(pthread_self(), &policy, &parameters)
        return policy
    }

    @Test("A wait runs under SCHED_FIFO when the system allows it (normal when not asked), and finish() gives the thread's policy back")
    func priorityIsGivenBack() {
        let (before, during, after, scheduling) = onOwnThread {
            let before = Self.policy()
            let clock = SystemReplayClock()
            clock.wait(until: clock.nanoseconds())
            let during = Self.policy()
            clock.finish()
            return (before, during, Self.policy(), clock.scheduling.rawValue)
        }
        #expect(after == before)
        #expect(during == (scheduling == "realTime" ? Int32(SCHED_FIFO) : before), "\(scheduling)")

        let (_, normalDuring, _, normalScheduling) = onOwnThread {
            let clock = SystemReplayClock(realTime: false)
            clock.wait(until: clock.nanoseconds())
            defer { clock.finish() }
            return (0, Self.policy(), 0, clock.scheduling.rawValue)
        }
        #expect(normalScheduling == "normal")
        #expect(normalDuring == before)
    }
}
