import Bus
import Foundation
import StoreKitModel
import Testing
import ZeroMQ

/// The queue lets in only the CURVE client keys it was given (RFC 27 ZAP handler).
@Suite("CURVE clients are authenticated by key")
struct AuthenticationTests {
    let context: ZeroMQContext

    init() throws {
        context = try ZeroMQContext()
    }

    @Test("an allowed key is served; an unknown key and a client without CURVE are refused", .timeLimit(.minutes(1)))
    func allowList() throws {
        let server = try CurveKeyPair.generate()
        let allowed = try CurveKeyPair.generate()
        let unknown = try CurveKeyPair.generate()
        let queue = try QueueHarness(context: context, configure: {
            $0.curveServerSecretKey = server.secretKey
            $0.allowedClientKeys = [allowed.publicKey]
        }) { _, _ in .duplicate(lastSequence: 0) }

        func dealer(_ pair: CurveKeyPair?) throws -> Socket {
            let socket = try context.socket(.dealer)
            if let pair {
                try socket.set(.curveServerKey, server.publicKey)
                try socket.set(.curvePublicKey, pair.publicKey)
                try socket.set(.curveSecretKey, pair.secretKey)
            }
            try socket.connect(queue.requestsEndpoint)
            return socket
        }
        let trusted = try dealer(allowed)
        #expect(try request(trusted, ["PING".bytes], within: .seconds(10))?.first == "PONG".bytes)

        // Three connections with the same unknown key: each refused, the key logged once.
        for attempt in 1...3 {
            let stranger = try dealer(unknown)
            try stranger.send(["PING".bytes])
            #expect(queue.wait { $0.refused[.unknownClientKey] >= attempt })
            #expect(try stranger.receive(timeout: .milliseconds(100)) == nil)
        }
        let reports = queue.refusals.filter { $0.reason == .unknownClientKey }
        #expect(reports.count == 1)
        #expect(reports.first?.detail.contains(unknown.publicKey.z85) == true)

        let plain = try dealer(nil)
        try plain.send(["PING".bytes])
        #expect(try plain.receive(timeout: .milliseconds(300)) == nil)
        #expect(queue.wait { $0.refused[.unknownClientKey] >= 3 })
        // The trusted client is still served.
        #expect(try request(trusted, ["PING".bytes], within: .seconds(10))?.first == "PONG".bytes)
    }

    @Test("an EventSubscriber with an allowed key receives events; one with an unknown key does not", .timeLimit(.minutes(1)))
    func subscribers() throws {
        let server = try CurveKeyPair.generate()
        let allowed = try CurveKeyPair.generate()
        let queue = try QueueHarness(context: context, configure: {
            $0.curveServerSecretKey = server.secretKey
            $0.allowedClientKeys = [allowed.publicKey]
        }) { _, _ in .duplicate(lastSequence: 0) }
        var trusted = EventSubscriberConfiguration(eventsEndpoint: queue.eventsEndpoint, requestsEndpoint: queue.requestsEndpoint)
        trusted.curve = CurveClientKeys(serverPublicKey: server.publicKey, clientKeyPair: allowed)
        var stranger = trusted
        stranger.curve = CurveClientKeys(serverPublicKey: server.publicKey, clientKeyPair: try CurveKeyPair.generate())
        let trustedSubscriber = try EventSubscriber(context: context, configuration: trusted)
        let strangerSubscriber = try EventSubscriber(context: context, configuration: stranger)
        queue.appendEvents(3)
        #expect(try collect(trustedSubscriber, count: 3).count == 3)
        #expect(try collect(strangerSubscriber, count: 1, within: .milliseconds(300)).isEmpty)
        #expect(queue.counters.connectionsRefused >= 1)
    }

