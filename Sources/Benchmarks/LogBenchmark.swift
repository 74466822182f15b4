import EventLog
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Throughput and append-to-durable latency of the log per durability policy, each next to a baseline that is
/// the real limit of the disk for the same bytes and the same durability, measured in the same run on the same
/// disk; and reading speed next to a raw scan of the same files.
///
/// Baselines: `.always`: write(2) + fdatasync per record. `.groupCommit`: a writer thread fills 64 KiB buffers
/// and writes them while a flusher thread fdatasyncs back to back whenever written bytes are pending, with the
/// same bound of 4 × maximumRecords records not yet durable. `.operatingSystem`: 64 KiB buffered writes, one
/// fdatasync at the end. The baselines copy the records but compute no checksum; a ratio above 1 would mean
/// the baseline is not the limit.
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
        /// Records in the log read back by the read benchmark.
        public var recordsRead = 1_000_000

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

    /// The floor of one durable append on the disk holding `directory`: the median of `records` single writes of
    /// `recordBytes` bytes, each followed by fdatasync, into a file whose space is reserved ahead (as the log
    /// reserves its segments'), in microseconds; and their 99th percentile, the disk's tail, which bounds
    /// the tail of anything that waits for several syncs (`bench bus`'s half load).
    public static func durableAppendPercentiles(directory: URL, records: Int = 300, recordBytes: Int = 128) throws
        -> (p50: Double, p99: Double) {
        let path = directory.appendingPathComponent("durable-append-\(getpid())").path
        let descriptor = try FileIO.open(path, flags: O_WRONLY | O_CREAT | O_TRUNC)
        defer {
            FileIO.close(descriptor)
            unlink(path)
        }
        _ = FileIO.reserve(descriptor, from: 0, length: UInt64(records) * UInt64(recordBytes))
        let record = [UInt8](repeating: 1, count: recordBytes)
        var syncs: [UInt64] = []
        for index in 0..<records {
            let begin = monotonicNanoseconds()
            try FileIO.writeAll(descriptor, record, at: UInt64(index * recordBytes), path: path)
            try FileIO.synchronizeData(descriptor, path: path)
            syncs.append(monotonicNanoseconds() &- begin)
        }
        syncs.sort()
        return (Double(syncs[syncs.count / 2]) / 1_000, Double(syncs[min(syncs.count - 1, syncs.count * 99 / 100)]) / 1_000)
    }

    /// Size of the baselines' buffered writes.
    static let baselineWriteBytes = 64 << 10

    /// The disk's limit for `policy` (see the type's comment).
    private static func measureBaseline(policy: DurabilityPolicy, records: Int, payloadBytes: Int, path: String) throws -> Measurement {
        let recordBytes = payloadBytes + SegmentFormat.recordHeaderBytes
        let descriptor = try FileIO.open(path, flags: O_WRONLY | O_CREAT | O_TRUNC)
        defer { FileIO.close(descriptor) }
        // The disk space is reserved ahead, as the log reserves its segments' (a sync then allocates no blocks).
        _ = FileIO.reserve(descriptor, from: 0, length: UInt64(records) * UInt64(recordBytes))
        let record = UnsafeMutableRawPointer.allocate(byteCount: recordBytes, alignment: 8)
        defer { record.deallocate() }
        for index in 0..<recordBytes { record.storeBytes(of: UInt8(truncatingIfNeeded: index &* 31 &+ 7), toByteOffset: index, as: UInt8.self) }
        let start = monotonicNanoseconds()
        switch policy {
        case .always:
            var histogram = LatencyHistogram()
            var offset: UInt64 = 0
            for number in 1...records {
                let begin = monotonicNanoseconds()
                record.storeBytes(of: UInt64(number).littleEndian, toByteOffset: 8, as: UInt64.self)
                try FileIO.writeAll(descriptor, UnsafeRawBufferPointer(start: record, count: recordBytes), at: offset, path: path)
                offset += UInt64(recordBytes)
                try FileIO.synchronizeData(descriptor, path: path)
                histogram.record(monotonicNanoseconds() &- begin)
            }
            return measurement(records: records, recordBytes: recordBytes, seconds: seconds(since: start), latency: histogram.summary)
        case .groupCommit(let maximumRecords, _):
            let flusher = BaselineFlusher(descriptor: descriptor, path: path, maximumPending: 4 * maximumRecords)
            flusher.start()
            try writeBuffered(records: records, record: record, recordBytes: recordBytes, descriptor: descriptor, path: path) {
                try flusher.written(through: $0)
            } beforeRecord: { number in
                flusher.startTimes[number & (BaselineFlusher.ringSize - 1)] = monotonicNanoseconds()
            }
            let latency = try flusher.finish()
            return measurement(records: records, recordBytes: recordBytes, seconds: seconds(since: start), latency: latency)
        case .operatingSystem:
            try writeBuffered(records: records, record: record, recordBytes: recordBytes, descriptor: descriptor, path: path) { _ in
            } beforeRecord: { _ in }
            try FileIO.synchronizeData(descriptor, path: path)  // the log syncs on close under every policy
            return measurement(records: records, recordBytes: recordBytes, seconds: seconds(since: start), latency: nil)
        }
    }

    /// Copies `records` numbered records into 64 KiB buffers and writes each when full; `written(n)` follows
    /// each write(2) with the number of records written so far.
    private static func writeBuffered(
        records: Int, record: UnsafeMutableRawPointer, recordBytes: Int, descriptor: Int32, path: String,
        written: (Int) throws -> Void, beforeRecord: (Int) -> Void
    ) throws {
        let capacity = max(baselineWriteBytes, recordBytes)
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 16)
        defer { buffer.deallocate() }
        var used = 0
        var offset: UInt64 = 0
        func writeOut(through number: Int) throws {
            try FileIO.writeAll(descriptor, UnsafeRawBufferPointer(start: buffer, count: used), at: offset, path: path)
            offset += UInt64(used)
            used = 0
            try written(number)
        }
        for number in 1...records {
            if used + recordBytes > capacity { try writeOut(through: number - 1) }
            beforeRecord(number)
            record.storeBytes(of: UInt64(number).littleEndian, toByteOffset: 8, as: UInt64.self)
            (buffer + used).copyMemory(from: record, byteCount: recordBytes)
            used += recordBytes
        }
        try writeOut(through: records)
    }

    /// The group-commit baseline's flusher thread: fdatasync back to back while written records are pending.
    private final class BaselineFlusher: @unchecked Sendable {
        static let ringSize = 1 << 18
        let startTimes = UnsafeMutablePointer<UInt64>.allocate(capacity: ringSize)
        private let descriptor: Int32
        private let path: String
        private let maximumPending: Int
        private let lock = MonitorLock()
        private let changed: MonitorLock.Condition
        // Guarded by `lock`.
        private var writtenRecords = 0
        private var syncedRecords = 0
        private var done = false
        private var exited = false
        private var failure: LogError?
        private var histogram = LatencyHistogram()

        init(descriptor: Int32, path: String, maximumPending: Int) {
            self.descriptor = descriptor
            self.path = path
            self.maximumPending = maximumPending
            changed = MonitorLock.Condition(lock)
        }

        deinit { startTimes.deallocate() }

        func start() {
            let thread = Thread { self.run() }
            thread.name = "baseline flusher"
            thread.start()
        }

        /// Called by the writer after each write(2); waits while too many written records are not yet durable.
        func written(through number: Int) throws {
            lock.lock()
            defer { lock.unlock() }
            writtenRecords = number
            changed.broadcast()
            while writtenRecords - syncedRecords >= maximumPending && failure == nil {
                changed.wait(untilMonotonicNanoseconds: monotonicNanoseconds() + 100_000_000)
            }
            if let failure { throw failure }
        }

        /// Waits until everything written is synced and the thread has exited.
        func finish() throws -> LatencySummary {
            lock.lock()
            defer { lock.unlock() }
            done = true
            changed.broadcast()
            while !exited { changed.wait(untilMonotonicNanoseconds: monotonicNanoseconds() + 100_000_000) }
            if let failure { throw failure }
            return histogram.summary
        }

        private func run() {
            lock.lock()
            while true {
                while writtenRecords == syncedRecords && !done {
                    changed.wait(untilMonotonicNanoseconds: monotonicNanoseconds() + 100_000_000)
                }
                if writtenRecords == syncedRecords && done { break }
                let target = writtenRecords
                lock.unlock()
                let result = Swift.Result { () throws(LogError) in try FileIO.synchronizeData(descriptor, path: path) }
                let now = monotonicNanoseconds()
                lock.lock()
                if case .failure(let error) = result {
                    failure = error
                    break
                }
                for number in (syncedRecords + 1)...target { histogram.record(now &- startTimes[number & (Self.ringSize - 1)]) }
                syncedRecords = target
                changed.broadcast()
            }
            exited = true
            changed.broadcast()
            lock.unlock()
        }
    }

    private static func seconds(since start: UInt64) -> Double { Double(monotonicNanoseconds() - start) / 1e9 }

    // MARK: Reading

    public struct ReadResult: Sendable, Equatable, CustomStringConvertible {
        /// `PartitionReader.forEachRecord` over the whole partition (checksums, sequences, units checked).
        public var log: Measurement
        /// The same segment files read with pread(2) in 4 MiB chunks, walking record lengths only.
        public var rawScan: Measurement
        /// Log records/s ÷ raw scan records/s.
        public var ratioToRawScan: Double { log.recordsPerSecond / rawScan.recordsPerSecond }

        public var description: String {
            String(
                format: "read: %.0f records/s, %.1f MB/s (raw scan %.0f records/s, %.1f MB/s); ratio to raw scan %.2f",
                log.recordsPerSecond, log.megabytesPerSecond, rawScan.recordsPerSecond, rawScan.megabytesPerSecond,
                ratioToRawScan)
        }
    }

    /// Writes `recordsRead` records, then reads them back with the reader and with a raw scan (best of three
    /// each, so both read from the page cache).
    public static func runRead(_ configuration: Configuration) throws -> ReadResult {
        let directory = configuration.directory.appendingPathComponent("eventlog-read-bench-\(getpid())-\(monotonicNanoseconds())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let records = configuration.recordsRead
        let writer = try PartitionWriter(
            directory: directory, partition: "bench", configuration: PartitionWriterConfiguration(durability: .operatingSystem))
        let payload = [UInt8](repeating: 0xA5, count: configuration.payloadBytes)
        for number in 1...records { try writer.append(payload: payload, timestampNanoseconds: Int64(number)) }
        try writer.close()
        let recordBytes = configuration.payloadBytes + SegmentFormat.recordHeaderBytes
        let reader = try PartitionReader(directory: directory, partition: "bench")
        var logBest = Double.infinity
        var rawBest = Double.infinity
        for _ in 0..<3 {
            let rawStart = monotonicNanoseconds()
            let scanned = try rawScan(partitionPath: LogDirectory.partitionPath(directory, "bench"))
            rawBest = min(rawBest, seconds(since: rawStart))
            precondition(scanned == records, "raw scan saw \(scanned) of \(records) records")
            let start = monotonicNanoseconds()
            var count = 0
            var payloadBytes = 0
            try reader.forEachRecord { record in
                count += 1
                payloadBytes &+= record.payload.count
            }
            logBest = min(logBest, seconds(since: start))
            precondition(count == records && payloadBytes == records * configuration.payloadBytes, "reader saw \(count) of \(records) records")
        }
        return ReadResult(
            log: measurement(records: records, recordBytes: recordBytes, seconds: logBest, latency: nil),
            rawScan: measurement(records: records, recordBytes: recordBytes, seconds: rawBest, latency: nil))
    }

    /// Counts records by walking length words (no checksum, no other check): the cost of reading the bytes.
    private static func rawScan(partitionPath: String) throws -> Int {
        let chunk = 4 << 20
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: chunk, alignment: 16)
        defer { buffer.deallocate() }
        var count = 0
        for segment in try LogDirectory.listSegments(partitionPath: partitionPath).segments {
            let descriptor = try FileIO.open(segment.segmentPath, flags: O_RDONLY)
            defer { FileIO.close(descriptor) }
            let size = try FileIO.size(descriptor, path: segment.segmentPath)
            var offset = UInt64(SegmentFormat.headerBytes(partitionNameLength: 5))
            while offset < size {
                let filled = try FileIO.read(
                    descriptor, into: UnsafeMutableRawBufferPointer(start: buffer, count: Int(min(UInt64(chunk), size - offset))),
                    at: offset, path: segment.segmentPath)
                var position = 0
                while position + SegmentFormat.recordHeaderBytes <= filled {
                    let word = UInt32(littleEndian: buffer.loadUnaligned(fromByteOffset: position + 4, as: UInt32.self))
                    let recordBytes = SegmentFormat.recordHeaderBytes + Int(word & SegmentFormat.payloadLengthMask)
                    if position + recordBytes > filled { break }
                    if word & SegmentFormat.sealFlag == 0 { count += 1 }
                    position += recordBytes
                }
                guard position > 0 else { break }
                offset += UInt64(position)
            }
        }
        return count
    }

    private static func measurement(records: Int, recordBytes: Int, seconds: Double, latency: LatencySummary?) -> Measurement {
        Measurement(
            records: records, seconds: seconds, recordsPerSecond: Double(records) / seconds,
            megabytesPerSecond: Double(records * recordBytes) / seconds / 1e6, appendToDurable: latency)
    }
}
