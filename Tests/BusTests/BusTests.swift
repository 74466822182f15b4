import Bus
import EventLog
import Foundation
import StoreKitModel
import Synchronization
import Testing
import ZeroMQ

@Suite("Bus over real ZeroMQ sockets", .serialized)
struct BusTests {
    let context: ZeroMQContext

    init() throws {
        context = try ZeroMQContext()
    }

    // MARK: Publish and subscribe

    @Test("events published after durable appends arrive decoded and equal", .timeLimit(.minutes(10)), arguments: Transport.allCases)
    func roundTrip(transport: Transport) throws {
        let queue = try QueueHarness(context: context, transport: transport) { command, appender in
            .accepted([try appender.append(.appLaunched(device: command.body.device), commandID: command.id, timestamp: 7)])
        }
        if transport == .tcp { #expect(queue.eventsEndpoint.hasPrefix("tcp://127.0.0.1:") && !queue.eventsEndpoint.hasSuffix(":*")) }
        let subscriber = try EventSubscriber(
            context: context,
            configuration: EventSubscriberConfiguration(eventsEndpoint: queue.eventsEndpoint, requestsEndpoint: queue.requestsEndpoint))
        #expect(try wait(for: subscriber) { subscriber.state == .live })
        queue.appendEvents(20)
        let events = try collect(subscriber, count: 20)
        let expected = try PartitionReader(directory: queue.directory, partition: "queue").records().map { record in
            let decoded = try EventCodec.decodeEvent(record.payload)
            return RecordedEvent(sequence: record.sequence, timestamp: record.timestampNanoseconds, commandID: decoded.commandID, event: decoded.event)
        }
        #expect(events.count == 20)
        #expect(events == expected)
        #expect(events.map(\.event) == (0..<20).map(sampleEvent))
        #expect(events.map(\.sequence) == Array(1...20))
        #expect(subscriber.counters.delivered == 20)
        // The harness's counters are a snapshot taken after each of the endpoint's steps: the events
        // can reach the subscriber before the step that published them has ended.
        #expect(queue.wait { $0.eventsPublished == 20 })
        #expect(queue.loopFailure == nil)
    }

    @Test("the allocation-free encoders write the wire's frames: an event's topic, header and payload, and an ACK's six frames")
    func composedFramesMatchTheWire() {
        var message = OutgoingMessage()
        for record in [BusRecord(sequence: 42, timestamp: -7, payload: [1, 2, 3], device: "device-1"),
                       BusRecord(sequence: 1, timestamp: 0, payload: [], device: nil)] {
            message.removeAll()
            BusWire.appendEvent(record, to: &message)
            #expect(message.bytes == BusWire.eventTopic(device: record.device)
                + BusWire.encodeHeader(BusWire.Header(kind: .event, sequence: record.sequence, timestamp: record.timestamp)) + record.payload)
            #expect(message.frameCount == 3)
        }
        for acknowledgement in [CommandAcknowledgement(status: .rejected, commandID: CommandID(origin: "o", number: 9), lastSequence: 5, message: "why"),
                                CommandAcknowledgement(status: .malformed, commandID: nil, lastSequence: 0, message: "")] {
            message.removeAll()
            acknowledgement.appendFrames(to: &message)
            #expect(message.bytes == acknowledgement.encodedFrames().flatMap { $0 })
            #expect(message.frameCount == 6)
        }
    }

    @Test("a late joiner receives the 500 events published before it started, in order", .timeLimit(.minutes(10)))
    func lateJoiner() throws {
        let queue = try QueueHarness(context: context) { _, _ in .duplicate(lastSequence: 0) }
        queue.appendEvents(500)
        try #require(queue.wait(within: .seconds(30)) { $0.eventsPublished == 500 })

        let subscriber = try EventSubscriber(
            context: context,
            configuration: EventSubscriberConfiguration(eventsEndpoint: queue.eventsEndpoint, requestsEndpoint: queue.requestsEndpoint))
        let events = try collect(subscriber, count: 500)
        #expect(events.map(\.sequence) == Array(1...500))
        #expect(events.map(\.event) == (0..<500).map(sampleEvent))
        #expect(subscriber.counters.fetchesSent >= 1)
        // Catch-up is not a gap.
        #expect(subscriber.counters.gapsRecovered == 0)
    }

