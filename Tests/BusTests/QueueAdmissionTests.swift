import Bus
import StoreKitModel
import Testing

/// The queue endpoint's rules as a state machine (issue 30, item 1): no socket, no clock.
@Suite struct QueueAdmissionTests {
    static let second: Int64 = 1_000_000_000

    static func command(_ origin: String, _ number: UInt64, _ body: CommandBody) -> Command {
        Command(id: CommandID(origin: origin, number: number), body: body)
    }

    @Test("a command outside its sender's roles is refused at the endpoint with the key's limits named; an allowed one passes")
    func roleRefused() throws {
        var admission = QueueAdmission(permissions: ["app-key": ClientPermissions(roles: [.app], devices: ["d1"])])
        let forged = Self.command("app.1", 1, .decidePurchase(TransactionKey(device: "d1", number: 1), .purchased(charged: false)))
        let verdict = admission.atEndpoint(forged, sender: "app-key", unpublishedRecords: 0)
        let refusal = try #require(verdict)
        #expect(refusal.reason == .role && refusal.status == .rejected)
        #expect(refusal.message.hasPrefix("not allowed: a store command"), "\(refusal.message)")
        let otherDevice = Self.command("app.1", 2, .launchApp(device: "d2"))
        let otherVerdict = admission.atEndpoint(otherDevice, sender: "app-key", unpublishedRecords: 0)
        #expect(otherVerdict?.reason == .role)
        let ownVerdict = admission.atEndpoint(Self.command("app.1", 3, .launchApp(device: "d1")), sender: "app-key", unpublishedRecords: 0)
        #expect(ownVerdict == nil)
        // No key at all (no CURVE) is not limited.
        let unkeyedVerdict = admission.atEndpoint(forged, sender: nil, unpublishedRecords: 0)
        #expect(unkeyedVerdict == nil)
        #expect(admission.refusedForRole == 2)
    }

    @Test("with too many records awaiting durability a command is answered unavailable, recording nothing")
    func overloadedIsUnavailable() throws {
        var admission = QueueAdmission(maximumUnpublishedRecords: 10)
        let command = Self.command("app.1", 1, .launchApp(device: "d"))
        let below = admission.atEndpoint(command, sender: nil, unpublishedRecords: 9)
        #expect(below == nil)
        let at = admission.atEndpoint(command, sender: nil, unpublishedRecords: 10)
        let refusal = try #require(at)
        #expect(refusal.reason == .overloaded && refusal.status == .unavailable)
        #expect(admission.refusedAsUnavailable == 1)
    }

    @Test("a command ahead of its sender's order waits (unavailable) until the earlier ones come, or its sender reports none is coming")
    func orderWaitsWithoutPatience() throws {
        var admission = QueueAdmission()
        let projection = QueueProjection()
        // Number 1 of this origin was never applied: number 2 skips ahead, and waits however long it is sent again.
        let ahead = Self.command("store.3", 2, .launchApp(device: "d"))
        let first = admission.beforeEngine(ahead, projection: projection)
        let refusal = try #require(first)
        #expect(refusal.reason == .outOfOrder && refusal.status == .unavailable)
        #expect(refusal.message.contains("arrived before store.3:1"))
        let again = admission.beforeEngine(ahead, report: SenderReport(lowestUnanswered: 1), projection: projection)
        #expect(again != nil, "number 1 is still unanswered at its sender: it is coming")
        // Its sender answered or gave up number 1: nothing is coming, so number 2 reaches the engine.
        let settled = admission.beforeEngine(ahead, report: SenderReport(lowestUnanswered: 2), projection: projection)
        #expect(settled == nil)
        // The first command of an origin never waits.
        let firstOfOrigin = admission.beforeEngine(Self.command("app.9", 1, .launchApp(device: "d")), projection: projection)
        #expect(firstOfOrigin == nil)
    }

    @Test("a payment beyond the queue's bound is refused before the engine, naming the bound")
    func paymentBound() throws {
        var admission = QueueAdmission(payments: PaymentAdmission(maximumPendingPerDevice: 10, maximumPendingInQueue: 0, recountEvery: 1))
        let payment = Self.command("app.1", 1, .addPayment(device: "d", payment: Payment(productIdentifier: "p")))
        let verdict = admission.beforeEngine(payment, projection: QueueProjection())
        let refusal = try #require(verdict)
        #expect(refusal.reason == .paymentBound && refusal.status == .rejected)
        #expect(refusal.message.contains("pending transactions"))
    }
}
