import Bus
import EventLog
import Foundation
import StoreKitModel
import Testing
import ZeroMQ

/// Wire version 2 (docs/wire-format.md, "Version 2: batches"): the HELLO handshake, commands in
/// CMDS, answers in ACKS, events in one `all` message per publishing round; version-1 clients
/// served beside version-2 ones, and a version-2 client going on with version 1 against a queue
/// that does not know HELLO.
@Suite("Wire version 2: batches and the version handshake", .serialized)
struct WireVersionTests {
    let context: ZeroMQContext

    init() throws {
        context = try ZeroMQContext()
    }

    @Test("HELLO is answered with the versions the queue speaks, 1 and 2")
    func helloListsVersions() throws {
        let queue = try QueueHarness(context: context) { _, _ in .duplicate(lastSequence: 0) }
        let dealer = try context.socket(.dealer)
        defer { dealer.close() }
        try dealer.connect(queue.requestsEndpoint)
        let reply = try #require(try request(dealer, ["HELLO".bytes]))
        #expect(reply == ["HELLO".bytes, [1, 2]])
    }

    @Test("a version-2 sender and subscriber batch: 600 commands in fewer CMDS, their answers in fewer ACKS, the events in fewer messages",
          .timeLimit(.minutes(10)))
    func batchesEndToEnd() throws {
        let handler = DedupingHandler()
        let queue = try QueueHarness(context: context) { command, appender in try handler.handle(command, appender) }
        let subscriber = try EventSubscriber(
            context: context, configuration: EventSubscriberConfiguration(eventsEndpoint: queue.eventsEndpoint, requestsEndpoint: queue.requestsEndpoint))
        defer { subscriber.close() }
        let sender = try CommandSender(context: context, configuration: CommandSenderConfiguration(origin: "batcher", requestsEndpoint: queue.requestsEndpoint))
        defer { sender.close() }
        // The handshake: until the queue's HELLO reply the sender speaks version 1.
        let deadline = ContinuousClock.now + .seconds(10)
        while sender.wireVersion < 2, ContinuousClock.now < deadline { _ = try sender.poll(timeout: .milliseconds(10)) }
        #expect(sender.wireVersion == 2)
        #expect(try wait(for: subscriber) { subscriber.state == .live })

        var acknowledged: [CommandAcknowledgement] = []
        for round in 0..<3 {
            for index in 0..<200 { try sender.submit(.launchApp(device: "d\(round * 200 + index)")) }
            while acknowledged.count < (round + 1) * 200, ContinuousClock.now < deadline + .seconds(10) {
                for completion in try sender.poll(timeout: .milliseconds(10)) {
                    guard case .acknowledged(let acknowledgement) = completion else {
                        Issue.record("\(completion)")
                        continue
                    }
                    acknowledged.append(acknowledgement)
                }
            }
        }
        #expect(acknowledged.count == 600)
        #expect(acknowledged.allSatisfy { $0.status == .accepted })
        #expect(acknowledged.compactMap(\.commandID?.number) == Array(1...600), "answers in the sender's order")
        let events = try collect(subscriber, count: 600)
        #expect(events.map(\.sequence) == Array(1...600))
        #expect(events.map(\.event) == (0..<600).map { .appLaunched(device: "d\($0)") })
        #expect(handler.appliedCount == 600)

        // 200 commands submitted between two polls go in one CMDS: three in all, and one more per
        // round of retries (none unless the machine stalled the queue for a retry interval).
        let batches = sender.commandBatchesSent
        #expect(batches >= 3 && batches <= 3 + sender.retriesSent)
        #expect(queue.wait { $0.commandBatchesReceived == batches && $0.eventsPublished == 600 })
        let counters = queue.counters
        #expect(counters.acknowledgementBatchesSent >= 3 && counters.acknowledgementBatchesSent < 600)
        #expect(counters.eventBatchesPublished >= 1 && counters.eventBatchesPublished < 600)
        #expect(subscriber.counters.eventBatchesReceived >= 1 && subscriber.counters.eventBatchesReceived < 600)
        #expect(subscriber.counters.malformed.total == 0)
        #expect(queue.loopFailure == nil)
    }

