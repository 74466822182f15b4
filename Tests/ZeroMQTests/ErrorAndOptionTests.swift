import Foundation
import Testing
import ZeroMQ

@Suite("Errors, options, CURVE and context lifetime", .serialized)
struct ErrorAndOptionTests {
    let context: ZeroMQContext

    init() throws {
        context = try ZeroMQContext()
    }

    @Test("binding an endpoint twice fails with EADDRINUSE and a hint", .timeLimit(.minutes(10)))
    func addressInUse() throws {
        let first = try context.socket(.publisher)
        try first.bind("tcp://127.0.0.1:*")
        let endpoint = try first.lastEndpoint
        let second = try context.socket(.publisher)
        let error = #expect(throws: ZeroMQError.self) { try second.bind(endpoint) }
        #expect(error?.code == EADDRINUSE)
        #expect(error?.operation == "bind \(endpoint)")
        #expect(error?.hint?.contains("pick another port") == true)
        #expect(error.map { String(describing: $0) }?.contains("Address already in use") == true)
    }

    @Test("malformed or unsupported endpoints are reported, not crashed on", .timeLimit(.minutes(10)))
    func malformedEndpoints() throws {
        let socket = try context.socket(.dealer)
        let malformed = #expect(throws: ZeroMQError.self) { try socket.connect("tcp//127.0.0.1:5555") }
        #expect(malformed?.code == EINVAL)
        #expect(malformed?.hint?.contains("malformed endpoint") == true)
        let unsupported = #expect(throws: ZeroMQError.self) { try socket.connect("carrier-pigeon://home") }
        #expect(unsupported?.code == EPROTONOSUPPORT)
        let missingDirectory = #expect(throws: ZeroMQError.self) {
            try socket.bind("ipc:///nonexistent-\(UUID().uuidString)/socket")
        }
        #expect(missingDirectory?.code == ENOENT)
        #expect(missingDirectory?.hint?.contains("directory") == true)
        let notBound = #expect(throws: ZeroMQError.self) { try socket.unbind("tcp://127.0.0.1:1") }
        #expect(notBound?.code == ENOENT)
    }

    @Test("operations on a closed socket throw instead of crashing", .timeLimit(.minutes(10)))
    func closedSocket() throws {
        let socket = try context.socket(.pair)
        socket.close()
        socket.close()
        #expect(socket.isClosed)
        let sendError = #expect(throws: ZeroMQError.self) { try socket.send(["x".bytes]) }
        #expect(sendError?.kind == .socketClosed)
        #expect(throws: ZeroMQError.self) { try socket.receive(timeout: .zero) }
        #expect(throws: ZeroMQError.self) { try socket.bind("inproc://closed") }
        #expect(throws: ZeroMQError.self) { try socket.get(.sendHighWaterMark) }
        #expect(try Poller().poll(timeout: .zero) == 0)
        let pollError = #expect(throws: ZeroMQError.self) {
            try ZeroMQ.poll([.socket(socket, .readable)], timeout: .zero)
        }
        #expect(pollError?.kind == .socketClosed)
    }

    @Test("invalid arguments are rejected before reaching libzmq", .timeLimit(.minutes(10)))
    func invalidArguments() throws {
        let socket = try context.socket(.dealer)
        #expect(throws: ZeroMQError.self) { try socket.send([]) }
        #expect(throws: ZeroMQError.self) { try socket.set(.routingID, []) }
        #expect(throws: ZeroMQError.self) { try socket.set(.sendHighWaterMark, Int(Int32.max) + 1) }
        let writeOnly = #expect(throws: ZeroMQError.self) { try socket.get(.routerMandatory) }
        #expect(writeOnly?.kind == .invalidArgument)
    }

    @Test("heartbeat options can be set and read back", .timeLimit(.minutes(10)))
    func heartbeatOptions() throws {
        let socket = try context.socket(.dealer)
        #expect(try socket.get(.heartbeatInterval) == .zero)
        try socket.set(.heartbeatInterval, .milliseconds(250))
        try socket.set(.heartbeatTimeToLive, .seconds(3))
        try socket.set(.heartbeatTimeout, .milliseconds(750))
        #expect(try socket.get(.heartbeatInterval) == .milliseconds(250))
        #expect(try socket.get(.heartbeatTimeToLive) == .seconds(3))
        #expect(try socket.get(.heartbeatTimeout) == .milliseconds(750))
    }

    @Test("typed options round-trip through libzmq", .timeLimit(.minutes(10)))
    func optionRoundTrips() throws {
        let socket = try context.socket(.router)
        #expect(try socket.get(.linger) == .zero)  // made explicit by ZeroMQContext.socket
        try socket.set(.linger, nil)
        #expect(try socket.get(.linger) == nil)
        try socket.set(.linger, .milliseconds(20))
        #expect(try socket.get(.linger) == .milliseconds(20))
        try socket.set(.sendHighWaterMark, 10)
        try socket.set(.receiveHighWaterMark, 20)
        #expect(try socket.get(.sendHighWaterMark) == 10)
        #expect(try socket.get(.receiveHighWaterMark) == 20)
        #expect(try socket.get(.receiveTimeout) == nil)
        try socket.set(.receiveTimeout, .microseconds(1_500))  // rounded up to 2 ms
        #expect(try socket.get(.receiveTimeout) == .milliseconds(2))
        try socket.set(.sendTimeout, .seconds(1))
        #expect(try socket.get(.sendTimeout) == .seconds(1))
        try socket.set(.reconnectInterval, .milliseconds(50))
        #expect(try socket.get(.reconnectInterval) == .milliseconds(50))
        #expect(try socket.get(.maximumMessageSize) == nil)
        try socket.set(.maximumMessageSize, 1 << 20)
        #expect(try socket.get(.maximumMessageSize) == 1 << 20)
        try socket.set(.tcpKeepAlive, true)
        #expect(try socket.get(.tcpKeepAlive) == true)
        try socket.set(.immediate, true)
        #expect(try socket.get(.immediate) == true)
        try socket.set(.zapDomain, "simulator")
        #expect(try socket.get(.zapDomain) == "simulator")
        try socket.set(.routerMandatory, true)
        #expect(try socket.get(.receiveMore) == false)
        #expect(try socket.get(.fileDescriptor) >= 0)
        #expect(try socket.get(.events) == [])

        let publisher = try context.socket(.extendedPublisher)
        try publisher.set(.extendedPublisherVerbose, true)
    }

    @Test("a terminated context refuses new sockets with ETERM", .timeLimit(.minutes(10)))
    func terminatedContext() throws {
        let context = try ZeroMQContext()
        do {
            let socket = try context.socket(.pair)
            socket.close()
        }
        context.terminate()
        context.terminate()
        let error = #expect(throws: ZeroMQError.self) { try context.socket(.pair) }
        #expect(error?.code == ZeroMQError.LibraryCode.contextTerminated)
        #expect(error?.hint?.contains("terminated") == true)
    }

    @Test("shutdown interrupts a receive blocked in another thread with ETERM", .timeLimit(.minutes(10)))
    func shutdownInterruptsBlockedReceive() throws {
        let context = try ZeroMQContext()
        let socket = try context.socket(.pull)
        try socket.bind("inproc://blocked-\(UUID().uuidString)")
        let finished = DispatchSemaphore(value: 0)
        let outcome = LockedBox<ZeroMQError?>(nil)
        // The socket is handed to the thread and used only there from now on.
        let thread = Thread {
            do {
                _ = try socket.receive(timeout: .seconds(10))
            } catch let error as ZeroMQError {
                outcome.value = error
            } catch {}
            socket.close()
            finished.signal()
        }
        thread.start()
        Thread.sleep(forTimeInterval: 0.1)
        context.shutdown()
        #expect(finished.wait(timeout: .now() + 5) == .success)
        #expect(outcome.value?.isContextTerminated == true)
        #expect(outcome.value?.code == ZeroMQError.LibraryCode.contextTerminated)
        context.terminate()
    }
}

