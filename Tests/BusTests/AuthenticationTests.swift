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

    @Test("an allowed key is served; an unknown key and a client without CURVE are refused", .timeLimit(.minutes(10)))
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

    @Test("an EventSubscriber with an allowed key receives events; one with an unknown key does not", .timeLimit(.minutes(10)))
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
          .timeLimit(.minutes(10)))
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
          .timeLimit(.minutes(10)))
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

    @Test("issue 30: with CURVE an app key's subscriptions to `all`, `evt.`, another device and a wide group close its connection and are logged with its key and role; its own device's topic and a load driver's group are heard",
          .timeLimit(.minutes(10)))
    func subscriptionsHeldToTheKeysDevices() throws {
        let server = try CurveKeyPair.generate()
        let app = try CurveKeyPair.generate()
        let driver = try CurveKeyPair.generate()
        let store = try CurveKeyPair.generate()
        let queue = try QueueHarness(context: context, configure: {
            $0.curveServerSecretKey = server.secretKey
            $0.allowedClientKeys = [app.publicKey, driver.publicKey, store.publicKey]
            $0.clientPermissions = [app.publicKey: ClientPermissions(roles: [.app], devices: ["device-2"]),
                                    driver.publicKey: ClientPermissions(roles: [.app], devices: [], devicePrefixes: ["device-1"]),
                                    store.publicKey: ClientPermissions(roles: [.store])]
            // Every refusal is logged, not one per second.
            $0.refusalReportInterval = .zero
        }) { _, _ in .duplicate(lastSequence: 0) }
        func subscriber(_ pair: CurveKeyPair, _ topics: [[UInt8]]) throws -> Socket {
            let socket = try context.socket(.subscriber)
            try CurveClientKeys(serverPublicKey: server.publicKey, clientKeyPair: pair).apply(to: socket)
            for topic in topics { try socket.subscribe(to: topic) }
            try socket.connect(queue.eventsEndpoint)
            return socket
        }
        // The app key's own device: kept (it hears a heartbeat first, so its connection is up).
        let own = try subscriber(app, [BusWire.eventTopic(device: "device-2"), BusWire.heartbeatTopic])
        defer { own.close() }
        #expect(try receiveTopic(own, BusWire.heartbeatTopic), "the app key's own subscriber heard no heartbeat")

        let hostileTopics = [BusWire.batchedEventsTopic, BusWire.eventTopicPrefix, BusWire.eventTopic(device: "device-3"),
                             BusWire.groupTopic("device-"), [], "e".bytes, BusWire.eventTopic(device: nil)]
        for (index, topic) in hostileTopics.enumerated() {
            let hostile = try context.socket(.extendedSubscriber)
            try CurveClientKeys(serverPublicKey: server.publicKey, clientKeyPair: app).apply(to: hostile)
            // One connection each: a reconnection would subscribe again and be refused again.
            try hostile.set(.reconnectInterval, nil)
            let monitor = try hostile.monitor([.disconnected])
            try hostile.connect(queue.eventsEndpoint)
            try hostile.send([[1] + topic])
            #expect(try monitor.receive(timeout: .seconds(10)) != nil, "the queue kept a subscription to \(String(decoding: topic, as: UTF8.self))")
            hostile.close()
            monitor.close()
            #expect(queue.wait { $0.subscribersClosed >= index + 1 })
        }
        let reports = queue.refusals.filter { $0.reason == .roleRefused }
        #expect(reports.count == hostileTopics.count)
        #expect(reports.allSatisfy { $0.detail.contains(app.publicKey.z85) && $0.detail.contains("roles are app") && $0.detail.contains("closed") })
        #expect(reports.contains { $0.detail.contains("\"all\"") })

        // Events of 16 devices: the app key's subscriber hears device-2's only; the load driver's key
        // its group (`grp.device-1/`: device-1 and device-10 to device-15); the store's key everything.
        var driverConfiguration = EventSubscriberConfiguration(eventsEndpoint: queue.eventsEndpoint, requestsEndpoint: queue.requestsEndpoint)
        driverConfiguration.curve = CurveClientKeys(serverPublicKey: server.publicKey, clientKeyPair: driver)
        driverConfiguration.topicGroup = "device-1"
        let driverSubscriber = try EventSubscriber(context: context, configuration: driverConfiguration)
        defer { driverSubscriber.close() }
        let storeSubscriber = try subscriber(store, [BusWire.eventTopicPrefix, BusWire.heartbeatTopic])
        defer { storeSubscriber.close() }
        // Its subscriptions are in place once it hears a heartbeat (a plain SUB does not fetch what it missed).
        #expect(try receiveTopic(storeSubscriber, BusWire.heartbeatTopic), "the store's subscriber heard no heartbeat")
        queue.appendEvents(32)
        #expect(try collect(driverSubscriber, count: 14).map(\.sequence) == [2, 11, 12, 13, 14, 15, 16, 18, 27, 28, 29, 30, 31, 32])
        var heard: [[UInt8]] = []
        let deadline = ContinuousClock.now + .seconds(10)
        while heard.count < 2, ContinuousClock.now < deadline {
            if let frames = try own.receive(timeout: .milliseconds(100)), frames.first != BusWire.heartbeatTopic { heard.append(frames[0]) }
        }
        #expect(heard == [BusWire.eventTopic(device: "device-2"), BusWire.eventTopic(device: "device-2")])
        var storeHeard = 0
        while storeHeard < 32, ContinuousClock.now < deadline {
            if let frames = try storeSubscriber.receive(timeout: .milliseconds(100)), frames.first != BusWire.heartbeatTopic { storeHeard += 1 }
        }
        #expect(storeHeard == 32)
        #expect(queue.counters.subscribersClosed == hostileTopics.count, "an allowed subscription was refused")
    }

    @Test("issue 30: a subscriber following its key's devices one group each hears only their events, caught up and live, each device in order; the other devices its groups carry are dropped",
          .timeLimit(.minutes(10)))
    func followedDevicesHearOnlyTheirOwn() throws {
        let server = try CurveKeyPair.generate()
        let app = try CurveKeyPair.generate()
        let queue = try QueueHarness(context: context, configure: {
            $0.curveServerSecretKey = server.secretKey
            $0.allowedClientKeys = [app.publicKey]
            $0.clientPermissions = [app.publicKey: ClientPermissions(roles: [.app], devices: ["device-1", "device-2"])]
        }) { _, _ in .duplicate(lastSequence: 0) }
        // Events of device-0 to device-15 in turn (sequence = index + 1): history first, caught up by FETCH.
        queue.appendEvents(8)
        try #require(queue.wait { $0.eventsPublished == 8 })
        var configuration = EventSubscriberConfiguration(eventsEndpoint: queue.eventsEndpoint, requestsEndpoint: queue.requestsEndpoint)
        configuration.curve = CurveClientKeys(serverPublicKey: server.publicKey, clientKeyPair: app)
        configuration.followedDevices = ["device-2", "device-1"]
        let subscriber = try EventSubscriber(context: context, configuration: configuration)
        defer { subscriber.close() }
        var heard = try collect(subscriber, count: 2)
        #expect(try wait(for: subscriber) { subscriber.isCaughtUp })
        // Live: group `device-1` also carries device-10 to device-15; only device-1's and device-2's are delivered.
        queue.appendEvents(32, startingAt: 8)
        heard += try collect(subscriber, count: 4)
        // Each device's in order; across devices, as their groups' messages arrived.
        #expect(heard.filter { $0.event.device == "device-1" }.map(\.sequence) == [2, 18, 34])
        #expect(heard.filter { $0.event.device == "device-2" }.map(\.sequence) == [3, 19, 35])
        #expect(heard.count == 6, "\(heard.map(\.sequence))")
        // Every followed record through the queue's last is delivered once asked for (a FETCH brings the quiet streams up).
        #expect(try wait(for: subscriber) { subscriber.hasDelivered(through: 40) })
        #expect(try subscriber.receive(timeout: .milliseconds(50)).isEmpty, "a record was delivered twice")
        #expect(queue.counters.subscribersClosed == 0, "a followed device's subscription was refused")
    }

    /// Receives until a message on `topic` arrives, up to 10 s.
    private func receiveTopic(_ socket: Socket, _ topic: [UInt8]) throws -> Bool {
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline {
            if let frames = try socket.receive(timeout: .milliseconds(100)), frames.first == topic { return true }
        }
        return false
    }
}
