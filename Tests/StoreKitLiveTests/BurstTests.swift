import Bus
import Foundation
import StoreKitModel
import Testing
import ZeroMQ

/// Issue 30: a burst of valid commands from many invented senders is shed with clear rejections
/// at the bounds, the store works its backlog off instead of exiting, and an honest client is
/// still answered. Scaled down (24 origins, not 200) so it runs in seconds.
@Suite(.serialized) struct BurstTests {
    @Test("a burst of payments from 24 invented origins: each device's payments beyond its bound are refused, an honest client is answered, and the run ends without a restart")
    func burstFromInventedOrigins() throws {
        let run = try LiveRunTests.BackgroundRun(topologyText: LiveRunTests.topology(devices: 2, purchases: 150, transport: "ipc", thinkMilliseconds: 20))
        let requests = "ipc://\(run.runDirectory.path)/r.ipc"
        #expect(run.waitForEvents(20), "the run did not get under way")
        let context = try ZeroMQContext()
        defer { context.terminate() }
        let origins = 24
        let paymentsPerOrigin = 1_100
        var senders: [CommandSender] = []
        defer { senders.forEach { $0.close() } }
        for index in 0..<origins {
            var configuration = CommandSenderConfiguration(origin: "invented-\(index)", requestsEndpoint: requests)
            configuration.giveUpAfter = .seconds(60)
            senders.append(try CommandSender(context: context, configuration: configuration))
        }
        var queued = senders.indices.map { index -> [CommandBody] in
            [.registerDevice(device: "burst-\(index)", account: "burst-\(index)"), .launchApp(device: "burst-\(index)")]
                + Array(repeating: .addPayment(device: "burst-\(index)", payment: Payment(productIdentifier: "com.example.sksim.coins.small")),
                        count: paymentsPerOrigin)
        }
        var accepted = 0
        var refusedAtBound = 0
        var otherAnswers: [String] = []
        var failures: [String] = []
        let deadline = Date().addingTimeInterval(120)
        while (queued.contains { !$0.isEmpty } || senders.contains { $0.outstandingCount > 0 }) && Date() < deadline {
            for (index, sender) in senders.enumerated() {
                // One sender's commands in order: a payment must not overtake its device's registration.
                var sent = 0
                while sent < queued[index].count && sender.hasCapacity {
                    try sender.submit(queued[index][sent])
                    sent += 1
                }
                queued[index].removeFirst(sent)
                for completion in try sender.poll(timeout: index == 0 ? .milliseconds(1) : .zero) {
                    switch completion {
                    case .acknowledged(let answer) where answer.status == .accepted: accepted += 1
                    case .acknowledged(let answer) where answer.message.contains("the most one device may hold"): refusedAtBound += 1
                    case .acknowledged(let answer): if otherAnswers.count < 5 { otherAnswers.append("\(answer.status): \(answer.message)") }
                    case .failed(_, let error): failures.append("\(error)")
                    }
                }
            }
        }
        #expect(failures.isEmpty, "\(failures.prefix(3))")
        #expect(refusedAtBound == origins * (paymentsPerOrigin - 1_000), "other answers: \(otherAnswers)")
        #expect(accepted == origins * (2 + 1_000))

        // An honest client is answered while the store works through 24,000 decisions.
        var honestConfiguration = CommandSenderConfiguration(origin: "honest", requestsEndpoint: requests)
        honestConfiguration.giveUpAfter = .seconds(10)
        let honest = try CommandSender(context: context, configuration: honestConfiguration)
        defer { honest.close() }
        let started = ContinuousClock.now
        try honest.submit(.registerDevice(device: "honest-device", account: "honest"))
        var answer: CommandCompletion?
        while answer == nil && ContinuousClock.now - started < .seconds(10) { answer = try honest.poll(timeout: .milliseconds(50)).first }
        guard case .acknowledged(let acknowledgement)? = answer else {
            Issue.record("the honest client was not answered: \(String(describing: answer))")
            return
        }
        #expect(acknowledgement.status == .accepted)

        let result = try #require(try run.wait(seconds: 120), "the run did not end within 120 s")
        #expect(result.failure == nil, "\(result.failure ?? "")")
        #expect(result.restarts.isEmpty, "\(result.restarts)")
    }
}