@Suite("CURVE security", .serialized, .enabled(if: ZeroMQ.hasCapability("curve"), "libzmq was built without CURVE"))
struct CurveTests {
    let context: ZeroMQContext

    init() throws {
        context = try ZeroMQContext()
    }

    @Test("key pairs are 40-character Z85 keys and the public key derives from the secret", .timeLimit(.minutes(10)))
    func keyGeneration() throws {
        let pair = try CurveKeyPair.generate()
        #expect(pair.publicKey.z85.count == 40)
        #expect(pair.secretKey.z85.count == 40)
        #expect(try pair.secretKey.derivedPublicKey() == pair.publicKey)
        #expect(try CurveKeyPair(publicKey: pair.publicKey, secretKey: pair.secretKey) == pair)
        #expect(!String(describing: pair).contains(pair.secretKey.z85))
        #expect(try CurveKeyPair.generate() != pair)
    }

    @Test("malformed Z85 keys are rejected with a clear error", .timeLimit(.minutes(10)))
    func invalidKeys() throws {
        let tooShort = #expect(throws: ZeroMQError.self) { try CurveKey(z85: "abc") }
        #expect(tooShort?.kind == .invalidCurveKey)
        let badCharacter = #expect(throws: ZeroMQError.self) { try CurveKey(z85: String(repeating: "~", count: 40)) }
        #expect(badCharacter?.kind == .invalidCurveKey)
        let other = try CurveKeyPair.generate()
        let mismatched = #expect(throws: ZeroMQError.self) {
            try CurveKeyPair(publicKey: other.publicKey, secretKey: try CurveKeyPair.generate().secretKey)
        }
        #expect(mismatched?.kind == .invalidCurveKey)
    }

    /// A CURVE ROUTER server on an ephemeral loopback port.
    private func makeServer(keys: CurveKeyPair) throws -> (Socket, String) {
        let server = try context.socket(.router)
        try server.set(.curveServer, true)
        try server.set(.curveSecretKey, keys.secretKey)
        try server.bind("tcp://127.0.0.1:*")
        return (server, try server.lastEndpoint)
    }

    private func makeClient(serverKey: CurveKey, endpoint: String) throws -> Socket {
        let clientKeys = try CurveKeyPair.generate()
        let client = try context.socket(.dealer)
        try client.set(.curveServerKey, serverKey)
        try client.set(.curvePublicKey, clientKeys.publicKey)
        try client.set(.curveSecretKey, clientKeys.secretKey)
        #expect(try client.get(.curveServerKey) == serverKey)
        try client.connect(endpoint)
        return client
    }

    @Test("a client with the right server key talks to a CURVE ROUTER", .timeLimit(.minutes(10)))
    func authenticatedExchange() throws {
        let serverKeys = try CurveKeyPair.generate()
        let (server, endpoint) = try makeServer(keys: serverKeys)
        #expect(try server.get(.curveServer))
        let client = try makeClient(serverKey: serverKeys.publicKey, endpoint: endpoint)
        try client.send(["secret".bytes, "payload".bytes])
        let request = try server.receive(timeout: .seconds(3))
        #expect(request?.count == 3)
        #expect(request?.suffix(2) == ["secret".bytes, "payload".bytes])
        if let routingID = request?.first {
            try server.send([routingID, "ack".bytes])
            #expect(try client.receive(timeout: .seconds(3)) == ["ack".bytes])
        }
    }

    @Test("a CURVE PUB reaches a SUB that knows its key", .timeLimit(.minutes(10)))
    func authenticatedPublishSubscribe() throws {
        let serverKeys = try CurveKeyPair.generate()
        let publisher = try context.socket(.publisher)
        try publisher.set(.curveServer, true)
        try publisher.set(.curveSecretKey, serverKeys.secretKey)
        try publisher.bind("tcp://127.0.0.1:*")
        let subscriber = try context.socket(.subscriber)
        let clientKeys = try CurveKeyPair.generate()
        try subscriber.set(.curveServerKey, serverKeys.publicKey)
        try subscriber.set(.curvePublicKey, clientKeys.publicKey)
        try subscriber.set(.curveSecretKey, clientKeys.secretKey)
        try subscriber.subscribe(to: "")
        try subscriber.connect(try publisher.lastEndpoint)
        #expect(try publishUntilReceived(["topic".bytes, "data".bytes], from: publisher, to: subscriber)
            == ["topic".bytes, "data".bytes])
    }

    @Test("a client with the wrong server key gets nothing through", .timeLimit(.minutes(10)))
    func wrongServerKey() throws {
        let serverKeys = try CurveKeyPair.generate()
        let (server, endpoint) = try makeServer(keys: serverKeys)
        let monitor = try server.monitor([.handshakeFailedNoDetail, .handshakeFailedProtocol, .handshakeFailedAuthentication])
        let impostorKey = try CurveKeyPair.generate().publicKey
        let client = try makeClient(serverKey: impostorKey, endpoint: endpoint)
        try client.send(["should not arrive".bytes])
        #expect(try server.receive(timeout: .milliseconds(500)) == nil)
        #expect(try client.receive(timeout: .milliseconds(100)) == nil)
        // The server sees the failed handshake (bounded wait).
        #expect(try monitor.receive(timeout: .seconds(10)) != nil)
    }
}

/// A value shared between a test and a thread it starts.
final class LockedBox<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var storage: Value

    init(_ value: Value) { storage = value }

    var value: Value {
        get { lock.withLock { storage } }
        set { lock.withLock { storage = newValue } }
    }
}
