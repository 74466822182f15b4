import Bus
import EventLog
import Foundation
import StoreKitLive
import StoreKitModel
import StoreKitRoles
import StoreKitRuntime
import ZeroMQ

/// `sksim bench bus`: whole purchase lifecycles (addPayment → purchased → finished →
/// removed) through a real queue process and a real store process, driven from this
/// process, beside raw libzmq PUB/SUB throughput measured in the same run.
public enum BusBenchmark {
    public struct Configuration: Sendable {
        public var executable: URL
        public var directory: URL
        public var seconds: Double = 4
        public var devices = 100
        /// Lifecycles in flight at once (a closed loop).
        public var inFlight = 2_000
        public var rawMessages = 400_000
        /// App-side load drivers, one thread each.
        public var drivers = 1
        /// Open model: lifecycles started at this rate (per second, over all drivers), each timed
        /// from its intended start, up to `inFlight` at once; nil is the closed loop of `inFlight`.
        public var rate: Double?
        /// The newest wire version the drivers and the store use (docs/wire-format.md); the queue speaks both.
        public var wireVersion: UInt8 = 2
        public init(executable: URL, directory: URL) {
            self.executable = executable
            self.directory = directory
        }
    }

    public struct Measurement: Sendable {
        public var transport: String
        public var lifecycles: Int
        public var seconds: Double
        public var lifecyclesPerSecond: Double
        public var latencyMicroseconds: (p50: Double, p99: Double, p999: Double)
        public var averageEventBytes: Double
        public var rawMessagesPerSecond: Double
        public var subscribers: Int
        /// Open model: lifecycles started per second (intended starts in the window); nil for the closed loop.
        public var offeredPerSecond: Double?
        /// Open model: lifecycles started in the window still unfinished when the drain gave up (each
        /// counted in the percentiles with the latency it had reached then, a lower bound).
        public var unfinished = 0
        /// Why the bus waits instead of working: command retries the drivers sent (no ACK in time, or
        /// answered `unavailable`), commands the queue answered `unavailable` and duplicates it ignored.
        public var retriesSent = 0
        public var queueAnsweredUnavailable = 0
        public var queueDuplicates = 0
        /// Replies the queue dropped because a peer's reply queue was full.
        public var repliesDropped = 0
        /// Gaps in the drivers' event streams filled by FETCH (PUB dropped at its high-water mark).
        public var gapsRecovered = 0
        /// CPU used during the measured window, in cores (1 = one core busy all the time): the
        /// queue process, the store process, and this process (the drivers).
        public var queueCores: Double = 0
        public var storeCores: Double = 0
        public var driverCores: Double = 0
        /// The whole machine over the measured window: the share of all cores' time that was busy, and the
        /// share the hypervisor took (steal). On a shared VM a phase with much steal runs slower and later.
        public var machineBusyFraction: Double = 0
        public var machineStealFraction: Double = 0
        /// The whole machine's context switches over the window, per lifecycle finished in it.
        public var machineContextSwitchesPerLifecycle: Double = 0
        /// The queue's CPU per finished lifecycle in the window, in microseconds (`queueCores` over the rate).
        public var queueMicrosecondsPerLifecycle: Double? {
            queueCores > 0 && lifecyclesPerSecond > 0 ? queueCores / lifecyclesPerSecond * 1e6 : nil
        }
        /// The ratio to the baseline if the queue had every core of the machine to itself (the store and
        /// the drivers costing nothing) at its measured CPU per lifecycle:
        /// `ratioToBaseline × cores / queueCores`. What the bus reaches on this machine without making the
        /// queue's own work per lifecycle smaller (larger batches at a higher rate would lower it a little).
        public var ceilingRatioToBaseline: Double? {
            queueCores > 0 ? ratioToBaseline * Double(ProcessInfo.processInfo.activeProcessorCount) / queueCores : nil
        }
        /// Group-commit fsyncs of the queue's log over its life, and the records it wrote.
        public var durabilityRounds = 0
        public var records: UInt64 = 0
        /// Where a finished lifecycle's time went, p50 and p99 in microseconds of each stage: the
        /// driver's lag (intended start to send), send to `transactionAdded`, to `transactionPurchased`,
        /// and to `transactionFinished` (the finish command's round trip through the queue).
        public var stages: [(name: String, p50: Double, p99: Double)] = []
        /// The open model's latency over the window: the largest latency of the lifecycles intended
        /// to start in each tenth of it, in microseconds (a backlog grows; a stall is a spike).
        public var timeline: [Double] = []
        /// Commands (3), their acknowledgements (3), and events (3) to each subscriber (the
        /// store and every driver).
        public var busMessagesPerLifecycle: Double { Double(6 + 3 * subscribers) }
        public var ratioToBaseline: Double { lifecyclesPerSecond * busMessagesPerLifecycle / rawMessagesPerSecond }
    }

