import Foundation
import Testing
import ZeroMQ

/// Transports exercised by the messaging tests.
enum Transport: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case inproc
    case ipc
    case tcp

    var testDescription: String { rawValue }

    /// An endpoint to bind for this transport: unique inproc name, a fresh ipc path in
    /// a short temporary directory, or an ephemeral loopback port.
    func bindEndpoint() throws -> String {
        switch self {
        case .inproc:
            return "inproc://test-\(UUID().uuidString)"
        case .ipc:
            // Short directory: ipc paths are limited to about 107 bytes.
            let directory = "/tmp/zmq-test-\(UUID().uuidString.prefix(8))"
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            return "ipc://\(directory)/socket"
        case .tcp:
            return "tcp://127.0.0.1:*"
        }
    }
}

/// Binds `socket` for `transport` and returns the endpoint peers should connect to.
func bind(_ socket: Socket, on transport: Transport) throws -> String {
    try socket.bind(transport.bindEndpoint())
    return try socket.lastEndpoint
}

/// Publishes `message` repeatedly until `subscriber` receives something (PUB/SUB
/// subscriptions propagate asynchronously: the "slow joiner"), for at most `limit`.
func publishUntilReceived(
    _ message: [[UInt8]],
    from publisher: Socket,
    to subscriber: Socket,
    limit: Duration = .seconds(5)
) throws -> [[UInt8]]? {
    let deadline = ContinuousClock.now + limit
    while ContinuousClock.now < deadline {
        try publisher.send(message)
        if let received = try subscriber.receive(timeout: .milliseconds(20)) { return received }
    }
    return nil
}

/// Drains whatever `socket` still has queued, waiting at most `quiet` for each message.
func drain(_ socket: Socket, quiet: Duration = .milliseconds(50)) throws {
    while try socket.receive(timeout: quiet) != nil {}
}

extension String {
    var bytes: [UInt8] { Array(utf8) }
}
