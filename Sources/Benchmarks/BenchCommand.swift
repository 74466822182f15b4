import ArgumentParser
import Bus
import EventLog
import Foundation
import StoreKitLive
import StoreKitLoad
import Logging
import SKSimCommands
import StoreKitModel
import StoreKitRuntime
import StoreKitSimulation

public struct BenchCommand: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "bench",
        abstract: "Benchmarks, each printed beside a baseline measured in the same run.",
        subcommands: [LogBench.self, BusBench.self, SimulateBench.self, ReplayBench.self, ExploreBench.self, LoadBench.self,
                      SigningBench.self])

    public init() {}

    static func warnIfDebug() {
        #if DEBUG
        printError("warning: this is a debug build; build with `swift build -c release` for meaningful figures")
        #endif
    }
}

struct LogBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "log",
        abstract: "Append throughput per durability policy and reading speed, each beside the disk's limit; projection rebuild rate and memory.",
        discussion: """
            Baselines (same run, same disk, same record bytes, no checksums): always = write(2) + fdatasync per record; \
            groupCommit = a writer thread writing 64 KiB buffers while a flusher thread fdatasyncs back to back, with the \
            log's bound of 4 x maximumRecords records not yet durable; operatingSystem = 64 KiB writes, one fdatasync at \
            the end. ratioToBaseline is log/baseline records per second (near 1 is good; above 1 means the baseline is \
            not the limit).

            JSON fields: payloadBytes; policies[] {policy, log, baseline, ratioToBaseline} where log and baseline are \
            {records, seconds, recordsPerSecond, megabytesPerSecond, appendToDurableP50Microseconds, \
            appendToDurableP99Microseconds}; read {records, recordsPerSecond, megabytesPerSecond, \
            rawScanRecordsPerSecond, rawScanMegabytesPerSecond, ratioToRawScan}: PartitionReader.forEachRecord over a \
            log of --records records (checksums, sequences and units checked) beside a raw pread scan of the same files \
            that only walks record lengths, best of three each (page cache warm); projection {events, eventsPerSecond, \
            baselineScanRecordsPerSecond, peakMemoryMegabytes}.
            """)

    @Option(help: "Directory on the disk to measure (default: the system's temporary directory).") var directory: String?
    @Option(parsing: .unconditional, help: "Records for the group-commit and os policies (the always policy uses 1/200 of it).") var records = 1_000_000
    @Option(parsing: .unconditional, help: "Events in the log rebuilt by the projection benchmark.") var projectionEvents = 1_000_000
    @Flag(help: "Print one JSON object.") var json = false
    @OptionGroup var results: BenchResultsOptions

    func run() async throws {
        BenchCommand.warnIfDebug()
        let base = directory.map { URL(fileURLWithPath: $0, isDirectory: true) } ?? FileManager.default.temporaryDirectory
        var configuration = LogBenchmark.Configuration(directory: base)
        configuration.recordsGroupCommit = records
        configuration.recordsOperatingSystem = records
        configuration.recordsAlways = max(100, records / 200)
        configuration.recordsRead = records
        let policies = try LogBenchmark.run(configuration)
        let read = try LogBenchmark.runRead(configuration)
        let rebuild = try ProjectionBenchmark.run(events: projectionEvents, directory: base)
        let object = JSONValue.object([
                ("payloadBytes", .int(configuration.payloadBytes)),
                ("policies", .array(policies.map { result in
                    .object([("policy", .string(result.policy.description)),
                             ("log", measurement(result.log)), ("baseline", measurement(result.baseline)),
                             ("ratioToBaseline", .double(result.ratioToBaseline))])
                })),
                ("read", .object([
                    ("records", .int(read.log.records)),
                    ("recordsPerSecond", .double(read.log.recordsPerSecond.rounded())),
                    ("megabytesPerSecond", .double(read.log.megabytesPerSecond)),
                    ("rawScanRecordsPerSecond", .double(read.rawScan.recordsPerSecond.rounded())),
                    ("rawScanMegabytesPerSecond", .double(read.rawScan.megabytesPerSecond)),
                    ("ratioToRawScan", .double((read.ratioToRawScan * 1000).rounded() / 1000)),
                ])),
                ("projection", .object([
                    ("events", .int(rebuild.events)),
                    ("eventsPerSecond", .double(rebuild.eventsPerSecond.rounded())),
                    ("baselineScanRecordsPerSecond", .double(rebuild.scanRecordsPerSecond.rounded())),
                    ("peakMemoryMegabytes", .double(rebuild.peakMemoryMegabytes)),
                ])),
            ])
        results.record(bench: "log", figures: object)
        if json {
            printLine(object.serialized())
            return
        }
        for result in policies { printLine(result.description) }
        printLine(read.description)
        printLine(String(format: "projection rebuild: %d events in %.3f s: %.0f events/s (baseline: raw log scan without decoding, %.0f records/s); peak memory %.1f MB",
                         rebuild.events, rebuild.seconds, rebuild.eventsPerSecond, rebuild.scanRecordsPerSecond, rebuild.peakMemoryMegabytes))
    }

    private func measurement(_ value: LogBenchmark.Measurement) -> JSONValue {
        var members: [(String, JSONValue)] = [
            ("records", .int(value.records)), ("seconds", .double(value.seconds)),
            ("recordsPerSecond", .double(value.recordsPerSecond.rounded())), ("megabytesPerSecond", .double(value.megabytesPerSecond)),
        ]
        if let latency = value.appendToDurable {
            members += [("appendToDurableP50Microseconds", .double(latency.p50Microseconds)),
                        ("appendToDurableP99Microseconds", .double(latency.p99Microseconds))]
        }
        return .object(members)
    }
}