    /// The benchmarks' topology: a queue and a store that decides at once and always purchases;
    /// the apps are the benchmark's own drivers.
    public static func topologyText(name: String, events: String = "ipc://{run}/e.ipc", requests: String = "ipc://{run}/r.ipc") -> String {
        """
        name: \(name)
        seed: 1
        durability: group
        heartbeatMilliseconds: 250
        scenario:
          devices: 1
          purchasesPerDevice: 0
          store: {failureProbability: 0, deferralProbability: 0, cancellationProbability: 0, latencyMilliseconds: {minimum: 0, mean: 0}}
        processes:
          - {name: queue, role: queue, events: "\(events)", requests: "\(requests)"}
          - {name: store, role: store}
          - {name: downloader, role: downloader}
          - {name: apps, role: observer, devices: "1-1"}
        """
    }

    public static func run(_ configuration: Configuration, transports: [String] = ["ipc", "tcp"]) throws -> [Measurement] {
        try transports.map { try measure(transport: $0, configuration) }
    }

    private static func endpoints(_ transport: String, _ directory: URL, offset: Int) -> (String, String) {
        if transport == "tcp" {
            let port = 30_000 + Int(getpid() % 15_000) * 2 + offset * 4
            return ("tcp://127.0.0.1:\(port)", "tcp://127.0.0.1:\(port + 1)")
        }
        return ("ipc://\(directory.path)/e\(offset).ipc", "ipc://\(directory.path)/r\(offset).ipc")
    }

