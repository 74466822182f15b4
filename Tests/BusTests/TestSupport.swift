import Bus
import EventLog
import Foundation
import StoreKitModel
import Synchronization
import Testing
import ZeroMQ

/// The transports every round-trip test runs over.
enum Transport: String, CaseIterable, Sendable, CustomStringConvertible {
    case ipc
    case tcp

    var description: String { rawValue }

    /// A fresh endpoint to bind: a unique short ipc path, or a wildcard local tcp port.
    func endpoint() -> String {
        switch self {
        case .ipc: "ipc:///tmp/bus-\(UUID().uuidString.prefix(12)).ipc"
        case .tcp: "tcp://127.0.0.1:*"
        }
    }
}

/// A ~256-byte event, the size the throughput target assumes.
func sampleEvent(_ index: Int) -> Event {
    .deviceRegistered(device: "device-\(index % 16)", account: "account-\(index)-" + String(repeating: "x", count: 220))
}

/// A command handler that appends one event per new command id and dedupes by id, the way
/// the queue role does; counts what it saw so tests can check "took effect once".
final class DedupingHandler: @unchecked Sendable {
    private let state = Locked<(applied: [CommandID: UInt64], calls: Int)>(([:], 0))

    func handle(_ command: Command, _ appender: EventLogAppender) throws -> CommandOutcome {
        if let lastSequence = state.withLock({ state -> UInt64? in
            state.calls += 1
            return state.applied[command.id]
        }) {
            return .duplicate(lastSequence: lastSequence)
        }
        let record = try appender.append(.appLaunched(device: command.body.device), commandID: command.id, timestamp: 1_000)
        state.withLock { $0.applied[command.id] = record.sequence }
        return .accepted([record])
    }

    var appliedCount: Int { state.withLock { $0.applied.count } }
    var calls: Int { state.withLock { $0.calls } }
}

/// Runs a `QueueEndpoint` over a real `PartitionWriter` in a temporary directory on its own
/// thread, the way the queue process does; tests talk to it only through sockets, except
/// for `perform`, which runs a closure on the loop thread (to append events directly).
final class QueueHarness: @unchecked Sendable {
    typealias Handler = @Sendable (Command, EventLogAppender) throws -> CommandOutcome

    let directory: URL
    let writer: PartitionWriter
    let eventsEndpoint: String
    let requestsEndpoint: String

    private struct Shared {
        var tasks: [@Sendable (QueueEndpoint, EventLogAppender) throws -> Void] = []
        var stop = false
        var counters = QueueEndpointCounters()
        var queuedReplyBytes = 0
        var connectedPeers = (subscribers: 0, requesters: 0)
        var refusals: [WireFailure] = []
        /// What each command's sender reported with the copy the handler took last.
        var reports: [CommandID: SenderReport] = [:]
        var failure: String?
    }
    private let shared = Locked(Shared())
    private let finished = DispatchSemaphore(value: 0)
    private var isStopped = false