    @Test("a late joiner starting mid-log is served from the log on disk, not from memory", .timeLimit(.minutes(10)))
    func fetchFromDisk() throws {
        let queue = try QueueHarness(context: context, configure: { $0.recentRecordCapacity = 100 }) { _, _ in .duplicate(lastSequence: 0) }
        queue.appendEvents(1_000)
        // All published before the subscriber starts, so sequence 401 has left the 100 kept in memory.
        try #require(queue.wait(within: .seconds(30)) { $0.eventsPublished == 1_000 })
        var configuration = EventSubscriberConfiguration(eventsEndpoint: queue.eventsEndpoint, requestsEndpoint: queue.requestsEndpoint)
        configuration.startSequence = 401
        let subscriber = try EventSubscriber(context: context, configuration: configuration)
        let events = try collect(subscriber, count: 600)
        #expect(events.map(\.sequence) == Array(401...1_000))
        #expect(events.map(\.event) == (400..<1_000).map(sampleEvent))
        #expect(queue.wait { $0.fetchesReadFromLog >= 1 })
        #expect(queue.counters.fetchReadFailures == 0)
    }

    @Test("a slow subscriber past its high-water mark recovers all 5,000 events in order", .timeLimit(.minutes(10)))
    func slowSubscriber() throws {
        let queue = try QueueHarness(context: context, transport: .ipc, configure: { $0.sendHighWaterMark = 10 }) { _, _ in
            .duplicate(lastSequence: 0)
        }
        var configuration = EventSubscriberConfiguration(eventsEndpoint: queue.eventsEndpoint, requestsEndpoint: queue.requestsEndpoint)
        configuration.receiveHighWaterMark = 10
        // One message per event (version 1): 5,000 of them overflow the high-water marks, where version 2's few batches would not.
        configuration.newestWireVersion = 1
        let subscriber = try EventSubscriber(context: context, configuration: configuration)
        #expect(try wait(for: subscriber) { subscriber.state == .live })

        queue.appendEvents(5_000)
        try #require(queue.wait(within: .seconds(30)) { $0.eventsPublished == 5_000 })

        let events = try collect(subscriber, count: 5_000, within: .seconds(30))
        #expect(events.count == 5_000)
        #expect(events.map(\.sequence) == Array(1...5_000))
        #expect(events.map(\.event) == (0..<5_000).map(sampleEvent))
        #expect(subscriber.counters.gapsRecovered > 0)
        #expect(subscriber.counters.delivered == 5_000)
    }

    // MARK: Commands

    @Test("the same command id sent twice, or retried after a lost ACK, takes effect once", .timeLimit(.minutes(10)))
    func duplicateCommands() throws {
        let handler = DedupingHandler()
        let queue = try QueueHarness(context: context) { command, appender in try handler.handle(command, appender) }

        let dealer = try context.socket(.dealer)
        try dealer.connect(queue.requestsEndpoint)
        let command = Command(id: CommandID(origin: "raw", number: 1), body: .launchApp(device: "d1"))
        let payload = EventCodec.encode(command)
        let first = try #require(try request(dealer, ["CMD".bytes, payload]))
        let second = try #require(try request(dealer, ["CMD".bytes, payload]))
        let firstAcknowledgement = try CommandAcknowledgement.decode(first)
        let secondAcknowledgement = try CommandAcknowledgement.decode(second)
        #expect(firstAcknowledgement == CommandAcknowledgement(status: .accepted, commandID: command.id, lastSequence: 1, message: ""))
        #expect(secondAcknowledgement == CommandAcknowledgement(status: .duplicate, commandID: command.id, lastSequence: 1, message: ""))

        // Stall the queue longer than the sender's retry interval: the first ACK is late, so the sender re-sends.
        var configuration = CommandSenderConfiguration(origin: "sender", requestsEndpoint: queue.requestsEndpoint)
        configuration.retryInterval = .milliseconds(40)
        configuration.maximumRetryInterval = .milliseconds(40)
        let sender = try CommandSender(context: context, configuration: configuration)
        queue.stall(for: .milliseconds(300))
        let id = try sender.submit(.launchApp(device: "d2"))
        var completions: [CommandCompletion] = []
        let deadline = ContinuousClock.now + .seconds(20)
        while completions.isEmpty, ContinuousClock.now < deadline { completions += try sender.poll(timeout: .milliseconds(20)) }
        #expect(completions == [.acknowledged(CommandAcknowledgement(status: .accepted, commandID: id, lastSequence: 2, message: ""))])
        #expect(sender.retriesSent >= 2)
        // The retries reach the queue too and are answered as duplicates, which the sender ignores.
        let lateDeadline = ContinuousClock.now + .seconds(10)
        while sender.lateAcknowledgements == 0, ContinuousClock.now < lateDeadline { _ = try sender.poll(timeout: .milliseconds(20)) }
        #expect(sender.lateAcknowledgements >= 1)
        #expect(handler.calls >= 4)
        #expect(handler.appliedCount == 2)
        try queue.writer.flush()
        let logged = try PartitionReader(directory: queue.directory, partition: "queue").records()
        #expect(logged.count == 2)
    }

