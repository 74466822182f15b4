import Bus
import EventLog
import Foundation
import StoreKitModel
import Testing
import ZeroMQ

/// What a client that does not read, floods or connects too often can make the queue hold
/// (docs/reliability.md). Each test creates the situation with real sockets and checks the
/// bound through the endpoint's own accounting.
@Suite("The queue's memory is bounded against any client")
struct BoundedResourceTests {
    let context: ZeroMQContext

    init() throws {
        context = try ZeroMQContext()
    }

    /// Appends `count` sample events and waits until they are published.
    private func publish(_ count: Int, on queue: QueueHarness) throws {
        queue.appendEvents(count)
        #expect(queue.wait(within: .seconds(20)) { $0.eventsPublished >= count })
    }

    @Test("5,000 FETCHes whose replies are never read leave at most the per-peer byte limit queued", .timeLimit(.minutes(1)))
    func unreadFetchReplies() throws {
        let perPeerLimit = 2 << 20
        let queue = try QueueHarness(context: context, configure: { $0.maximumQueuedFetchBytesPerPeer = perPeerLimit }) { _, _ in
            .duplicate(lastSequence: 0)
        }
        try publish(1_000, on: queue)
        let dealer = try context.socket(.dealer)
        try dealer.set(.receiveHighWaterMark, 1)
        try dealer.connect(queue.requestsEndpoint)
        let fetch = BusWire.encodeFetch(from: 1, maximumCount: 0)
        let before = residentBytes()
        for _ in 0..<5_000 { try dealer.send(["FETCH".bytes, fetch]) }
        #expect(queue.wait { $0.fetchesServed + $0.fetchesDroppedForUnreadReplies == 5_000 })
        print("unread FETCH replies: resident memory grew by \((residentBytes() - before) >> 20) MB, \(queue.queuedFetchBytes >> 10) KiB queued")

        let counters = queue.counters
        // Each reply is about 256 kB; the kernel's socket buffers take a few, the limit the rest.
        #expect(counters.fetchesDroppedForUnreadReplies > 4_900)
        #expect(counters.fetchesServed < 100)
        // Checked before each reply, so at most one batch (1 MiB) over the limit.
        #expect(queue.queuedFetchBytes <= perPeerLimit + (1 << 20))
        #expect(queue.queuedFetchBytes > 0)
        #expect(queue.loopFailure == nil)

        // Once the peer reads, its FETCHes are served again.
        var received = 0
        while received < 200, try dealer.receive(timeout: .milliseconds(500)) != nil { received += 1 }
        #expect(received > 0)
        let servedBefore = queue.counters.fetchesServed
        let reply = try request(dealer, ["FETCH".bytes, fetch], within: .seconds(10))
        #expect(reply?.first == "BATCH".bytes || queue.counters.fetchesServed > servedBefore)
    }

    /// 30 SUB sockets that never read, in another process (as subscribers are): libzmq aborts when
    /// a subscriber closes in the queue's own process while its pipe still takes a multipart
    /// message (libzmq issue 3442), and the queue's memory alone is what is bounded.
    static let stalledSubscribersScript = """
    import sys, zmq
    context = zmq.Context()
    sockets = []
    for _ in range(30):
        socket = context.socket(zmq.SUB)
        socket.setsockopt(zmq.RCVHWM, 1)
        socket.setsockopt(zmq.SUBSCRIBE, b"evt.")
        socket.connect(sys.argv[1])
        sockets.append(socket)
    print("connected", flush=True)
    sys.stdin.read()
    """

    static let pythonHasZeroMQ: Bool = {
        let probe = Process()
        probe.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        probe.arguments = ["python3", "-c", "import zmq"]
        probe.standardError = FileHandle.nullDevice
        guard (try? probe.run()) != nil else { return false }
        probe.waitUntilExit()
        return probe.terminationStatus == 0
    }()

    @Test("30 subscribers that never read cost the queue less than 200 MB for 50,000 events", .timeLimit(.minutes(1)),
          .enabled(if: pythonHasZeroMQ, "needs python3 with pyzmq (scripts/setup installs it) for subscribers in another process"))
    func stalledSubscribers() throws {
        let queue = try QueueHarness(context: context) { _, _ in .duplicate(lastSequence: 0) }
        let subscribers = Process()
        subscribers.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        subscribers.arguments = ["python3", "-c", Self.stalledSubscribersScript, queue.eventsEndpoint]
        let input = Pipe()
        subscribers.standardInput = input
        subscribers.standardOutput = FileHandle.nullDevice
        try subscribers.run()
        defer {
            kill(subscribers.processIdentifier, SIGKILL)
            subscribers.waitUntilExit()
        }
        // Every subscriber is connected before publishing, so each has its own full queue.
        let connected = ContinuousClock.now + .seconds(10)
        while queue.connectedPeers.subscribers < 30, ContinuousClock.now < connected { Thread.sleep(forTimeInterval: 0.005) }
        #expect(queue.connectedPeers.subscribers == 30)
        let before = residentBytes()
        try publish(50_000, on: queue)
        let growth = residentBytes() - before
        // 50,000 events of about 256 bytes are 13 MB of payload (shared), the rest is per-subscriber queues.
        #expect(growth < 200 << 20, "resident memory grew by \(growth >> 20) MB")
        print("stalled subscribers: resident memory of the queue's process grew by \(growth >> 20) MB")
    }

