import StoreKitModel
import StoreKitRoles
import StoreKitRuntime

/// One device's `PaymentQueue` wired straight to the queue engine: commands it emits are
/// decided at once and the resulting events delivered back, as a runtime would, with no
/// network in between. For tests of an observer's callbacks step by step.
///
/// The app side is the one every runtime runs (`InstalledApp`), hosted in the one `RoleHost`; the
/// transport is the engine itself (`LoopbackTransport`).
public final class LoopbackDevice {
    /// The queue the device talks to.
    public var harness: QueueHarness { transport.harness }
    public let paymentQueue: PaymentQueue
    public private(set) var events: [RecordedEvent] = []
    private let app: InstalledApp
    private let host: RoleHost
    private var transport: LoopbackTransport

    public init(device: String = "d1", seed: UInt64 = 1, ordering: ObserverOrdering = .seededShuffle, catalog: Catalog = .sample) {
        let choices = SeededChoices(seed: seed)
        paymentQueue = PaymentQueue(device: device, catalog: catalog, ordering: ordering, choices: choices)
        // A test attaches its observers itself (`launch(with:)`, or on `paymentQueue`).
        app = InstalledApp(queue: paymentQueue, code: .app { _ in }, observerChoices: choices)
        host = RoleHost(role: app)
        transport = LoopbackTransport(harness: QueueHarness(catalog: catalog))
    }

    /// Rounds of commands one `send` or `pump` carries out at most: an observer that makes a command
    /// from every callback (an `add(_:)` in `updatedTransactions`) would otherwise never stop.
    public static let maximumRounds = 1_000

    /// Why the last `send` or `pump` stopped before the app's queue settled, nil when it settled.
    public private(set) var unsettled: String?

    /// Sends a command as another role would (the store, the downloader). False when the
    /// observers were still making commands after `maximumRounds` rounds (see `unsettled`).
    /// Called from an observer's callback, it is sent once the events being delivered are.
    @discardableResult
    public func send(_ body: CommandBody) -> Bool { process([body]) }

    /// Delivers everything the app's queue asked for, until nothing more comes. False when the
    /// observers were still making commands after `maximumRounds` rounds (see `unsettled`); what
    /// they made last stays in the outbox, so the next `pump()` goes on from there.
    @discardableResult
    public func pump() -> Bool { process(paymentQueue.drainOutbox()) }

    /// True while a `send` or `pump` delivers: an observer that calls either from its callback
    /// (re-entrancy) has its commands sent by the running one, after the events being delivered.
    private var isProcessing = false

    private func process(_ bodies: [CommandBody]) -> Bool {
        guard !isProcessing else {
            // Delivering inside a delivery once overflowed the stack and handed the queue its events out of order.
            for body in bodies { paymentQueue.enqueue(body) }
            return true
        }
        isProcessing = true
        defer { isProcessing = false }
        var pendingBodies = bodies
        var rounds = 0
        unsettled = nil
        while !pendingBodies.isEmpty {
            guard rounds < Self.maximumRounds else {
                // Put back, in order, ahead of anything made since: a later pump continues.
                for body in pendingBodies { paymentQueue.enqueue(body) }
                unsettled = "the observers still made \(pendingBodies.count) commands after \(rounds) rounds of commands and callbacks "
                    + "(\(pendingBodies.prefix(3).map { "\($0)" }.joined(separator: "; "))): an observer that makes a command from "
                    + "every callback never lets the queue settle"
                return false
            }
            rounds += 1
            // Each command's events are delivered before the next command of the round is decided; what
            // the observers make meanwhile is the next round.
            for body in pendingBodies {
                let before = transport.harness.recorded.count
                transport.harness.send(body)
                var position = before
                while position < transport.harness.recorded.count {
                    let recorded = transport.harness.recorded[position]
                    position += 1
                    events.append(recorded)
                    host.deliver(recorded, over: &transport)
                }
            }
            pendingBodies = transport.takeNextRound()
        }
        return true
    }

    /// Launches the app (registering the device first).
    public func launch(account: String = "a1") { launch(account: account, with: nil, named: "") }

    /// Launches the app (registering the device first) and attaches `observer` as the app's code does,
    /// under `name` (its class name when nil, as `SKPaymentQueue.add(_:)` names it).
    public func launch(account: String = "a1", with observer: (any SKPaymentTransactionObserver)?, named name: String? = nil) {
        paymentQueue.enqueue(.registerDevice(device: paymentQueue.device, account: account))
        app.launch()
        pump()
        if let observer {
            paymentQueue.add(observer, named: name ?? String(describing: type(of: observer)))
            pump()
        }
    }

    /// Adds a payment through the app's queue and delivers what follows.
    public func buy(_ product: String) throws {
        try paymentQueue.add(Payment(productIdentifier: product))
        pump()
    }
}

/// The test kit's transport: the app's commands go straight to the queue engine (`QueueHarness`),
/// a round at a time (those made while one round's events are delivered are the next round, as a
/// runtime's network would deliver them later), and its clock is the time of the last event.
struct LoopbackTransport: RoleTransport {
    typealias Failure = Never
    var harness: QueueHarness
    private var nextRound: [CommandBody] = []

    init(harness: QueueHarness) {
        self.harness = harness
    }

    var now: Int64 { harness.recorded.last?.timestamp ?? 0 }
    var hasCapacity: Bool { true }
    mutating func submit(_ body: CommandBody) { nextRound.append(body) }
    /// The loopback has no timers: the app's asynchronous work waits in its queue.
    mutating func setTimer(afterNanoseconds delay: Int64, _ token: TimerToken) {}

    mutating func takeNextRound() -> [CommandBody] {
        defer { nextRound.removeAll() }
        return nextRound
    }
}