    @Test("many commands in flight at once are all acknowledged, in a bounded window", .timeLimit(.minutes(10)))
    func pipelining() throws {
        let handler = DedupingHandler()
        let queue = try QueueHarness(context: context) { command, appender in try handler.handle(command, appender) }
        var configuration = CommandSenderConfiguration(origin: "pipeline", requestsEndpoint: queue.requestsEndpoint)
        configuration.window = 64
        let sender = try CommandSender(context: context, configuration: configuration)
        var acknowledged = Set<UInt64>()
        var submitted = 0
        var sawFullWindow = false
        let deadline = ContinuousClock.now + .seconds(30)
        while acknowledged.count < 1_000, ContinuousClock.now < deadline {
            while submitted < 1_000, sender.hasCapacity {
                try sender.submit(.launchApp(device: "d\(submitted % 7)"))
                submitted += 1
            }
            if submitted < 1_000 {
                sawFullWindow = true
                #expect(throws: CommandSenderError.windowFull(window: 64)) { try sender.submit(.launchApp(device: "x")) }
            }
            for completion in try sender.poll(timeout: .milliseconds(50)) {
                guard case .acknowledged(let acknowledgement) = completion else { Issue.record("\(completion)"); continue }
                #expect(acknowledgement.status == .accepted)
                acknowledged.insert(acknowledgement.commandID?.number ?? 0)
            }
        }
        #expect(acknowledged == Set(1...1_000))
        #expect(sawFullWindow)
        #expect(handler.appliedCount == 1_000)
    }

    @Test("a sender answered \"duplicate\" for a command it sent once says another client used its id", .timeLimit(.minutes(10)))
    func duplicateOfUnsentCommandFails() throws {
        let handler = DedupingHandler()
        let queue = try QueueHarness(context: context) { command, appender in try handler.handle(command, appender) }
        // A forger who read the victim's origin (events are readable by anyone) sends its next id first.
        let forger = try context.socket(.dealer)
        defer { forger.close() }
        try forger.connect(queue.requestsEndpoint)
        let forged = Command(id: CommandID(origin: "victim.7", number: 1), body: .launchApp(device: "elsewhere"))
        try forger.send([Array(BusWire.RequestVerb.command.rawValue.utf8), EventCodec.encode(forged)])
        let forgedAnswer = try #require(try forger.receive(timeout: .seconds(5)))
        #expect(try CommandAcknowledgement.decode(forgedAnswer).status == .accepted)

        let sender = try CommandSender(context: context, configuration: CommandSenderConfiguration(origin: "victim.7", requestsEndpoint: queue.requestsEndpoint))
        let first = try sender.submit(.launchApp(device: "mine"))
        let second = try sender.submit(.launchApp(device: "mine"))
        var completions: [CommandCompletion] = []
        let deadline = ContinuousClock.now + .seconds(20)
        while completions.count < 2, ContinuousClock.now < deadline { completions += try sender.poll(timeout: .milliseconds(50)) }
        #expect(completions.count == 2)
        for completion in completions {
            switch completion {
            case .failed(let id, let error):
                #expect(id == first)
                #expect(error == .duplicateOfUnsentCommand(commandID: first, endpoint: queue.requestsEndpoint))
                #expect(error.description.contains("although this sender sent it only once"))
            case .acknowledged(let acknowledgement):
                // Its next command, which nobody forged, is applied as usual.
                #expect(acknowledgement.commandID == second)
                #expect(acknowledgement.status == .accepted)
            }
        }
        #expect(handler.appliedCount == 2)
    }

