import Bus
import EventLog
import Foundation
import StoreKitLive
import ZeroMQ

/// The bus's ceiling on this machine: the hops of a purchase lifecycle and nothing else.
///
/// Three roles, each on its own thread with its own ZeroMQ context (so its own I/O thread, as a
/// process has), over the same sockets as the bus: the driver and the store send commands on a
/// DEALER to the queue's ROUTER and hear every record on a SUB from its PUB. The queue appends each
/// round's commands to a file with one write and one fdatasync, then publishes them as one message and
/// acknowledges each sender once. A lifecycle is three such commands (add, decide, finish), each a
/// durable record heard by both subscribers: the critical path and the messages of a bus lifecycle,
/// batched as wire version 2 batches, without decoding, projections, roles or any per-command check.
/// No runtime of these roles on these sockets and this disk can beat it, so `bench bus` prints it
/// beside the bus: a target above the skeleton's figure is above what the design allows here.
enum BusSkeleton {
    struct Measurement {
        var lifecyclesPerSecond: Double
        var latencyMicroseconds: (p50: Double, p99: Double)
        /// The open model: lifecycles intended to start in the window (nil for the closed loop).
        var offeredPerSecond: Double?
    }

    /// Bytes of one record on the wire and in the file: a lifecycle's number, its stage, and padding
    /// to the size of the bus's average event.
    fileprivate static let idBytes = 9

