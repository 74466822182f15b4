import Foundation

/// Facts and problems of one partition, from a full scan.
public struct PartitionReport: Sendable, Equatable {
    public var partition: String
    public var segmentCount = 0
    public var recordCount: UInt64 = 0
    public var firstSequence: UInt64?
    public var lastSequence: UInt64?
    public var firstTimestampNanoseconds: Int64?
    public var lastTimestampNanoseconds: Int64?
    /// Total size of the segment files.
    public var byteCount: UInt64 = 0
    public var problems: [LogProblem] = []

    public var isIntact: Bool { problems.isEmpty }
}

/// Result of `LogMaintenance.verify`.
public struct VerificationReport: Sendable, Equatable, CustomStringConvertible {
    public var directory: String
    public var partitions: [PartitionReport]

    public var problems: [LogProblem] { partitions.flatMap(\.problems) }
    /// No problem of any kind (stale indexes included).
    public var isIntact: Bool { problems.isEmpty }
    /// Every problem is one `repair` fixes without dropping a whole record.
    public var isRepairable: Bool { problems.allSatisfy(\.isRepairable) }

    public var description: String {
        var lines: [String] = []
        for partition in partitions {
            let range = partition.firstSequence.map { "\($0)...\(partition.lastSequence ?? $0)" } ?? "empty"
            lines.append(
                "\(partition.partition): \(partition.recordCount) records (\(range)), \(partition.segmentCount) segments, "
                    + "\(partition.byteCount) bytes, \(partition.isIntact ? "intact" : "\(partition.problems.count) problems")")
            lines += partition.problems.map { "  \($0)" }
        }
        lines.append(isIntact ? "log is intact" : (isRepairable ? "log needs `sksim log repair`" : "log is damaged"))
        return lines.joined(separator: "\n")
    }
}

/// Offline checks and fixes of a whole log directory (`sksim log verify|repair|stats`). Run them while no
/// writer has the log open.
public enum LogMaintenance {
    /// Scans every segment of every partition: checksums, sequence continuity, headers, indexes.
    public static func verify(directory: URL) throws(LogError) -> VerificationReport {
        var report = VerificationReport(directory: directory.path, partitions: [])
        for partition in try LogDirectory.partitions(in: directory) {
            report.partitions.append(try verifyPartition(directory: directory, partition: partition).report)
        }
        return report
    }

    /// Counts, bytes, segments, first/last sequences and timestamps per partition.
    public static func statistics(directory: URL) throws(LogError) -> [PartitionReport] {
        try verify(directory: directory).partitions
    }

    struct SegmentFinding {
        var entry: LogDirectory.SegmentEntry
        var expectedIndex: SparseIndex?
    }

    static func verifyPartition(directory: URL, partition: String) throws(LogError) -> (report: PartitionReport, segments: [SegmentFinding]) {
        let partitionPath = LogDirectory.partitionPath(directory, partition)
        var report = PartitionReport(partition: partition)
        var findings: [SegmentFinding] = []
        let listing = try LogDirectory.listSegments(partitionPath: partitionPath)
        report.problems += listing.badNames.map {
            LogProblem(kind: .badFileName, path: $0, byteOffset: 0, message: "segment file names must be 20 decimal digits followed by .segment")
        }
        report.segmentCount = listing.segments.count
        var expected: UInt64? = 1
        let intervalHint = LogDirectory.indexIntervalHint(listing.segments)
        for (position, entry) in listing.segments.enumerated() {
            let isLast = position == listing.segments.count - 1
            var finding = SegmentFinding(entry: entry)
            defer { findings.append(finding) }
            let file: SegmentFile
            do {
                file = try SegmentFile(path: entry.segmentPath)
            } catch {
                report.problems.append(LogProblem(kind: .unreadable, path: entry.segmentPath, byteOffset: 0, message: error.message))
                expected = nil
                continue
            }
            report.byteCount += file.size
            let header: SegmentHeader
            switch try file.validHeader(partition: partition, baseSequence: entry.baseSequence) {
            case .success(let valid):
                header = valid
            case .failure(let problem):
                if problem.kind == .truncatedHeader && !isLast {
                    report.problems.append(
                        LogProblem(
                            kind: .badHeader, path: problem.path, byteOffset: problem.byteOffset,
                            message: problem.message + ", but it is not the last segment"))
                } else {
                    report.problems.append(problem)
                }
                expected = nil
                continue
            }
            if let expected, header.baseSequence != expected {
                report.problems.append(
                    LogProblem(
                        kind: .sequenceGap, path: entry.segmentPath, byteOffset: 0,
                        message: "segment starts at sequence \(header.baseSequence) but \(expected) was expected"))
            }
            let interval = existingInterval(indexPath: entry.indexPath) ?? intervalHint
            let summary = try SegmentSummary.scan(file: file, header: header, intervalRecords: interval)
            report.recordCount += summary.recordCount
            if report.firstSequence == nil {
                report.firstSequence = summary.firstSequence
                report.firstTimestampNanoseconds = summary.firstTimestampNanoseconds
            }
            if summary.lastSequence != nil {
                report.lastSequence = summary.lastSequence
                report.lastTimestampNanoseconds = summary.lastTimestampNanoseconds
            }
            expected = (summary.lastSequence ?? header.baseSequence - 1) + 1
            switch summary.end {
            case .endOfData, .stopped:
                break
            case .tornTail(let offset, let dropped, let reason):
                report.problems.append(
                    LogProblem(
                        kind: isLast ? .tornTail : .truncatedRecord, path: entry.segmentPath, byteOffset: offset,
                        message: isLast
                            ? "\(reason); \(dropped) bytes after the last whole record"
                            : "\(reason), in a sealed segment (not the last one)"))
            case .damage(let problem):
                report.problems.append(problem)
                expected = nil
                continue
            }
            finding.expectedIndex = summary.index
            if SparseIndex.fileBytes(path: entry.indexPath) != summary.index.encoded() {
                report.problems.append(
                    LogProblem(
                        kind: .staleIndex, path: entry.indexPath, byteOffset: 0,
                        message: "the sparse index is missing, damaged or does not match its segment's records"))
            }
        }
        return (report, findings)
    }

    /// Interval K stored in an existing index file header, if the header is readable.
    static func existingInterval(indexPath: String) -> UInt32? {
        guard let bytes = SparseIndex.fileBytes(path: indexPath), bytes.count >= SparseIndex.headerBytes,
            bytes[0..<8].elementsEqual(SparseIndex.magic)
        else { return nil }
        let interval = bytes.loadLittleEndian(UInt32.self, at: 12)
        return interval > 0 ? interval : nil
    }
}
