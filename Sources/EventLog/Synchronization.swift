#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A pthread mutex with condition variables on the monotonic clock.
///
/// Used instead of actors so the append hot path costs one uncontended lock, and so
/// waits can be bounded by deadlines.
package final class MonitorLock: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)

    package init() {
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    package func lock() { pthread_mutex_lock(mutex) }
    package func unlock() { pthread_mutex_unlock(mutex) }

    func withLock<Result>(_ body: () throws -> Result) rethrows -> Result {
        lock()
        defer { unlock() }
        return try body()
    }

    /// A condition variable bound to this lock.
    package final class Condition: @unchecked Sendable {
        private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
        private let owner: MonitorLock

        package init(_ owner: MonitorLock) {
            self.owner = owner
            var attributes = pthread_condattr_t()
            pthread_condattr_init(&attributes)
            #if os(Linux)
            pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
            #endif
            pthread_cond_init(condition, &attributes)
            pthread_condattr_destroy(&attributes)
        }

        deinit {
            pthread_cond_destroy(condition)
            condition.deallocate()
        }

        /// Waits (lock held) until signalled or the monotonic deadline passes; spurious wake-ups possible.
        package func wait(untilMonotonicNanoseconds deadline: UInt64) {
            var time = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
            pthread_cond_timedwait(condition, owner.mutex, &time)
        }

        func signal() { pthread_cond_signal(condition) }
        package func broadcast() { pthread_cond_broadcast(condition) }
    }
}

/// Monotonic time in nanoseconds (CLOCK_MONOTONIC); only for deadlines and measurements, never written to the log.
@usableFromInline
package func monotonicNanoseconds() -> UInt64 {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return UInt64(time.tv_sec) &* 1_000_000_000 &+ UInt64(time.tv_nsec)
}
