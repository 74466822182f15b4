#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// How a scan of a segment ended.
enum SegmentScanEnd {
    /// Whole units end exactly at `offset`, the size seen when the scan started; the segment has no seal.
    case endOfData(offset: UInt64)
    /// A valid seal starts at `offset` (where the records end) and ends the file; the next segment must
    /// start at `nextBaseSequence`.
    case sealed(offset: UInt64, nextBaseSequence: UInt64)
    /// The body asked to stop before the record at `offset`.
    case stopped(offset: UInt64)
    /// Whole units end at `offset`; after it comes an incomplete unit or a partial or failing record with no
    /// whole valid record anywhere after it (what a crash during an append leaves).
    case tornTail(offset: UInt64, droppedBytes: UInt64, reason: String)
    /// Damage that is not a torn tail.
    case damage(LogProblem)
}

/// A valid segment header, or why there is none.
enum HeaderValidation {
    case success(SegmentHeader)
    case failure(LogProblem)
}

/// A segment file opened read-only, with a size snapshot taken at open.
final class SegmentFile {
    let path: String
    let descriptor: Int32
    let size: UInt64
    /// Read chunk size: big enough for few syscalls, small enough to keep replay memory bounded.
    static let chunkBytes = 4 << 20

    init(path: String) throws(LogError) {
        self.path = path
        descriptor = try FileIO.open(path, flags: O_RDONLY)
        do {
            size = try FileIO.size(descriptor, path: path)
        } catch {
            FileIO.close(descriptor)
            throw error
        }
    }

    deinit { FileIO.close(descriptor) }