    private static func measure(transport: String, _ configuration: Configuration) throws -> Measurement {
        let directory = configuration.directory.appendingPathComponent("bus-\(transport)-\(getpid())", isDirectory: true)
        try? FileManager.default.removeItem(at: directory)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let (events, requests) = endpoints(transport, directory, offset: 0)
        let topologyPath = directory.appendingPathComponent("bench.yaml").path
        try topologyText(name: "bench-\(transport)", events: events, requests: requests)
            .write(toFile: topologyPath, atomically: true, encoding: .utf8)
        var children: [Process] = []
        defer {
            for child in children where child.isRunning { child.terminate() }
            for child in children { child.waitUntilExit() }
        }
        try startServices(into: &children, executable: configuration.executable, wireVersion: configuration.wireVersion, topologyPath: topologyPath, directory: directory)

        let context = try ZeroMQContext()
        defer { context.terminate() }
        // Several app-side drivers, each on its own thread with its own connections and
        // devices: one thread alone saturates a core before the queue does.
        let drivers = try (0..<configuration.drivers).map { index in
            try Driver(index: index, context: context, events: events, requests: requests,
                       devices: max(1, configuration.devices / configuration.drivers),
                       inFlight: max(1, configuration.inFlight / configuration.drivers),
                       rate: configuration.rate.map { $0 / Double(configuration.drivers) }, wireVersion: configuration.wireVersion)
        }
        let warmUp = LiveClock.monotonicNanoseconds() + 500_000_000
        let end = warmUp + Int64(configuration.seconds * 1e9)
        let finished = DispatchGroup()
        for driver in drivers {
            finished.enter()
            Thread.detachNewThread {
                driver.run(warmUp: warmUp, end: end, drainUntil: end + drainNanoseconds)
                finished.leave()
            }
        }
        // Each process's CPU over the measured window (the clock, not a synchronisation: the drivers
        // keep their own time).
        func sleepUntil(_ instant: Int64) {
            let left = instant - LiveClock.monotonicNanoseconds()
            if left > 0 { usleep(useconds_t(left / 1_000)) }
        }
        func cpu() -> [Int64] { children.map { processCPUNanoseconds(pid: $0.processIdentifier) ?? 0 } + [processCPUNanoseconds()] }
        sleepUntil(warmUp)
        let cpuBefore = cpu()
        let machineBefore = LoadBenchmark.CPUTimes.read()
        sleepUntil(end)
        let cpuAfter = cpu()
        let machineAfter = LoadBenchmark.CPUTimes.read()
        guard finished.wait(timeout: .now() + configuration.seconds + 30) == .success else {
            throw RoleProcessError("bench: the load drivers did not stop in time", code: .benchmark)
        }
        for driver in drivers { if let failure = driver.failure { throw RoleProcessError("bench: \(failure)", code: .benchmark) } }
        // The queue writes its statistics when it stops.
        children[0].terminate()
        children[0].waitUntilExit()
        let statistics = QueueStatistics.read(in: directory, partition: QueueProcess.partition)
        var latencies = drivers.flatMap(\.latencies)
        let completed = drivers.reduce(0) { $0 + $1.completed }
        let eventBytes = drivers.reduce(0) { $0 + $1.eventBytes }
        let eventCount = drivers.reduce(0) { $0 + $1.eventCount }
        let seconds = Double(end - warmUp) / 1e9
        latencies.sort()
        func percentile(_ fraction: Double) -> Double { Self.percentileMicroseconds(latencies, fraction) }
        let averageBytes = eventCount > 0 ? Double(eventBytes) / Double(eventCount) : 128
        // The best of three: the limit is what the machine reaches, and one run slowed by a neighbour
        // on the VM (seen: a fifth of the usual rate) would make the ratio look five times better.
        let raw = try (0..<Self.rawRuns).map { _ in
            try rawPublishSubscribe(transport: transport, directory: directory, messages: configuration.rawMessages, bytes: Int(averageBytes.rounded()))
        }.max() ?? 0
        var measurement = Measurement(transport: transport, lifecycles: completed, seconds: seconds,
                                      lifecyclesPerSecond: Double(completed) / seconds,
                                      latencyMicroseconds: (percentile(0.5), percentile(0.99), percentile(0.999)),
                                      averageEventBytes: averageBytes, rawMessagesPerSecond: raw, subscribers: configuration.drivers + 1)
        if configuration.rate != nil {
            measurement.offeredPerSecond = Double(drivers.reduce(0) { $0 + $1.startedInWindow }) / seconds
        }
        measurement.unfinished = drivers.reduce(0) { $0 + $1.unfinished }
        let samples = drivers.flatMap(\.stageSamples)
        measurement.stages = stages(samples)
        if configuration.rate != nil { measurement.timeline = timeline(samples, warmUp: warmUp, end: end) }
        measurement.retriesSent = drivers.reduce(0) { $0 + $1.sender.retriesSent }
        measurement.gapsRecovered = drivers.reduce(0) { $0 + $1.subscriber.counters.gapsRecovered }
        measurement.queueAnsweredUnavailable = statistics?.commandsAnsweredUnavailable ?? 0
        measurement.queueDuplicates = statistics?.duplicateCommands ?? 0
        measurement.repliesDropped = statistics?.repliesDropped ?? 0
        measurement.durabilityRounds = statistics?.durabilityRounds ?? 0
        measurement.records = statistics?.records ?? 0
        let cores = zip(cpuBefore, cpuAfter).map { Double($1 - $0) / Double(end - warmUp) }
        (measurement.queueCores, measurement.storeCores, measurement.driverCores) = (cores[0], cores[1], cores[2])
        measurement.machineBusyFraction = LoadBenchmark.CPUTimes.busyFraction(from: machineBefore, to: machineAfter)
        measurement.machineStealFraction = LoadBenchmark.CPUTimes.stealFraction(from: machineBefore, to: machineAfter)
        measurement.machineContextSwitchesPerLifecycle = completed > 0
            ? Double(LoadBenchmark.CPUTimes.contextSwitches(from: machineBefore, to: machineAfter)) / Double(completed) : 0
        return measurement
    }

