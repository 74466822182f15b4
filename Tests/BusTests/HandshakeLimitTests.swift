import Bus
import Foundation
import Testing
import ZeroMQ

/// Connections that never complete their ZMTP handshake cannot lock honest clients out
/// (docs/reliability.md, "Bounds").
@Suite("Half-open connections are bounded")
struct HandshakeLimitTests {
    let context: ZeroMQContext

    init() throws {
        context = try ZeroMQContext()
    }

    @Test("TCP connections that send nothing neither count as peers nor stay open beyond the limit; a new client is served", .timeLimit(.minutes(10)))
    func halfOpenConnections() throws {
        let maximumPeers = 3
        let queue = try QueueHarness(context: context, configure: {
            $0.maximumPeers = maximumPeers
            $0.silentConnectionTimeout = .milliseconds(200)
        }) { _, _ in .duplicate(lastSequence: 0) }
        let port = try #require(queue.requestsEndpoint.split(separator: ":").last.flatMap { UInt16($0) })
        // More silent connections than maximumPeers: counted as peers, they would refuse every client.
        let silent = try (0..<10).map { _ in try RawConnection(port: port) }
        defer { silent.forEach { $0.close() } }
        // The queue closes the old silent ones only while more than maximumPeers are open. It hears the
        // connections in one batch or several, so it may stop at the limit with up to maximumPeers left.
        #expect(queue.wait { $0.silentConnectionsClosed >= silent.count - maximumPeers },
                "silent connections were not closed while over the limit")
        // As many clients as the limit allows: each is served, and with them connected, any silent
        // connection left puts the socket over the limit again, so it is closed too.
        let dealers = try (0..<maximumPeers).map { _ in
            let dealer = try context.socket(.dealer)
            try dealer.connect(queue.requestsEndpoint)
            return dealer
        }
        for dealer in dealers {
            #expect(try request(dealer, ["PING".bytes], within: .seconds(5))?.first == "PONG".bytes,
                    "a client was refused while silent connections were held")
        }
        #expect(queue.counters.connectionsRefused == 0)
        #expect(queue.wait { $0.silentConnectionsClosed == silent.count }, "a silent connection stayed open over the limit")
        // The closed ones see the end of their stream.
        #expect(silent.allSatisfy { $0.isClosedByPeer(within: .seconds(5)) })
    }
}

/// A plain TCP connection that sends nothing.
final class RawConnection {
    let descriptor: Int32

    init(port: UInt16) throws {
        descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else { throw POSIXError(.ECONNREFUSED) }
    }

    /// Whether the other end closed it (a read returns 0 or an error) within `limit`; what it sent
    /// before (libzmq's half of the ZMTP greeting) is read and dropped.
    func isClosedByPeer(within limit: Duration) -> Bool {
        let deadline = ContinuousClock.now + limit
        var buffer = [UInt8](repeating: 0, count: 256)
        while ContinuousClock.now < deadline {
            var item = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            let remaining = deadline - ContinuousClock.now
            guard poll(&item, 1, Int32(remaining.components.seconds * 1_000 + remaining.components.attoseconds / 1_000_000_000_000_000 + 1)) == 1 else {
                return false
            }
            if read(descriptor, &buffer, buffer.count) <= 0 { return true }
        }
        return false
    }

    func close() { _ = Glibc.close(descriptor) }
}
