/// On-disk constants and header encoding (see docs/log-format.md).
package enum SegmentFormat {
    static let magic: [UInt8] = Array("SKSIMLOG".utf8)
    /// The version this build writes. Version 3 adds input records (bit 29); version 2 segments (no input
    /// records, otherwise the same bytes) are still read, and `LogUpgrade` rewrites their headers.
    static let version: UInt16 = 3
    /// The oldest version this build reads.
    static let oldestReadableVersion: UInt16 = 2
    /// Fixed part of the segment header before the partition name.
    static let fixedHeaderBytes = 24
    /// crc (u32) + length word (u32) + sequence (u64) + timestamp (i64).
    package static let recordHeaderBytes = 24
    /// The CRC covers everything after itself: length word, sequence, timestamp, payload. Covering the length
    /// word means a flipped length bit fails the CRC instead of passing for a torn tail.
    static let checksumCoverageOffset = 4
    /// Length word bit 31: more records of this atomic unit follow.
    static let moreInUnitFlag: UInt32 = 1 << 31
    /// Length word bit 30: this record is the seal that ends a sealed segment (no payload, no sequence of its own).
    package static let sealFlag: UInt32 = 1 << 30
    /// Length word bit 29 (version 3): this record is its unit's input (the command as accepted), the unit's
    /// first record; it takes no sequence of its own (its sequence field is the next event's).
    package static let inputFlag: UInt32 = 1 << 29
    /// Length word bits 0...28: payload length (the largest payload, 256 MiB, needs 29 bits).
    package static let payloadLengthMask: UInt32 = (1 << 29) - 1
    /// A seal is a record header with no payload.
    static let sealBytes = recordHeaderBytes
    /// Hard ceiling for any segment's payload limit, so a damaged header cannot demand a huge buffer.
    static let absoluteMaximumPayloadBytes: UInt32 = 256 << 20
    static let segmentSuffix = ".segment"
    static let indexSuffix = ".index"
    static let sequenceDigits = 20

    package static func headerBytes(partitionNameLength: Int) -> Int { fixedHeaderBytes + partitionNameLength + 4 }

    static func isReadable(_ version: UInt16) -> Bool { version >= oldestReadableVersion && version <= self.version }

    static func encodeHeader(
        partition: String, baseSequence: UInt64, maximumPayloadBytes: UInt32, version: UInt16 = SegmentFormat.version
    ) -> [UInt8] {
        let name = Array(partition.utf8)
        var bytes = magic
        bytes.appendLittleEndian(version)
        bytes.appendLittleEndian(UInt16(name.count))
        bytes.appendLittleEndian(maximumPayloadBytes)
        bytes.appendLittleEndian(baseSequence)
        bytes += name
        bytes.appendLittleEndian(CRC32C.checksum(bytes))
        return bytes
    }

    /// Encodes one record at `record`, which has room for `recordHeaderBytes + payloadCount` bytes;
    /// `copyPayload` fills the payload bytes at the pointer it gets.
    static func encodeRecord(
        at record: UnsafeMutableRawPointer, payloadCount: Int, lengthFlags: UInt32, sequence: UInt64, timestamp: Int64,
        copyPayload: (UnsafeMutableRawPointer) -> Void
    ) {
        record.storeBytes(of: (UInt32(payloadCount) | lengthFlags).littleEndian, toByteOffset: 4, as: UInt32.self)
        record.storeBytes(of: sequence.littleEndian, toByteOffset: 8, as: UInt64.self)
        record.storeBytes(of: timestamp.littleEndian, toByteOffset: 16, as: Int64.self)
        copyPayload(record + recordHeaderBytes)
        let checksum = CRC32C.checksum(
            UnsafeRawBufferPointer(
                start: record + checksumCoverageOffset, count: recordHeaderBytes + payloadCount - checksumCoverageOffset))
        record.storeBytes(of: checksum.littleEndian, toByteOffset: 0, as: UInt32.self)
    }

    /// The seal that ends a sealed segment; it names the base sequence of the next segment.
    static func encodeSeal(nextBaseSequence: UInt64) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: sealBytes)
        bytes.withUnsafeMutableBytes { buffer in
            encodeRecord(
                at: buffer.baseAddress!, payloadCount: 0, lengthFlags: sealFlag, sequence: nextBaseSequence, timestamp: 0
            ) { _ in }
        }
        return bytes
    }

    static func segmentFileName(baseSequence: UInt64) -> String {
        zeroPadded(baseSequence) + segmentSuffix
    }

    static func indexFileName(baseSequence: UInt64) -> String {
        zeroPadded(baseSequence) + indexSuffix
    }

    private static func zeroPadded(_ value: UInt64) -> String {
        let digits = String(value)
        return String(repeating: "0", count: max(0, sequenceDigits - digits.count)) + digits
    }

    /// Base sequence from a segment file name, or nil when the name is not exactly 20 digits + ".segment".
    static func baseSequence(fromSegmentFileName name: String) -> UInt64? {
        guard name.hasSuffix(segmentSuffix) else { return nil }
        let digits = name.utf8.dropLast(segmentSuffix.utf8.count)
        guard digits.count == sequenceDigits, digits.allSatisfy({ $0 >= 48 && $0 <= 57 }) else { return nil }
        return UInt64(String(decoding: digits, as: UTF8.self))
    }

    /// Throws `.invalidPartitionName` unless the name is 1...255 bytes of [A-Za-z0-9._-] and not "." or "..".
    static func validatePartitionName(_ name: String) throws(LogError) {
        let bytes = Array(name.utf8)
        let allowed = bytes.allSatisfy { byte in
            (byte >= 65 && byte <= 90) || (byte >= 97 && byte <= 122) || (byte >= 48 && byte <= 57)
                || byte == 46 || byte == 95 || byte == 45
        }
        guard !bytes.isEmpty, bytes.count <= 255, allowed, name != ".", name != ".." else {
            throw LogError(
                .invalidPartitionName,
                "partition name \"\(name)\" is invalid: use 1 to 255 characters from A-Z a-z 0-9 . _ - (not \".\" or \"..\")",
                remedy: "Choose a name such as \"payments\" or \"queue-1\"")
        }
    }
}