    /// The `fraction` percentile of ascending nanoseconds, in microseconds (0 when there are none).
    static func percentileMicroseconds(_ sorted: [Int64], _ fraction: Double) -> Double {
        guard !sorted.isEmpty else { return 0 }
        return Double(sorted[min(sorted.count - 1, Int(Double(sorted.count) * fraction))]) / 1_000
    }

    /// Starts the queue, then the store, each waited for until ready; each is in `children` as soon as it runs,
    /// so the caller stops whatever started.
    private static func startServices(into children: inout [Process], executable: URL, wireVersion: UInt8, topologyPath: String, directory: URL) throws {
        for name in ["queue", "store"] {
            let process = Process()
            process.executableURL = executable
            process.arguments = [name, "--topology", topologyPath, "--name", name, "--run-directory", directory.path]
            process.standardError = FileHandle(forWritingAtPath: "/dev/null")
            process.environment = ProcessInfo.processInfo.environment.merging(["SKSIM_WIRE_VERSION": "\(wireVersion)"]) { $1 }
            try process.run()
            children.append(process)
            // The queue first (the store connects to it); the store before any load, so that its start-up
            // (catching up on the log) is not measured as the latency of the first lifecycles.
            try waitUntilReady(process, name: name, directory: directory)
        }
    }

    /// One finished lifecycle's intended start and the durations of its stages (`Measurement.stages`).
    private typealias StageSample = (intended: Int64, lag: Int64, added: Int64, purchased: Int64, finished: Int64)

    /// p50 and p99 of each stage, in microseconds.
    private static func stages(_ samples: [StageSample]) -> [(name: String, p50: Double, p99: Double)] {
        func stage(_ name: String, _ value: (StageSample) -> Int64) -> (name: String, p50: Double, p99: Double) {
            let sorted = samples.map(value).sorted()
            guard !sorted.isEmpty else { return (name, 0, 0) }
            return (name, Double(sorted[sorted.count / 2]) / 1_000, Double(sorted[min(sorted.count - 1, sorted.count * 99 / 100)]) / 1_000)
        }
        return [stage("driver lag") { $0.lag }, stage("to added") { $0.added }, stage("to purchased") { $0.purchased },
                stage("to finished") { $0.finished }]
    }

    /// The largest latency of the lifecycles intended to start in each tenth of the window, in microseconds.
    private static func timeline(_ samples: [StageSample], warmUp: Int64, end: Int64) -> [Double] {
        let tenth = max(1, (end - warmUp) / 10)
        var largest = [Int64](repeating: 0, count: 10)
        for sample in samples {
            let bucket = Int(min(9, max(0, (sample.intended - warmUp) / tenth)))
            largest[bucket] = max(largest[bucket], sample.lag + sample.added + sample.purchased + sample.finished)
        }
        return largest.map { Double($0) / 1_000 }
    }

    /// Open model: how long after the window the drivers wait for the lifecycles started in it.
    static let drainNanoseconds: Int64 = 10_000_000_000

