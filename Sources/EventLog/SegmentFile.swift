#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// How a scan of a segment ended.
enum SegmentScanEnd {
    /// All bytes up to `offset` (the size seen when the scan started) were whole, valid records.
    case endOfData(offset: UInt64)
    /// The body asked to stop before the record at `offset`.
    case stopped(offset: UInt64)
    /// The last record is partial or fails its checksum with nothing after it; whole records end at `offset`.
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
        }
    }

    /// Scans records from `startOffset` (which must be a record boundary), checking length, CRC and that
    /// sequences continue from `expectedSequence`. `body` gets each record with its offset and returns false to stop.
    func scan(
        header: SegmentHeader, from startOffset: UInt64, expectedSequence: UInt64,
        _ body: (LogRecordView, UInt64) throws -> Bool
    ) throws -> SegmentScanEnd {
        let recordHeaderBytes = SegmentFormat.recordHeaderBytes
        let remainingInFile = size > startOffset ? Int(size - startOffset) : 0
        var capacity = max(recordHeaderBytes, min(Self.chunkBytes, remainingInFile))
        var buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: capacity, alignment: 8)
        defer { buffer.deallocate() }
        var bufferFileOffset = startOffset  // file offset of buffer[0]
        var filled = 0
        var position = 0
        var expected = expectedSequence

        // Moves unread bytes to the front and reads more; grows the buffer when one record needs it.
        func refill(minimumBytes: Int) throws(LogError) {
            let unread = filled - position
            if minimumBytes > capacity {
                let larger = UnsafeMutableRawBufferPointer.allocate(byteCount: minimumBytes, alignment: 8)
                larger.baseAddress!.copyMemory(from: buffer.baseAddress! + position, byteCount: unread)
                buffer.deallocate()
                buffer = larger
                capacity = minimumBytes
            } else if unread > 0 && position > 0 {
                memmove(buffer.baseAddress!, buffer.baseAddress! + position, unread)
            }
            bufferFileOffset += UInt64(position)
            position = 0
            filled = unread
            let readOffset = bufferFileOffset + UInt64(filled)
            let wanted = Int(min(UInt64(capacity - filled), size - min(size, readOffset)))
            if wanted > 0 {
                filled += try FileIO.read(
                    descriptor, into: UnsafeMutableRawBufferPointer(rebasing: buffer[filled..<(filled + wanted)]),
                    at: readOffset, path: path)
            }
        }

        while true {
            let recordOffset = bufferFileOffset + UInt64(position)
            let bytesLeftInFile = size > recordOffset ? size - recordOffset : 0
            if bytesLeftInFile == 0 { return .endOfData(offset: recordOffset) }
            if filled - position < recordHeaderBytes {
                if bytesLeftInFile < UInt64(recordHeaderBytes) {
                    return .tornTail(
                        offset: recordOffset, droppedBytes: bytesLeftInFile,
                        reason: "only \(bytesLeftInFile) of \(recordHeaderBytes) record header bytes are present")
                }
                try refill(minimumBytes: recordHeaderBytes)
                if filled - position < recordHeaderBytes {
                    return .tornTail(
                        offset: recordOffset, droppedBytes: bytesLeftInFile, reason: "the file shrank while being read")
                }
            }
            let recordBase = UnsafeRawBufferPointer(rebasing: buffer[position..<filled])
            let length = UInt32(littleEndian: recordBase.loadUnaligned(fromByteOffset: 0, as: UInt32.self))
            guard length <= header.maximumPayloadBytes else {
                return .damage(
                    LogProblem(
                        kind: .invalidLength, path: path, byteOffset: recordOffset,
                        message: "record length \(length) exceeds the segment's payload limit \(header.maximumPayloadBytes)"))
            }
            let recordBytes = recordHeaderBytes + Int(length)
            if UInt64(recordBytes) > bytesLeftInFile {
                return .tornTail(
                    offset: recordOffset, droppedBytes: bytesLeftInFile,
                    reason: "the last record needs \(recordBytes) bytes but only \(bytesLeftInFile) are present")
            }
            if filled - position < recordBytes {
                try refill(minimumBytes: recordBytes)
                if filled - position < recordBytes {
                    return .tornTail(
                        offset: recordOffset, droppedBytes: bytesLeftInFile, reason: "the file shrank while being read")
                }
            }
            let record = UnsafeRawBufferPointer(rebasing: buffer[position..<(position + recordBytes)])
            let storedChecksum = UInt32(littleEndian: record.loadUnaligned(fromByteOffset: 4, as: UInt32.self))
            let computedChecksum = CRC32C.checksum(
                UnsafeRawBufferPointer(rebasing: record[SegmentFormat.checksumCoverageOffset...]))
            if storedChecksum != computedChecksum {
                if UInt64(recordBytes) == bytesLeftInFile {
                    return .tornTail(
                        offset: recordOffset, droppedBytes: bytesLeftInFile,
                        reason: "the last record fails its checksum (a partially written record)")
                }
                return .damage(
                    LogProblem(
                        kind: .checksumMismatch, path: path, byteOffset: recordOffset,
                        message: "record checksum mismatch (stored \(hex(storedChecksum)), computed \(hex(computedChecksum))) "
                            + "with \(bytesLeftInFile - UInt64(recordBytes)) more bytes after it"))
            }
            let sequence = UInt64(littleEndian: record.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
            guard sequence == expected else {
                return .damage(
                    LogProblem(
                        kind: .sequenceGap, path: path, byteOffset: recordOffset,
                        message: sequence < expected
                            ? "sequence \(sequence) repeats or goes backwards (expected \(expected))"
                            : "sequence jumps from \(expected - 1) to \(sequence); records \(expected)...\(sequence - 1) are missing"))
            }
            let timestamp = Int64(littleEndian: record.loadUnaligned(fromByteOffset: 16, as: Int64.self))
            let view = LogRecordView(
                sequence: sequence, timestampNanoseconds: timestamp,
                payload: UnsafeRawBufferPointer(rebasing: record[recordHeaderBytes...]))
            if try !body(view, recordOffset) { return .stopped(offset: recordOffset) }
            position += recordBytes
            expected += 1
        }
    }
}
