import Foundation
import Logging
import StoreKitLive
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
        public var baselineSeconds = 4.0
        public init(executable: URL, directory: URL) {
            self.executable = executable
            self.directory = directory
        }
    }

    public struct Measurement: Sendable {
        public var durationSeconds: Double
        public var result: LoadCoordinator.Result
        public var startsPerSecond: Double { result.figures.loadSeconds > 0 ? Double(result.figures.counters.started) / result.figures.loadSeconds : 0 }
        public var driverCPUMicrosecondsPerLifecycle: Double {
            result.figures.counters.started > 0 ? result.driversCPUSeconds * 1e6 / Double(result.figures.counters.started) : 0
        }
    }

    public static func run(_ configuration: Configuration, logger: Logger) throws -> [Measurement] {
        var measurements: [Measurement] = []
        for (index, duration) in configuration.durationsNanoseconds.enumerated() {
            let directory = configuration.directory.appendingPathComponent("skbl-\(getpid())-\(index)", isDirectory: true)
            try? FileManager.default.removeItem(at: directory)
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let topologyPath = directory.appendingPathComponent("bench.yaml").path
            try BusBenchmark.topologyText(name: "bench-load").write(toFile: topologyPath, atomically: true, encoding: .utf8)
            let topology = try Topology.load(path: topologyPath)
            var options = LoadCoordinator.Options()
            options.plan.model = .open
            options.plan.schedule = .constant(perSecond: configuration.ratePerSecond, durationNanoseconds: duration)
            options.plan.devicesPerDriver = configuration.devices
            options.plan.drainNanoseconds = 5_000_000_000
            options.showLiveView = false
            let coordinator = LoadCoordinator(topology: topology, topologyPath: topologyPath, runDirectory: directory.appendingPathComponent("run"),
                                              executable: configuration.executable, options: options, logger: logger)
            measurements.append(Measurement(durationSeconds: Double(duration) / 1e9, result: try coordinator.run()))
        }
        return measurements
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
