#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Facts gathered by one full scan of a segment (used by open, verify, repair and index rebuilds).
struct SegmentSummary {
    var header: SegmentHeader
    var recordCount: UInt64 = 0
    var firstSequence: UInt64?
    var lastSequence: UInt64?
    var firstTimestampNanoseconds: Int64?
    var lastTimestampNanoseconds: Int64?
    /// The index this segment's whole records imply.
    var index: SparseIndex
    var end: SegmentScanEnd

    /// Scans every record of `file` from its header on.
    /// `inspect`, when given, sees each whole record with its byte offset.
    static func scan(
        file: SegmentFile, header: SegmentHeader, intervalRecords: UInt32,
        inspect: ((LogRecordView, UInt64) -> Void)? = nil
    ) throws(LogError) -> SegmentSummary {
        var summary = SegmentSummary(
            header: header, index: SparseIndex(intervalRecords: intervalRecords, baseSequence: header.baseSequence),
            end: .endOfData(offset: UInt64(header.byteCount)))
        do {
            summary.end = try file.scan(
                header: header, from: UInt64(header.byteCount), expectedSequence: header.baseSequence
            ) { record, offset in
                if summary.firstSequence == nil {
                    summary.firstSequence = record.sequence
                    summary.firstTimestampNanoseconds = record.timestampNanoseconds
                }
                summary.lastSequence = record.sequence
                summary.lastTimestampNanoseconds = record.timestampNanoseconds
                summary.recordCount += 1
                inspect?(record, offset)
                if SparseIndex.isIndexed(record.sequence, baseSequence: header.baseSequence, intervalRecords: intervalRecords) {
                    summary.index.entries.append(SparseIndex.Entry(sequence: record.sequence, byteOffset: offset))
                }
                return true
            }
        } catch let error as LogError {
            throw error
        } catch {
            preconditionFailure("segment scan body does not throw")
        }
        return summary
    }

    /// Byte offset where whole records end (for a clean segment, its size).
    var wholeRecordsEndOffset: UInt64 {
        switch end {
        case .endOfData(let offset), .stopped(let offset), .tornTail(let offset, _, _), .sealed(let offset, _): offset
        case .damage(let problem): problem.byteOffset
        }
    }
}

enum SegmentLookup {
    /// Last sequence stored in a (sealed) segment, scanning from its last usable index entry; falls back to a
    /// full scan if the index leads nowhere. Throws the corruption found, or nil sequence for an empty segment.
    static func lastSequence(
        of entry: LogDirectory.SegmentEntry, partition: String
    ) throws(LogError) -> (lastSequence: UInt64?, end: SegmentScanEnd) {
        let file = try SegmentFile(path: entry.segmentPath)
        let header: SegmentHeader
        switch try file.validHeader(partition: partition, baseSequence: entry.baseSequence) {
        case .success(let valid): header = valid
        case .failure(let problem): throw LogError(corruption: problem)
        }
        if let next = try file.trailingSeal(), next > header.baseSequence {
            return (next - 1, .sealed(offset: file.size - UInt64(SegmentFormat.sealBytes), nextBaseSequence: next))
        }
        if let index = SparseIndex.load(
            path: entry.indexPath, baseSequence: header.baseSequence, segmentHeaderBytes: header.byteCount,
            segmentSize: file.size), let start = index.entries.last
        {
            var last: UInt64?
            let end = try? file.scan(header: header, from: start.byteOffset, expectedSequence: start.sequence) { record, _ in
                last = record.sequence
                return true
            }
            if let end, case .endOfData = end, last != nil { return (last, end) }
        }
        let summary = try SegmentSummary.scan(file: file, header: header, intervalRecords: 1 << 30)
        return (summary.lastSequence, summary.end)
    }
}

/// How the end of a segment that has a successor is judged (by writers, readers, verify and repair alike).
enum SealedSegmentEnd: Equatable {
    case sealed
    /// A crash during a roll: the successor holds no records and this segment's records end right before its
    /// base; only the seal (or part of it) is missing. Repaired by truncating at `offset` and writing the seal.
    case interruptedRoll(offset: UInt64)
    case damage(LogProblem)

    /// `lastSequence` is the segment's last whole record (base - 1 when none); `successorHoldsRecords` whether
    /// the next segment has any byte beyond its header.
    static func judge(
        _ end: SegmentScanEnd, lastSequence: UInt64, path: String, successor: LogDirectory.SegmentEntry,
        successorHoldsRecords: Bool
    ) -> SealedSegmentEnd {
        let rollWasInterrupted = !successorHoldsRecords && lastSequence + 1 == successor.baseSequence
        switch end {
        case .sealed(let offset, let next):
            guard next == successor.baseSequence else {
                return .damage(
                    LogProblem(
                        kind: .sequenceGap, path: path, byteOffset: offset,
                        message: "the seal names \(next) as the next segment's base, but the next segment starts at \(successor.baseSequence)"))
            }
            return .sealed
        case .stopped:
            return .sealed
        case .endOfData(let offset):
            if rollWasInterrupted { return .interruptedRoll(offset: offset) }
            return .damage(
                LogProblem(
                    kind: .missingSeal, path: path, byteOffset: offset,
                    message: "the segment ends after sequence \(lastSequence) without its seal although it is not the last one: "
                        + "it was cut, and the records after it up to \(successor.baseSequence - 1) are missing"))
        case .tornTail(let offset, let dropped, let reason):
            if rollWasInterrupted && dropped <= UInt64(SegmentFormat.sealBytes) { return .interruptedRoll(offset: offset) }
            return .damage(
                LogProblem(
                    kind: .truncatedRecord, path: path, byteOffset: offset,
                    message: "\(reason), in a sealed segment (not the last one)"))
        case .damage(let problem):
            return .damage(problem)
        }
    }

    /// The problem of a last segment that is sealed: the segment its seal names is gone.
    static func missingSegment(path: String, sealOffset: UInt64, next: UInt64) -> LogProblem {
        LogProblem(
            kind: .missingSegment, path: path, byteOffset: sealOffset,
            message: "the last segment is sealed: its seal names \(SegmentFormat.segmentFileName(baseSequence: next)) as the next "
                + "segment, which is missing (deleted or lost), with every record from \(next) on")
    }

    /// Whether the segment file holds anything beyond its header (a missing file holds nothing).
    static func holdsRecords(_ entry: LogDirectory.SegmentEntry, partition: String) -> Bool {
        guard let file = try? SegmentFile(path: entry.segmentPath) else { return false }
        return file.size > UInt64(SegmentFormat.headerBytes(partitionNameLength: partition.utf8.count))
    }

    /// Whether the segment file is shorter than its header (a crash while creating it; it holds no records).
    static func isCutInsideHeader(_ entry: LogDirectory.SegmentEntry, partition: String) -> Bool {
        guard let file = try? SegmentFile(path: entry.segmentPath) else { return false }
        return file.size < UInt64(SegmentFormat.headerBytes(partitionNameLength: partition.utf8.count))
    }

    /// Truncates the segment at `offset` and writes its seal there (the repair of an interrupted roll).
    static func completeSeal(path: String, at offset: UInt64, nextBaseSequence: UInt64) throws(LogError) {
        let descriptor = try FileIO.open(path, flags: O_WRONLY)
        defer { FileIO.close(descriptor) }
        try FileIO.truncate(descriptor, to: offset, path: path)
        try FileIO.writeAll(descriptor, SegmentFormat.encodeSeal(nextBaseSequence: nextBaseSequence), at: offset, path: path)
        try FileIO.synchronizeData(descriptor, path: path)
    }
}
