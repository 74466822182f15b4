import Bus
import StoreKitModel
import StoreKitRuntime
import Testing
@testable import StoreKitLive

/// The bounds a live queue puts on pending transactions (issue 30, "a command burst kills the run").
@Suite struct PaymentAdmissionTests {
    /// A queue engine in memory with `devices` registered, running apps.
    static func engine(devices: Int) throws -> QueueEngine {
        let engine = try QueueEngine(catalog: .sample, storage: MemoryLogStorage())
        var number: UInt64 = 0
        func send(_ body: CommandBody) throws {
            number += 1
            _ = try engine.handle(Command(id: CommandID(origin: "setup", number: number), body: body), timestamp: Int64(number))
        }
        for index in 0..<devices {
            try send(.registerDevice(device: "d\(index)", account: "a\(index)"))
            try send(.launchApp(device: "d\(index)"))
        }
        return engine
    }

    static let payment = Payment(productIdentifier: "com.example.sksim.coins.small")

    @Test("a burst of payments to one device is refused past the device's bound, with a sentence naming it; other devices still pay")
    func perDevice() throws {
        let engine = try Self.engine(devices: 2)
        var admission = PaymentAdmission(maximumPendingPerDevice: 5, maximumPendingInQueue: 1_000, recountEvery: 1)
        var number: UInt64 = 100
        var refusals: [String] = []
        for _ in 0..<8 {
            let body = CommandBody.addPayment(device: "d0", payment: Self.payment)
            if let refusal = admission.refusal(of: body, in: engine.projection) {
                refusals.append(refusal)
                continue
            }
            number += 1
            _ = try engine.handle(Command(id: CommandID(origin: "burst", number: number), body: body), timestamp: Int64(number))
        }
        #expect(engine.projection.device("d0")?.pending.count == 5)
        #expect(refusals.count == 3)
        #expect(refusals.first?.contains("device d0 holds 5 pending transactions") == true)
        #expect(admission.refusal(of: .addPayment(device: "d1", payment: Self.payment), in: engine.projection) == nil)
        #expect(admission.refusal(of: .launchApp(device: "d0"), in: engine.projection) == nil, "only payments are bounded")
    }

    @Test("payments from many devices are refused past the queue's bound")
    func wholeQueue() throws {
        let engine = try Self.engine(devices: 20)
        var admission = PaymentAdmission(maximumPendingPerDevice: 100, maximumPendingInQueue: 30, recountEvery: 1)
        var accepted = 0
        var refusal: String?
        var number: UInt64 = 100
        for round in 0..<3 {
            for device in 0..<20 {
                let body = CommandBody.addPayment(device: "d\(device)", payment: Self.payment)
                if let refused = admission.refusal(of: body, in: engine.projection) {
                    refusal = refused
                    continue
                }
                number += 1
                _ = try engine.handle(Command(id: CommandID(origin: "burst\(round)", number: number), body: body), timestamp: Int64(number))
                accepted += 1
            }
        }
        #expect(accepted == 30)
        #expect(engine.projection.pendingCount == 30)
        #expect(refusal?.contains("the queue holds 30 pending transactions") == true)
    }
}
