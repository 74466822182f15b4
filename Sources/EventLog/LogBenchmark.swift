import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Throughput and append-to-durable latency of the log per durability policy, each next to a raw write(2)
/// baseline of the same bytes with the same fsync schedule, measured in the same run on the same disk.
public enum LogBenchmark {
    public struct Configuration: Sendable {
        /// A scratch directory; the benchmark creates and removes its own files inside.
        public var directory: URL
        public var payloadBytes = 256
        public var recordsAlways = 5_000
        public var recordsGroupCommit = 1_000_000
        public var recordsOperatingSystem = 1_000_000
        public var groupCommitMaximumRecords = 256
        public var groupCommitMaximumDelayMilliseconds = 1

        public init(directory: URL) { self.directory = directory }
    }

    public struct Measurement: Sendable, Equatable {
        public var records: Int
        public var seconds: Double
        public var recordsPerSecond: Double
        public var megabytesPerSecond: Double
        /// From the append call to the moment the durable sequence covers the record. Nil for
        /// `.operatingSystem`, where nothing is durable before close.
        public var appendToDurable: LatencySummary?
    }

    public struct Result: Sendable, Equatable, CustomStringConvertible {
        public var policy: DurabilityPolicy
        public var log: Measurement
        public var baseline: Measurement
        /// Log records/s ÷ baseline records/s.
        public var ratioToBaseline: Double { log.recordsPerSecond / baseline.recordsPerSecond }

        public var description: String {
            func line(_ name: String, _ value: Measurement) -> String {
                let latency = value.appendToDurable.map {
                    String(format: ", durable p50 %.1f µs p99 %.1f µs", $0.p50Microseconds, $0.p99Microseconds)
                } ?? ""
                return String(
                    format: "  %@ %d records in %.3f s: %.0f records/s, %.1f MB/s%@", name, value.records, value.seconds,
                    value.recordsPerSecond, value.megabytesPerSecond, latency)
            }
            return "\(policy): ratio to baseline \(String(format: "%.2f", ratioToBaseline))\n"
                + line("log     ", log) + "\n" + line("baseline", baseline)
        }
    }

