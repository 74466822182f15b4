import StoreKitModel
import StoreKitRoles
import StoreKitRuntime

/// One device's `PaymentQueue` wired straight to the queue engine: commands it emits are
/// decided at once and the resulting events delivered back, as a runtime would, with no
/// network in between. For tests of an observer's callbacks step by step.
public final class LoopbackDevice {
    /// The queue the device talks to.
    public private(set) var harness: QueueHarness
    public let paymentQueue: PaymentQueue
    public private(set) var events: [RecordedEvent] = []

    public init(device: String = "d1", seed: UInt64 = 1, ordering: ObserverOrdering = .seededShuffle, catalog: Catalog = .sample) {
        harness = QueueHarness(catalog: catalog)
        paymentQueue = PaymentQueue(device: device, catalog: catalog, ordering: ordering, choices: SeededChoices(seed: seed))
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
            for body in pendingBodies {
                let before = harness.recorded.count
                harness.send(body)
                for recorded in harness.recorded[before...] {
                    events.append(recorded)
                    paymentQueue.deliver(recorded)
                }
            }
            pendingBodies = paymentQueue.drainOutbox()
        }
        return true
    }

    /// Launches the app (registering the device first).
    public func launch(account: String = "a1") { launch(account: account, with: nil) }

    /// Launches the app (registering the device first) and attaches `observer`.
    package func launch(account: String = "a1", with observer: PaymentTransactionObserver?) {
        paymentQueue.enqueue(.registerDevice(device: paymentQueue.device, account: account))
        paymentQueue.enqueue(.launchApp(device: paymentQueue.device))
        pump()
        if let observer {
            paymentQueue.add(observer)
            pump()
        }
    }

    /// Adds a payment through the app's queue and delivers what follows.
    public func buy(_ product: String) throws {
        try paymentQueue.add(Payment(productIdentifier: product))
        pump()
    }
}