    /// Waits (bounded) for a process's ready note: the queue has bound its endpoints, the store has
    /// caught up and reacts to events.
    private static func waitUntilReady(_ process: Process, name: String, directory: URL) throws {
        let deadline = LiveClock.monotonicNanoseconds() + 10_000_000_000
        while ReadyNote.pid(process: name, runDirectory: directory) != process.processIdentifier {
            guard process.isRunning, LiveClock.monotonicNanoseconds() < deadline else {
                throw RoleProcessError("bench: the \(name) process did not start", code: .benchmark)
            }
            usleep(5_000)
        }
    }

    /// The floor of one lifecycle's critical path on this machine, measured now: three durable
    /// appends (the payment, the store's decision, the finish) and six one-way hops (three
    /// command round trips: command in, ACK or event out).
    public struct Floor: Sendable {
        public var fsyncMicroseconds: Double
        /// The 99th percentile of the same write + fdatasync: a lifecycle waits for three, so no
        /// latency p99 under load can be much below it (every command in a slow sync's batch waits).
        public var fsyncP99Microseconds: Double = 0
        public var roundTripMicroseconds: Double
        public var floorMicroseconds: Double { 3 * fsyncMicroseconds + 3 * roundTripMicroseconds }
    }

    /// Median of a write + fdatasync of one 128-byte record on `directory`'s disk, and of a
    /// DEALER/ROUTER round trip over `transport`.
    public static func floor(transport: String, directory: URL) throws -> Floor {
        let scratch = directory.appendingPathComponent("floor-\(transport)-\(getpid())", isDirectory: true)
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: scratch) }
        let fsync = try LogBenchmark.durableAppendPercentiles(directory: scratch)
        let context = try ZeroMQContext()
        defer { context.terminate() }
        let router = try context.socket(.router)
        let dealer = try context.socket(.dealer)
        defer {
            router.close()
            dealer.close()
        }
        let (endpoint, _) = endpoints(transport, scratch, offset: 2)
        try router.bind(endpoint)
        try dealer.connect(try router.lastEndpoint)
        let echo = SocketBox(router)
        let echoing = Thread {
            while let message = try? echo.socket.receive(timeout: .seconds(2)), message.first != [0] {
                _ = try? echo.socket.send(message)
            }
        }
        echoing.start()
        var trips: [Int64] = []
        for _ in 0..<2_000 {
            let start = LiveClock.monotonicNanoseconds()
            try dealer.send([[1]])
            guard try dealer.receive(timeout: .seconds(2)) != nil else { throw RoleProcessError("bench: the round-trip echo did not answer", code: .benchmark) }
            trips.append(LiveClock.monotonicNanoseconds() - start)
        }
        try dealer.send([[0]])
        func median(_ values: [Int64]) -> Double { Double(values.sorted()[values.count / 2]) / 1_000 }
        return Floor(fsyncMicroseconds: fsync.p50, fsyncP99Microseconds: fsync.p99, roundTripMicroseconds: median(trips))
    }

    /// Raw PUB/SUB runs per measurement; the fastest is the baseline.
    static let rawRuns = 3

    /// Raw libzmq: one PUB thread, one SUB, no high-water mark, messages of `bytes` bytes.
    static func rawPublishSubscribe(transport: String, directory: URL, messages: Int, bytes: Int) throws -> Double {
        let (endpoint, _) = endpoints(transport, directory, offset: 1)
        let context = try ZeroMQContext()
        defer { context.terminate() }
        let publisher = try context.socket(.publisher)
        let subscriber = try context.socket(.subscriber)
        defer {
            publisher.close()
            subscriber.close()
        }
        try publisher.set(.sendHighWaterMark, 0)
        try subscriber.set(.receiveHighWaterMark, 0)
        try publisher.bind(endpoint)
        try subscriber.subscribe(to: "")
        try subscriber.connect(try publisher.lastEndpoint)
        let payload = [UInt8](repeating: 7, count: max(1, bytes))
        // Wait for the subscription to reach the publisher (the slow-joiner problem).
        var joined = false
        for _ in 0..<200 where !joined {
            try publisher.send([[1]])
            joined = try subscriber.receive(timeout: .milliseconds(10)) != nil
        }
        while try subscriber.receive(timeout: .milliseconds(20)) != nil {}
        let box = SocketBox(publisher)
        let sent = DispatchSemaphore(value: 0)
        let sending = Thread {
            for _ in 0..<messages { _ = try? box.socket.send([payload]) }
            sent.signal()
        }
        let start = LiveClock.monotonicNanoseconds()
        sending.start()
        var received = 0
        while received < messages, try subscriber.receive(timeout: .seconds(2)) != nil { received += 1 }
        let seconds = Double(LiveClock.monotonicNanoseconds() - start) / 1e9
        _ = sent.wait(timeout: .now() + 10)  // The publisher is closed only once its thread is done.
        return Double(received) / seconds
    }

    /// One app-side load driver: registers its devices, keeps `inFlight` lifecycles going
    /// (addPayment, then finish once purchased) and times each from send to finished. Owns
    /// its sockets and is used by one thread at a time (created here, run there). Its reactions
    /// (`Lifecycles`) run in the one role loop (`RoleHost` over a `LiveRoleTransport`), as a role
    /// process's do.
    private final class Driver: @unchecked Sendable {
        let subscriber: EventSubscriber
        let sender: CommandSender
        let devices: [String]
        let prefix: String
        let inFlightLimit: Int
        /// Nanoseconds between intended starts in the open model; nil for the closed loop.
        let interval: Int64?
        /// What the driver heard and timed.
        private(set) var lifecycles = Lifecycles(devices: 0, interval: nil, warmUp: 0, end: 0)
        var latencies: [Int64] { lifecycles.latencies }
        var stageSamples: [(intended: Int64, lag: Int64, added: Int64, purchased: Int64, finished: Int64)] { lifecycles.stageSamples }
        var completed: Int { lifecycles.completed }
        var eventBytes = 0
        var eventCount = 0
        /// Open model: lifecycles whose intended start fell in the window, and those of them not
        /// finished when the drain ended.
        var startedInWindow: Int { lifecycles.startedInWindow }
        var unfinished = 0
        var failure: String?

        init(index: Int, context: ZeroMQContext, events: String, requests: String, devices: Int, inFlight: Int, rate: Double?,
             wireVersion: UInt8) throws {
            interval = rate.map { Int64(1e9 / max($0, 0.001)) }
            var subscriberConfiguration = EventSubscriberConfiguration(eventsEndpoint: events, requestsEndpoint: requests)
            subscriberConfiguration.newestWireVersion = wireVersion
            subscriber = try EventSubscriber(context: context, configuration: subscriberConfiguration)
            var senderConfiguration = CommandSenderConfiguration(origin: "bench.\(getpid()).\(index)", requestsEndpoint: requests)
            senderConfiguration.newestWireVersion = wireVersion
            senderConfiguration.window = inFlight * 2 + devices * 3 + 1_000
            sender = try CommandSender(context: context, configuration: senderConfiguration)
            prefix = "bench-\(index)-"
            self.devices = (0..<devices).map { "bench-\(index)-\($0)" }
            inFlightLimit = inFlight
        }

        func run(warmUp: Int64, end: Int64, drainUntil: Int64) {
            defer {
                subscriber.close()
                sender.close()
            }
            do {
                try drive(warmUp: warmUp, end: end, drainUntil: drainUntil)
            } catch {
                failure = "\(error)"
            }
        }

        /// The closed loop counts the lifecycles that start and finish inside the window. The open
        /// model counts every lifecycle whose intended start is inside it, however late it finishes:
        /// after the window it starts no more and waits (up to `drainUntil`) for those to finish, so
        /// a system that falls behind shows as latency, not as fewer samples.
        private func drive(warmUp: Int64, end: Int64, drainUntil: Int64) throws {
            for device in devices {
                try sender.submit(.registerDevice(device: device, account: "account-\(device)"))
                try sender.submit(.launchApp(device: device))
                try sender.submit(.attachObserver(device: device, observer: "bench"))
            }
            lifecycles = Lifecycles(devices: devices.count, interval: interval, warmUp: warmUp, end: end)
            let host = RoleHost(role: lifecycles)
            var transport = LiveRoleTransport(sender: sender, processName: "bench")
            var nextDevice = 0
            let payment = Payment(productIdentifier: "com.example.sksim.coins.small")
            var nextIntended = LiveClock.monotonicNanoseconds()
            var unread: ArraySlice<BusRecord> = []
            while true {
                transport.tick()
                let now = transport.now
                if now > end {
                    guard interval != nil, completed < startedInWindow else { return }
                    if now > drainUntil {
                        // Still unfinished (some perhaps not even added yet): the latency reached so far.
                        unfinished = lifecycles.giveUp(now: now)
                        return
                    }
                }
                // Closed loop: keep inFlightLimit going. Open model: start what is due, timed from
                // when it was due (a stalled queue shows as latency, not as fewer samples).
                while lifecycles.inFlight < inFlightLimit && sender.hasCapacity && (interval == nil || (nextIntended <= now && nextIntended < end)) {
                    try sender.submit(.addPayment(device: devices[nextDevice], payment: payment))
                    lifecycles.started(intended: interval == nil ? now : nextIntended, sentAt: LiveClock.monotonicNanoseconds())
                    nextIntended += interval ?? 0
                    nextDevice = (nextDevice + 1) % devices.count
                }
                try host.sendWaiting(over: &transport)
                for completion in try sender.poll(timeout: .zero) {
                    if case .failed(_, let error) = completion { throw error }
                }
                if unread.isEmpty {
                    let wait: Duration = interval == nil || now > end ? .milliseconds(1)
                        : .nanoseconds(max(0, min(1_000_000, nextIntended - LiveClock.monotonicNanoseconds())))
                    unread = try subscriber.receiveRecords(timeout: wait)[...]
                }
                // A round's share, as a role process takes it: the finishes it makes go out before the next share.
                for record in RoleProcess.takeRound(from: &unread) {
                    // Every driver hears the whole partition; each handles its own devices.
                    // A record caught up by FETCH has no topic (device nil): its event names the device.
                    // Compared as bytes: `hasPrefix` also checks grapheme boundaries, a cost per record.
                    if let device = record.device, !device.utf8.starts(with: prefix.utf8) { continue }
                    let recorded = try record.decoded()
                    if record.device == nil, !(recorded.event.device?.utf8.starts(with: prefix.utf8) ?? false) { continue }
                    eventBytes += record.payload.count + 24
                    eventCount += 1
                    transport.tick()
                    try host.deliver(recorded, over: &transport)
                }
            }
        }
    }

    /// The bench driver's reactions as a role: each lifecycle timed through its stages (sent,
    /// added, purchased, finished), and each purchased transaction finished.
    private final class Lifecycles: Role {
        let name = "bench"
        let interval: Int64?
        let warmUp: Int64
        let end: Int64
        var latencies: [Int64] = []
        /// Per finished lifecycle: intended start, and the stage durations (see `Measurement.stages`).
        var stageSamples: [(intended: Int64, lag: Int64, added: Int64, purchased: Int64, finished: Int64)] = []
        var completed = 0
        var startedInWindow = 0
        var inFlight = 0
        /// Per lifecycle in flight: its intended start, when it was really sent, and when its transaction was
        /// added and purchased; per device (its index in its name, `bench-<driver>-<index>`), by transaction
        /// number, so an event costs an index, not a hash of its key.
        private var progress: [NumberedWindow<Progress>]
        /// A struct, not a tuple: a dictionary of tuples looks their type metadata up at run time, at every access.
        private struct Progress {
            var start: Int64
            var sent: Int64
            var added: Int64
            var purchased: Int64
        }
        private var sentAt: [Int64] = []
        private var submittedAt: [Int64] = []
        private var submittedHead = 0

        init(devices: Int, interval: Int64?, warmUp: Int64, end: Int64) {
            progress = Array(repeating: NumberedWindow(), count: devices)
            self.interval = interval
            self.warmUp = warmUp
            self.end = end
            // Reserved, not grown: an array that outgrows its capacity copies itself into fresh pages at
            // once, a stall of the driver (and of every lifecycle in flight) inside the window it measures.
            let expected = interval == nil && end == 0 ? 0 : 1 << 19
            latencies.reserveCapacity(expected)
            stageSamples.reserveCapacity(expected)
        }

        private func inWindow(_ start: Int64) -> Bool { start >= warmUp && start < end }

        /// A lifecycle's `addPayment` went out (intended at `intended`, sent at `sentAt`).
        func started(intended: Int64, sentAt sent: Int64) {
            if interval != nil && inWindow(intended) { startedInWindow += 1 }
            submittedAt.append(intended)
            sentAt.append(sent)
            inFlight += 1
        }

        /// The drain ended: the lifecycles of the window still unfinished count with the latency reached
        /// so far; returns how many.
        func giveUp(now: Int64) -> Int {
            let waiting = progress.flatMap { $0.map(\.value.start) }.filter(inWindow) + submittedAt[submittedHead...].filter(inWindow)
            latencies.append(contentsOf: waiting.map { now - $0 })
            return waiting.count
        }

        func catchUp(_ event: RecordedEvent) {}
        func resume(now: Int64) -> [Effect] { [] }
        func timerFired(_ token: TimerToken, now: Int64) -> [Effect] { [] }

        /// The device's index in its name (`bench-<driver>-<index>`); nil for a name that is not one of this driver's.
        private func deviceIndex(_ device: String) -> Int? {
            var index = 0, scale = 1, digits = 0
            for byte in device.utf8.reversed() {
                guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9"), digits < 9 else { break }
                index += Int(byte - UInt8(ascii: "0")) * scale
                scale *= 10
                digits += 1
            }
            return digits > 0 && index < progress.count ? index : nil
        }

        func receive(_ recorded: RecordedEvent, now: Int64) -> [Effect] {
            switch recorded.event {
            case .transactionAdded(let key, _):
                // Payments reach the queue in the order sent (one connection), so the
                // oldest unmatched send is this transaction's.
                if submittedHead < submittedAt.count {
                    if let device = deviceIndex(key.device) {
                        progress[device].insert(
                            Progress(start: submittedAt[submittedHead], sent: sentAt[submittedHead], added: now, purchased: 0), at: key.number)
                    }
                    submittedHead += 1
                    if submittedHead > 65_536 {
                        submittedAt.removeFirst(submittedHead)
                        sentAt.removeFirst(submittedHead)
                        submittedHead = 0
                    }
                }
            case .transactionPurchased(let key, _, _, _):
                if let device = deviceIndex(key.device) { progress[device].update(key.number) { $0.purchased = now } }
                return [.send(.finishTransaction(key))]
            case .transactionFinished(let key):
                inFlight -= 1
                if let device = deviceIndex(key.device), let stages = progress[device].remove(key.number), stages.start >= warmUp, interval == nil ? now <= end : stages.start < end {
                    let start = stages.start
                    latencies.append(now - start)
                    completed += 1
                    stageSamples.append((start, stages.sent - start, stages.added - stages.sent,
                                         stages.purchased - stages.added, now - stages.purchased))
                }
            default:
                break
            }
            return []
        }
    }

    private final class SocketBox: @unchecked Sendable {
        let socket: Socket
        init(_ socket: Socket) { self.socket = socket }
    }
}
