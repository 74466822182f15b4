import Bus
import Foundation
import StoreKitModel
import Testing
import ZeroMQ

/// One group commit makes a whole window of a sender's commands durable at once, so their ACKs
/// leave in one burst, larger than the ROUTER's reply high-water mark. A dropped ACK cost its
/// sender a 500 ms retry: under load, a closed loop of 2,000 lifecycles fell from about 40k to
/// 5k lifecycles/s (docs/performance.md). Real sockets; the reader is slow on purpose.
@Suite("ACK bursts beyond the reply high-water mark")
struct AcknowledgementBurstTests {
    let context: ZeroMQContext

    init() throws {
        context = try ZeroMQContext()
    }

    static let commands = 20_000

    /// A DEALER that reads nothing until told: its own queue holds 10 messages, so what the
    /// kernel's socket buffers cannot take stays at the queue.
    private func flood(_ queue: QueueHarness) throws -> Socket {
        let dealer = try context.socket(.dealer)
        try dealer.set(.receiveHighWaterMark, 10)
        try dealer.connect(queue.requestsEndpoint)
        for number in 1...Self.commands {
            let command = Command(id: CommandID(origin: "burst", number: UInt64(number)), body: .launchApp(device: "device-1"))
            try dealer.send(["CMD".bytes, EventCodec.encode(command)])
        }
        #expect(queue.wait(within: .seconds(30)) { $0.commandsHandled == Self.commands })
        return dealer
    }

    @Test("every ACK of a burst 2,000 times the reply high-water mark reaches a reader that reads late, none dropped", .timeLimit(.minutes(1)))
    func burstArrivesWhole() throws {
        let queue = try QueueHarness(context: context, transport: .ipc, configure: {
            $0.replyHighWaterMark = 10
            $0.maximumHeldAcknowledgementsPerPeer = 65_536
        }) { _, _ in .accepted([]) }
        let dealer = try flood(queue)
        defer { dealer.close() }
        // 20,000 ACKs do not fit in 10 messages and the kernel's buffers: the endpoint held some.
        #expect(queue.counters.acknowledgementsHeld > 0)
        var acknowledged = Set<UInt64>()
        while acknowledged.count < Self.commands, let frames = try dealer.receive(timeout: .seconds(5)) {
            let acknowledgement = try CommandAcknowledgement.decode(frames)
            #expect(acknowledgement.status == .accepted)
            if let number = acknowledgement.commandID?.number { acknowledged.insert(number) }
        }
        #expect(acknowledged == Set(1...UInt64(Self.commands)))
        #expect(queue.counters.repliesDropped == 0)
        #expect(queue.wait { _ in queue.heldAcknowledgements == 0 })
        #expect(queue.loopFailure == nil)
    }

    @Test("ACKs for a peer that never reads are held up to the per-peer bound, the rest dropped and counted", .timeLimit(.minutes(1)))
    func heldAcknowledgementsAreBounded() throws {
        let queue = try QueueHarness(context: context, transport: .ipc, configure: {
            $0.replyHighWaterMark = 10
            $0.maximumHeldAcknowledgementsPerPeer = 100
        }) { _, _ in .accepted([]) }
        let dealer = try flood(queue)
        defer { dealer.close() }
        #expect(queue.wait { $0.repliesDropped > 0 })
        #expect(queue.heldAcknowledgements <= 100)
        #expect(queue.counters.repliesDropped < Self.commands)
        #expect(queue.loopFailure == nil)
    }
}