    @Test("a version-1 client (CMD and a SUB on `evt.`) is answered and published to as before, beside a version-2 subscriber",
          .timeLimit(.minutes(10)))
    func version1BesideVersion2() throws {
        let queue = try QueueHarness(context: context) { command, appender in
            .accepted([try appender.append(.appLaunched(device: command.body.device), commandID: command.id, timestamp: 3)])
        }
        let batched = try EventSubscriber(
            context: context, configuration: EventSubscriberConfiguration(eventsEndpoint: queue.eventsEndpoint, requestsEndpoint: queue.requestsEndpoint))
        defer { batched.close() }
        let sub = try context.socket(.subscriber)
        defer { sub.close() }
        try sub.subscribe(to: "evt.")
        try sub.connect(queue.eventsEndpoint)
        let dealer = try context.socket(.dealer)
        defer { dealer.close() }
        try dealer.connect(queue.requestsEndpoint)
        // Both subscriptions are known to the queue once both streams carry an event.
        #expect(try wait(for: batched) { batched.state == .live })
        var number: UInt64 = 0
        var version1Event: [[UInt8]]?
        while version1Event == nil || batched.counters.eventBatchesReceived == 0, number < 200 {
            number += 1
            let command = Command(id: CommandID(origin: "v1", number: number), body: .launchApp(device: "old\(number)"))
            let reply = try #require(try request(dealer, ["CMD".bytes, EventCodec.encode(command)]))
            #expect(reply.count == 6 && reply[0] == "ACK".bytes)
            #expect(try CommandAcknowledgement.decode(reply).status == .accepted)
            version1Event = try sub.receive(timeout: .milliseconds(100)) ?? version1Event
            _ = try batched.receiveRecords(timeout: .milliseconds(10))
        }
        let message = try #require(version1Event)
        #expect(message.count == 3 && message[0].starts(with: "evt.old".bytes))
        #expect(try BusWire.decodeHeader(message[1]).kind == .event)
        #expect(batched.counters.eventBatchesReceived >= 1)
        let all = try collect(batched, count: Int(number) - batched.counters.delivered)
        #expect(batched.counters.delivered == Int(number), "\(all.count) more")
        #expect(queue.loopFailure == nil)
    }

    @Test("a sender offering version 2 to a queue that does not know HELLO goes on with version 1")
    func versionOneQueue() throws {
        // A version-1 queue, scripted: HELLO is an unknown verb; commands are answered with ACK.
        let router = try context.socket(.router)
        defer { router.close() }
        try router.bind("tcp://127.0.0.1:*")
        let sender = try CommandSender(context: context, configuration: CommandSenderConfiguration(origin: "modern", requestsEndpoint: try router.lastEndpoint))
        defer { sender.close() }
        let hello = try #require(try router.receive(timeout: .seconds(10)))
        #expect(hello.count == 2 && hello[1] == "HELLO".bytes)
        let refusal = CommandAcknowledgement(status: .malformed, commandID: nil, lastSequence: 0,
                                             message: "unknownVerb: unknown request verb (5 bytes); expected CMD, FETCH or PING")
        try router.send([hello[0]] + refusal.encodedFrames())
        let id = try sender.submit(.launchApp(device: "d"))
        _ = try sender.poll(timeout: .zero)
        let command = try #require(try router.receive(timeout: .seconds(10)))
        #expect(command.count == 3 && command[1] == "CMD".bytes, "a version-1 CMD, not a CMDS")
        #expect(try EventCodec.decodeCommand(command[2]).id == id)
        try router.send([command[0]] + CommandAcknowledgement(status: .accepted, commandID: id, lastSequence: 1, message: "").encodedFrames())
        var completions: [CommandCompletion] = []
        let deadline = ContinuousClock.now + .seconds(10)
        while completions.isEmpty, ContinuousClock.now < deadline { completions += try sender.poll(timeout: .milliseconds(10)) }
        #expect(completions == [.acknowledged(CommandAcknowledgement(status: .accepted, commandID: id, lastSequence: 1, message: ""))])
        #expect(sender.wireVersion == 1)
        #expect(sender.lateAcknowledgements == 0, "the refused HELLO is not a late answer")
        #expect(sender.malformed.total == 0)
    }

