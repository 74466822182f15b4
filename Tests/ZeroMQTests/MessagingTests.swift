import Foundation
import Testing
import ZeroMQ

@Suite("Messaging over real sockets", .serialized)
struct MessagingTests {
    let context: ZeroMQContext

    init() throws {
        context = try ZeroMQContext()
    }

    @Test("the linked libzmq reports a 4.x version", .timeLimit(.minutes(10)))
    func versionIsReported() {
        #expect(ZeroMQ.version >= ZeroMQVersion(major: 4, minor: 0, patch: 0))
        #expect(ZeroMQ.hasCapability("no-such-capability") == false)
    }

    @Test("PUB/SUB delivers multipart messages intact", .timeLimit(.minutes(10)), arguments: Transport.allCases)
    func publishSubscribeMultipart(transport: Transport) throws {
        let publisher = try context.socket(.publisher)
        let subscriber = try context.socket(.subscriber)
        let endpoint = try bind(publisher, on: transport)
        if transport == .tcp { #expect(endpoint.hasPrefix("tcp://127.0.0.1:") && !endpoint.hasSuffix(":*")) }
        try subscriber.subscribe(to: "prices")
        try subscriber.connect(endpoint)

        let large = (0..<100_000).map { UInt8(truncatingIfNeeded: $0) }
        let message: [[UInt8]] = ["prices".bytes, "EURUSD".bytes, [], large]
        let first = try publishUntilReceived(message, from: publisher, to: subscriber)
        #expect(first == message)
        try drain(subscriber)

        try publisher.send(message)
        #expect(try subscriber.receive(timeout: .seconds(10)) == message)
    }

    @Test("a message composed in a reused OutgoingMessage arrives with the same frames as the array form", .timeLimit(.minutes(10)))
    func outgoingMessageFrames() throws {
        let dealer = try context.socket(.dealer)
        let router = try context.socket(.router)
        let endpoint = try bind(router, on: .ipc)
        try dealer.connect(endpoint)
        var message = OutgoingMessage()
        for round in 0..<3 {
            // Reused: each round replaces the previous message, empty frames included.
            message.removeAll()
            message.appendFrame("verb".bytes)
            message.appendFrame([UInt8]())
            message.appendFrame(littleEndian: UInt64(round))
            message.appendFrame { $0.append(contentsOf: repeatElement(UInt8(round), count: 100 * round)) }
            #expect(message.frameCount == 4)
            #expect(try dealer.send(message))
            let received = try #require(try router.receive(timeout: .seconds(10)))
            #expect(Array(received.dropFirst()) == ["verb".bytes, [], withUnsafeBytes(of: UInt64(round).littleEndian) { Array($0) },
                                                    [UInt8](repeating: UInt8(round), count: 100 * round)])
        }
        #expect(throws: ZeroMQError.self) { try dealer.send(OutgoingMessage()) }
    }

    @Test("SUB receives only topics matching its prefix", .timeLimit(.minutes(10)), arguments: Transport.allCases)
    func subscriptionFiltering(transport: Transport) throws {
        let publisher = try context.socket(.publisher)
        let subscriber = try context.socket(.subscriber)
        let endpoint = try bind(publisher, on: transport)
        try subscriber.subscribe(to: "alpha")
        try subscriber.connect(endpoint)
        #expect(try publishUntilReceived(["alpha.warmup".bytes], from: publisher, to: subscriber) != nil)
        try drain(subscriber)

        try publisher.send(["beta".bytes, "skipped".bytes])
        try publisher.send(["alphabet".bytes, "kept".bytes])
        #expect(try subscriber.receive(timeout: .seconds(10)) == ["alphabet".bytes, "kept".bytes])
        #expect(try subscriber.receive(timeout: .milliseconds(100)) == nil)

        try subscriber.unsubscribe(from: "alpha")
        try subscriber.subscribe(to: "beta")
        #expect(try publishUntilReceived(["beta.2".bytes], from: publisher, to: subscriber) == ["beta.2".bytes])
    }

    @Test("ROUTER and DEALER exchange request and reply by routing id", .timeLimit(.minutes(10)), arguments: Transport.allCases)
    func routerDealer(transport: Transport) throws {
        let router = try context.socket(.router)
        let dealer = try context.socket(.dealer)
        try router.set(.routerMandatory, true)
        let endpoint = try bind(router, on: transport)
        try dealer.set(.routingID, "worker-1".bytes)
        #expect(try dealer.get(.routingID) == "worker-1".bytes)
        try dealer.connect(endpoint)

        try dealer.send(["hello".bytes, "world".bytes])
        #expect(try router.receive(timeout: .seconds(10)) == ["worker-1".bytes, "hello".bytes, "world".bytes])
        try router.send(["worker-1".bytes, "reply".bytes])
        #expect(try dealer.receive(timeout: .seconds(10)) == ["reply".bytes])

        let unknownPeer = #expect(throws: ZeroMQError.self) {
            try router.send(["nobody".bytes, "lost".bytes])
        }
        #expect(unknownPeer?.code == EHOSTUNREACH)
    }

    @Test("receive with a timeout returns nil in time when nothing arrives", .timeLimit(.minutes(10)))
    func receiveTimeout() throws {
        let dealer = try context.socket(.dealer)
        try dealer.bind("inproc://idle-\(UUID().uuidString)")
        let start = ContinuousClock.now
        #expect(try dealer.receive(timeout: .milliseconds(150)) == nil)
        let elapsed = ContinuousClock.now - start
        #expect(elapsed >= .milliseconds(140) && elapsed < .seconds(5))
        #expect(try dealer.receive(timeout: .zero) == nil)

        try dealer.set(.receiveTimeout, .milliseconds(50))
        #expect(try dealer.receive() == nil)
    }

    @Test("non-blocking send returns false when nothing can be queued", .timeLimit(.minutes(10)))
    func nonBlockingSendAtHighWaterMark() throws {
        // No peer at all: nothing to queue to.
        let lonelyDealer = try context.socket(.dealer)
        try lonelyDealer.set(.sendHighWaterMark, 1)
        #expect(try lonelyDealer.send(["x".bytes], mode: .nonBlocking) == false)
        let lonelyPush = try context.socket(.push)
        #expect(try lonelyPush.send(["x".bytes], mode: .nonBlocking) == false)

        // A pipe toward a peer that never shows up fills at the high water mark.
        let push = try context.socket(.push)
        try push.set(.sendHighWaterMark, 1)
        try push.connect("inproc://never-bound-\(UUID().uuidString)")
        var accepted = 0
        while try push.send(["payload".bytes], mode: .nonBlocking), accepted < 10_000 { accepted += 1 }
        #expect(accepted >= 1 && accepted < 10_000)
    }

    @Test("an oversized message is drained as a typed error and the next one still arrives", .timeLimit(.minutes(10)))
    func oversizedMessage() throws {
        let endpoint = "inproc://limits-\(UUID().uuidString)"
        let receiver = try context.socket(.pair)
        let sender = try context.socket(.pair)
        try receiver.bind(endpoint)
        try sender.connect(endpoint)
        receiver.receiveLimits = MessageLimits(maximumFrameCount: 3, maximumByteCount: 1_000)

        try sender.send([[1], [2], [3], [4], [5]])
        let tooManyFrames = #expect(throws: ZeroMQError.self) { try receiver.receive(timeout: .seconds(10)) }
        #expect(tooManyFrames?.kind == .messageTooLarge(frameCount: 5, byteCount: 5))
        #expect(tooManyFrames?.code == EMSGSIZE)

        try sender.send([[UInt8](repeating: 7, count: 600), [UInt8](repeating: 8, count: 600)])
        let tooManyBytes = #expect(throws: ZeroMQError.self) { try receiver.receive(timeout: .seconds(10)) }
        #expect(tooManyBytes?.kind == .messageTooLarge(frameCount: 2, byteCount: 1_200))

        try sender.send(["small".bytes, "ok".bytes])
        #expect(try receiver.receive(timeout: .seconds(10)) == ["small".bytes, "ok".bytes])
    }

    @Test("the poller reports which sockets are ready", .timeLimit(.minutes(10)))
    func polling() throws {
        let endpointA = "inproc://poll-a-\(UUID().uuidString)"
        let endpointB = "inproc://poll-b-\(UUID().uuidString)"
        let pullA = try context.socket(.pull)
        let pullB = try context.socket(.pull)
        try pullA.bind(endpointA)
        try pullB.bind(endpointB)
        let pushB = try context.socket(.push)
        try pushB.connect(endpointB)

        let poller = Poller()
        let indexA = poller.register(pullA, for: .readable)
        let indexB = poller.register(pullB, for: .readable)
        let indexPush = poller.register(pushB, for: .writable)

        let start = ContinuousClock.now
        #expect(try poller.poll(timeout: .milliseconds(100)) == 1)  // only the push side is writable
        #expect(poller.isWritable(at: indexPush))
        #expect(ContinuousClock.now - start < .seconds(5))

        try pushB.send(["wake".bytes])
        #expect(try poller.poll(timeout: .seconds(10)) == 2)
        #expect(!poller.isReadable(at: indexA))
        #expect(poller.isReadable(at: indexB))
        #expect(try pullB.receive(timeout: .zero) == ["wake".bytes])

        let idle = try ZeroMQ.poll([.socket(pullA, .readable), .socket(pullB, .readable)], timeout: .milliseconds(50))
        #expect(idle == [[], []])
        #expect(try pullB.get(.events).contains(.readable) == false)
    }

    @Test("a monitor reports that a socket is listening", .timeLimit(.minutes(10)))
    func monitorEvents() throws {
        let socket = try context.socket(.router)
        let monitor = try socket.monitor([.listening, .accepted])
        try socket.bind("tcp://127.0.0.1:*")
        let event = try monitor.receive(timeout: .seconds(10))
        #expect(event?.event == .listening)
        #expect(try event?.endpoint == socket.lastEndpoint)
        monitor.close()
    }
}
