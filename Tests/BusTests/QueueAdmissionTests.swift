import Bus
import StoreKitModel
import Testing

/// The queue endpoint's rules as a state machine (issue 30, item 1): no socket, time passed in.
@Suite struct QueueAdmissionTests {
    static let second: Int64 = 1_000_000_000

    static func command(_ origin: String, _ number: UInt64, _ body: CommandBody) -> Command {
        Command(id: CommandID(origin: origin, number: number), body: body)
    }

    @Test("a command outside its sender's roles is refused at the endpoint with the key's limits named; an allowed one passes")
    func roleRefused() throws {
        var admission = QueueAdmission(permissions: ["app-key": ClientPermissions(roles: [.app], devices: ["d1"])])
        let forged = Self.command("app.1", 1, .decidePurchase(TransactionKey(device: "d1", number: 1), .purchased(charged: false)))
        let refusal = try #require(admission.atEndpoint(forged, sender: "app-key", unpublishedRecords: 0))
        #expect(refusal.reason == .role && refusal.status == .rejected)
        #expect(refusal.message.hasPrefix("not allowed: a store command"), "\(refusal.message)")
        let otherDevice = Self.command("app.1", 2, .launchApp(device: "d2"))
        #expect(admission.atEndpoint(otherDevice, sender: "app-key", unpublishedRecords: 0)?.reason == .role)
        #expect(admission.atEndpoint(Self.command("app.1", 3, .launchApp(device: "d1")), sender: "app-key", unpublishedRecords: 0) == nil)
        // A key not listed, or no key at all (no CURVE), is not limited.
        #expect(admission.atEndpoint(forged, sender: nil, unpublishedRecords: 0) == nil)
        #expect(admission.refusedForRole == 2)
    }

    @Test("with too many records awaiting durability a command is answered unavailable, recording nothing")
    func overloadedIsUnavailable() throws {
        var admission = QueueAdmission(maximumUnpublishedRecords: 10)
        let command = Self.command("app.1", 1, .launchApp(device: "d"))
        #expect(admission.atEndpoint(command, sender: nil, unpublishedRecords: 9) == nil)
        let refusal = try #require(admission.atEndpoint(command, sender: nil, unpublishedRecords: 10))
        #expect(refusal.reason == .overloaded && refusal.status == .unavailable)
        #expect(admission.refusedAsUnavailable == 1)
    }

    @Test("a command ahead of its sender's order waits (unavailable) for at most the patience, then reaches the engine")
    func orderWaitsWithPatience() throws {
        var admission = QueueAdmission()
        let projection = QueueProjection()
        // Number 1 of this origin was never applied: number 2 skips ahead.
        let ahead = Self.command("store.3", 2, .launchApp(device: "d"))
        let refusal = try #require(admission.beforeEngine(ahead, projection: projection, now: 0))
        #expect(refusal.reason == .outOfOrder && refusal.status == .unavailable)
        #expect(refusal.message.contains("arrived before store.3:1"))
        #expect(admission.beforeEngine(ahead, projection: projection, now: 2 * Self.second) != nil)
        #expect(admission.beforeEngine(ahead, projection: projection, now: 3 * Self.second + 1) == nil)
        // The first command of an origin never waits.
        #expect(admission.beforeEngine(Self.command("app.9", 1, .launchApp(device: "d")), projection: projection, now: 0) == nil)
    }

    @Test("a payment beyond the queue's bound is refused before the engine, naming the bound")
    func paymentBound() throws {
        var admission = QueueAdmission(payments: PaymentAdmission(maximumPendingPerDevice: 10, maximumPendingInQueue: 0, recountEvery: 1))
        let payment = Self.command("app.1", 1, .addPayment(device: "d", payment: Payment(productIdentifier: "p")))
        let refusal = try #require(admission.beforeEngine(payment, projection: QueueProjection(), now: 0))
        #expect(refusal.reason == .paymentBound && refusal.status == .rejected)
        #expect(refusal.message.contains("pending transactions"))
    }
}