    @Test("a CMDS whose framing is wrong has no effect and is answered malformed in an ACKS; a good one is applied in order")
    func malformedBatches() throws {
        let handler = DedupingHandler()
        let queue = try QueueHarness(context: context) { command, appender in try handler.handle(command, appender) }
        let dealer = try context.socket(.dealer)
        defer { dealer.close() }
        try dealer.connect(queue.requestsEndpoint)
        func answers(_ body: [UInt8]) throws -> [CommandAcknowledgement] {
            let reply = try #require(try request(dealer, ["CMDS".bytes, body]))
            #expect(reply.count == 2 && reply[0] == "ACKS".bytes)
            return try reply[1].withUnsafeBytes { buffer in Result { () throws(WireFailure) in try BusWire.decodeAcknowledgements(buffer) } }.get()
        }
        func entry(_ number: UInt64) -> [UInt8] {
            var writer = BinaryWriter()
            writer.write(EventCodec.encode(Command(id: CommandID(origin: "raw", number: number), body: .launchApp(device: "d\(number)"))))
            return writer.bytes
        }
        // Count 2, but one entry and a stray byte: nothing of it is applied.
        let broken = try answers([2, 2] + entry(1) + [9])
        #expect(broken.count == 1 && broken[0].status == .malformed && broken[0].commandID == nil)
        #expect(broken[0].message.hasPrefix("malformedBody"))
        #expect(try answers([3, 1] + entry(1))[0].message.hasPrefix("unsupportedVersion"))
        #expect(try answers([2, 0])[0].message.hasPrefix("malformedBody"))
        #expect(handler.calls == 0)

        var good = try answers([2, 3] + entry(1) + entry(2) + entry(3))
        // The answers go out as the records become durable: in one ACKS, or in more.
        while good.count < 3, let more = try dealer.receive(timeout: .seconds(5)), more.count == 2 {
            good += try decodeAcknowledgements(more[1])
        }
        #expect(good.map(\.status) == [.accepted, .accepted, .accepted])
        #expect(good.map(\.commandID?.number) == [1, 2, 3])
        #expect(good.map(\.lastSequence) == [1, 2, 3])
        #expect(handler.appliedCount == 3)
    }

    @Test("a version-2 sender reports with each command what it had heard and its lowest unanswered number; a version-1 CMD reports nothing",
          .timeLimit(.minutes(10)))
    func senderReports() throws {
        let handler = DedupingHandler()
        let queue = try QueueHarness(context: context) { command, appender in try handler.handle(command, appender) }
        let sender = try CommandSender(context: context, configuration: CommandSenderConfiguration(origin: "hearer", requestsEndpoint: queue.requestsEndpoint))
        defer { sender.close() }
        let deadline = ContinuousClock.now + .seconds(10)
        while sender.wireVersion < 2, ContinuousClock.now < deadline { _ = try sender.poll(timeout: .milliseconds(10)) }
        #expect(sender.wireVersion == 2)
        var heard: [UInt64] = [7, 0]
        sender.heard = { heard }
        // Three commands between two polls, the sender hearing more after the second: one CMDS, two runs.
        let first = try sender.submit(.launchApp(device: "a"))
        let second = try sender.submit(.launchApp(device: "b"))
        heard = [9, 4]
        let third = try sender.submit(.launchApp(device: "c"))
        var answered = 0
        while answered < 3, ContinuousClock.now < deadline { answered += try sender.poll(timeout: .milliseconds(10)).count }
        #expect(answered == 3)
        #expect(queue.report(of: first) == SenderReport(heard: HeardSequences([7, 0]), lowestUnanswered: 1))
        #expect(queue.report(of: second) == SenderReport(heard: HeardSequences([7, 0]), lowestUnanswered: 1))
        #expect(queue.report(of: third) == SenderReport(heard: HeardSequences([9, 4]), lowestUnanswered: 1))
        // A plain CMD (version 1, the Python and C clients) carries no report: what its sender heard is unknown.
        let dealer = try context.socket(.dealer)
        defer { dealer.close() }
        try dealer.connect(queue.requestsEndpoint)
        let plain = Command(id: CommandID(origin: "plain", number: 1), body: .launchApp(device: "p"))
        let reply = try #require(try request(dealer, ["CMD".bytes, EventCodec.encode(plain)]))
        #expect(reply.first == "ACK".bytes)
        #expect(queue.report(of: plain.id) == .unknown)
    }

