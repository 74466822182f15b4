import Foundation
import Testing
import ZeroMQ

/// `AcceptedConnection` shuts down only what it is told it is: an accepted connection to the given
/// endpoint. A descriptor reused for anything else is left alone.
@Suite("Closing one accepted connection by its descriptor")
struct AcceptedConnectionTests {
    let context: ZeroMQContext

    init() throws {
        context = try ZeroMQContext()
    }

    @Test("an XPUB's subscription names its connection's descriptor, which shuts down that connection only", .timeLimit(.minutes(10)))
    func shutDownOneConnection() throws {
        let publisher = try context.socket(.extendedPublisher)
        try publisher.set(.extendedPublisherVerboser, true)
        try publisher.bind("tcp://127.0.0.1:*")
        let endpoint = try publisher.lastEndpoint
        let subscriber = try context.socket(.subscriber)
        let monitor = try subscriber.monitor([.disconnected])
        try subscriber.subscribe(to: "evt.")
        try subscriber.connect(endpoint)
        var descriptor: Int32?
        let deadline = ContinuousClock.now + .seconds(5)
        while descriptor == nil, ContinuousClock.now < deadline {
            descriptor = try publisher.receiveFrame { bytes, _, connection, _ in bytes.first == 1 ? connection : nil } ?? nil
        }
        let connection = try #require(descriptor, "no subscription with a descriptor arrived")
        // Not a connection to another endpoint, not a file.
        #expect(!AcceptedConnection.shutDown(fileDescriptor: connection, boundTo: "tcp://127.0.0.1:1"))
        let file = open("/dev/null", O_RDONLY)
        defer { close(file) }
        #expect(!AcceptedConnection.shutDown(fileDescriptor: file, boundTo: endpoint))
        #expect(AcceptedConnection.peerAddress(fileDescriptor: connection)?.hasPrefix("127.0.0.1:") == true)
        #expect(AcceptedConnection.hasReceivedData(fileDescriptor: connection) == true)
        #expect(AcceptedConnection.shutDown(fileDescriptor: connection, boundTo: endpoint))
        #expect(try monitor.receive(timeout: .seconds(5)) != nil, "the subscriber's connection did not end")
    }
}
