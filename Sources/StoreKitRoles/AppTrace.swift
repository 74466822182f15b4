import StoreKitModel

/// What the apps did, step by step: which observer heard which callback (and which logged
/// event caused it), and who made each command they sent. The log says what the queue did;
/// this says who in the app did it, so a trace can draw each observer as its own lifeline.
/// Kept only when asked for (exploration re-runs a minimal schedule with it), so it costs
/// nothing otherwise.
public final class AppTrace {
    public enum Entry: Sendable, Hashable {
        /// `observer` on `device` was called with `callback` because of the event at `cause`.
        case callback(device: String, observer: String, callback: String, detail: String, cause: UInt64)
        /// The apps role sent its `ordinal`-th command (1-based, the number in its command id).
        case command(device: String, sender: String, body: CommandBody, ordinal: UInt64)
        /// The app on `device` was killed after handling the event at `afterCause`, once the apps role
        /// had sent `sentBefore` commands; `dropped` (made, never sent) were lost with it.
        case killed(device: String, dropped: [CommandBody], afterCause: UInt64, sentBefore: UInt64)
    }

    public private(set) var entries: [Entry] = []
    /// Commands sent so far by the apps role: the next command's number.
    public private(set) var commandsSent: UInt64 = 0

    public init() {}

    func callback(device: String, observer: String, callback: String, detail: String, cause: UInt64) {
        entries.append(.callback(device: device, observer: observer, callback: callback, detail: detail, cause: cause))
    }

    func sent(device: String, sender: String, body: CommandBody) {
        commandsSent += 1
        entries.append(.command(device: device, sender: sender, body: body, ordinal: commandsSent))
    }

    func killed(device: String, dropped: [CommandBody], afterCause: UInt64) {
        entries.append(.killed(device: device, dropped: dropped, afterCause: afterCause, sentBefore: commandsSent))
    }
}

/// How the apps are driven beyond what a scenario records: the app a user wrote (instead of the
/// built-in behaviours) and a trace. Used by one runtime on one thread.
public final class AppHooks: @unchecked Sendable {
    public var trace: AppTrace?
    /// The app's own code at every launch, given the device's queue (StoreKitSim's `SimulatedApp`):
    /// it attaches its observers itself, through `SKPaymentQueue.default()`.
    public var appLaunch: ((_ queue: PaymentQueue) -> Void)?
    /// The user asks the app's own code to buy `payment`'s product (StoreKitSim's `SimulatedApp`,
    /// whose `buy` adds an `SKPayment`); false when the app takes no such request, and the user's
    /// payment is added as it is. nil: the user's payments are added as they are.
    public var appPurchase: ((_ queue: PaymentQueue, _ payment: Payment) -> Bool)?

    public init(trace: AppTrace? = nil, appLaunch: ((_ queue: PaymentQueue) -> Void)? = nil,
                appPurchase: ((_ queue: PaymentQueue, _ payment: Payment) -> Bool)? = nil) {
        self.trace = trace
        self.appLaunch = appLaunch
        self.appPurchase = appPurchase
    }
}
