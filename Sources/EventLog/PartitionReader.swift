import Foundation

/// What a read saw besides the records themselves.
public struct ReadSummary: Sendable, Equatable {
    /// Records passed to the closure.
    public var recordCount: UInt64 = 0
    /// Sequence of the last record passed to the closure (0 if none).
    public var lastSequence: UInt64 = 0
    /// Set when the log ends in a torn tail (a crash mid-write, or a writer still writing): reading stopped
    /// there; opening a writer truncates it.
    public var tornTail: LogProblem?
}

/// Reads one partition: from a sequence number to the end, in bounded memory, verifying checksums and
/// sequence continuity. Works while a writer appends (it sees a prefix).
public struct PartitionReader: Sendable {
    public let directory: URL
    public let partition: String
    private let partitionPath: String

    public init(directory: URL, partition: String) throws(LogError) {
        try SegmentFormat.validatePartitionName(partition)
        self.directory = directory
        self.partition = partition
        partitionPath = LogDirectory.partitionPath(directory, partition)
        guard LogDirectory.isDirectory(partitionPath) else {
            throw LogError(.notFound, "partition \"\(partition)\" does not exist", path: partitionPath)
        }
    }

    /// Calls `body` for each record with `from <= sequence <= through`, in order. The view's payload is only
    /// valid during the call. Finds the segment by file name and seeks with its sparse index, so at most
    /// K records (the index interval) are scanned before `from`. Records reach `body` as soon as their whole
    /// unit is checked, so every good record before any damage is delivered before `.corruption` is thrown;
    /// records of an incomplete unit at the end are never delivered. A torn tail at the very end is reported
    /// in the summary instead of thrown.
    ///
    /// With `includingInputs`, each unit's input record (`LogRecordView.isInput`, log format 3) reaches `body`
    /// too, before the unit's events; an input counts as at its unit's first sequence (for an input alone,
    /// the next event's), and is not counted in the summary. The index points at events, so a read from
    /// the middle of a segment may start after the input of the unit holding `from`.
    @discardableResult
    public func forEachRecord(
        from: UInt64 = 1, through: UInt64 = .max, includingInputs: Bool = false, _ body: (LogRecordView) throws -> Void
    ) throws -> ReadSummary {
        var summary = ReadSummary()
        let start = max(from, 1)
        var segments = try LogDirectory.listSegments(partitionPath: partitionPath).segments
        guard let first = segments.first, start <= through else { return summary }
        guard first.baseSequence == 1 else {
            throw LogError(
                corruption: LogProblem(
                    kind: .sequenceGap, path: first.segmentPath, byteOffset: 0,
                    message: "the partition's first segment starts at sequence \(first.baseSequence), not 1"))
        }
        let startSegment = segments.lastIndex { $0.baseSequence <= start } ?? 0
        var expected: UInt64 = segments[startSegment].baseSequence
        var position = startSegment
        while position < segments.count {
            let entry = segments[position]
            let isLast = position == segments.count - 1
            let file = try SegmentFile(path: entry.segmentPath)
            guard let header = try checkedHeader(of: file, entry: entry, isLast: isLast, expected: expected, summary: &summary) else {
                return summary
            }
            var lastInSegment = header.baseSequence - 1
            var skipped: UInt64 = 0
            // The state it changes is passed in, not captured: a local function that captures a `var` and
            // is passed as a closure makes every access to it a run-time exclusivity check (per record).
            func visit(
                _ record: LogRecordView, _ summary: inout ReadSummary, _ lastInSegment: inout UInt64, _ skipped: inout UInt64
            ) throws -> Bool {
                if record.sequence > through { return false }
                if record.isInput {
                    if record.sequence >= start { try body(record) }
                    return true
                }
                lastInSegment = record.sequence
                if record.sequence < start {
                    skipped += 1
                    return true
                }
                try body(record)
                summary.recordCount += 1
                summary.lastSequence = record.sequence
                // Stop before parsing the next record, so damage after `through` does not fail this read.
                return record.sequence < through
            }
            var end: SegmentScanEnd
            var index: SparseIndex?
            if position == startSegment && start > header.baseSequence {
                index = SparseIndex.load(
                    path: entry.indexPath, baseSequence: header.baseSequence, segmentHeaderBytes: header.byteCount,
                    segmentSize: file.size)
            }
            if let index, let seek = index.entry(atOrBefore: start), seek.sequence > header.baseSequence {
                end = try file.scan(
                    header: header, from: seek.byteOffset, expectedSequence: seek.sequence, includingInputs: includingInputs
                ) { record, _ in
                    try visit(record, &summary, &lastInSegment, &skipped)
                }
                // The index is never trusted over the segment: if its offset leads nowhere, scan from the start.
                if case .damage(let problem) = end, problem.byteOffset == seek.byteOffset, summary.recordCount == 0 {
                    skipped = 0
                    end = try file.scan(
                        header: header, from: UInt64(header.byteCount), expectedSequence: header.baseSequence,
                        includingInputs: includingInputs
                    ) { record, _ in try visit(record, &summary, &lastInSegment, &skipped) }
                    if !isLast { rebuildIndex(file: file, header: header, entry: entry, interval: index.intervalRecords) }
                }
            } else {
                end = try file.scan(
                    header: header, from: UInt64(header.byteCount), expectedSequence: header.baseSequence,
                    includingInputs: includingInputs
                ) { record, _ in
                    try visit(record, &summary, &lastInSegment, &skipped)
                }
            }
            if position == startSegment && !isLast && start > header.baseSequence {
                let interval = index?.intervalRecords ?? LogDirectory.indexIntervalHint(segments)
                if index == nil || skipped > UInt64(interval) {
                    rebuildIndex(file: file, header: header, entry: entry, interval: interval)
                }
            }
            if case .stopped = end { return summary }
            if case .damage(let problem) = end { throw LogError(corruption: problem) }
            guard let next = try successorStart(after: end, position: position, segments: &segments, lastInSegment: lastInSegment, summary: &summary) else {
                return summary
            }
            expected = next
            position += 1
        }
        return summary
    }

