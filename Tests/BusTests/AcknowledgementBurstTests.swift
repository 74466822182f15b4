import Bus
import Foundation
import StoreKitModel
import Testing
import ZeroMQ

/// One group commit makes a whole window of a sender's commands durable at once, so their ACKs
/// leave in one burst. A dropped ACK costs its sender a 500 ms retry: under load a closed loop of
/// 2,000 lifecycles fell from about 40k to 5k lifecycles/s (docs/performance.md). So the reply
/// queue holds the largest window a client of ours uses, and what goes beyond it (a peer that
/// does not read) is dropped and counted, never held without bound. Real sockets over ipc.
@Suite("ACK bursts and the reply high-water mark")
struct AcknowledgementBurstTests {
    let context: ZeroMQContext

    init() throws {
        context = try ZeroMQContext()
    }

    /// A DEALER that reads nothing until told, after sending `commands` commands; returns once the
    /// queue has handled them all (so every ACK has been sent or dropped).
    private func flood(_ queue: QueueHarness, commands: Int) throws -> Socket {
        let dealer = try context.socket(.dealer)
        try dealer.set(.receiveHighWaterMark, 10)
        try dealer.set(.sendHighWaterMark, commands)
        try dealer.connect(queue.requestsEndpoint)
        for number in 1...commands {
            let command = Command(id: CommandID(origin: "burst", number: UInt64(number)), body: .launchApp(device: "device-1"))
            try dealer.send(["CMD".bytes, EventCodec.encode(command)])
        }
        #expect(queue.wait(within: .seconds(30)) { $0.commandsHandled == commands })
        return dealer
    }

    /// Closes the flooding DEALER and waits until the queue has seen it leave, before the harness
    /// closes the queue's sockets. libzmq 4.3.4 asserts ("Resource temporarily unavailable",
    /// session_base.cpp, zeromq/libzmq#3442) when a connection drops while its session holds part of
    /// an unsent reply and the ROUTER is being closed at the same moment: this test's teardown once
    /// did exactly that, aborting the whole test process.
    private func close(_ dealer: Socket, from queue: QueueHarness) {
        dealer.close()
        #expect(queue.wait(within: .seconds(10)) { _ in queue.connectedPeers.requesters == 0 })
    }

    @Test("a burst of ACKs twice a sender's default window reaches a reader that reads late, none dropped", .timeLimit(.minutes(10)))
    func windowArrivesWhole() throws {
        let commands = 8_192
        let queue = try QueueHarness(context: context, transport: .ipc) { _, _ in .accepted([]) }
        let dealer = try flood(queue, commands: commands)
        defer { close(dealer, from: queue) }
        var acknowledged = Set<UInt64>()
        while acknowledged.count < commands, let frames = try dealer.receive(timeout: .seconds(5)) {
            let acknowledgement = try CommandAcknowledgement.decode(frames)
            #expect(acknowledgement.status == .accepted)
            if let number = acknowledgement.commandID?.number { acknowledged.insert(number) }
        }
        #expect(acknowledged == Set(1...UInt64(commands)))
        #expect(queue.counters.repliesDropped == 0)
        #expect(queue.loopFailure == nil)
    }

    @Test("ACKs beyond the reply queue of a peer that never reads are dropped and counted; the queue goes on", .timeLimit(.minutes(10)))
    func overflowIsCounted() throws {
        let commands = 20_000
        let queue = try QueueHarness(context: context, transport: .ipc, configure: { $0.replyHighWaterMark = 10 }) { _, _ in .accepted([]) }
        let dealer = try flood(queue, commands: commands)
        defer { close(dealer, from: queue) }
        #expect(queue.wait { $0.repliesDropped > 0 })
        #expect(queue.counters.repliesDropped < commands)
        #expect(queue.loopFailure == nil)
    }
}