/// Builds a log of realistic purchase lifecycles, then measures folding it into the
/// queue projection (decode + apply), beside a raw scan of the same log.
enum ProjectionBenchmark {
    struct Result {
        var events: Int
        var seconds: Double
        var eventsPerSecond: Double
        var scanRecordsPerSecond: Double
        var peakMemoryMegabytes: Double
    }

    static func run(events target: Int, directory: URL) throws -> Result {
        let logDirectory = directory.appendingPathComponent("sksim-projection-bench-\(getpid())", isDirectory: true)
        try? FileManager.default.removeItem(at: logDirectory)
        defer { try? FileManager.default.removeItem(at: logDirectory) }
        let partition = LogProjection.partition
        let written = try writeLifecycles(count: target, directory: logDirectory, partition: partition)

        let reader = try PartitionReader(directory: logDirectory, partition: partition)
        let scanStart = monotonicSeconds()
        var scanned = 0
        try reader.forEachRecord { _ in scanned += 1 }
        let scanSeconds = monotonicSeconds() - scanStart

        resetPeakMemory()
        let start = monotonicSeconds()
        let state = try LogProjection.build(directory: logDirectory, partition: partition, checkInvariants: false)
        let seconds = monotonicSeconds() - start
        precondition(state.recordCount == UInt64(written), "rebuild read \(state.recordCount) of \(written) events")
        return Result(events: written, seconds: seconds, eventsPerSecond: Double(written) / seconds,
                      scanRecordsPerSecond: Double(scanned) / scanSeconds, peakMemoryMegabytes: peakMemoryMegabytes())
    }

    /// Lifecycles over 1,000 devices: added, purchased (some with a download that
    /// starts, progresses and finishes), finished; consistent, so the fold does real work.
    /// Written through the engine's storage, each event a unit of its own.
    private static func writeLifecycles(count: Int, directory: URL, partition: String) throws -> Int {
        let storage = try DiskLogStorage(directory: directory, partition: partition, durability: .operatingSystem)
        var writtenCount = 0
        var encoder = BinaryWriter(capacity: 256)
        func append(_ event: Event, _ number: UInt64) throws {
            encoder.removeAll()
            EventCodec.encode(event, commandID: CommandID(origin: "apps", number: number), into: &encoder)
            let end = encoder.bytes.count
            try encoder.bytes.withUnsafeBytes { _ = try storage.appendUnit(bytes: $0, ends: [end], timestamp: Int64(writtenCount) * 1_000) }
            writtenCount += 1
        }
        let devices = 1_000
        for index in 0..<devices {
            try append(.deviceRegistered(device: "device-\(index)", account: "account-\(index / 2)"), UInt64(writtenCount))
            try append(.appLaunched(device: "device-\(index)"), UInt64(writtenCount))
            try append(.observerAttached(device: "device-\(index)", observer: "downloadThenFinish-1"), UInt64(writtenCount))
        }
        let content = HostedContent(contentIdentifier: "com.example.sksim.levelpack.forest.levels", contentLength: 24_576, contentVersion: "1.0")
        var number: [UInt64] = Array(repeating: 0, count: devices)
        var lifecycle = 0
        while writtenCount < count {
            let index = lifecycle % devices
            number[index] += 1
            let key = TransactionKey(device: "device-\(index)", number: number[index])
            let withDownload = lifecycle % 4 == 0
            try append(.transactionAdded(key, Payment(productIdentifier: "com.example.sksim.coins.small", quantity: 1,
                                                      applicationUsername: "account-\(index / 2)")), UInt64(writtenCount))
            try append(.transactionPurchased(key, identifier: "device-\(index).\(number[index])",
                                             downloads: withDownload ? [content] : [], charged: true), UInt64(writtenCount))
            if withDownload {
                let download = DownloadKey(transaction: key, index: 0)
                try append(.downloadStarted(download), UInt64(writtenCount))
                try append(.downloadProgressed(download, progress: 0.5, timeRemaining: 0.1), UInt64(writtenCount))
                try append(.downloadFinished(download, contentURL: "/tmp/content/\(key.device)/\(key.number)"), UInt64(writtenCount))
            }
            try append(.transactionFinished(key), UInt64(writtenCount))
            lifecycle += 1
        }
        try storage.close()
        return writtenCount
    }

    static func monotonicSeconds() -> Double { Double(LiveClock.monotonicNanoseconds()) / 1e9 }

