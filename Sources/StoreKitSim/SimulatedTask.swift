import StoreKitRoles

/// The app's own tasks, run on the simulator's thread: `Task { … }` in a file that imports
/// StoreKitSim is this type (it shadows the standard library's, as any module's declaration does),
/// so app code that awaits its server in a task runs unchanged and deterministically. Created by a
/// simulated device's app code, a task runs on that device's executor: its steps run on the
/// runtime's thread, in the order they became ready, right after the callback (or the completion
/// of asynchronous work) that made them ready. Elsewhere it is the standard library's task.
///
/// Awaiting `SimulatedWork.result` (or `Task.sleep`) makes the completion a choice in exploration.
/// Awaiting something the simulator does not run (a real network call, an actor such as the main
/// actor) resumes on another thread: the simulation is then neither deterministic nor safe.
public struct Task<Success: Sendable, Failure: Error>: Sendable, Hashable {
    private let task: _Concurrency.Task<Success, Failure>

    public var value: Success {
        get async throws { try await task.value }
    }

    public var result: Result<Success, Failure> {
        get async { await task.result }
    }

    public func cancel() { task.cancel() }
    public var isCancelled: Bool { task.isCancelled }
}

extension Task where Failure == Never {
    @discardableResult
    public init(priority: TaskPriority? = nil, operation: sending @escaping () async -> Success) {
        if let executor = SimulatedDevice.current?.executor {
            task = _Concurrency.Task(executorPreference: executor, priority: priority, operation: operation)
        } else {
            task = _Concurrency.Task(priority: priority, operation: operation)
        }
    }

    @discardableResult
    public static func detached(priority: TaskPriority? = nil, operation: sending @escaping () async -> Success) -> Task<Success, Never> {
        Task(priority: priority, operation: operation)
    }

    public var value: Success {
        get async { await task.value }
    }
}

extension Task where Failure == any Error {
    @discardableResult
    public init(priority: TaskPriority? = nil, operation: sending @escaping () async throws -> Success) {
        if let executor = SimulatedDevice.current?.executor {
            task = _Concurrency.Task(executorPreference: executor, priority: priority, operation: operation)
        } else {
            task = _Concurrency.Task(priority: priority, operation: operation)
        }
    }

    @discardableResult
    public static func detached(priority: TaskPriority? = nil, operation: sending @escaping () async throws -> Success) -> Task<Success, any Error> {
        Task(priority: priority, operation: operation)
    }
}

extension Task where Success == Never, Failure == Never {
    public static var isCancelled: Bool { _Concurrency.Task<Never, Never>.isCancelled }
    public static var currentPriority: TaskPriority { _Concurrency.Task<Never, Never>.currentPriority }
    public static func checkCancellation() throws { try _Concurrency.Task<Never, Never>.checkCancellation() }
    public static func yield() async { await _Concurrency.Task<Never, Never>.yield() }

    /// In a simulated device's code, a timer of the app: when it fires is a choice in exploration
    /// (`nanoseconds` is not simulated time); elsewhere the standard library's sleep.
    public static func sleep(nanoseconds: UInt64) async throws {
        guard SimulatedDevice.current != nil else { return try await _Concurrency.Task<Never, Never>.sleep(nanoseconds: nanoseconds) }
        _ = await SimulatedWork.result(canFail: false)
        try checkCancellation()
    }

    public static func sleep(for duration: Duration) async throws {
        let (seconds, attoseconds) = duration.components
        try await sleep(nanoseconds: UInt64(max(0, seconds)) * 1_000_000_000 + UInt64(max(0, attoseconds / 1_000_000_000)))
    }
}
