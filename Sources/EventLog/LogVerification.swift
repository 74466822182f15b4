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
                    + "\(partition.byteCount) bytes, \(partition.isIntact ? "intact" : partition.problems.count == 1 ? "1 problem" : "\(partition.problems.count) problems")")
            lines += partition.problems.map { "  \($0)" }
        }
        lines.append(verdict)
        return lines.joined(separator: "\n")
    }

    /// The last line of `description`: what the problems mean and what `repair` would do.
    var verdict: String {
        if isIntact { return "log is intact" }
        guard isRepairable else {
            return "the log is damaged where shown above; `sksim log repair` will not touch it (it never drops whole records)"
        }
        if problems.contains(where: { $0.kind == .tornTail || $0.kind == .truncatedHeader }) {
            return "the log ends in a torn record: `sksim log repair` cuts it off (nothing before it is lost)"
        }
        // A missing or stale index, or a roll cut short: every record is whole (readers already cope).
        return "every record is whole; `sksim log repair` fixes what is shown above (it rebuilds indexes and completes an interrupted segment roll) without touching a record"
    }
}

/// Offline checks and fixes of a whole log directory (`sksim log verify|repair|stats`). Run them while no
/// writer has the log open.
public enum LogMaintenance {
    /// Scans every segment of every partition: checksums, units, seals, sequence continuity, headers, indexes.
    /// `validatePayload`, when given, is called with each record's payload and returns why it does not decode
    /// (or nil); such records are reported as `.invalidPayload`, which `repair` never "fixes" by dropping.
    /// Throws `.notALog` when the directory holds no partition with segment files, and
    /// `.unsupportedFormatVersion` for segments of another log format.
    public static func verify(
        directory: URL, validatePayload: ((UnsafeRawBufferPointer) -> String?)? = nil
    ) throws(LogError) -> VerificationReport {
        var report = VerificationReport(directory: directory.path, partitions: [])
        for partition in try logPartitions(in: directory) {
            report.partitions.append(
                try verifyPartition(directory: directory, partition: partition, validatePayload: validatePayload).report)
        }
        return report
    }

    /// Counts, bytes, segments, first/last sequences and timestamps per partition.
    public static func statistics(directory: URL) throws(LogError) -> [PartitionReport] {
        try verify(directory: directory).partitions
    }

    /// The partitions of a log directory; throws `.notALog` unless at least one holds segment files, so a
    /// mistyped path is not reported as an intact (empty) log.
    static func logPartitions(in directory: URL) throws(LogError) -> [String] {
        let partitions = try LogDirectory.partitions(in: directory)
        for partition in partitions {
            let listing = try LogDirectory.listSegments(partitionPath: LogDirectory.partitionPath(directory, partition))
            if !listing.segments.isEmpty || !listing.badNames.isEmpty { return partitions }
        }
        throw LogError(
            .notALog, "\(directory.path) holds no event log: no partition directories with .segment files",
            remedy: "Give the run directory or its log/ folder")
    }

    struct SegmentFinding {
        var entry: LogDirectory.SegmentEntry
        var expectedIndex: SparseIndex?
        /// Where the seal of an interrupted roll goes, and the base it names.
        var missingSeal: (offset: UInt64, nextBaseSequence: UInt64)?
    }

    /// At most this many `.invalidPayload` problems per partition are listed; a last one gives the total.
    static let listedInvalidPayloads = 20

