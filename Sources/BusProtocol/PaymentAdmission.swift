import StoreKitModel

/// Bounds what payments a live queue takes on, so a burst of `addPayment` commands (valid ones, from
/// any number of invented senders) cannot grow its memory without limit: each pending transaction is
/// kept until its app finishes it. Past a bound the payment is answered `rejected` with a sentence
/// naming the bound, and only the command's id is recorded (docs/reliability.md, "Bounds").
public struct PaymentAdmission: Sendable {
    /// Pending (unfinished) transactions one device may hold; a real app has a handful.
    public var maximumPendingPerDevice: Int
    /// Pending transactions over all devices of the queue.
    public var maximumPendingInQueue: Int
    /// The queue-wide count is summed over every device (a pass over all of them), so it is counted
    /// again only after this many payments, and the bound holds to within as many.
    public var recountEvery: Int

    private var pendingInQueue = 0
    private var paymentsSinceCount = Int.max

    public init(maximumPendingPerDevice: Int = 1_000, maximumPendingInQueue: Int = 100_000, recountEvery: Int = 4_096) {
        self.maximumPendingPerDevice = maximumPendingPerDevice
        self.maximumPendingInQueue = maximumPendingInQueue
        self.recountEvery = recountEvery
    }

    /// Why `command` must be refused now, or nil to hand it to the engine.
    public mutating func refusal(of command: CommandBody, in projection: QueueProjection) -> String? {
        guard case .addPayment(let device, _) = command else { return nil }
        if paymentsSinceCount >= recountEvery {
            pendingInQueue = projection.pendingCount
            paymentsSinceCount = 0
        }
        paymentsSinceCount += 1
        if pendingInQueue >= maximumPendingInQueue {
            // Counted again soon, so the queue takes payments again as transactions finish.
            paymentsSinceCount = max(paymentsSinceCount, recountEvery - 64)
            return "the queue holds \(pendingInQueue) pending transactions, its most (\(maximumPendingInQueue)); "
                + "payments are refused until apps finish theirs (docs/reliability.md, Bounds)"
        }
        if let pending = projection.device(device)?.pending.count, pending >= maximumPendingPerDevice {
            return "device \(device) holds \(pending) pending transactions, the most one device may hold (\(maximumPendingPerDevice)); "
                + "finish some before adding payments (docs/reliability.md, Bounds)"
        }
        pendingInQueue += 1
        return nil
    }
}
