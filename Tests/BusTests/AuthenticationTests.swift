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
}
