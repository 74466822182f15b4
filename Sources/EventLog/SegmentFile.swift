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
        var capacity = max(recordHeaderBytes, min(Self.chunkBytes, remainingInFile))
        var buffer = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 8)
        defer { buffer.deallocate() }
        var bufferFileOffset = startOffset  // file offset of buffer[0]
        var filled = 0
        var position = 0
        /// Buffer position of the first checked but undelivered record of the current unit, if any.
        var unitStart: Int?
        var expected = expectedSequence

        // Keeps the bytes from the current unit's start, moves them to the front and reads more; grows the
        // buffer when the unit so far plus `minimumBytes` does not fit.
        func refill(minimumBytes: Int) throws(LogError) {
            let keep = unitStart ?? position
            let kept = filled - keep
            let needed = position - keep + minimumBytes
            if needed > capacity {
                let larger = UnsafeMutableRawPointer.allocate(byteCount: max(needed, 2 * capacity), alignment: 8)
                larger.copyMemory(from: buffer + keep, byteCount: kept)
                buffer.deallocate()
                buffer = larger
                capacity = max(needed, 2 * capacity)
            } else if kept > 0 && keep > 0 {
                memmove(buffer, buffer + keep, kept)
            }
            bufferFileOffset += UInt64(keep)
            position -= keep
            if unitStart != nil { unitStart = 0 }
            filled = kept
            let readOffset = bufferFileOffset + UInt64(filled)
            let wanted = Int(min(UInt64(capacity - filled), size - min(size, readOffset)))
            if wanted > 0 {
                filled += try FileIO.read(
                    descriptor, into: UnsafeMutableRawBufferPointer(start: buffer + filled, count: wanted), at: readOffset,
                    path: path)
            }
        }

        // The record at the current position is partial or fails its checks before its CRC could vouch for it.
        func unusable(_ kind: LogProblem.Kind, _ reason: String) throws(LogError) -> SegmentScanEnd {
            let recordOffset = bufferFileOffset + UInt64(position)
            if let following = try firstValidRecord(after: recordOffset, header: header, expectedSequence: expected) {
                return .damage(
                    LogProblem(
                        kind: kind, path: path, byteOffset: recordOffset,
                        message: "\(reason), yet a whole valid record follows at byte offset \(following): "
                            + "this is damage, not a torn tail"))
            }
            let unitOffset = bufferFileOffset + UInt64(unitStart ?? position)
            let partOfUnit = unitStart.map { _ in " (the incomplete unit starts at byte offset \(unitOffset))" } ?? ""
            return .tornTail(offset: unitOffset, droppedBytes: size - unitOffset, reason: reason + partOfUnit)
        }

        // Hands the checked records from `first` up to `end` (buffer positions) to `body`.
        func deliver(from first: Int, to end: Int) throws -> UInt64? {
            var cursor = first
            while cursor < end {
                let record = buffer + cursor
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
                let offset = bufferFileOffset + UInt64(cursor)
                if try !body(view, offset) { return offset }
                cursor += recordHeaderBytes + length
            }
            return nil
        }

        while true {
            let recordOffset = bufferFileOffset + UInt64(position)
            let bytesLeftInFile = size > recordOffset ? size - recordOffset : 0
            if bytesLeftInFile == 0 {
                if let unitStart {
                    let unitOffset = bufferFileOffset + UInt64(unitStart)
                    return .tornTail(
                        offset: unitOffset, droppedBytes: size - unitOffset,
                        reason: "the last unit is incomplete: its record \(expected - 1) says more records follow, "
                            + "but the file ends")
                }
                return .endOfData(offset: recordOffset)
            }
            if filled - position < recordHeaderBytes {
                if bytesLeftInFile < UInt64(recordHeaderBytes) {
                    return try unusable(
                        .truncatedRecord, "only \(bytesLeftInFile) of \(recordHeaderBytes) record header bytes are present")
                }
                try refill(minimumBytes: recordHeaderBytes)
                if filled - position < recordHeaderBytes { return try unusable(.truncatedRecord, "the file shrank while being read") }
            }
            var record = buffer + position
            let word = UInt32(littleEndian: record.loadUnaligned(fromByteOffset: 4, as: UInt32.self))
            let length = word & SegmentFormat.payloadLengthMask
            guard length <= header.maximumPayloadBytes else {
                // A whole record whose checksum holds was written so: the header's limit is what is wrong
                // (a crafted or damaged header), and calling it a torn tail would have repair delete it.
                if UInt64(recordHeaderBytes) + UInt64(length) <= bytesLeftInFile,
                    try hasValidChecksum(at: recordOffset, recordBytes: recordHeaderBytes + Int(length)) {
                    return .damage(
                        LogProblem(
                            kind: .invalidLength, path: path, byteOffset: recordOffset,
                            message: "record length \(length) exceeds the segment header's payload limit \(header.maximumPayloadBytes), "
                                + "yet the record's checksum holds: the header is damaged, not the record; this is not a torn tail"))
                }
                return try unusable(
                    .invalidLength, "record length \(length) exceeds the segment's payload limit \(header.maximumPayloadBytes)")
            }
            let recordBytes = recordHeaderBytes + Int(length)
            if UInt64(recordBytes) > bytesLeftInFile {
                return try unusable(
                    .invalidLength, "the record needs \(recordBytes) bytes but only \(bytesLeftInFile) are left in the file")
            }
            if filled - position < recordBytes {
                try refill(minimumBytes: recordBytes)
                if filled - position < recordBytes { return try unusable(.truncatedRecord, "the file shrank while being read") }
                record = buffer + position
            }
            let storedChecksum = UInt32(littleEndian: record.loadUnaligned(fromByteOffset: 0, as: UInt32.self))
            let computedChecksum = CRC32C.checksum(
                UnsafeRawBufferPointer(
                    start: record + SegmentFormat.checksumCoverageOffset, count: recordBytes - SegmentFormat.checksumCoverageOffset))
            guard storedChecksum == computedChecksum else {
                return try unusable(
                    .checksumMismatch,
                    "record checksum mismatch (stored \(hex(storedChecksum)), computed \(hex(computedChecksum)))")
            }
            // The CRC vouches for these bytes: whatever is wrong below was written so, never a torn write.
            let sequence = UInt64(littleEndian: record.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
            if word & SegmentFormat.sealFlag != 0 {
                return checkSeal(
                    word: word, nextBaseSequence: sequence, offset: recordOffset, expected: expected,
                    insideUnit: unitStart != nil, bytesLeftInFile: bytesLeftInFile)
            }
            let isInput = word & SegmentFormat.inputFlag != 0
            if isInput {
                guard header.version >= 3 else {
                    return .damage(
                        LogProblem(
                            kind: .badInput, path: path, byteOffset: recordOffset,
                            message: "an input record in a segment of log format \(header.version) (input records exist from format 3 on)"))
                }
                guard unitStart == nil else {
                    return .damage(
                        LogProblem(
                            kind: .badInput, path: path, byteOffset: recordOffset,
                            message: "an input record inside a unit: an input is always its unit's first record"))
                }
            }
            guard sequence == expected else {
                return .damage(
                    LogProblem(
                        kind: .sequenceGap, path: path, byteOffset: recordOffset,
                        message: sequence < expected
                            ? "sequence \(sequence) repeats or goes backwards (expected \(expected))"
                            : "sequence jumps from \(expected - 1) to \(sequence); records \(expected)...\(sequence - 1) are missing"))
            }
            // An input names the sequence its unit's first event takes (or would take): it has none of its own.
            if !isInput { expected += 1 }
            if word & SegmentFormat.moreInUnitFlag != 0 {
                if unitStart == nil { unitStart = position }
                position += recordBytes
                continue
            }
            let first = unitStart ?? position
            unitStart = nil
            position += recordBytes
            if let stoppedAt = try deliver(from: first, to: position) { return .stopped(offset: stoppedAt) }
        }
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