    func readHeader(partition: String?, baseSequence: UInt64?) throws(LogError) -> SegmentHeaderParse {
        let wanted = Int(min(size, UInt64(SegmentFormat.headerBytes(partitionNameLength: 255))))
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: max(wanted, 1), alignment: 8)
        defer { scratch.deallocate() }
        let count = try FileIO.read(
            descriptor, into: UnsafeMutableRawBufferPointer(rebasing: scratch[0..<wanted]), at: 0, path: path)
        let bytes = Array(scratch[0..<count])
        return SegmentHeaderParse.parse(bytes, expectedPartition: partition, expectedBaseSequence: baseSequence)
    }

    /// Header or a problem describing why there is none.
    func validHeader(partition: String, baseSequence: UInt64) throws(LogError) -> HeaderValidation {
        switch try readHeader(partition: partition, baseSequence: baseSequence) {
        case .valid(let header):
            return .success(header)
        case .truncated(let available):
            return .failure(
                LogProblem(
                    kind: .truncatedHeader, path: path, byteOffset: UInt64(available),
                    message: "the file ends after \(available) bytes, inside its segment header"))
        case .invalid(let reason):
            return .failure(LogProblem(kind: .badHeader, path: path, byteOffset: 0, message: reason))
        case .unsupportedVersion(let version):
            throw Self.unsupportedVersion(version, path: path)
        }
    }

    static func unsupportedVersion(_ version: UInt16, path: String) -> LogError {
        let writer = version < SegmentFormat.version ? "an older" : "a newer"
        return LogError(
            .unsupportedFormatVersion,
            "\(path) was written by \(writer) sksim (log format \(version)); this build reads log formats "
                + "\(SegmentFormat.oldestReadableVersion) and \(SegmentFormat.version) only",
            path: path,
            remedy: version < SegmentFormat.version
                ? "Re-record the run with this version of sksim (the sksim that wrote it can still read it)"
                : "Read it with the newer sksim that wrote it")
    }

    /// A writer appends only to segments of the current version: an older log is read as it is, or
    /// upgraded first (`LogUpgrade`, `sksim log upgrade`).
    static func olderVersionForWriting(_ version: UInt16, path: String) -> LogError {
        LogError(
            .unsupportedFormatVersion,
            "\(path) is log format \(version), which this build reads but does not append to (it writes format \(SegmentFormat.version))",
            path: path,
            remedy: "Upgrade the log first with `sksim log upgrade DIR` (its records are kept as they are), or write a new log")
    }

    /// Scans records from `startOffset` (a record boundary, treated as the start of a unit), checking length,
    /// CRC, flags and that sequences continue from `expectedSequence`. `body` gets each record with its offset,
    /// but only once its whole unit has been checked, so it never sees part of a unit; it returns false to stop.
    /// Input records (a unit's first, taking no sequence) reach `body` only with `includingInputs`.
    func scan(
        header: SegmentHeader, from startOffset: UInt64, expectedSequence: UInt64, includingInputs: Bool = false,
        _ body: (LogRecordView, UInt64) throws -> Bool
    ) throws -> SegmentScanEnd {
        let recordHeaderBytes = SegmentFormat.recordHeaderBytes
        let remainingInFile = size > startOffset ? Int(size - startOffset) : 0
        var window = ScanWindow(capacity: max(recordHeaderBytes, min(Self.chunkBytes, remainingInFile)), fileOffset: startOffset)
        defer { window.buffer.deallocate() }
        var expected = expectedSequence

        while true {
            let recordOffset = window.fileOffset(of: window.position)
            let bytesLeftInFile = size > recordOffset ? size - recordOffset : 0
            if bytesLeftInFile == 0 {
                if let unitStart = window.unitStart {
                    let unitOffset = window.fileOffset(of: unitStart)
                    return .tornTail(
                        offset: unitOffset, droppedBytes: size - unitOffset,
                        reason: "the last unit is incomplete: its record \(expected - 1) says more records follow, "
                            + "but the file ends")
                }
                return .endOfData(offset: recordOffset)
            }
            if window.available < recordHeaderBytes {
                if bytesLeftInFile < UInt64(recordHeaderBytes) {
                    return try unusable(
                        .truncatedRecord, "only \(bytesLeftInFile) of \(recordHeaderBytes) record header bytes are present",
                        window: window, header: header, expected: expected)
                }
                try refill(&window, minimumBytes: recordHeaderBytes)
                if window.available < recordHeaderBytes {
                    return try unusable(.truncatedRecord, "the file shrank while being read", window: window, header: header, expected: expected)
                }
            }
            let word = UInt32(littleEndian: (window.buffer + window.position).loadUnaligned(fromByteOffset: 4, as: UInt32.self))
            let length = word & SegmentFormat.payloadLengthMask
            if let refusal = try checkLength(length, window: window, header: header, expected: expected, bytesLeftInFile: bytesLeftInFile) {
                return refusal
            }
            let recordBytes = recordHeaderBytes + Int(length)
            if window.available < recordBytes {
                try refill(&window, minimumBytes: recordBytes)
                if window.available < recordBytes {
                    return try unusable(.truncatedRecord, "the file shrank while being read", window: window, header: header, expected: expected)
                }
            }
            let record = window.buffer + window.position
            let storedChecksum = UInt32(littleEndian: record.loadUnaligned(fromByteOffset: 0, as: UInt32.self))
            let computedChecksum = CRC32C.checksum(
                UnsafeRawBufferPointer(
                    start: record + SegmentFormat.checksumCoverageOffset, count: recordBytes - SegmentFormat.checksumCoverageOffset))
            guard storedChecksum == computedChecksum else {
                return try unusable(
                    .checksumMismatch,
                    "record checksum mismatch (stored \(hex(storedChecksum)), computed \(hex(computedChecksum)))",
                    window: window, header: header, expected: expected)
            }
            // The CRC vouches for these bytes: whatever is wrong below was written so, never a torn write.
            let sequence = UInt64(littleEndian: record.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
            if let end = checkVouchedRecord(
                word: word, sequence: sequence, offset: recordOffset, expected: expected, insideUnit: window.unitStart != nil,
                header: header, bytesLeftInFile: bytesLeftInFile) {
                return end
            }
            // An input names the sequence its unit's first event takes (or would take): it has none of its own.
            if word & SegmentFormat.inputFlag == 0 { expected += 1 }
            if word & SegmentFormat.moreInUnitFlag != 0 {
                if window.unitStart == nil { window.unitStart = window.position }
                window.position += recordBytes
                continue
            }
            let first = window.unitStart ?? window.position
            window.unitStart = nil
            window.position += recordBytes
            if let stoppedAt = try deliver(window, from: first, includingInputs: includingInputs, body) {
                return .stopped(offset: stoppedAt)
            }
        }
    }

    /// Reads more of the file into `window`, keeping the bytes from the current unit's start (moved to the
    /// front); grows the buffer when the unit so far plus `minimumBytes` does not fit.
    private func refill(_ window: inout ScanWindow, minimumBytes: Int) throws(LogError) {
        let keep = window.unitStart ?? window.position
        let kept = window.filled - keep
        let needed = window.position - keep + minimumBytes
        if needed > window.capacity {
            let capacity = max(needed, 2 * window.capacity)
            let larger = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 8)
            larger.copyMemory(from: window.buffer + keep, byteCount: kept)
            window.buffer.deallocate()
            window.buffer = larger
            window.capacity = capacity
        } else if kept > 0 && keep > 0 {
            memmove(window.buffer, window.buffer + keep, kept)
        }
        window.bufferFileOffset += UInt64(keep)
        window.position -= keep
        if window.unitStart != nil { window.unitStart = 0 }
        window.filled = kept
        let readOffset = window.fileOffset(of: window.filled)
        let wanted = Int(min(UInt64(window.capacity - window.filled), size - min(size, readOffset)))
        if wanted > 0 {
            window.filled += try FileIO.read(
                descriptor, into: UnsafeMutableRawBufferPointer(start: window.buffer + window.filled, count: wanted), at: readOffset,
                path: path)
        }
    }

    /// The end of a scan whose record at the window's position is partial or fails its checks before its CRC
    /// could vouch for it: damage when a whole valid record follows, a torn tail otherwise.
    private func unusable(
        _ kind: LogProblem.Kind, _ reason: String, window: ScanWindow, header: SegmentHeader, expected: UInt64
    ) throws(LogError) -> SegmentScanEnd {
        let recordOffset = window.fileOffset(of: window.position)
        if let following = try firstValidRecord(after: recordOffset, header: header, expectedSequence: expected) {
            return .damage(
                LogProblem(
                    kind: kind, path: path, byteOffset: recordOffset,
                    message: "\(reason), yet a whole valid record follows at byte offset \(following): "
                        + "this is damage, not a torn tail"))
        }
        let unitOffset = window.fileOffset(of: window.unitStart ?? window.position)
        let partOfUnit = window.unitStart.map { _ in " (the incomplete unit starts at byte offset \(unitOffset))" } ?? ""
        return .tornTail(offset: unitOffset, droppedBytes: size - unitOffset, reason: reason + partOfUnit)
    }

    /// Nil when a record of `length` payload bytes fits the header's limit and the file, else the scan's end.
    private func checkLength(
        _ length: UInt32, window: ScanWindow, header: SegmentHeader, expected: UInt64, bytesLeftInFile: UInt64
    ) throws(LogError) -> SegmentScanEnd? {
        let recordBytes = SegmentFormat.recordHeaderBytes + Int(length)
        guard length <= header.maximumPayloadBytes else {
            // A whole record whose checksum holds was written so: the header's limit is what is wrong
            // (a crafted or damaged header), and calling it a torn tail would have repair delete it.
            let recordOffset = window.fileOffset(of: window.position)
            if UInt64(recordBytes) <= bytesLeftInFile, try hasValidChecksum(at: recordOffset, recordBytes: recordBytes) {
                return .damage(
                    LogProblem(
                        kind: .invalidLength, path: path, byteOffset: recordOffset,
                        message: "record length \(length) exceeds the segment header's payload limit \(header.maximumPayloadBytes), "
                            + "yet the record's checksum holds: the header is damaged, not the record; this is not a torn tail"))
            }
            return try unusable(
                .invalidLength, "record length \(length) exceeds the segment's payload limit \(header.maximumPayloadBytes)",
                window: window, header: header, expected: expected)
        }
        if UInt64(recordBytes) > bytesLeftInFile {
            return try unusable(
                .invalidLength, "the record needs \(recordBytes) bytes but only \(bytesLeftInFile) are left in the file",
                window: window, header: header, expected: expected)
        }
        return nil
    }

    /// Nil when a record whose checksum holds may come here (not a seal, an input only where one may be, the
    /// expected sequence), else the scan's end: a seal, or damage that was written so.
    private func checkVouchedRecord(
        word: UInt32, sequence: UInt64, offset: UInt64, expected: UInt64, insideUnit: Bool, header: SegmentHeader,
        bytesLeftInFile: UInt64
    ) -> SegmentScanEnd? {
        func damage(_ kind: LogProblem.Kind, _ message: String) -> SegmentScanEnd {
            .damage(LogProblem(kind: kind, path: path, byteOffset: offset, message: message))
        }
        if word & SegmentFormat.sealFlag != 0 {
            return checkSeal(
                word: word, nextBaseSequence: sequence, offset: offset, expected: expected, insideUnit: insideUnit,
                bytesLeftInFile: bytesLeftInFile)
        }
        if word & SegmentFormat.inputFlag != 0 {
            guard header.version >= 3 else {
                return damage(.badInput, "an input record in a segment of log format \(header.version) (input records exist from format 3 on)")
            }
            guard !insideUnit else {
                return damage(.badInput, "an input record inside a unit: an input is always its unit's first record")
            }
        }
        guard sequence == expected else {
            return damage(
                .sequenceGap,
                sequence < expected
                    ? "sequence \(sequence) repeats or goes backwards (expected \(expected))"
                    : "sequence jumps from \(expected - 1) to \(sequence); records \(expected)...\(sequence - 1) are missing")
        }
        return nil
    }

    /// Hands the checked records of the window from `first` up to its position to `body`; the offset of the
    /// record `body` stopped before, or nil.
    private func deliver(
        _ window: ScanWindow, from first: Int, includingInputs: Bool, _ body: (LogRecordView, UInt64) throws -> Bool
    ) throws -> UInt64? {
        let recordHeaderBytes = SegmentFormat.recordHeaderBytes
        var cursor = first
        while cursor < window.position {
            let record = window.buffer + cursor
            let word = UInt32(littleEndian: record.loadUnaligned(fromByteOffset: 4, as: UInt32.self))
            let length = Int(word & SegmentFormat.payloadLengthMask)
            let isInput = word & SegmentFormat.inputFlag != 0
            if isInput && !includingInputs {
                cursor += recordHeaderBytes + length
                continue
            }
            let view = LogRecordView(
                sequence: UInt64(littleEndian: record.loadUnaligned(fromByteOffset: 8, as: UInt64.self)),
                timestampNanoseconds: Int64(littleEndian: record.loadUnaligned(fromByteOffset: 16, as: Int64.self)),
                payload: UnsafeRawBufferPointer(start: record + recordHeaderBytes, count: length),
                endsUnit: word & SegmentFormat.moreInUnitFlag == 0, isInput: isInput)
            let offset = window.fileOffset(of: cursor)
            if try !body(view, offset) { return offset }
            cursor += recordHeaderBytes + length
        }
        return nil
    }

    private func checkSeal(
        word: UInt32, nextBaseSequence: UInt64, offset: UInt64, expected: UInt64, insideUnit: Bool, bytesLeftInFile: UInt64
    ) -> SegmentScanEnd {
        func damage(_ kind: LogProblem.Kind, _ message: String) -> SegmentScanEnd {
            .damage(LogProblem(kind: kind, path: path, byteOffset: offset, message: message))
        }
        guard word == SegmentFormat.sealFlag else {
            return damage(.badSeal, "a seal must have no payload and no other flag (length word \(hex(word)))")
        }
        guard !insideUnit else {
            return damage(.incompleteUnit, "the segment is sealed inside a unit: record \(expected - 1) says more records follow")
        }
        guard nextBaseSequence == expected else {
            return damage(
                .sequenceGap, "the seal names \(nextBaseSequence) as the next sequence, but the records end at \(expected - 1)")
        }
        guard bytesLeftInFile == UInt64(SegmentFormat.sealBytes) else {
            return damage(.badSeal, "\(bytesLeftInFile - UInt64(SegmentFormat.sealBytes)) bytes follow the segment's seal")
        }
        return .sealed(offset: offset, nextBaseSequence: nextBaseSequence)
    }

    /// Offset of the first whole, valid record (or seal) after `offset` whose sequence is plausible for that
    /// place (at least `expectedSequence`, at most one per 24 bytes further on), or nil. Decides whether a bad
    /// record is a torn tail (nothing valid after it) or damage in the middle. Checks every byte offset.
    func firstValidRecord(after offset: UInt64, header: SegmentHeader, expectedSequence: UInt64) throws(LogError) -> UInt64? {
        let recordHeaderBytes = UInt64(SegmentFormat.recordHeaderBytes)
        guard size >= offset + 1 + recordHeaderBytes else { return nil }
        let chunk = 1 << 20
        let window = UnsafeMutableRawPointer.allocate(byteCount: chunk + Int(recordHeaderBytes), alignment: 8)
        defer { window.deallocate() }
        var windowOffset = offset + 1
        while windowOffset + recordHeaderBytes <= size {
            let count = try FileIO.read(
                descriptor, into: UnsafeMutableRawBufferPointer(start: window, count: Int(min(UInt64(chunk) + recordHeaderBytes, size - windowOffset))),
                at: windowOffset, path: path)
            guard count >= Int(recordHeaderBytes) else { return nil }
            for start in 0...(count - Int(recordHeaderBytes)) {
                let candidate = windowOffset + UInt64(start)
                let word = UInt32(littleEndian: window.loadUnaligned(fromByteOffset: start + 4, as: UInt32.self))
                let length = UInt64(word & SegmentFormat.payloadLengthMask)
                let isSeal = word & SegmentFormat.sealFlag != 0
                // Any length the format allows, not only the header's limit: a header can be wrong too, and a whole
                // record whose checksum holds after a bad one proves the bad one is damage, not a torn tail.
                guard !isSeal || word == SegmentFormat.sealFlag,
                    candidate + recordHeaderBytes + length <= size
                else { continue }
                let sequence = UInt64(littleEndian: window.loadUnaligned(fromByteOffset: start + 8, as: UInt64.self))
                let before = (candidate - offset) / recordHeaderBytes + 1
                guard sequence >= expectedSequence, sequence - expectedSequence <= before else { continue }
                if try hasValidChecksum(at: candidate, recordBytes: Int(recordHeaderBytes + length)) { return candidate }
            }
            windowOffset += UInt64(count) - recordHeaderBytes + 1
        }
        return nil
    }

    private func hasValidChecksum(at offset: UInt64, recordBytes: Int) throws(LogError) -> Bool {
        let record = UnsafeMutableRawBufferPointer.allocate(byteCount: recordBytes, alignment: 8)
        defer { record.deallocate() }
        guard try FileIO.read(descriptor, into: record, at: offset, path: path) == recordBytes else { return false }
        let stored = UInt32(littleEndian: record.loadUnaligned(fromByteOffset: 0, as: UInt32.self))
        return stored == CRC32C.checksum(UnsafeRawBufferPointer(rebasing: record[SegmentFormat.checksumCoverageOffset...]))
    }

    /// The seal at the end of the file, if its last `sealBytes` bytes are a valid one.
    func trailingSeal() throws(LogError) -> UInt64? {
        guard size >= UInt64(SegmentFormat.sealBytes) else { return nil }
        let seal = UnsafeMutableRawBufferPointer.allocate(byteCount: SegmentFormat.sealBytes, alignment: 8)
        defer { seal.deallocate() }
        guard try FileIO.read(descriptor, into: seal, at: size - UInt64(SegmentFormat.sealBytes), path: path) == seal.count,
            UInt32(littleEndian: seal.loadUnaligned(fromByteOffset: 4, as: UInt32.self)) == SegmentFormat.sealFlag,
            UInt32(littleEndian: seal.loadUnaligned(fromByteOffset: 0, as: UInt32.self))
                == CRC32C.checksum(UnsafeRawBufferPointer(rebasing: seal[SegmentFormat.checksumCoverageOffset...]))
        else { return nil }
        return UInt64(littleEndian: seal.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
    }
}

/// The bytes a scan holds: a window of the file starting at `bufferFileOffset`, read in chunks and grown when
/// one unit does not fit, so a unit is checked whole before any of it is delivered.
private struct ScanWindow {
    var buffer: UnsafeMutableRawPointer
    var capacity: Int
    /// The file offset of `buffer[0]`.
    var bufferFileOffset: UInt64
    /// Bytes of the buffer read from the file.
    var filled = 0
    /// The buffer position of the record being checked.
    var position = 0
    /// The buffer position of the first checked but undelivered record of the current unit, if any.
    var unitStart: Int?

    init(capacity: Int, fileOffset: UInt64) {
        buffer = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 8)
        self.capacity = capacity
        bufferFileOffset = fileOffset
    }

    /// Bytes read but not yet checked.
    var available: Int { filled - position }

    func fileOffset(of bufferPosition: Int) -> UInt64 { bufferFileOffset + UInt64(bufferPosition) }
}
