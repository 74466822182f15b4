import Foundation

/// The app's own asynchronous work in a simulation: what a test's stand-in for the app's server
/// client (or a timer) uses in place of `URLSession`, so the app's code around it runs unchanged.
/// Started from the app's code on a simulated device, the completion comes later, as that device's
/// app code; in exploration when it comes (before or after any delivery) is a choice, the app may be
/// killed meanwhile (the completion then never comes), and work that `canFail` may fail.
public enum SimulatedWork {
    /// Calls `completion` once the work is done, `true` when it succeeded. Outside a simulated
    /// device's code it is called at once, with `true`.
    public static func start(canFail: Bool = true, completion: @escaping (_ succeeded: Bool) -> Void) {
        guard let device = SimulatedDevice.current else { return completion(true) }
        device.startWork(canFail: canFail, completion: completion)
    }

    /// `start` for `async` code: returns once the work is done, `true` when it succeeded. Outside a
    /// simulated device's code it returns `true` at once.
    public static func result(canFail: Bool = true) async -> Bool {
        guard let device = SimulatedDevice.current else { return true }
        // Unsafe rather than checked: a kill loses the work, and with it this continuation, on purpose.
        return await withUnsafeContinuation { continuation in
            device.startWork(canFail: canFail) { succeeded in continuation.resume(returning: succeeded) }
        }
    }
}

/// Runs a simulated device's tasks on the thread that runs its app code: each job when `runReady`
/// is called, in the order they were enqueued.
package final class SimulatedExecutor: TaskExecutor, @unchecked Sendable {
    private let lock = NSLock()
    private var ready: [UnownedJob] = []

    package func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        lock.withLock { ready.append(job) }
    }

    /// Whether a job waits to run: the device binds itself to run them only then.
    var hasReady: Bool { lock.withLock { !ready.isEmpty } }

    /// Runs every ready job, and those they make ready, until none is left.
    func runReady() {
        while let job = lock.withLock({ ready.isEmpty ? nil : ready.removeFirst() }) {
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }
}
