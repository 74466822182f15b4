import StoreKitModel

/// A timer a role asked for; handed back to the same role when it fires.
public enum TimerToken: Sendable, Hashable {
    case decidePurchase(TransactionKey)
    case approveDeferred(TransactionKey)
    case answerRestore(device: String, restore: UInt64)
    case downloadTick(DownloadKey, generation: Int)
    case deviceStep(device: String)
}

/// What a role wants done. Roles never send or sleep themselves: the runtime (the
/// deterministic simulation, or a live process on ZeroMQ) carries effects out, so the
/// same role code runs in both (DESIGN.md, "Two ways to run the same roles").
public enum Effect: Sendable, Hashable {
    case send(CommandBody)
    case timer(afterNanoseconds: Int64, TimerToken)
}

/// A role reacts to events from the queue and to its own timers. `now` is injected
/// time in nanoseconds; roles never read a clock.
public protocol Role: AnyObject {
    /// The origin of the role's commands (part of every command id).
    var name: String { get }
    func receive(_ event: RecordedEvent, now: Int64) -> [Effect]
    func timerFired(_ token: TimerToken, now: Int64) -> [Effect]
}