    /// The segment's header, checked to be this partition's and to start at `expected`; nil when the last
    /// segment is cut inside its header (a crash creating it), which the summary reports as a torn tail.
    private func checkedHeader(
        of file: SegmentFile, entry: LogDirectory.SegmentEntry, isLast: Bool, expected: UInt64, summary: inout ReadSummary
    ) throws(LogError) -> SegmentHeader? {
        let header: SegmentHeader
        switch try file.validHeader(partition: partition, baseSequence: entry.baseSequence) {
        case .success(let valid):
            header = valid
        case .failure(let problem) where problem.kind == .truncatedHeader && isLast:
            summary.tornTail = problem
            return nil
        case .failure(let problem):
            throw LogError(corruption: problem)
        }
        guard header.baseSequence == expected else {
            throw LogError(
                corruption: LogProblem(
                    kind: .sequenceGap, path: entry.segmentPath, byteOffset: 0,
                    message: "segment starts at sequence \(header.baseSequence) but \(expected) was expected"))
        }
        return header
    }

    /// The sequence the segment after the one at `position` must start at, given how that one's scan ended;
    /// nil when the read is over (the last segment, or a torn tail the summary reports). Lists the segments
    /// again when a writer rolled to a new one since they were listed.
    private func successorStart(
        after end: SegmentScanEnd, position: Int, segments: inout [LogDirectory.SegmentEntry], lastInSegment: UInt64,
        summary: inout ReadSummary
    ) throws(LogError) -> UInt64? {
        let entry = segments[position]
        let isLast = position == segments.count - 1
        // A last segment cut inside its header (a crash creating it) does not count as a successor.
        let successorIsStub =
            position == segments.count - 2 && SealedSegmentEnd.isCutInsideHeader(segments[position + 1], partition: partition)
        if isLast || successorIsStub {
            switch end {
            case .tornTail(let offset, _, let reason):
                summary.tornTail = LogProblem(kind: .tornTail, path: entry.segmentPath, byteOffset: offset, message: reason)
                return nil
            case .sealed(let offset, let next):
                // A writer may have rolled since the listing: its successor is created before the seal is written.
                guard let refreshed = try relisted(finding: next, at: position + 1) else {
                    throw LogError(corruption: SealedSegmentEnd.missingSegment(path: entry.segmentPath, sealOffset: offset, next: next))
                }
                segments = refreshed
                return next
            default:
                if isLast { return nil }
                return lastInSegment + 1
            }
        } else {
            let successor = segments[position + 1]
            let holdsRecords = SealedSegmentEnd.holdsRecords(successor, partition: partition)
            // A writer writes the seal after creating the successor and before writing to it, so a seal missing
            // from the size seen at open may be there now.
            let seal = try SegmentFile(path: entry.segmentPath).trailingSeal()
            if seal == successor.baseSequence {
                return successor.baseSequence
            } else if let seal, let refreshed = try relisted(finding: seal, at: position + 1) {
                // A listing taken while a writer rolls may miss a new segment but show a newer one.
                segments = refreshed
                return seal
            } else {
                switch SealedSegmentEnd.judge(
                    end, lastSequence: lastInSegment, path: entry.segmentPath, successor: successor,
                    successorHoldsRecords: holdsRecords)
                {
                case .sealed, .interruptedRoll: return successor.baseSequence
                case .damage(let problem): throw LogError(corruption: problem)
                }
            }
        }
    }