    @Test("issue 30: a forging client with an allowed app key is refused the store's and the downloader's commands and other devices', and the refusal names its key and role",
          .timeLimit(.minutes(1)))
    func rolesEnforced() throws {
        let server = try CurveKeyPair.generate()
        let app = try CurveKeyPair.generate()
        let store = try CurveKeyPair.generate()
        let handler = DedupingHandler()
        let queue = try QueueHarness(context: context, configure: {
            $0.curveServerSecretKey = server.secretKey
            $0.allowedClientKeys = [app.publicKey, store.publicKey]
            $0.clientPermissions = [app.publicKey: ClientPermissions(roles: [.app], devices: ["d1"]),
                                    store.publicKey: ClientPermissions(roles: [.store])]
        }) { command, appender in try handler.handle(command, appender) }
        func sender(_ pair: CurveKeyPair, origin: String) throws -> CommandSender {
            var configuration = CommandSenderConfiguration(origin: origin, requestsEndpoint: queue.requestsEndpoint)
            configuration.curve = CurveClientKeys(serverPublicKey: server.publicKey, clientKeyPair: pair)
            return try CommandSender(context: context, configuration: configuration)
        }
        func answer(_ sender: CommandSender, _ body: CommandBody) throws -> CommandAcknowledgement? {
            let id = try sender.submit(body)
            let deadline = ContinuousClock.now + .seconds(10)
            while ContinuousClock.now < deadline {
                for case .acknowledged(let acknowledgement) in try sender.poll(timeout: .milliseconds(50)) where acknowledgement.commandID == id {
                    return acknowledgement
                }
            }
            return nil
        }
        let forger = try sender(app, origin: "forger.1")
        defer { forger.close() }
        // Its own device: served.
        #expect(try answer(forger, .launchApp(device: "d1"))?.status == .accepted)
        // The store's decision for its own purchase, the downloader's completion, another device's payment: refused.
        let decision = try #require(try answer(forger, .decidePurchase(TransactionKey(device: "d1", number: 1), .purchased(charged: false))))
        #expect(decision.status == .rejected)
        #expect(decision.message.contains("store command"))
        let download = try #require(try answer(forger, .completeDownload(DownloadKey(transaction: TransactionKey(device: "d1", number: 1), index: 0), contentURL: "/x")))
        #expect(download.status == .rejected)
        let elsewhere = try #require(try answer(forger, .launchApp(device: "d2")))
        #expect(elsewhere.status == .rejected)
        #expect(elsewhere.message.contains("d2"))
        #expect(queue.wait { $0.commandsRefusedForRole >= 3 })
        #expect(handler.appliedCount == 1, "only the forger's own launch reached the handler")
        let report = try #require(queue.refusals.first { $0.reason == .roleRefused })
        #expect(report.detail.contains(app.publicKey.z85))
        #expect(report.detail.contains("store command"))
        #expect(report.detail.contains("roles are app"))
        // The store's key may send the store's command.
        let honestStore = try sender(store, origin: "store.1")
        defer { honestStore.close() }
        #expect(try answer(honestStore, .decidePurchase(TransactionKey(device: "d1", number: 1), .purchased(charged: false)))?.status == .accepted)
    }

    @Test("issue 30: with CURVE an app key's FETCH returns only its own devices' events, whatever it asks for; the store's key gets every event",
          .timeLimit(.minutes(1)))
    func fetchLimitedToTheKeysDevices() throws {
        let server = try CurveKeyPair.generate()
        let app = try CurveKeyPair.generate()
        let otherApp = try CurveKeyPair.generate()
        let store = try CurveKeyPair.generate()
        let queue = try QueueHarness(context: context, configure: {
            $0.curveServerSecretKey = server.secretKey
            $0.allowedClientKeys = [app.publicKey, otherApp.publicKey, store.publicKey]
            $0.clientPermissions = [app.publicKey: ClientPermissions(roles: [.app], devices: ["device-2"]),
                                    otherApp.publicKey: ClientPermissions(roles: [.app], devices: ["device-3"]),
                                    store.publicKey: ClientPermissions(roles: [.store])]
        }) { _, _ in .duplicate(lastSequence: 0) }
        queue.appendEvents(64)
        try #require(queue.wait { $0.eventsPublished == 64 })
        func fetch(_ pair: CurveKeyPair, _ body: [UInt8]) throws -> [[UInt8]] {
            let dealer = try context.socket(.dealer)
            defer { dealer.close() }
            try CurveClientKeys(serverPublicKey: server.publicKey, clientKeyPair: pair).apply(to: dealer)
            try dealer.connect(queue.requestsEndpoint)
            return try #require(try request(dealer, ["FETCH".bytes, body], within: .seconds(10)))
        }
        func sequences(_ reply: [[UInt8]]) -> [UInt64] {
            reply.dropFirst(2).map { frame in frame[8..<16].enumerated().reduce(UInt64(0)) { $0 | UInt64($1.element) << (8 * UInt64($1.offset)) } }
        }
        // The app key holding device-3 asks for everything, then for device-2's group: it gets device-3's events, then none.
        let everything = try fetch(otherApp, BusWire.encodeFetch(from: 1, maximumCount: 0))
        #expect(everything[1].count == BusWire.groupBatchHeaderByteCount)
        #expect(sequences(everything) == [4, 20, 36, 52])
        let another = try fetch(otherApp, BusWire.encodeGroupFetch(from: 1, maximumCount: 0, prefix: "device-2"))
        #expect(sequences(another).isEmpty)
        // Its own key's subscriber follows its device.
        var configuration = EventSubscriberConfiguration(eventsEndpoint: queue.eventsEndpoint, requestsEndpoint: queue.requestsEndpoint)
        configuration.curve = CurveClientKeys(serverPublicKey: server.publicKey, clientKeyPair: app)
        configuration.topicGroup = "device-2"
        let subscriber = try EventSubscriber(context: context, configuration: configuration)
        defer { subscriber.close() }
        #expect(try collect(subscriber, count: 4).map(\.sequence) == [3, 19, 35, 51])
        // The store's key is not limited to devices.
        #expect(sequences(try fetch(store, BusWire.encodeFetch(from: 1, maximumCount: 0))) == Array(1...64))
    }
}