    /// Runs all three policies (log first, then baseline, per policy).
    public static func run(_ configuration: Configuration) throws -> [Result] {
        let runDirectory = configuration.directory.appendingPathComponent("eventlog-bench-\(getpid())-\(monotonicNanoseconds())")
        try FileManager.default.createDirectory(at: runDirectory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: runDirectory) }
        let policies: [(DurabilityPolicy, Int)] = [
            (.always, configuration.recordsAlways),
            (
                .groupCommit(
                    maximumRecords: configuration.groupCommitMaximumRecords,
                    maximumDelayMilliseconds: configuration.groupCommitMaximumDelayMilliseconds),
                configuration.recordsGroupCommit
            ),
            (.operatingSystem, configuration.recordsOperatingSystem),
        ]
        var results: [Result] = []
        for (number, (policy, records)) in policies.enumerated() {
            let log = try measureLog(
                policy: policy, records: records, payloadBytes: configuration.payloadBytes,
                directory: runDirectory.appendingPathComponent("log-\(number)"))
            let baseline = try measureBaseline(
                policy: policy, records: records, payloadBytes: configuration.payloadBytes,
                path: runDirectory.appendingPathComponent("baseline-\(number).bin").path)
            results.append(Result(policy: policy, log: log, baseline: baseline))
        }
        return results
    }

    /// Start times by sequence in a ring; the writer bounds non-durable records far below its size.
    private final class LatencyTracker: @unchecked Sendable {
        static let ringSize = 1 << 18
        let startTimes = UnsafeMutablePointer<UInt64>.allocate(capacity: ringSize)
        var histogram = LatencyHistogram()
        var lastDurable: UInt64 = 0

        deinit { startTimes.deallocate() }

        /// Called serially by the writer's durability hook.
        func durable(through sequence: UInt64) {
            let now = monotonicNanoseconds()
            var next = lastDurable + 1
            while next <= sequence {
                histogram.record(now &- startTimes[Int(next) & (Self.ringSize - 1)])
                next += 1
            }
            lastDurable = max(lastDurable, sequence)
        }
    }

    private static func measureLog(policy: DurabilityPolicy, records: Int, payloadBytes: Int, directory: URL) throws -> Measurement {
        let tracker = LatencyTracker()
        let tracksLatency = policy != .operatingSystem
        var configuration = PartitionWriterConfiguration(durability: policy)
        if tracksLatency { configuration.onDurable = { tracker.durable(through: $0) } }
        let payload = [UInt8](unsafeUninitializedCapacity: payloadBytes) { buffer, count in
            for index in 0..<payloadBytes { buffer[index] = UInt8(truncatingIfNeeded: index &* 31 &+ 7) }
            count = payloadBytes
        }
        let start = monotonicNanoseconds()
        let writer = try PartitionWriter(directory: directory, partition: "bench", configuration: configuration)
        try payload.withUnsafeBytes { bytes in
            for number in 1...records {
                if tracksLatency { tracker.startTimes[number & (LatencyTracker.ringSize - 1)] = monotonicNanoseconds() }
                try writer.append(payload: bytes, timestampNanoseconds: Int64(number))
            }
        }
        try writer.close()
        let seconds = Double(monotonicNanoseconds() - start) / 1e9
        return measurement(
            records: records, recordBytes: payloadBytes + SegmentFormat.recordHeaderBytes, seconds: seconds,
            latency: tracksLatency ? tracker.histogram.summary : nil)
    }

    /// Raw write(2) per record (24-byte header + payload), fsync on the same schedule as the policy.
    private static func measureBaseline(policy: DurabilityPolicy, records: Int, payloadBytes: Int, path: String) throws -> Measurement {
        let recordBytes = payloadBytes + SegmentFormat.recordHeaderBytes
        var record = [UInt8](repeating: 0x5A, count: recordBytes)
        var histogram = LatencyHistogram()
        let pendingStarts = UnsafeMutablePointer<UInt64>.allocate(capacity: 1 << 16)
        defer { pendingStarts.deallocate() }
        var pending = 0
        let start = monotonicNanoseconds()
        let descriptor = try FileIO.open(path, flags: O_WRONLY | O_CREAT | O_TRUNC)
        defer { FileIO.close(descriptor) }
        func synchronize() throws(LogError) {
            try FileIO.synchronize(descriptor, path: path)
            let now = monotonicNanoseconds()
            for index in 0..<pending { histogram.record(now &- pendingStarts[index]) }
            pending = 0
        }
        var offset: UInt64 = 0
        for number in 1...records {
            let begin = monotonicNanoseconds()
            record.withUnsafeMutableBytes { $0.storeBytes(of: UInt64(number).littleEndian, toByteOffset: 8, as: UInt64.self) }
            let written = record.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, recordBytes) }
            guard written == recordBytes else { throw FileIO.failure("write", path) }
            offset += UInt64(recordBytes)
            switch policy {
            case .always:
                pendingStarts[0] = begin
                pending = 1
                try synchronize()
            case .groupCommit(let maximumRecords, let milliseconds):
                pendingStarts[pending & ((1 << 16) - 1)] = begin
                pending += 1
                if pending >= maximumRecords || begin - pendingStarts[0] >= UInt64(milliseconds) * 1_000_000 {
                    try synchronize()
                }
            case .operatingSystem:
                break
            }
        }
        if policy == .operatingSystem { pending = 0 }
        try synchronize()  // the log fsyncs on close under every policy, so the baseline does too
        let seconds = Double(monotonicNanoseconds() - start) / 1e9
        return measurement(
            records: records, recordBytes: recordBytes, seconds: seconds,
            latency: policy == .operatingSystem ? nil : histogram.summary)
    }

    private static func measurement(records: Int, recordBytes: Int, seconds: Double, latency: LatencySummary?) -> Measurement {
        Measurement(
            records: records, seconds: seconds, recordsPerSecond: Double(records) / seconds,
            megabytesPerSecond: Double(records * recordBytes) / seconds / 1e6, appendToDurable: latency)
    }
}
