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
    static func scan(file: SegmentFile, header: SegmentHeader, intervalRecords: UInt32) throws(LogError) -> SegmentSummary {
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
        case .endOfData(let offset), .stopped(let offset), .tornTail(let offset, _, _): offset
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