/// A parsed, validated segment header.
struct SegmentHeader: Sendable, Equatable {
    var partition: String
    var baseSequence: UInt64
    var maximumPayloadBytes: UInt32
    var byteCount: Int
    /// The segment's format version (2 or 3): only version 3 holds input records.
    var version: UInt16 = SegmentFormat.version
}

enum SegmentHeaderParse {
    case valid(SegmentHeader)
    /// The file ends inside the header, and the bytes present agree with a header (a crash while creating it).
    case truncated(availableBytes: Int)
    case invalid(String)
    /// Valid magic but another format version (version 1 was written by sksim before atomic units).
    case unsupportedVersion(UInt16)

    /// Parses the header in `bytes` (the first bytes of the file; `bytes.count < total` means the file is that short).
    static func parse(_ bytes: [UInt8], expectedPartition: String?, expectedBaseSequence: UInt64?) -> SegmentHeaderParse {
        let magic = SegmentFormat.magic
        let magicPrefix = min(bytes.count, magic.count)
        guard bytes[..<magicPrefix].elementsEqual(magic[..<magicPrefix]) else {
            return .invalid("wrong magic bytes: this is not an event log segment")
        }
        guard bytes.count >= SegmentFormat.fixedHeaderBytes else {
            if bytes.count >= 10 && !SegmentFormat.isReadable(bytes.loadLittleEndian(UInt16.self, at: 8)) {
                return .unsupportedVersion(bytes.loadLittleEndian(UInt16.self, at: 8))
            }
            return .truncated(availableBytes: bytes.count)
        }
        let version = bytes.loadLittleEndian(UInt16.self, at: 8)
        guard SegmentFormat.isReadable(version) else { return .unsupportedVersion(version) }
        let nameLength = Int(bytes.loadLittleEndian(UInt16.self, at: 10))
        guard nameLength >= 1 && nameLength <= 255 else {
            return .invalid("partition name length \(nameLength) is outside 1...255")
        }
        let total = SegmentFormat.headerBytes(partitionNameLength: nameLength)
        guard bytes.count >= total else { return .truncated(availableBytes: bytes.count) }
        let storedChecksum = bytes.loadLittleEndian(UInt32.self, at: total - 4)
        let computedChecksum = CRC32C.checksum(bytes[0..<(total - 4)])
        guard storedChecksum == computedChecksum else {
            return .invalid("header checksum mismatch (stored \(hex(storedChecksum)), computed \(hex(computedChecksum)))")
        }
        let maximumPayloadBytes = bytes.loadLittleEndian(UInt32.self, at: 12)
        guard maximumPayloadBytes <= SegmentFormat.absoluteMaximumPayloadBytes else {
            return .invalid("payload limit \(maximumPayloadBytes) exceeds \(SegmentFormat.absoluteMaximumPayloadBytes)")
        }
        let baseSequence = bytes.loadLittleEndian(UInt64.self, at: 16)
        let partition = String(decoding: bytes[SegmentFormat.fixedHeaderBytes..<(total - 4)], as: UTF8.self)
        if let expectedPartition, partition != expectedPartition {
            return .invalid("header names partition \"\(partition)\" but the file is in partition \"\(expectedPartition)\"")
        }
        if let expectedBaseSequence, baseSequence != expectedBaseSequence {
            return .invalid("header base sequence \(baseSequence) does not match the file name (\(expectedBaseSequence))")
        }
        return .valid(
            SegmentHeader(
                partition: partition, baseSequence: baseSequence, maximumPayloadBytes: maximumPayloadBytes,
                byteCount: total, version: version))
    }
}

func hex(_ value: UInt32) -> String {
    let digits = String(value, radix: 16, uppercase: true)
    return "0x" + String(repeating: "0", count: 8 - digits.count) + digits
}

extension Array where Element == UInt8 {
    mutating func appendLittleEndian<Value: FixedWidthInteger>(_ value: Value) {
        Swift.withUnsafeBytes(of: value.littleEndian) { append(contentsOf: $0) }
    }

    func loadLittleEndian<Value: FixedWidthInteger>(_ type: Value.Type, at offset: Int) -> Value {
        withUnsafeBytes { Value(littleEndian: $0.loadUnaligned(fromByteOffset: offset, as: Value.self)) }
    }
}