    @Test("a CMDS report whose runs do not cover the batch exactly, or with bytes after them, makes the batch malformed with no effect")
    func malformedReports() throws {
        let handler = DedupingHandler()
        let queue = try QueueHarness(context: context) { command, appender in try handler.handle(command, appender) }
        let dealer = try context.socket(.dealer)
        defer { dealer.close() }
        try dealer.connect(queue.requestsEndpoint)
        var body: [UInt8] = [2, 2]
        for number in UInt64(1)...2 {
            var writer = BinaryWriter()
            writer.write(EventCodec.encode(Command(id: CommandID(origin: "raw", number: number), body: .launchApp(device: "d\(number)"))))
            body += writer.bytes
        }
        func firstAnswer(_ report: [UInt8]) throws -> CommandAcknowledgement? {
            let reply = try #require(try request(dealer, ["CMDS".bytes, body, report]))
            return try decodeAcknowledgements(reply[1]).first
        }
        // Lowest unanswered 0, one partition, then: a run of 1 (one command uncovered); a run of 3; runs of 2 and a stray byte.
        for report: [UInt8] in [[0, 1, 1, 5], [0, 1, 3, 5], [0, 1, 2, 5, 9]] {
            let answer = try firstAnswer(report)
            #expect(answer?.status == .malformed && answer?.commandID == nil, "\(report): \(String(describing: answer))")
        }
        #expect(handler.calls == 0)
        // No heard sequences (P = 0) with a lowest unanswered number: applied.
        let answer = try firstAnswer([1, 0])
        #expect(answer?.status == .accepted)
        #expect(queue.report(of: CommandID(origin: "raw", number: 2)) == SenderReport(lowestUnanswered: 1))
    }

    @Test("ACKS and event batch bodies decode to what was encoded; a batch refuses trailing bytes and sequences that do not ascend")
    func batchBodies() throws {
        let acknowledgements = [
            CommandAcknowledgement(status: .accepted, commandID: CommandID(origin: "o", number: 300), lastSequence: 1 << 40, message: ""),
            CommandAcknowledgement(status: .malformed, commandID: nil, lastSequence: 0, message: "unknownVerb: é"),
        ]
        // ACKS: version 2, count 2, then each entry (status, commandID?, last sequence, message).
        var body: [UInt8] = [2, 2]
        body += [0, 1, 1, 0x6F] + [0xAC, 0x02] + [0x80, 0x80, 0x80, 0x80, 0x80, 0x20] + [0]
        body += [3, 0, 0] + [UInt8(Array("unknownVerb: é".utf8).count)] + Array("unknownVerb: é".utf8)
        #expect(try decodeAcknowledgements(body) == acknowledgements)
        #expect(throws: WireFailure.self) { try decodeAcknowledgements(body + [0]) }

        let records = [BusRecord(sequence: 7, timestamp: -2, payload: [1, 2], device: "d1"),
                       BusRecord(sequence: 8, timestamp: 5, payload: [], device: nil)]
        // Events: version 2, count 2, then sequence, timestamp (zigzag), device (empty: none), payload.
        let batch: [UInt8] = [2, 2, 7, 3, 2] + "d1".bytes + [2, 1, 2, 8, 10, 0, 0]
        #expect(try decodeEventBatch(batch) == records)
        #expect(throws: WireFailure.self) { try decodeEventBatch([2, 2, 8, 3, 0, 0, 7, 10, 0, 0]) }
        #expect(throws: WireFailure.self) { try decodeEventBatch(batch + [1]) }
    }

    private func decodeAcknowledgements(_ body: [UInt8]) throws -> [CommandAcknowledgement] {
        try body.withUnsafeBytes { buffer in Result { () throws(WireFailure) in try BusWire.decodeAcknowledgements(buffer) } }.get()
    }

    private func decodeEventBatch(_ body: [UInt8]) throws -> [BusRecord] {
        try body.withUnsafeBytes { buffer in Result { () throws(WireFailure) in try BusWire.decodeEventBatch(buffer) } }.get()
    }
}