    /// Resets the kernel's peak-RSS mark (Linux: write 5 to /proc/self/clear_refs), so the
    /// peak read afterwards belongs to the rebuild alone.
    static func resetPeakMemory() {
        try? "5".write(toFile: "/proc/self/clear_refs", atomically: false, encoding: .utf8)
    }

    static func peakMemoryMegabytes() -> Double {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
              let kilobytes = Double(line.split(separator: " ").dropFirst().first ?? "") else { return -1 }
        return kilobytes / 1024
    }
}

struct BusBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bus",
        abstract: "Purchase lifecycles per second through real queue and store processes, beside raw libzmq PUB/SUB and the machine's floor.",
        discussion: """
            Per transport: the closed loop of --in-flight lifecycles (throughput, latency) beside raw libzmq PUB/SUB of \
            messages of the same size, the fastest of three runs (ratioToBaseline counts the bus messages of one lifecycle); one lifecycle alone \
            (unloadedLatencyP50Microseconds) beside the floor of its critical path measured just before and just after it, \
            the lower of the two (floorMicroseconds: three write + fdatasync of one record and three round trips over the \
            transport; ratioToFloor); and the open model \
            at half the measured throughput, each lifecycle timed from its intended start (halfLoadLatencyP99Microseconds). \
            queueMicrosecondsPerLifecycle is the queue process's CPU per lifecycle in the closed loop, and \
            ceilingRatioToBaseline = ratioToBaseline × cores / queueCores is the ratio the bus could reach if the queue had \
            every core of the machine to itself at that cost (the store and the drivers costing nothing). \
            The skeleton (skeletonLifecyclesPerSecond, skeletonRatioToBaseline, skeletonHalfLoadLatencyP99Microseconds) is the \
            design's ceiling here: the same sockets, processes' worth of threads and hops, one write + fdatasync per round, and \
            nothing else. machineBusyPercent and stealPercent say how busy the machine was and how much the hypervisor took, \
            contextSwitchesPerLifecycle and halfLoadContextSwitchesPerLifecycle how many times its threads were switched per lifecycle.
            """)

    @Option(parsing: .unconditional, help: "Seconds of load per transport.") var seconds: Double = 4
    @Option(parsing: .unconditional, help: "Lifecycles in flight at once.") var inFlight = 2_000
    @Option(help: "Transports to measure, comma-separated.") var transports = "ipc,tcp"
    @Option(help: "Wire versions the store and the drivers speak, comma-separated, each measured in turn (1, 2).") var wireVersions = "2"
    @Option(parsing: .unconditional, help: "App-side load drivers (threads, each with its own connections).") var drivers = 1
    @Option(parsing: .unconditional, help: "Seconds of the lone-lifecycle and half-load measurements (each).") var latencySeconds: Double = 2
    @Option(parsing: .unconditional, help: "Lifecycles per second of the open-model latency measurement (default: half the closed loop's throughput).") var halfLoadRate: Double?
    @Flag(help: "Print one JSON object.") var json = false
    @OptionGroup var results: BenchResultsOptions

    struct TransportFigures {
        var wireVersion: UInt8
        var throughput: BusBenchmark.Measurement
        var floor: BusBenchmark.Floor
        var unloaded: BusBenchmark.Measurement
        var halfLoad: BusBenchmark.Measurement
        /// The bus's hops alone (`BusSkeleton`): its closed loop, and its open model at the half load's rate.
        var skeleton: BusSkeleton.Measurement
        var skeletonHalfLoad: BusSkeleton.Measurement
        var skeletonRatioToBaseline: Double {
            skeleton.lifecyclesPerSecond * throughput.busMessagesPerLifecycle / max(throughput.rawMessagesPerSecond, 1)
        }
        var ratioToFloor: Double { unloaded.latencyMicroseconds.p50 / max(floor.floorMicroseconds, 1) }
    }

    func run() async throws {
        BenchCommand.warnIfDebug()
        if let halfLoadRate, !(halfLoadRate > 0 && halfLoadRate <= 10_000_000) {
            throw UserFacingError("--half-load-rate must be above 0 and at most 10,000,000 lifecycles per second")
        }
        var configuration = BusBenchmark.Configuration(executable: currentExecutable(), directory: URL(fileURLWithPath: "/tmp", isDirectory: true))
        configuration.seconds = seconds
        configuration.inFlight = inFlight
        configuration.drivers = max(1, drivers)
        let versions = try wireVersions.split(separator: ",").map { text throws -> UInt8 in
            guard let version = UInt8(text), BusWire.supportedVersions.contains(version) else {
                throw UserFacingError("--wire-versions takes 1, 2 or both (\"1,2\"), not \"\(wireVersions)\"")
            }
            return version
        }
        var figures: [TransportFigures] = []
        for version in versions {
        configuration.wireVersion = version
        for transport in transports.split(separator: ",").map(String.init) {
            let throughput = try BusBenchmark.run(configuration, transports: [transport])[0]
            let floorBefore = try BusBenchmark.floor(transport: transport, directory: configuration.directory)
            var lone = configuration
            lone.seconds = latencySeconds
            lone.inFlight = 1
            lone.drivers = 1
            lone.devices = 1
            let unloaded = try BusBenchmark.run(lone, transports: [transport])[0]
            // A shared disk's fsync swings from 0.1 to 4 ms within a minute: the floor is measured on
            // both sides of the lone lifecycle, and the lower one counts (the ratio errs high, never low).
            let floorAfter = try BusBenchmark.floor(transport: transport, directory: configuration.directory)
            let floor = floorAfter.floorMicroseconds < floorBefore.floorMicroseconds ? floorAfter : floorBefore
            var half = configuration
            half.seconds = latencySeconds
            half.rate = halfLoadRate ?? max(1, throughput.lifecyclesPerSecond / 2)
            half.inFlight = max(configuration.inFlight, 10_000)
            let halfLoad = try BusBenchmark.run(half, transports: [transport])[0]
            let skeleton = try BusSkeleton.run(transport: transport, directory: configuration.directory, seconds: latencySeconds,
                                               inFlight: configuration.inFlight, rate: nil, recordBytes: Int(throughput.averageEventBytes.rounded()))
            let skeletonHalfLoad = try BusSkeleton.run(transport: transport, directory: configuration.directory, seconds: latencySeconds,
                                                       inFlight: half.inFlight, rate: half.rate, recordBytes: Int(throughput.averageEventBytes.rounded()))
            figures.append(TransportFigures(wireVersion: version, throughput: throughput, floor: floor, unloaded: unloaded, halfLoad: halfLoad,
                                            skeleton: skeleton, skeletonHalfLoad: skeletonHalfLoad))
        }
        }
        let object = JSONValue.object([
            ("drivers", .int(drivers)),
            ("transports", .array(figures.map(Self.figuresJSON))),
        ])
        results.record(bench: "bus", figures: object)
        if json {
            printLine(object.serialized())
            return
        }
        for figure in figures {
            if versions.count > 1 { printLine("wire version \(figure.wireVersion):") }
            Self.printText(figure)
        }
    }

    /// One transport's figures as JSON.
    private static func figuresJSON(_ figure: TransportFigures) -> JSONValue {
        let result = figure.throughput
        return .object([
            ("transport", .string(result.transport)), ("wireVersion", .int(Int(figure.wireVersion))), ("lifecycles", .int(result.lifecycles)),
            ("seconds", .double(result.seconds)), ("lifecyclesPerSecond", .double(result.lifecyclesPerSecond.rounded())),
            ("latencyP50Microseconds", .double(result.latencyMicroseconds.p50.rounded())),
            ("latencyP99Microseconds", .double(result.latencyMicroseconds.p99.rounded())),
            ("latencyP999Microseconds", .double(result.latencyMicroseconds.p999.rounded())),
            ("averageEventBytes", .double(result.averageEventBytes.rounded())),
            ("rawMessagesPerSecond", .double(result.rawMessagesPerSecond.rounded())),
            ("busMessagesPerLifecycle", .double(result.busMessagesPerLifecycle)),
            ("ratioToBaseline", .double((result.ratioToBaseline * 1000).rounded() / 1000)),
            ("queueMicrosecondsPerLifecycle", result.queueMicrosecondsPerLifecycle.map { .double(($0 * 10).rounded() / 10) } ?? .null),
            ("ceilingRatioToBaseline", result.ceilingRatioToBaseline.map { .double(($0 * 1000).rounded() / 1000) } ?? .null),
            ("unloadedLatencyP50Microseconds", .double(figure.unloaded.latencyMicroseconds.p50.rounded())),
            ("unloadedLatencyP99Microseconds", .double(figure.unloaded.latencyMicroseconds.p99.rounded())),
            ("fsyncMicroseconds", .double((figure.floor.fsyncMicroseconds * 10).rounded() / 10)),
            ("fsyncP99Microseconds", .double(figure.floor.fsyncP99Microseconds.rounded())),
            ("roundTripMicroseconds", .double((figure.floor.roundTripMicroseconds * 10).rounded() / 10)),
            ("floorMicroseconds", .double(figure.floor.floorMicroseconds.rounded())),
            ("ratioToFloor", .double((figure.ratioToFloor * 100).rounded() / 100)),
            ("halfLoadLifecyclesPerSecond", .double(figure.halfLoad.lifecyclesPerSecond.rounded())),
            ("halfLoadLatencyP50Microseconds", .double(figure.halfLoad.latencyMicroseconds.p50.rounded())),
            ("halfLoadLatencyP99Microseconds", .double(figure.halfLoad.latencyMicroseconds.p99.rounded())),
            ("halfLoadOfferedPerSecond", .double((figure.halfLoad.offeredPerSecond ?? 0).rounded())),
            ("halfLoadUnfinished", .int(figure.halfLoad.unfinished)),
            // The design's ceiling here: the lifecycle's hops alone (BusSkeleton), closed loop and at the half load's rate.
            ("skeletonLifecyclesPerSecond", .double(figure.skeleton.lifecyclesPerSecond.rounded())),
            ("skeletonRatioToBaseline", .double((figure.skeletonRatioToBaseline * 1000).rounded() / 1000)),
            ("skeletonHalfLoadLatencyP50Microseconds", .double(figure.skeletonHalfLoad.latencyMicroseconds.p50.rounded())),
            ("skeletonHalfLoadLatencyP99Microseconds", .double(figure.skeletonHalfLoad.latencyMicroseconds.p99.rounded())),
            // The machine in each window: busy and stolen by the hypervisor, in percent of all cores' time.
            ("machineBusyPercent", .double((result.machineBusyFraction * 1000).rounded() / 10)),
            ("stealPercent", .double((result.machineStealFraction * 1000).rounded() / 10)),
            ("halfLoadMachineBusyPercent", .double((figure.halfLoad.machineBusyFraction * 1000).rounded() / 10)),
            ("halfLoadStealPercent", .double((figure.halfLoad.machineStealFraction * 1000).rounded() / 10)),
            // The machine's context switches per lifecycle: a half-load lifecycle comes in smaller rounds, each waking threads.
            ("contextSwitchesPerLifecycle", .double((result.machineContextSwitchesPerLifecycle * 100).rounded() / 100)),
            ("halfLoadContextSwitchesPerLifecycle", .double((figure.halfLoad.machineContextSwitchesPerLifecycle * 100).rounded() / 100)),
            // Where the closed loop's time went: each process's CPU (in cores) and the waits.
            ("queueCores", .double((result.queueCores * 100).rounded() / 100)),
            ("storeCores", .double((result.storeCores * 100).rounded() / 100)),
            ("driverCores", .double((result.driverCores * 100).rounded() / 100)),
            ("durabilityRounds", .int(result.durabilityRounds)),
            ("retriesSent", .int(result.retriesSent)),
            ("queueAnsweredUnavailable", .int(result.queueAnsweredUnavailable)),
            ("queueDuplicates", .int(result.queueDuplicates)),
            ("repliesDropped", .int(result.repliesDropped)),
            ("gapsRecovered", .int(result.gapsRecovered)),
        ])
    }

    /// One transport's figures as lines of text.
    private static func printText(_ figure: TransportFigures) {
        let result = figure.throughput
        printLine(String(format: "%@: %.0f lifecycles/s (%d in %.2f s), latency p50 %.0f µs p99 %.0f µs p99.9 %.0f µs; raw PUB/SUB %.0f msgs/s of %.0f bytes; ratio to baseline %.3f (× %.0f bus messages per lifecycle)",
                         result.transport, result.lifecyclesPerSecond, result.lifecycles, result.seconds,
                         result.latencyMicroseconds.p50, result.latencyMicroseconds.p99, result.latencyMicroseconds.p999,
                         result.rawMessagesPerSecond, result.averageEventBytes, result.ratioToBaseline, result.busMessagesPerLifecycle))
        if let perLifecycle = result.queueMicrosecondsPerLifecycle, let ceiling = result.ceilingRatioToBaseline {
            printLine(String(format: "%@: the queue used %.1f µs of CPU per lifecycle; with all %d cores to itself at that cost (store and drivers free) the ratio could reach %.3f",
                             result.transport, perLifecycle, ProcessInfo.processInfo.activeProcessorCount, ceiling))
        }
        printLine(String(format: "%@: one lifecycle alone p50 %.0f µs (p99 %.0f µs); floor %.0f µs (3 × write+fdatasync %.0f µs + 3 × round trip %.0f µs); ratio to floor %.2f",
                         result.transport, figure.unloaded.latencyMicroseconds.p50, figure.unloaded.latencyMicroseconds.p99,
                         figure.floor.floorMicroseconds, figure.floor.fsyncMicroseconds, figure.floor.roundTripMicroseconds, figure.ratioToFloor))
        printLine(String(format: "%@: CPU in cores: queue %.2f, store %.2f, drivers %.2f; machine %.1f %% busy, %.1f %% stolen by the hypervisor, %.2f context switches per lifecycle; %d fsyncs for %d records; %d retries sent, %d answered unavailable, %d duplicates, %d replies dropped, %d gaps fetched",
                         result.transport, result.queueCores, result.storeCores, result.driverCores,
                         result.machineBusyFraction * 100, result.machineStealFraction * 100, result.machineContextSwitchesPerLifecycle, result.durabilityRounds,
                         Int(result.records), result.retriesSent, result.queueAnsweredUnavailable, result.queueDuplicates, result.repliesDropped, result.gapsRecovered))
        printLine(String(format: "%@: at half the throughput (%.0f/s offered, open model, %d lifecycles finished, %d unfinished): p50 %.0f µs, p99 %.0f µs from the intended start (the disk's write+fdatasync p99 %.0f µs)",
                         result.transport, figure.halfLoad.offeredPerSecond ?? 0, figure.halfLoad.lifecycles, figure.halfLoad.unfinished,
                         figure.halfLoad.latencyMicroseconds.p50, figure.halfLoad.latencyMicroseconds.p99, figure.floor.fsyncP99Microseconds))
        printLine(String(format: "%@: the bus's hops alone (skeleton: the same sockets, one write+fdatasync per round, no decoding or roles): %.0f lifecycles/s, ratio to baseline %.3f; at %.0f/s offered: p50 %.0f µs, p99 %.0f µs",
                         result.transport, figure.skeleton.lifecyclesPerSecond, figure.skeletonRatioToBaseline,
                         figure.skeletonHalfLoad.offeredPerSecond ?? 0, figure.skeletonHalfLoad.latencyMicroseconds.p50, figure.skeletonHalfLoad.latencyMicroseconds.p99))
        printLine("\(result.transport): one lifecycle alone: stages p50/p99 µs: "
                  + figure.unloaded.stages.map { String(format: "%@ %.0f/%.0f", $0.name, $0.p50, $0.p99) }.joined(separator: ", "))
        let half = figure.halfLoad
        printLine(String(format: "%@: half load: CPU in cores: queue %.2f, store %.2f, drivers %.2f; machine %.1f %% busy, %.1f %% stolen by the hypervisor, %.2f context switches per lifecycle; %d fsyncs for %d records; %d retries sent, %d answered unavailable, %d duplicates, %d replies dropped, %d gaps fetched",
                         result.transport, half.queueCores, half.storeCores, half.driverCores,
                         half.machineBusyFraction * 100, half.machineStealFraction * 100, half.machineContextSwitchesPerLifecycle, half.durabilityRounds,
                         Int(half.records), half.retriesSent, half.queueAnsweredUnavailable, half.queueDuplicates, half.repliesDropped, half.gapsRecovered))
        printLine("\(result.transport): half load: stages p50/p99 µs: " + half.stages.map { String(format: "%@ %.0f/%.0f", $0.name, $0.p50, $0.p99) }.joined(separator: ", ")
                  + "; largest latency per tenth of the window, ms: " + half.timeline.map { String(format: "%.1f", $0 / 1_000) }.joined(separator: " "))
    }
}

