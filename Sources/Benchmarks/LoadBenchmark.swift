import Foundation
import Logging
import StoreKitLive
import StoreKitLoad
import StoreKitModel

/// `sksim bench load`: how many lifecycle starts per second one driver process sustains in the
/// open model against a real queue and store, and its CPU per lifecycle; beside the baseline of
/// `sksim bench bus` in the same run (a minimal closed-loop driver with no stage timing, no
/// histograms, no coordinator), so the ratio shows what the load machinery costs.
public enum LoadBenchmark {
    public struct Configuration: Sendable {
        public var executable: URL
        public var directory: URL
        public var ratePerSecond = 25_000.0
        /// One load per duration (a soak compares the peak memory of a short and a long one).
        public var durationsNanoseconds: [Int64] = [5_000_000_000]
        public var devices = 1_000
        /// Queue partitions, one load per entry (and duration): 1 and 2 compare partitioned throughput.
        public var partitions: [Int] = [1]
        /// Local driver processes, one load per entry: 1 and 4 compare a driver's CPU per lifecycle (`driverScaling`).
        public var drivers: [Int] = [1]
        public var baselineSeconds = 4.0
        /// Each queue process limited to this many cores by the kernel (`CPULimit`), so that the
        /// queue is the bottleneck even on a machine with fewer cores than processes; nil: no limit.
        public var queueCores: Double?
        /// Lifecycles the driver keeps in flight at most (starts beyond are missed): bounded, a rate above
        /// what the system sustains measures its throughput instead of a backlog that grows for the whole run.
        public var maximumInFlight = 50_000
        public init(executable: URL, directory: URL) {
            self.executable = executable
            self.directory = directory
        }
    }

    public struct Measurement: Sendable {
        public var durationSeconds: Double
        public var partitions: Int
        public var drivers = 1
        public var result: LoadCoordinator.Result
        /// Each queue's statistics (CPU, durability rounds, records), in partition order.
        public var queues: [QueueStatistics]
        public var queuePartitions: [String]
        /// How busy the machine's cores were during the run (user + system + irq over all time), 0-1,
        /// and how many cores it has: beside each queue's CPU, it says whether CPU is what limits.
        public var machineBusyFraction: Double
        public var cores: Int
        /// The limit on each queue's CPU, in cores, if there was one.
        public var queueCoresLimit: Double?
        /// Lifecycles completed per second while starts were still offered (the whole seconds of the load,
        /// the first left out as warm-up): the rate the system sustains; `lifecyclesPerSecond` counts the
        /// first second too (neither counts the drain after the load).
        public var sustainedLifecyclesPerSecond: Double {
            let interval = Double(result.plan.intervalNanoseconds) / 1e9
            let rows = result.rows.filter { $0.startSeconds >= interval && $0.startSeconds + interval <= result.figures.loadSeconds + 1e-9 }
            guard !rows.isEmpty, interval > 0 else { return result.figures.lifecyclesPerSecond }
            return Double(rows.reduce(0) { $0 + $1.counters.completed }) / (Double(rows.count) * interval)
        }
        public var startsPerSecond: Double { result.figures.loadSeconds > 0 ? Double(result.figures.counters.started) / result.figures.loadSeconds : 0 }
        public var driverCPUMicrosecondsPerLifecycle: Double {
            result.figures.counters.started > 0 ? result.driversCPUSeconds * 1e6 / Double(result.figures.counters.started) : 0
        }
    }

    public static func run(_ configuration: Configuration, logger: Logger) throws -> [Measurement] {
        var measurements: [Measurement] = []
        let runs = configuration.durationsNanoseconds.flatMap { duration in
            configuration.partitions.flatMap { partitions in configuration.drivers.map { (duration, partitions, $0) } }
        }
        for (index, (duration, partitions, drivers)) in runs.enumerated() {
            let directory = configuration.directory.appendingPathComponent("skbl-\(getpid())-\(index)", isDirectory: true)
            try? FileManager.default.removeItem(at: directory)
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let topologyPath = directory.appendingPathComponent("bench.yaml").path
            try topologyText(partitions: partitions).write(toFile: topologyPath, atomically: true, encoding: .utf8)
            let topology = try Topology.load(path: topologyPath)
            var options = LoadCoordinator.Options()
            options.plan.model = .open
            options.plan.schedule = .constant(perSecond: configuration.ratePerSecond, durationNanoseconds: duration)
            // The same devices and rate in all, split over the drivers: only the number of drivers changes.
            options.localDrivers = drivers
            options.plan.devicesPerDriver = max(1, configuration.devices / drivers)
            options.plan.maximumInFlight = configuration.maximumInFlight
            options.plan.drainNanoseconds = 5_000_000_000
            options.showLiveView = false
            let names = topology.queues.map { $0.partition! }
            // One group per queue: each partition gets its own share, as on a host of its own.
            let limits = try configuration.queueCores.map { cores in
                try names.map { try CPULimit(name: "sksim-\(getpid())-\(index)-\($0)", cores: cores) }
            } ?? []
            defer { for limit in limits { limit.remove() } }
            if !limits.isEmpty {
                let queues = topology.queues.map(\.name)
                options.servicesStarted = { runDirectory in
                    for (queue, limit) in zip(queues, limits) {
                        guard let pid = ReadyNote.pid(process: queue, runDirectory: runDirectory) else {
                            throw CPULimit.Failure(description: "the queue '\(queue)' wrote no ready note with its pid, so its CPU cannot be limited; "
                                + "see its log, \(runDirectory.appendingPathComponent("\(queue).log").path)")
                        }
                        try limit.add(pid: pid)
                    }
                }
            }
            let coordinator = LoadCoordinator(topology: topology, topologyPath: topologyPath, runDirectory: directory.appendingPathComponent("run"),
                                              executable: configuration.executable, options: options, logger: logger)
            let before = CPUTimes.read()
            let result = try coordinator.run()
            let after = CPUTimes.read()
            let queues = names.map { QueueStatistics.read(in: directory.appendingPathComponent("run"), partition: $0)
                ?? QueueStatistics(duplicateCommands: 0, commandsHandled: 0, refusedFrames: 0) }
            measurements.append(Measurement(durationSeconds: Double(duration) / 1e9, partitions: partitions, drivers: drivers, result: result, queues: queues,
                                            queuePartitions: names,
                                            machineBusyFraction: CPUTimes.busyFraction(from: before, to: after),
                                            cores: ProcessInfo.processInfo.activeProcessorCount, queueCoresLimit: configuration.queueCores))
        }
        return measurements
    }

