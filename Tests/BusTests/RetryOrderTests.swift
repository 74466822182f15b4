import Bus
import Foundation
import StoreKitModel
import Testing
import ZeroMQ

/// A sender's retries reach a restarted queue in command order: a payment must never arrive
/// before the registration of its device (found by scripts/soak: after a queue kill, retries in
/// hash order were rejected as `unknownDevice` and the run stalled).
@Suite struct RetryOrderTests {
    @Test("a retry resends every unacknowledged command up to the last one due, in number order")
    func retriesInOrder() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sksim-retry-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let context = try ZeroMQContext()
        defer { context.terminate() }
        // A queue that takes commands and never acknowledges them (it lost them: a restart).
        let router = try context.socket(.router)
        defer { router.close() }
        let endpoint = "ipc://\(directory.path)/r.ipc"
        try router.bind(endpoint)
        var configuration = CommandSenderConfiguration(origin: "app.1", requestsEndpoint: endpoint)
        configuration.retryInterval = .milliseconds(30)
        configuration.maximumRetryInterval = .seconds(1)
        let sender = try CommandSender(context: context, configuration: configuration)
        defer { sender.close() }

        var received: [UInt64] = []
        func pump(until count: Int) throws {
            let deadline = ContinuousClock.now + .seconds(10)
            while received.count < count && ContinuousClock.now < deadline {
                _ = try sender.poll(timeout: .zero)
                if let message = try router.receive(timeout: .milliseconds(5)), message.count == 3 {
                    received.append(try EventCodec.decodeCommand(message[2]).id.number)
                }
            }
        }
        _ = try sender.submit(.registerDevice(device: "d", account: "a"))
        try pump(until: 2)  // its first send and first retry: its interval is now twice the others'
        #expect(received == [1, 1])
        _ = try sender.submit(.launchApp(device: "d"))
        _ = try sender.submit(.addPayment(device: "d", payment: Payment(productIdentifier: "p")))
        try pump(until: 4)
        #expect(Array(received.suffix(2)) == [2, 3])
        // Commands 2 and 3 fall due before command 1 does: all three go again, 1 first.
        try pump(until: 7)
        #expect(Array(received.suffix(3)) == [1, 2, 3], "retries must keep the sender's order: \(received)")
    }
}