    @Test("a sender with no queue retries, then gives up with a clear error", .timeLimit(.minutes(10)))
    func senderGivesUp() throws {
        let endpoint = "ipc:///tmp/bus-nobody-\(UUID().uuidString.prefix(8)).ipc"
        var configuration = CommandSenderConfiguration(origin: "lonely", requestsEndpoint: endpoint)
        configuration.retryInterval = .milliseconds(20)
        configuration.maximumRetryInterval = .milliseconds(80)
        configuration.giveUpAfter = .milliseconds(400)
        let sender = try CommandSender(context: context, configuration: configuration)
        let id = try sender.submit(.launchApp(device: "d"))
        #expect(id == CommandID(origin: "lonely", number: 1))
        var completions: [CommandCompletion] = []
        let start = ContinuousClock.now
        while completions.isEmpty, ContinuousClock.now - start < .seconds(15) { completions += try sender.poll(timeout: .milliseconds(50)) }
        let elapsed = ContinuousClock.now - start
        // It gives up after its bound, not never: the upper limit is loose for a loaded machine.
        #expect(elapsed >= .milliseconds(400) && elapsed < .seconds(10))
        let completion = try #require(completions.first)
        guard case .failed(let failedID, let error) = completion, case .notAcknowledged(_, _, let attempts, _) = error else {
            Issue.record("expected a give-up, got \(completion)")
            return
        }
        #expect(failedID == id)
        #expect(attempts >= 4)
        let text = error.description
        #expect(text.hasPrefix("the queue at \(endpoint) did not acknowledge command lonely:1 after \(attempts) attempts over 0."))
        #expect(text.hasSuffix(" s; is it running?"))
        #expect(sender.outstandingCount == 0)
    }

    // MARK: Malformed input

