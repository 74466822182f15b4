import StoreKitModel

/// A timer a role asked for; handed back to the same role when it fires.
public enum TimerToken: Sendable, Hashable {
    case decidePurchase(TransactionKey)
    case approveDeferred(TransactionKey)
    case answerRestore(device: String, restore: UInt64)
    case downloadTick(DownloadKey, generation: Int)
    case deviceStep(device: String)
    /// The end of a subscription's current period (its first purchase's identifier, renewals so far).
    case subscriptionPeriodEnd(original: String, renewals: Int)
    /// A billing retry of a subscription (F-B1): at the grace period's end, or (`final`) the retry period's.
    case billingRetry(original: String, final: Bool)
    /// The scenario's store action at this index (F-T2).
    case storeAction(index: Int)
    /// The store's answer to a receipt refresh (R-R2).
    case answerReceiptRefresh(device: String, request: UInt64)
    /// A live replay's apps: the recording's length and a grace have passed; stop waiting for
    /// devices that stay unsettled.
    case replaySettleDeadline
    /// A live replay's apps: the recording's last event is due.
    case replayRecordingEnd
    /// A live replay's store: the recorded store actions on a device's account (clearings), timed
    /// from the device's registration.
    case replayAccountActions(device: String)
    /// A piece of asynchronous work the app on `device` started (`PaymentQueue.startWork`) completes.
    case appWork(device: String, work: UInt64)
}

/// What a role wants done. Roles never send or sleep themselves: the runtime (the
/// deterministic one, or a live process on ZeroMQ) carries effects out, so the same role
/// code runs in both.
public enum Effect: Sendable, Hashable {
    case send(CommandBody)
    case timer(afterNanoseconds: Int64, TimerToken)
}

/// A role reacts to events from the queue and to its own timers. `now` is injected time
/// in nanoseconds; roles never read a clock, and draw every random choice from the
/// runtime's `ChoiceSource`.
///
/// Every role can be restarted: a new instance `catchUp`s on the log silently, then
/// `resume` returns what it must do again (timers lost with the old instance, commands
/// that may not have arrived). Decisions are idempotent at the queue, so a resumed role
/// that repeats one is answered "rejected" or "duplicate", never applied twice.
public protocol Role: AnyObject {
    /// The origin of the role's commands (part of every command id).
    var name: String { get }
    func receive(_ event: RecordedEvent, now: Int64) -> [Effect]
    func timerFired(_ token: TimerToken, now: Int64) -> [Effect]
    /// `receive`, adding the effects to `effects` (a buffer the deterministic runtime reuses for
    /// every reaction) instead of returning an array of their own. Defaults to `receive`.
    func receive(_ event: RecordedEvent, now: Int64, into effects: inout [Effect])
    /// `timerFired`, adding the effects to `effects`. Defaults to `timerFired`.
    func timerFired(_ token: TimerToken, now: Int64, into effects: inout [Effect])
    /// Applies history without reacting (a restarted role reading the log).
    func catchUp(_ event: RecordedEvent)
    /// After `catchUp`: what to do again. Called once, also for a first start.
    func resume(now: Int64) -> [Effect]
    /// True when the role has nothing more to do unless someone else acts (an app whose
    /// users are done and whose queue holds nothing unfinished). Servers are always settled.
    var isSettled: Bool { get }
    /// What the role's environment failed to do that it cannot simulate around (content it could
    /// not write: a full disk, a folder without permission), with the path involved. A live
    /// process stops with it, loudly, instead of letting the run go on as if nothing happened.
    var environmentFailure: EnvironmentFailure? { get }
}

/// A role's `environmentFailure`, thrown by a runtime that stops on it.
public struct EnvironmentFailure: Error, CustomStringConvertible {
    public var role: String
    /// Relative to the content root, as `contentURL` holds it.
    public var path: String
    public var underlying: any Error
    public init(role: String, path: String, underlying: any Error) {
        self.role = role
        self.path = path
        self.underlying = underlying
    }
    public var description: String { "\(role) could not write \(path): \(underlying)" }
}

extension Role {
    // Most reactions are empty, and appending an empty array still costs a call into the
    // runtime's generic `append(contentsOf:)`.
    public func receive(_ event: RecordedEvent, now: Int64, into effects: inout [Effect]) {
        let produced = receive(event, now: now)
        if !produced.isEmpty { effects.append(contentsOf: produced) }
    }
    public func timerFired(_ token: TimerToken, now: Int64, into effects: inout [Effect]) {
        let produced = timerFired(token, now: now)
        if !produced.isEmpty { effects.append(contentsOf: produced) }
    }
    public var isSettled: Bool { true }
    public var environmentFailure: EnvironmentFailure? { nil }
}