    init(
        context: ZeroMQContext, transport: Transport = .tcp, durability: DurabilityPolicy = .defaultGroupCommit,
        configure: @Sendable (inout QueueEndpointConfiguration) -> Void = { _ in }, handler: @escaping Handler
    ) throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("bus-tests-\(UUID().uuidString)")
        writer = try PartitionWriter(
            directory: directory, partition: "queue", configuration: PartitionWriterConfiguration(durability: durability))
        var configuration = QueueEndpointConfiguration(eventsEndpoint: transport.endpoint(), requestsEndpoint: transport.endpoint())
        configuration.heartbeatInterval = .milliseconds(50)
        configure(&configuration)
        let started = DispatchSemaphore(value: 0)
        let endpoints = Locked<Result<(String, String), any Error>?>(nil)
        let writer = writer
        let frozenConfiguration = configuration
        let thread = Thread { [shared, finished] in
            defer { finished.signal() }
            let appender = EventLogAppender(writer: writer)
            let endpoint: QueueEndpoint
            do {
                endpoint = try QueueEndpoint(
                    context: context, configuration: frozenConfiguration, writer: writer,
                    handler: { command, report in
                        shared.withLock { $0.reports[command.id] = report }
                        return try handler(command, appender)
                    })
                endpoints.withLock { $0 = .success((endpoint.eventsEndpoint, endpoint.requestsEndpoint)) }
            } catch {
                endpoints.withLock { $0 = .failure(error) }
                started.signal()
                return
            }
            endpoint.onRefused = { failure in shared.withLock { $0.refusals.append(failure) } }
            started.signal()
            defer { endpoint.close() }
            while true {
                let (tasks, stop) = shared.withLock { state in
                    defer { state.tasks = [] }
                    return (state.tasks, state.stop)
                }
                if stop { return }
                do {
                    for task in tasks { try task(endpoint, appender) }
                    try endpoint.step(timeout: .milliseconds(5))
                } catch {
                    shared.withLock { $0.failure = "\(error)" }
                    return
                }
                let counters = endpoint.counters
                let (queuedReplyBytes, connectedPeers) = (endpoint.queuedReplyByteCount, endpoint.connectedPeers)
                shared.withLock {
                    $0.counters = counters
                    $0.queuedReplyBytes = queuedReplyBytes
                    $0.connectedPeers = connectedPeers
                }
            }
        }
        thread.start()
        started.wait()
        let (events, requests) = try endpoints.withLock { $0! }.get()
        eventsEndpoint = events
        requestsEndpoint = requests
    }

    /// Runs `task` on the loop thread before its next step.
    func perform(_ task: @escaping @Sendable (QueueEndpoint, EventLogAppender) throws -> Void) {
        shared.withLock { $0.tasks.append(task) }
    }

    /// Stalls the loop thread for `duration`; returns once the stall has begun, so that a request
    /// sent afterwards is certain to wait behind it.
    func stall(for duration: Duration) {
        let begun = DispatchSemaphore(value: 0)
        let seconds = Double(duration.components.seconds) + Double(duration.components.attoseconds) * 1e-18
        perform { _, _ in
            begun.signal()
            Thread.sleep(forTimeInterval: seconds)  // The stall under test, not a synchronisation.
        }
        begun.wait()
    }

    /// Appends `count` sample events outside any command and hands them to the endpoint.
    func appendEvents(_ count: Int, startingAt first: Int = 0) {
        perform { endpoint, appender in
            var records: [BusRecord] = []
            records.reserveCapacity(count)
            for index in first..<(first + count) {
                records.append(try appender.append(sampleEvent(index), commandID: nil, timestamp: Int64(index)))
            }
            endpoint.publishWhenDurable(records)
        }
    }

    var counters: QueueEndpointCounters { shared.withLock { $0.counters } }
    /// Reply bytes (ACK, PONG, BATCH) the endpoint had queued at its last step.
    var queuedReplyBytes: Int { shared.withLock { $0.queuedReplyBytes } }
    var connectedPeers: (subscribers: Int, requesters: Int) { shared.withLock { $0.connectedPeers } }

    /// Waits until `condition` holds for the endpoint's counters (checked after each of its
    /// steps) or `limit` passes; returns whether it held.
    func wait(within limit: Duration = .seconds(10), until condition: (QueueEndpointCounters) -> Bool) -> Bool {
        let deadline = ContinuousClock.now + limit
        while ContinuousClock.now < deadline {
            if condition(counters) { return true }
            Thread.sleep(forTimeInterval: 0.002)  // Polling the loop's snapshot, not synchronising with it.
        }
        return condition(counters)
    }
    var refusals: [WireFailure] { shared.withLock { $0.refusals } }
    func report(of id: CommandID) -> SenderReport? { shared.withLock { $0.reports[id] } }
    var loopFailure: String? { shared.withLock { $0.failure } }

    /// Stops the loop (closing the endpoint's sockets) and waits for it; idempotent.
    func stop() {
        guard !isStopped else { return }
        isStopped = true
        shared.withLock { $0.stop = true }
        finished.wait()
    }

    deinit {
        stop()
        try? writer.close()
        try? FileManager.default.removeItem(at: directory)
    }
}

/// Receives until `count` events arrived or `limit` passed.
func collect(_ subscriber: EventSubscriber, count: Int, within limit: Duration = .seconds(20)) throws -> [RecordedEvent] {
    let deadline = ContinuousClock.now + limit
    var events: [RecordedEvent] = []
    while events.count < count, ContinuousClock.now < deadline {
        events += try subscriber.receive(timeout: .milliseconds(20))
    }
    return events
}

/// Polls the subscriber until `condition` holds or `limit` passes; returns whether it held.
func wait(for subscriber: EventSubscriber, within limit: Duration = .seconds(20), until condition: () -> Bool) throws -> Bool {
    let deadline = ContinuousClock.now + limit
    while !condition() {
        if ContinuousClock.now >= deadline { return false }
        _ = try subscriber.receiveRecords(timeout: .milliseconds(10))
    }
    return true
}

/// Sends one request on a raw DEALER and returns the reply, if any arrives within `limit`.
func request(_ dealer: Socket, _ frames: [[UInt8]], within limit: Duration = .seconds(2)) throws -> [[UInt8]]? {
    try dealer.send(frames)
    return try dealer.receive(timeout: limit)
}

extension String {
    var bytes: [UInt8] { Array(utf8) }
}

/// A value behind a lock, shareable between the test thread and a loop thread.
final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) { self.value = value }

    func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