    @Test("garbage requests are refused with a reason, counted, and never reach the log", .timeLimit(.minutes(10)))
    func garbageRequests() throws {
        let handler = DedupingHandler()
        let queue = try QueueHarness(context: context) { command, appender in try handler.handle(command, appender) }
        let dealer = try context.socket(.dealer)
        try dealer.connect(queue.requestsEndpoint)

        func malformedReply(_ frames: [[UInt8]]) throws -> CommandAcknowledgement? {
            guard let reply = try request(dealer, frames) else { return nil }
            let acknowledgement = try CommandAcknowledgement.decode(reply)
            #expect(acknowledgement.status == .malformed)
            return acknowledgement
        }
        var generator = SystemRandomNumberGenerator()
        let random = (0..<64).map { _ in UInt8.random(in: 0...255, using: &generator) }
        #expect(try malformedReply([random])?.message.hasPrefix("unknownVerb") == true)
        #expect(try malformedReply(["HOLA".bytes, [1, 2, 3]])?.message.hasPrefix("unknownVerb") == true)
        #expect(try malformedReply(["FETCH".bytes, [1, 2, 3, 4, 5]])?.message.hasPrefix("malformedBody") == true)
        #expect(try malformedReply(["CMD".bytes])?.message.hasPrefix("wrongFrameCount") == true)

        var wrongVersion = EventCodec.encode(Command(id: CommandID(origin: "bad", number: 9), body: .launchApp(device: "d")))
        wrongVersion[0] = EventCodec.formatVersion + 1
        let versionReply = try malformedReply(["CMD".bytes, wrongVersion])
        #expect(versionReply?.message.hasPrefix("unsupportedVersion") == true)

        var undecodable = EventCodec.encode(Command(id: CommandID(origin: "bad", number: 10), body: .launchApp(device: "d")))
        undecodable.append(contentsOf: [0xFF, 0xFF])
        let undecodableReply = try malformedReply(["CMD".bytes, undecodable])
        #expect(undecodableReply?.message.hasPrefix("undecodablePayload") == true)
        // The id is echoed when it could be read, so the sender stops retrying.
        #expect(undecodableReply?.commandID == CommandID(origin: "bad", number: 10))

        let tooLarge = EventCodec.encode(Command(
            id: CommandID(origin: "bad", number: 11), body: .completeDownload(DownloadKey(transaction: TransactionKey(device: "d", number: 1), index: 0),
                                                                           contentURL: String(repeating: "u", count: 65_600))))
        #expect(try malformedReply(["CMD".bytes, tooLarge])?.message.hasPrefix("commandTooLarge") == true)
        // Beyond the receive limits the message is drained unread: nobody to answer, only counted.
        #expect(try request(dealer, ["CMD".bytes, [UInt8](repeating: 7, count: 200_000)], within: .milliseconds(300)) == nil)

        // The queue still works.
        let pong = try #require(try request(dealer, ["PING".bytes]))
        #expect(pong.count == 3 && pong[0] == "PONG".bytes && pong[1] == "queue".bytes && pong[2] == [UInt8](repeating: 0, count: 8))
        let valid = Command(id: CommandID(origin: "good", number: 1), body: .launchApp(device: "d"))
        let accepted = try CommandAcknowledgement.decode(try #require(try request(dealer, ["CMD".bytes, EventCodec.encode(valid)])))
        #expect(accepted.status == .accepted && accepted.lastSequence == 1)

        let counters = queue.counters
        #expect(counters.refused[.unknownVerb] == 2)
        #expect(counters.refused[.malformedBody] == 1)
        #expect(counters.refused[.wrongFrameCount] == 1)
        #expect(counters.refused[.unsupportedVersion] == 1)
        #expect(counters.refused[.undecodablePayload] == 1)
        #expect(counters.refused[.commandTooLarge] == 1)
        #expect(counters.refused[.oversized] == 1)
        #expect(counters.refused.total == 8)
        // Reports are rate-limited per reason: the second unknown verb came within the second.
        #expect(queue.refusals.count == 7)
        #expect(counters.refusalReportsSkipped == 1)
        #expect(handler.calls == 1)
        try queue.writer.flush()
        #expect(try PartitionReader(directory: queue.directory, partition: "queue").records().count == 1)
        #expect(queue.loopFailure == nil)
    }

    @Test("a subscriber refuses malformed published messages and still delivers good ones", .timeLimit(.minutes(10)))
    func garbagePublished() throws {
        let publisher = try context.socket(.publisher)
        try publisher.bind("tcp://127.0.0.1:*")
        let router = try context.socket(.router)
        try router.bind("tcp://127.0.0.1:*")
        var configuration = EventSubscriberConfiguration(eventsEndpoint: try publisher.lastEndpoint, requestsEndpoint: try router.lastEndpoint)
        configuration.startSequence = 1
        let subscriber = try EventSubscriber(context: context, configuration: configuration)
        // Answer the initial FETCH with an empty batch so the subscriber is caught up.
        let fetch = try #require(try router.receive(timeout: .seconds(10)))
        #expect(fetch.count == 3 && fetch[1] == "FETCH".bytes && fetch[2] == BusWire.encodeFetch(from: 1, maximumCount: 1_000))
        var batchHeader: [UInt8] = []
        BusWire.appendLittleEndian(UInt64(1), to: &batchHeader)
        BusWire.appendLittleEndian(UInt32(0), to: &batchHeader)
        BusWire.appendLittleEndian(UInt64(0), to: &batchHeader)
        try router.send([fetch[0], "BATCH".bytes, batchHeader])
        #expect(try wait(for: subscriber) { subscriber.state == .live })

        let payload = EventCodec.encode(sampleEvent(1), commandID: nil)
        let good = BusWire.encodeHeader(BusWire.Header(kind: .event, sequence: 1, timestamp: 5))
        var wrongVersion = good
        wrongVersion[0] = 9
        var unknownKind = good
        unknownKind[1] = 7
        try publisher.send(["evt.d".bytes, Array(good.prefix(10)), payload])
        try publisher.send(["evt.d".bytes, wrongVersion, payload])
        try publisher.send(["evt.d".bytes, unknownKind, payload])
        try publisher.send(["evt.d".bytes, good])
        try publisher.send(["evt.d".bytes, good, payload])
        let events = try collect(subscriber, count: 1, within: .seconds(10))
        #expect(events.map(\.event) == [sampleEvent(1)])
        let malformed = subscriber.counters.malformed
        #expect(malformed[.truncatedHeader] == 1)
        #expect(malformed[.unsupportedVersion] == 1)
        #expect(malformed[.unknownKind] == 1)
        #expect(malformed[.wrongFrameCount] == 1)
        #expect(malformed.total == 4)
    }

    // MARK: Liveness and security

    @Test("a dead publisher is reported within the silence timeout; heartbeats keep a live one live", .timeLimit(.minutes(10)))
    func deadPublisher() throws {
        let queue = try QueueHarness(context: context) { _, _ in .duplicate(lastSequence: 0) }
        var configuration = EventSubscriberConfiguration(eventsEndpoint: queue.eventsEndpoint, requestsEndpoint: queue.requestsEndpoint)
        // Twenty heartbeat intervals (50 ms in the harness): a loaded machine that delays a few
        // heartbeats must not make a live publisher look dead.
        configuration.silenceTimeout = .seconds(1)
        let subscriber = try EventSubscriber(context: context, configuration: configuration)
        let changes = Locked<[EventSubscriberState]>([])
        subscriber.onStateChange = { state in changes.withLock { $0.append(state) } }
        #expect(try wait(for: subscriber) { subscriber.state == .live })
        // Idle for twice the silence timeout: heartbeats alone keep it live.
        #expect(try !wait(for: subscriber, within: .seconds(2)) { subscriber.state != .live })

        queue.stop()
        let stoppedAt = ContinuousClock.now
        #expect(try wait(for: subscriber, within: .seconds(10)) { subscriber.state == .publisherSilent })
        let noticedAfter = ContinuousClock.now - stoppedAt
        #expect(noticedAfter < .seconds(5))
        #expect(changes.withLock { $0 } == [.live, .publisherSilent])
    }

    @Test("with CURVE, the right server key receives events and a wrong one receives nothing", .timeLimit(.minutes(10)))
    func curve() throws {
        let server = try CurveKeyPair.generate()
        let queue = try QueueHarness(context: context, configure: { $0.curveServerSecretKey = server.secretKey }) { command, appender in
            .accepted([try appender.append(.appLaunched(device: command.body.device), commandID: command.id, timestamp: 1)])
        }
        var trusted = EventSubscriberConfiguration(eventsEndpoint: queue.eventsEndpoint, requestsEndpoint: queue.requestsEndpoint)
        trusted.curve = CurveClientKeys(serverPublicKey: server.publicKey, clientKeyPair: try CurveKeyPair.generate())
        var impostor = trusted
        impostor.curve = CurveClientKeys(serverPublicKey: try CurveKeyPair.generate().publicKey, clientKeyPair: try CurveKeyPair.generate())
        impostor.silenceTimeout = .milliseconds(500)
        var plain = trusted
        plain.curve = nil
        let trustedSubscriber = try EventSubscriber(context: context, configuration: trusted)
        let impostorSubscriber = try EventSubscriber(context: context, configuration: impostor)
        let plainSubscriber = try EventSubscriber(context: context, configuration: plain)

        var senderConfiguration = CommandSenderConfiguration(origin: "curve", requestsEndpoint: queue.requestsEndpoint)
        senderConfiguration.curve = trusted.curve
        let sender = try CommandSender(context: context, configuration: senderConfiguration)
        try sender.submit(.launchApp(device: "secure"))
        var completions: [CommandCompletion] = []
        let deadline = ContinuousClock.now + .seconds(20)
        while completions.isEmpty, ContinuousClock.now < deadline { completions += try sender.poll(timeout: .milliseconds(20)) }
        #expect(completions.first.map { if case .acknowledged(let ack) = $0 { ack.status == .accepted } else { false } } == true)

        let events = try collect(trustedSubscriber, count: 1)
        #expect(events.map(\.event) == [.appLaunched(device: "secure")])
        #expect(try collect(impostorSubscriber, count: 1, within: .milliseconds(700)).isEmpty)
        #expect(impostorSubscriber.state == .publisherSilent)
        #expect(try collect(plainSubscriber, count: 1, within: .milliseconds(300)).isEmpty)
    }

    // MARK: Wire format

    @Test("the record header is 24 bytes: version, kind, six zero bytes, sequence and timestamp little-endian")
    func headerLayout() throws {
        let header = BusWire.encodeHeader(BusWire.Header(kind: .heartbeat, sequence: 0x0102_0304_0506_0708, timestamp: -2))
        #expect(header == [1, 2, 0, 0, 0, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1, 0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF])
        #expect(try BusWire.decodeHeader(header) == BusWire.Header(kind: .heartbeat, sequence: 0x0102_0304_0506_0708, timestamp: -2))
        var reserved = header
        reserved[5] = 1
        #expect(throws: WireFailure.self) { try BusWire.decodeHeader(reserved) }
        #expect(BusWire.eventTopic(device: nil) == "evt.*".bytes)
        #expect(BusWire.eventTopic(device: "phone") == "evt.phone".bytes)
        #expect(BusWire.encodeFetch(from: 258, maximumCount: 3) == [2, 1, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0])
    }
}