    /// The closed loop of `inFlight` lifecycles (`rate` nil), or the open model at `rate` per second.
    static func run(transport: String, directory: URL, seconds: Double, inFlight: Int, rate: Double?, recordBytes: Int) throws -> Measurement {
        let scratch = directory.appendingPathComponent("skeleton-\(transport)-\(getpid())", isDirectory: true)
        try? FileManager.default.removeItem(at: scratch)
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: scratch) }
        let (events, requests) = transport == "tcp"
            ? ("tcp://127.0.0.1:*", "tcp://127.0.0.1:*")
            : ("ipc://\(scratch.path)/e.ipc", "ipc://\(scratch.path)/r.ipc")
        let recordSize = max(idBytes, recordBytes)
        let queue = try Queue(events: events, requests: requests, path: scratch.appendingPathComponent("log").path, recordBytes: recordSize)
        let store = try Store(events: queue.eventsEndpoint, requests: queue.requestsEndpoint, recordBytes: recordSize)
        let warmUp = LiveClock.monotonicNanoseconds() + 500_000_000
        let end = warmUp + Int64(seconds * 1e9)
        let driver = try Driver(events: queue.eventsEndpoint, requests: queue.requestsEndpoint, recordBytes: recordSize,
                                inFlight: inFlight, interval: rate.map { Int64(1e9 / $0) }, warmUp: warmUp, end: end)
        let stop = Flag()
        let roles = DispatchGroup()
        func start(_ body: @escaping @Sendable () throws -> Void) {
            roles.enter()
            Thread.detachNewThread {
                defer { roles.leave() }
                do { try body() } catch { stop.fail("\(error)") }
            }
        }
        start { try queue.run(until: stop) }
        // Each probes on its own sockets before its thread starts: a socket is used by one thread at a time.
        store.client.waitForSubscription()
        driver.client.waitForSubscription()
        start { try store.run(until: stop) }
        start {
            defer { stop.set() }
            try driver.run(drainUntil: end + 5_000_000_000)
        }
        guard roles.wait(timeout: .now() + seconds + 40) == .success else {
            throw RoleProcessError("bench: the bus skeleton did not stop in time", code: .benchmark)
        }
        if let failure = stop.failure { throw RoleProcessError("bench: the bus skeleton failed: \(failure)", code: .benchmark) }
        let latencies = driver.latencies.sorted()
        let window = Double(end - warmUp) / 1e9
        return Measurement(lifecyclesPerSecond: Double(driver.completed) / window,
                           latencyMicroseconds: (BusBenchmark.percentileMicroseconds(latencies, 0.5), BusBenchmark.percentileMicroseconds(latencies, 0.99)),
                           offeredPerSecond: rate.map { _ in Double(driver.startedInWindow) / window })
    }

    /// Set once by whichever role finishes or fails first; every role loop checks it each round.
    private final class Flag: @unchecked Sendable {
        private let lock = NSLock()
        private var isSet = false
        private(set) var failure: String?
        var value: Bool { lock.withLock { isSet } }
        func set() { lock.withLock { isSet = true } }
        func fail(_ message: String) {
            lock.withLock {
                if failure == nil { failure = message }
                isSet = true
            }
        }
    }

    /// Reads every message waiting on `socket` (after waiting up to `timeout` for the first), at most `limit`.
    private static func drain(_ socket: Socket, timeout: Duration, limit: Int = 4_096, _ body: ([[UInt8]]) -> Void) throws {
        guard let first = try socket.receive(timeout: timeout) else { return }
        body(first)
        var count = 1
        while count < limit, let next = try socket.receive(timeout: .zero) {
            body(next)
            count += 1
        }
    }

    /// Each record of a published round: (lifecycle, stage).
    private static func records(_ body: [UInt8], recordBytes: Int) -> [(UInt64, UInt8)] {
        stride(from: 0, to: body.count - recordBytes + 1, by: recordBytes).map { offset in
            (BusWire.readLittleEndian(body, at: offset), body[offset + 8])
        }
    }

    private static func append(_ id: UInt64, stage: UInt8, to batch: inout [UInt8], recordBytes: Int) {
        BusWire.appendLittleEndian(id, to: &batch)
        batch.append(stage)
        batch.append(contentsOf: repeatElement(0, count: recordBytes - idBytes))
    }

    /// ROUTER in, file with one fdatasync per round, PUB out, one acknowledgement per sender per round.
    private final class Queue: @unchecked Sendable {
        let router: Socket
        let publisher: Socket
        let context: ZeroMQContext
        let eventsEndpoint: String
        let requestsEndpoint: String
        let path: String
        let recordBytes: Int

        init(events: String, requests: String, path: String, recordBytes: Int) throws {
            context = try ZeroMQContext()
            router = try context.socket(.router)
            publisher = try context.socket(.publisher)
            try publisher.set(.sendHighWaterMark, 0)
            try router.bind(requests)
            try publisher.bind(events)
            requestsEndpoint = try router.lastEndpoint
            eventsEndpoint = try publisher.lastEndpoint
            self.path = path
            self.recordBytes = recordBytes
        }

        func run(until stop: Flag) throws {
            defer {
                router.close()
                publisher.close()
                context.terminate()
            }
            let descriptor = try FileIO.open(path, flags: O_WRONLY | O_CREAT | O_TRUNC)
            defer { FileIO.close(descriptor) }
            var offset: UInt64 = 0
            while !stop.value {
                var round: [UInt8] = []
                var senders: [[UInt8]] = []
                try BusSkeleton.drain(router, timeout: .milliseconds(1)) { message in
                    guard message.count == 2 else { return }
                    senders.append(message[0])
                    round.append(contentsOf: message[1])
                }
                guard !round.isEmpty else { continue }
                try FileIO.writeAll(descriptor, round, at: offset, path: path)
                try FileIO.synchronizeData(descriptor, path: path)
                offset += UInt64(round.count)
                try publisher.send([round])
                var acknowledged = Set<[UInt8]>()
                for sender in senders where acknowledged.insert(sender).inserted {
                    try router.send([sender, [1]])
                }
            }
        }
    }

    /// A role's sockets: a SUB that hears every record and a DEALER to the queue, on a context of its own.
    private final class Client: @unchecked Sendable {
        let context: ZeroMQContext
        let subscriber: Socket
        let dealer: Socket

        init(events: String, requests: String) throws {
            context = try ZeroMQContext()
            subscriber = try context.socket(.subscriber)
            dealer = try context.socket(.dealer)
            try subscriber.set(.receiveHighWaterMark, 0)
            try subscriber.subscribe(to: "")
            try subscriber.connect(events)
            try dealer.connect(requests)
        }

        /// Sends a probe record (stage 255, which no role acts on) until the queue's PUB knows this
        /// subscriber (a round is heard), then drops what the probes brought.
        func waitForSubscription() {
            var probe: [UInt8] = []
            BusSkeleton.append(.max, stage: 255, to: &probe, recordBytes: BusSkeleton.idBytes)
            for _ in 0..<500 {
                _ = try? dealer.send([probe])
                if (try? subscriber.receive(timeout: .milliseconds(10))) ?? nil != nil { break }
            }
            while (try? dealer.receive(timeout: .milliseconds(20))) ?? nil != nil {}
            while (try? subscriber.receive(timeout: .milliseconds(20))) ?? nil != nil {}
        }

        func close() {
            subscriber.close()
            dealer.close()
            context.terminate()
        }
    }

    /// Hears every record; answers each added lifecycle with its decision, one message per round.
    private final class Store: @unchecked Sendable {
        let client: Client
        let recordBytes: Int

        init(events: String, requests: String, recordBytes: Int) throws {
            client = try Client(events: events, requests: requests)
            self.recordBytes = recordBytes
        }

        func run(until stop: Flag) throws {
            defer { client.close() }
            while !stop.value {
                var decisions: [UInt8] = []
                try BusSkeleton.drain(client.subscriber, timeout: .milliseconds(1)) { message in
                    for (id, stage) in BusSkeleton.records(message[0], recordBytes: recordBytes) where stage == 0 {
                        BusSkeleton.append(id, stage: 1, to: &decisions, recordBytes: recordBytes)
                    }
                }
                if !decisions.isEmpty { try client.dealer.send([decisions]) }
                try BusSkeleton.drain(client.dealer, timeout: .zero) { _ in }
            }
        }
    }

    /// Starts lifecycles (closed loop or open model), finishes each once decided, and times it.
    private final class Driver: @unchecked Sendable {
        let client: Client
        let recordBytes: Int
        let inFlightLimit: Int
        let interval: Int64?
        let warmUp: Int64
        let end: Int64
        var latencies: [Int64] = []
        var completed = 0
        var startedInWindow = 0
        /// Each lifecycle in flight's intended start (closed loop: when it was sent), by number.
        private var starts: [UInt64: Int64] = [:]

        init(events: String, requests: String, recordBytes: Int, inFlight: Int, interval: Int64?, warmUp: Int64, end: Int64) throws {
            client = try Client(events: events, requests: requests)
            self.recordBytes = recordBytes
            inFlightLimit = inFlight
            self.interval = interval
            self.warmUp = warmUp
            self.end = end
        }

        func run(drainUntil: Int64) throws {
            defer { client.close() }
            var nextID: UInt64 = 0
            var nextIntended = LiveClock.monotonicNanoseconds()
            while true {
                let now = LiveClock.monotonicNanoseconds()
                if now > end && (interval == nil || starts.isEmpty || now > drainUntil) { return }
                var commands: [UInt8] = []
                while starts.count < inFlightLimit && now <= end && (interval == nil || nextIntended <= now) {
                    let intended = interval == nil ? now : nextIntended
                    starts[nextID] = intended
                    if intended >= warmUp && intended < end { startedInWindow += 1 }
                    BusSkeleton.append(nextID, stage: 0, to: &commands, recordBytes: recordBytes)
                    nextID += 1
                    nextIntended += interval ?? 0
                }
                if !commands.isEmpty { try client.dealer.send([commands]) }
                try BusSkeleton.drain(client.dealer, timeout: .zero) { _ in }
                let wait: Duration = interval == nil || now > end ? .milliseconds(1)
                    : .nanoseconds(max(0, min(1_000_000, nextIntended - LiveClock.monotonicNanoseconds())))
                var finishes: [UInt8] = []
                try BusSkeleton.drain(client.subscriber, timeout: wait) { message in
                    let heard = LiveClock.monotonicNanoseconds()
                    for (id, stage) in BusSkeleton.records(message[0], recordBytes: recordBytes) {
                        if stage == 1 {
                            BusSkeleton.append(id, stage: 2, to: &finishes, recordBytes: recordBytes)
                        } else if stage == 2, let start = starts.removeValue(forKey: id) {
                            // The closed loop counts what starts and finishes in the window; the open model
                            // every lifecycle intended to start in it, however late it finishes.
                            let counted = interval == nil ? start >= warmUp && heard < end : start >= warmUp && start < end
                            if counted {
                                latencies.append(heard - start)
                                completed += 1
                            }
                        }
                    }
                }
                if !finishes.isEmpty { try client.dealer.send([finishes]) }
            }
        }
    }
}