    /// The partition's segments listed again, if the segment at `position` now has base `sequence`.
    private func relisted(finding sequence: UInt64, at position: Int) throws(LogError) -> [LogDirectory.SegmentEntry]? {
        let segments = try LogDirectory.listSegments(partitionPath: partitionPath).segments
        return segments.count > position && segments[position].baseSequence == sequence ? segments : nil
    }

    /// Owned copies of the records in `from...through`; for small reads (tests, tools).
    public func records(from: UInt64 = 1, through: UInt64 = .max) throws -> [LogRecord] {
        var records: [LogRecord] = []
        try forEachRecord(from: from, through: through) { records.append($0.record) }
        return records
    }

    /// Sequence of the last whole record (0 when empty), found from the last segment's index.
    public func lastSequence() throws(LogError) -> UInt64 {
        let segments = try LogDirectory.listSegments(partitionPath: partitionPath).segments
        for (position, entry) in segments.enumerated().reversed() {
            let lookup: (lastSequence: UInt64?, end: SegmentScanEnd)
            do {
                lookup = try SegmentLookup.lastSequence(of: entry, partition: partition)
            } catch {
                // A last segment cut inside its header holds no records: the previous segment has the last one.
                if error.problems.first?.kind == .truncatedHeader && position == segments.count - 1 { continue }
                throw error
            }
            if case .damage(let problem) = lookup.end { throw LogError(corruption: problem) }
            // Sealed is right only before a header-cut last segment that the seal names (skipped above).
            if case .sealed(let offset, let next) = lookup.end, position == segments.count - 1 || segments[position + 1].baseSequence != next {
                throw LogError(corruption: SealedSegmentEnd.missingSegment(path: entry.segmentPath, sealOffset: offset, next: next))
            }
            return lookup.lastSequence ?? entry.baseSequence - 1
        }
        return 0
    }

    /// Rewrites a sealed segment's stale or missing index; failures are ignored (the index is optional).
    private func rebuildIndex(file: SegmentFile, header: SegmentHeader, entry: LogDirectory.SegmentEntry, interval: UInt32) {
        guard let summary = try? SegmentSummary.scan(file: file, header: header, intervalRecords: interval) else { return }
        switch summary.end {
        case .endOfData, .sealed: break
        default: return
        }
        try? summary.index.write(path: entry.indexPath, directory: partitionPath)
    }
}