struct LoadBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "load",
        abstract: "Lifecycle starts per second one load driver sustains (open model), its CPU per lifecycle, beside `bench bus` in the same run.",
        discussion: """
            One `sksim load` run per --durations entry: one driver process, a constant --rate, against real queue and store \
            processes (group commit, store latency 0). startsPerSecond is lifecycles started over the load's length; \
            missedStarts are starts past the in-flight bound; the stage latencies are timed from each intended start. The \
            baseline is `sksim bench bus` over ipc (a minimal closed-loop driver, 2,000 in flight, no stage timing): \
            ratioToBaseline is completed lifecycles/s of the load beside the baseline's. Give two durations (e.g. 1m,10m) \
            to compare peak memory of a short and a long run at the same rate. Give --partitions 1,2 to run each \
            load against one queue and then against two queue partitions (devices routed by account); each run \
            shows every queue's CPU seconds and durability rounds (fsyncs) per second, and how busy the machine's \
            cores were, so it says what limits it. On a machine with fewer cores than processes the machine, not the \
            queue, limits; --queue-cores C caps each queue process at C cores with the kernel's CPU controller (a cgroup; \
            needs root), so that the queue is the bottleneck and 1 against 2 partitions shows how the queue scales \
            (as with a host per partition).

            JSON fields: baseline {lifecyclesPerSecond, latencyP50Microseconds, latencyP99Microseconds}; runs[] \
            {durationSeconds, ratePerSecond, started, startsPerSecond, missedStarts, lifecycles, lifecyclesPerSecond, sustainedLifecyclesPerSecond, \
            driverCpuMicrosecondsPerLifecycle, coordinatorCpuSeconds, driverPeakMemoryMegabytes, \
            coordinatorPeakMemoryMegabytes, removedP50Microseconds, removedP99Microseconds, ratioToBaseline, partitions, \
            machineBusyPercent, cores, queueCoresLimit (null without --queue-cores), maximumInFlight, queues[] {partition, cpuSeconds, cpuPercent, fsyncsPerSecond, records}}.
            """)

    @Option(parsing: .unconditional, help: "Lifecycle starts per second offered to the one driver.") var rate: Double = 25_000
    @Option(help: "Comma-separated load lengths, one run each (e.g. 5s, or 1m,10m for a memory soak).") var durations = "5s"
    @Option(parsing: .unconditional, help: "Devices the driver spreads lifecycles over.") var devices = 1_000
    @Option(help: "Comma-separated numbers of queue partitions, one load each (e.g. 1,2).") var partitions = "1"
    @Option(help: "Comma-separated numbers of driver processes, one load each at the same rate and devices (e.g. 1,4): driverScaling compares their CPU per lifecycle.") var drivers = "1"
    @Option(parsing: .unconditional, help: "Seconds of the bus baseline.") var baselineSeconds: Double = 4
    @Option(parsing: .unconditional, help: "Limit each queue process to this many cores (e.g. 0.25; a cgroup, needs root), so that the queue is the bottleneck.")
    var queueCores: Double?
    @Option(parsing: .unconditional, help: "Lifecycles the driver keeps in flight at most; starts beyond are missed. With a rate above what the queue sustains, a bound such as 2000 measures its throughput, not a backlog that grows all run long.")
    var maximumInFlight = 50_000
    @Flag(help: "Print one JSON object.") var json = false
    @OptionGroup var results: BenchResultsOptions

    func run() async throws {
        BenchCommand.warnIfDebug()
        Shutdown.installSignalHandlers()
        let configuration = try self.configuration()
        var logger = Logger(label: "sksim.bench.load")
        logger.logLevel = .warning
        let baseline = try LoadBenchmark.baseline(configuration)
        let runs = try LoadBenchmark.run(configuration, logger: logger)
        func rounded(_ value: Double, _ places: Double = 1) -> JSONValue { .double((value * places).rounded() / places) }
        let object = JSONValue.object([
                ("baseline", .object([("lifecyclesPerSecond", rounded(baseline.lifecyclesPerSecond)),
                                      ("latencyP50Microseconds", rounded(baseline.latencyMicroseconds.p50)),
                                      ("latencyP99Microseconds", rounded(baseline.latencyMicroseconds.p99))])),
                ("runs", .array(runs.map { run in
                    let figures = run.result.figures
                    let removed = figures.summary(.removed)
                    let queueLimit: JSONValue = run.queueCoresLimit.map { .double($0) } ?? .null
                    let queues: [JSONValue] = zip(run.queuePartitions, run.queues).map { name, queue in
                        .object([("partition", .string(name)), ("cpuSeconds", rounded(queue.cpuSeconds ?? 0, 100)),
                                 ("cpuPercent", rounded((queue.cpuSeconds ?? 0) * 100 / max(run.result.wallSeconds, 0.001))),
                                 ("fsyncsPerSecond", rounded(Double(queue.durabilityRounds ?? 0) / max(run.result.wallSeconds, 0.001))),
                                 ("records", .int(Int(queue.records ?? 0)))])
                    }
                    return .object([
                        ("durationSeconds", .double(run.durationSeconds)), ("ratePerSecond", .double(rate)),
                        ("started", .int(figures.counters.started)), ("startsPerSecond", rounded(run.startsPerSecond)),
                        ("missedStarts", .int(figures.counters.missedStarts)), ("lifecycles", .int(figures.counters.completed)),
                        ("lifecyclesPerSecond", rounded(figures.lifecyclesPerSecond)),
                        ("sustainedLifecyclesPerSecond", rounded(run.sustainedLifecyclesPerSecond)),
                        ("driverCpuMicrosecondsPerLifecycle", rounded(run.driverCPUMicrosecondsPerLifecycle, 10)),
                        ("coordinatorCpuSeconds", rounded(run.result.coordinatorCPUSeconds, 1000)),
                        ("driverPeakMemoryMegabytes", rounded(Double(run.result.driverPeakMemoryBytes) / 1_048_576)),
                        ("coordinatorPeakMemoryMegabytes", rounded(Double(run.result.coordinatorPeakMemoryBytes) / 1_048_576)),
                        ("removedP50Microseconds", .int(Int(removed?.p50Microseconds ?? 0))),
                        ("removedP99Microseconds", .int(Int(removed?.p99Microseconds ?? 0))),
                        ("ratioToBaseline", rounded(figures.lifecyclesPerSecond / max(1, baseline.lifecyclesPerSecond), 1000)),
                        ("partitions", .int(run.partitions)), ("drivers", .int(run.drivers)),
                        ("machineBusyPercent", rounded(run.machineBusyFraction * 100)),
                        ("cores", .int(run.cores)),
                        ("queueCoresLimit", queueLimit), ("maximumInFlight", .int(configuration.maximumInFlight)),
                        ("queues", .array(queues)),
                    ])
                })),
                ("driverScaling", .array(LoadBenchmark.driverScaling(runs).map { scaling in
                    .object([("drivers", .int(scaling.drivers)), ("driverMicrosecondsPerLifecycle", rounded(scaling.microsecondsPerLifecycle, 10))])
                })),
            ])
        results.record(bench: "load", figures: object)
        if json {
            printLine(object.serialized())
            return
        }
        printText(baseline: baseline, runs: runs)
    }

    /// The benchmark's configuration from the options, each checked.
    private func configuration() throws -> LoadBenchmark.Configuration {
        if let queueCores, !(queueCores >= 0.01 && queueCores <= 1_024) {
            throw UserFacingError("--queue-cores \(queueCores) is out of range; give 0.01 to 1024 cores (e.g. 0.25)")
        }
        var configuration = LoadBenchmark.Configuration(executable: currentExecutable(), directory: URL(fileURLWithPath: "/tmp", isDirectory: true))
        configuration.ratePerSecond = rate
        configuration.devices = devices
        configuration.baselineSeconds = baselineSeconds
        configuration.queueCores = queueCores
        guard (1...1_000_000).contains(maximumInFlight) else { throw UserFacingError("--maximum-in-flight must be between 1 and 1,000,000") }
        configuration.maximumInFlight = maximumInFlight
        do {
            configuration.durationsNanoseconds = try durations.split(separator: ",").map { try DurationText.nanoseconds(String($0)) }
        } catch {
            throw UserFacingError("--durations: \(error)")
        }
        let partitionCounts = partitions.split(separator: ",").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        guard !partitionCounts.isEmpty, partitionCounts.count == partitions.split(separator: ",").count, partitionCounts.allSatisfy({ (1...16).contains($0) }) else {
            throw UserFacingError("--partitions '\(partitions)' must be numbers of queue partitions within 1-16, comma-separated, e.g. 1,2")
        }
        configuration.partitions = partitionCounts
        let driverCounts = drivers.split(separator: ",").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        guard !driverCounts.isEmpty, driverCounts.count == drivers.split(separator: ",").count, driverCounts.allSatisfy({ (1...64).contains($0) }) else {
            throw UserFacingError("--drivers '\(drivers)' must be numbers of driver processes within 1-64, comma-separated, e.g. 1,4")
        }
        configuration.drivers = driverCounts
        guard rate > 0, rate <= 10_000_000 else { throw UserFacingError("--rate must be above 0 and at most 10,000,000 starts per second") }
        return configuration
    }

    /// The figures as text, one line per run and its queues, then the drivers' scaling and the partitions' gain.
    private func printText(baseline: BusBenchmark.Measurement, runs: [LoadBenchmark.Measurement]) {
        printLine(String(format: "baseline (bench bus, ipc, closed loop of 2000): %.0f lifecycles/s, p50 %.0f µs, p99 %.0f µs",
                         baseline.lifecyclesPerSecond, baseline.latencyMicroseconds.p50, baseline.latencyMicroseconds.p99))
        for run in runs {
            let figures = run.result.figures
            let removed = figures.summary(.removed)
            printLine(String(format: "load %.0f s at %.0f/s, %d driver%@: %.0f starts/s (%d started, %d missed), %.0f lifecycles/s completed (%.0f/s sustained during the load; ratio to baseline %.3f); driver CPU %.1f µs per lifecycle; removed p50 %@ p99 %@; peak memory driver %.1f MB, coordinator %.1f MB; coordinator CPU %.2f s",
                             run.durationSeconds, rate, run.drivers, (run.drivers == 1 ? "" : "s") as NSString, run.startsPerSecond, figures.counters.started, figures.counters.missedStarts,
                             figures.lifecyclesPerSecond, run.sustainedLifecyclesPerSecond, figures.lifecyclesPerSecond / max(1, baseline.lifecyclesPerSecond),
                             run.driverCPUMicrosecondsPerLifecycle, formatMicroseconds(removed?.p50Microseconds ?? 0) as NSString,
                             formatMicroseconds(removed?.p99Microseconds ?? 0) as NSString,
                             Double(run.result.driverPeakMemoryBytes) / 1_048_576, Double(run.result.coordinatorPeakMemoryBytes) / 1_048_576,
                             run.result.coordinatorCPUSeconds))
            let queues = zip(run.queuePartitions, run.queues).map { name, queue in
                String(format: "%@ CPU %.1f s (%.0f%% of the run), %.0f fsyncs/s, %d records", name as NSString, queue.cpuSeconds ?? 0,
                       (queue.cpuSeconds ?? 0) * 100 / max(run.result.wallSeconds, 0.001),
                       Double(queue.durabilityRounds ?? 0) / max(run.result.wallSeconds, 0.001), Int(queue.records ?? 0))
            }
            let limit = run.queueCoresLimit.map { String(format: " (each queue limited to %.2f cores)", $0) } ?? ""
            printLine(String(format: "  %d partition%@%@: %@; machine %.0f%% busy over %d cores", run.partitions, run.partitions == 1 ? "" : "s",
                             limit as NSString, queues.joined(separator: "; ") as NSString, run.machineBusyFraction * 100, run.cores))
        }
        // The drivers' CPU per lifecycle, by number of drivers, against one driver's (target: at most 1.25×).
        let scaling = LoadBenchmark.driverScaling(runs)
        if scaling.count > 1, let one = scaling.first {
            printLine("driverScaling: " + scaling.map { String(format: "%d driver%@ %.1f µs per lifecycle (%.2f×)", $0.drivers, ($0.drivers == 1 ? "" : "s") as NSString,
                                                              $0.microsecondsPerLifecycle, $0.microsecondsPerLifecycle / max(0.001, one.microsecondsPerLifecycle)) }
                .joined(separator: ", "))
        }
        // Partitioned against one queue, at the same length: the rates sustained while the load ran.
        for run in runs where run.partitions > 1 {
            guard let single = runs.first(where: { $0.partitions == 1 && $0.durationSeconds == run.durationSeconds }) else { continue }
            printLine(String(format: "%d partitions / 1: %.2f× the lifecycles/s sustained during the load (%.0f vs %.0f)", run.partitions,
                             run.sustainedLifecyclesPerSecond / max(1, single.sustainedLifecyclesPerSecond),
                             run.sustainedLifecyclesPerSecond, single.sustainedLifecyclesPerSecond))
        }
    }
}
