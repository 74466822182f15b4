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

    /// Sends a command as another role would (the store, the downloader).
    public func send(_ body: CommandBody) { process([body]) }

    /// Delivers everything the app's queue asked for, until nothing more comes.
    public func pump() { process(paymentQueue.drainOutbox()) }

    private func process(_ bodies: [CommandBody]) {
        var pendingBodies = bodies
        var rounds = 0
        while !pendingBodies.isEmpty {
            rounds += 1
            precondition(rounds < 1_000, "commands keep producing commands")
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
    }

    /// Launches the app (registering the device first) and attaches `observer`.
    public func launch(account: String = "a1", with observer: PaymentTransactionObserver? = nil) {
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