    static func verifyPartition(
        directory: URL, partition: String, validatePayload: ((UnsafeRawBufferPointer) -> String?)? = nil
    ) throws(LogError) -> (report: PartitionReport, segments: [SegmentFinding]) {
        let partitionPath = LogDirectory.partitionPath(directory, partition)
        var report = PartitionReport(partition: partition)
        var findings: [SegmentFinding] = []
        let listing = try LogDirectory.listSegments(partitionPath: partitionPath)
        report.problems += listing.badNames.map {
            LogProblem(kind: .badFileName, path: $0, byteOffset: 0, message: "segment file names must be 20 decimal digits followed by .segment")
        }
        let segments = listing.segments
        report.segmentCount = segments.count
        var expected: UInt64? = 1
        let intervalHint = LogDirectory.indexIntervalHint(segments)
        // A last segment cut inside its header is a crash while creating it: the one before counts as the last.
        let lastIsStub = segments.count >= 2 && SealedSegmentEnd.isCutInsideHeader(segments[segments.count - 1], partition: partition)
        var invalidPayloads = 0
        for (position, entry) in segments.enumerated() {
            let isLast = position == segments.count - 1
            let judgedAsLast = isLast || (lastIsStub && position == segments.count - 2)
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
            guard let header = try verifiedHeader(of: file, entry: entry, partition: partition, isLast: isLast, report: &report) else {
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
            let summary = try SegmentSummary.scan(file: file, header: header, intervalRecords: interval) { record, offset in
                guard let validatePayload, let reason = validatePayload(record.payload) else { return }
                invalidPayloads += 1
                if invalidPayloads <= listedInvalidPayloads {
                    report.problems.append(
                        LogProblem(
                            kind: .invalidPayload, path: entry.segmentPath, byteOffset: offset,
                            message: "record \(record.sequence) has a valid checksum but its payload does not decode: \(reason)"))
                }
            }
            report.recordCount += summary.recordCount
            if report.firstSequence == nil {
                report.firstSequence = summary.firstSequence
                report.firstTimestampNanoseconds = summary.firstTimestampNanoseconds
            }
            if summary.lastSequence != nil {
                report.lastSequence = summary.lastSequence
                report.lastTimestampNanoseconds = summary.lastTimestampNanoseconds
            }
            let lastSequence = summary.lastSequence ?? header.baseSequence - 1
            expected = lastSequence + 1
            if case .damage(let problem) = summary.end {
                report.problems.append(problem)
                expected = nil
                continue
            }
            checkEnd(
                summary.end, of: position, in: segments, judgedAsLast: judgedAsLast, lastSequence: lastSequence, partition: partition,
                report: &report, finding: &finding)
            finding.expectedIndex = summary.index
            if SparseIndex.fileBytes(path: entry.indexPath) != summary.index.encoded() {
                report.problems.append(
                    LogProblem(
                        kind: .staleIndex, path: entry.indexPath, byteOffset: 0,
                        message: "the sparse index is missing, damaged or does not match its segment's records"))
            }
        }
        if invalidPayloads > listedInvalidPayloads {
            report.problems.append(
                LogProblem(
                    kind: .invalidPayload, path: partitionPath, byteOffset: 0,
                    message: "\(invalidPayloads) records in all have payloads that do not decode (the first \(listedInvalidPayloads) are listed)"))
        }
        return (report, findings)
    }

    /// The segment's header; nil when it has none, with the problem added to the report (a header cut short
    /// is a torn tail only in the last segment).
    private static func verifiedHeader(
        of file: SegmentFile, entry: LogDirectory.SegmentEntry, partition: String, isLast: Bool, report: inout PartitionReport
    ) throws(LogError) -> SegmentHeader? {
        switch try file.validHeader(partition: partition, baseSequence: entry.baseSequence) {
        case .success(let valid):
            return valid
        case .failure(let problem):
            if problem.kind == .truncatedHeader && !isLast {
                report.problems.append(
                    LogProblem(
                        kind: .badHeader, path: problem.path, byteOffset: problem.byteOffset,
                        message: problem.message + ", but it is not the last segment"))
            } else {
                report.problems.append(problem)
            }
            return nil
        }
    }

    /// Adds to the report what is wrong with how the segment at `position` ends: a torn tail or a seal naming
    /// no segment in the last one, an interrupted roll or damage before a successor.
    private static func checkEnd(
        _ end: SegmentScanEnd, of position: Int, in segments: [LogDirectory.SegmentEntry], judgedAsLast: Bool,
        lastSequence: UInt64, partition: String, report: inout PartitionReport, finding: inout SegmentFinding
    ) {
        let isLast = position == segments.count - 1
        if judgedAsLast {
            switch end {
            case .tornTail(let offset, let dropped, let reason):
                report.problems.append(
                    LogProblem(
                        kind: .tornTail, path: segments[position].segmentPath, byteOffset: offset,
                        message: "\(reason); \(dropped) bytes after the last whole unit"))
            case .sealed(let offset, let next) where isLast || segments[position + 1].baseSequence != next:
                report.problems.append(SealedSegmentEnd.missingSegment(path: segments[position].segmentPath, sealOffset: offset, next: next))
            default:
                break
            }
        } else {
            let successor = segments[position + 1]
            switch SealedSegmentEnd.judge(
                end, lastSequence: lastSequence, path: segments[position].segmentPath, successor: successor,
                successorHoldsRecords: SealedSegmentEnd.holdsRecords(successor, partition: partition))
            {
            case .sealed:
                break
            case .interruptedRoll(let offset):
                finding.missingSeal = (offset, successor.baseSequence)
                report.problems.append(
                    LogProblem(
                        kind: .interruptedRoll, path: segments[position].segmentPath, byteOffset: offset,
                        message: "the segment lacks (part of) its seal and the next segment holds no records: "
                            + "a crash interrupted a roll; no record is lost"))
            case .damage(let problem):
                report.problems.append(problem)
            }
        }
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