    @Test("a subscription longer than any topic closes its connection; the longest real topic is kept", .timeLimit(.minutes(1)),
          arguments: Transport.allCases)
    func oversizedSubscription(transport: Transport) throws {
        let queue = try QueueHarness(context: context, transport: transport) { _, _ in .duplicate(lastSequence: 0) }
        // A client of the longest device name (128 bytes) subscribes to its own topic only.
        let device = String(repeating: "d", count: 128)
        let client = try context.socket(.subscriber)
        try client.subscribe(to: BusWire.eventTopic(device: device))
        try client.connect(queue.eventsEndpoint)
        // A stranger subscribes 2 KB first, then to every event: were the long one kept, it would hear them.
        let stranger = try context.socket(.subscriber)
        let monitor = try stranger.monitor([.disconnected])
        try stranger.subscribe(to: BusWire.eventTopicPrefix + Array(repeating: UInt8(ascii: "x"), count: 2_048))
        try stranger.subscribe(to: BusWire.eventTopicPrefix)
        try stranger.connect(queue.eventsEndpoint)
        #expect(try monitor.receive(timeout: .seconds(10)) != nil, "the queue did not close the connection of a 2 KB subscription")
        let heard = Date().addingTimeInterval(10)
        var received: [[UInt8]]?
        while received == nil, Date() < heard {
            queue.perform { endpoint, appender in
                endpoint.publishWhenDurable([try appender.append(.appLaunched(device: device), commandID: nil, timestamp: 1)])
            }
            received = try client.receive(timeout: .milliseconds(100))
        }
        #expect(received?.first == BusWire.eventTopic(device: device), "a subscription to the longest device topic was not served")
        #expect(try stranger.receive(timeout: .zero) == nil)
    }

    @Test("connections beyond maximumPeers are refused during the handshake and counted", .timeLimit(.minutes(1)))
    func peerLimit() throws {
        let queue = try QueueHarness(context: context, configure: { $0.maximumPeers = 3 }) { _, _ in .duplicate(lastSequence: 0) }
        var dealers: [Socket] = []
        for _ in 0..<3 {
            let dealer = try context.socket(.dealer)
            try dealer.connect(queue.requestsEndpoint)
            #expect(try request(dealer, ["PING".bytes], within: .seconds(10))?.first == "PONG".bytes)
            dealers.append(dealer)
        }
        let extra = try context.socket(.dealer)
        try extra.connect(queue.requestsEndpoint)
        try extra.send(["PING".bytes])
        #expect(queue.wait { $0.connectionsRefused >= 1 })
        #expect(queue.counters.refused[.tooManyPeers] >= 1)
        #expect(try extra.receive(timeout: .milliseconds(200)) == nil)
        #expect(queue.connectedPeers.requesters == 3)

        // A refused client is not reconnected by libzmq (the handshake ended in an error);
        // once a peer leaves, a new connection gets in and is answered.
        dealers.removeLast().close()
        #expect(queue.wait { _ in queue.connectedPeers.requesters == 2 })
        let next = try context.socket(.dealer)
        try next.connect(queue.requestsEndpoint)
        #expect(try request(next, ["PING".bytes], within: .seconds(10))?.first == "PONG".bytes)
    }

    @Test("a flood of garbage is counted in full but reported at most once per reason per interval", .timeLimit(.minutes(1)))
    func refusalReportsAreRateLimited() throws {
        let queue = try QueueHarness(context: context, configure: { $0.refusalReportInterval = .seconds(60) }) { _, _ in
            .duplicate(lastSequence: 0)
        }
        let dealer = try context.socket(.dealer)
        try dealer.connect(queue.requestsEndpoint)
        for index in 0..<1_000 { try dealer.send(["NOPE\(index)".bytes]) }
        #expect(queue.wait { $0.refused[.unknownVerb] == 1_000 })
        #expect(queue.refusals.count == 1)
        #expect(queue.counters.refusalReportsSkipped == 999)
    }

    @Test("request limits do not count the routing id: a maximal request under a 255-byte id is answered")
    func routingIDIsNotCounted() throws {
        let queue = try QueueHarness(context: context, configure: { $0.maximumCommandBytes = 1_000 }) { _, _ in .duplicate(lastSequence: 0) }
        let dealer = try context.socket(.dealer)
        try dealer.set(.routingID, [UInt8](repeating: 0x41, count: 255))
        try dealer.connect(queue.requestsEndpoint)
        // Verb and body exactly at the request limit (maximumCommandBytes + 1,024).
        let body = [UInt8](repeating: 7, count: 2_024 - 3)
        let reply = try #require(try request(dealer, ["CMD".bytes, body], within: .seconds(10)))
        #expect(try CommandAcknowledgement.decode(reply).message.hasPrefix("commandTooLarge"))
        // One byte more is oversized: drained unanswered.
        #expect(try request(dealer, ["CMD".bytes, body + [7]], within: .milliseconds(300)) == nil)
        #expect(queue.wait { $0.refused[.oversized] == 1 })
    }
}

/// This process's resident memory, from /proc/self/statm.
func residentBytes() -> Int {
    guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
    let fields = text.split(separator: " ")
    guard fields.count > 1, let pages = Int(fields[1]) else { return 0 }
    return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
}