    /// CPU per lifecycle of the drivers together, per number of drivers (the first run of each, at the
    /// first duration and partition count): what `driverScaling` reports. Flat when each driver's work
    /// follows its own lifecycles; growing when every driver handles every driver's events.
    public static func driverScaling(_ measurements: [Measurement]) -> [(drivers: Int, microsecondsPerLifecycle: Double)] {
        guard let first = measurements.first else { return [] }
        var seen: Set<Int> = []
        return measurements.filter { $0.durationSeconds == first.durationSeconds && $0.partitions == first.partitions && seen.insert($0.drivers).inserted }
            .map { ($0.drivers, $0.driverCPUMicrosecondsPerLifecycle) }
    }

    /// `bench bus`'s topology, with its one queue split into `partitions` queues over ipc.
    static func topologyText(partitions: Int) -> String {
        let text = BusBenchmark.topologyText(name: "bench-load")
        guard partitions > 1 else { return text }
        let queues = (1...partitions).map { index in
            "  - {name: queue-\(index), role: queue, events: \"ipc://{run}/e\(index).ipc\", requests: \"ipc://{run}/r\(index).ipc\"}"
        }
        return text.split(separator: "\n", omittingEmptySubsequences: false)
            .flatMap { line in line.contains("role: queue") ? queues : [String(line)] }
            .joined(separator: "\n")
    }

    /// The kernel's cumulative CPU times of all cores (/proc/stat), in clock ticks.
    public struct CPUTimes: Sendable {
        var busy: Int64
        var total: Int64
        /// Time a virtual machine's processors were runnable but the hypervisor ran something else.
        var steal: Int64 = 0
        /// Context switches on every processor since boot (`ctxt`): each a thread put to sleep or
        /// preempted, the cost that grows when work comes in many small rounds.
        var contextSwitches: Int64 = 0

        public static func read() -> CPUTimes? {
            guard let text = try? String(contentsOfFile: "/proc/stat", encoding: .utf8) else { return nil }
            let lines = text.split(separator: "\n")
            guard let line = lines.first(where: { $0.hasPrefix("cpu ") }) else { return nil }
            let fields = line.split(separator: " ").dropFirst().compactMap { Int64($0) }
            guard fields.count >= 5 else { return nil }
            // user nice system idle iowait irq softirq steal: idle and iowait are not busy.
            let total = fields.prefix(8).reduce(0, +)
            let switches = lines.first(where: { $0.hasPrefix("ctxt ") }).flatMap { Int64($0.dropFirst(5)) } ?? 0
            return CPUTimes(busy: total - fields[3] - fields[4], total: total, steal: fields.count > 7 ? fields[7] : 0,
                            contextSwitches: switches)
        }

        /// The machine's context switches between two readings (0 when either is missing).
        public static func contextSwitches(from before: CPUTimes?, to after: CPUTimes?) -> Int64 {
            guard let before, let after else { return 0 }
            return max(0, after.contextSwitches - before.contextSwitches)
        }

        /// The share of all cores' time the hypervisor took (steal) between two readings.
        public static func stealFraction(from before: CPUTimes?, to after: CPUTimes?) -> Double {
            guard let before, let after, after.total > before.total else { return 0 }
            return Double(after.steal - before.steal) / Double(after.total - before.total)
        }

        public static func busyFraction(from before: CPUTimes?, to after: CPUTimes?) -> Double {
            guard let before, let after, after.total > before.total else { return 0 }
            return Double(after.busy - before.busy) / Double(after.total - before.total)
        }
    }

    /// The baseline: `sksim bench bus`'s closed-loop driver over ipc, in this same run.
    public static func baseline(_ configuration: Configuration) throws -> BusBenchmark.Measurement {
        var bus = BusBenchmark.Configuration(executable: configuration.executable, directory: configuration.directory)
        bus.seconds = configuration.baselineSeconds
        bus.inFlight = 2_000
        bus.rawMessages = 200_000
        return try BusBenchmark.run(bus, transports: ["ipc"])[0]
    }
}
