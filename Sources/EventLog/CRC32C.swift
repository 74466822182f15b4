import CChecksum

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum used by iSCSI, ext4 and SCTP.
///
/// By the CPU's `crc32` instruction where it has one (x86-64 with SSE4.2, checked once at run time);
/// otherwise in Swift, slicing-by-16: sixteen 256-entry tables let the loop consume sixteen bytes per
/// step (twice the speed of slicing-by-8 here: the loop is bound by its dependency chain, not by table loads).
public enum CRC32C {
    /// True when checksums are computed by the CPU's instruction.
    public static let usesHardware = sksim_crc32c_hardware_available() == 1

    /// Checksum of `bytes`, continuing from a previous result `crc` (0 to start).
    /// `update(update(0, a), b) == update(0, a + b)`.
    @inlinable
    public static func checksum(_ bytes: some Collection<UInt8>, continuing crc: UInt32 = 0) -> UInt32 {
        if let result = bytes.withContiguousStorageIfAvailable({ checksum(UnsafeRawBufferPointer($0), continuing: crc) }) {
            return result
        }
        return checksum(Array(bytes), continuing: crc)
    }

    /// Checksum of raw bytes, continuing from a previous result `crc` (0 to start).
    public static func checksum(_ bytes: UnsafeRawBufferPointer, continuing crc: UInt32 = 0) -> UInt32 {
        guard let pointer = bytes.baseAddress, bytes.count > 0 else { return crc }
        if usesHardware { return sksim_crc32c_hardware(crc, pointer, bytes.count) }
        return softwareChecksum(bytes, continuing: crc)
    }

    /// The Swift slicing-by-16 computation, used where the CPU has no instruction (and by tests, to
    /// check both agree).
    public static func softwareChecksum(_ bytes: UnsafeRawBufferPointer, continuing crc: UInt32 = 0) -> UInt32 {
        guard var pointer = bytes.baseAddress, bytes.count > 0 else { return crc }
        let table = crc32cTables
        var remaining = bytes.count
        var value = ~crc
        // Byte-wise until 8-byte aligned so the wide loads below are aligned.
        while remaining > 0 && UInt(bitPattern: pointer) & 7 != 0 {
            value = table[Int((value ^ UInt32(pointer.load(as: UInt8.self))) & 0xFF)] ^ (value >> 8)
            pointer += 1
            remaining -= 1
        }
        while remaining >= 16 {
            let first = UInt64(littleEndian: pointer.load(as: UInt64.self))
            let second = UInt64(littleEndian: pointer.load(fromByteOffset: 8, as: UInt64.self))
            let low = UInt32(truncatingIfNeeded: first) ^ value
            let high = UInt32(truncatingIfNeeded: first >> 32)
            let third = UInt32(truncatingIfNeeded: second)
            let fourth = UInt32(truncatingIfNeeded: second >> 32)
            value = table[15 * 256 + Int(low & 0xFF)]
                ^ table[14 * 256 + Int((low >> 8) & 0xFF)]
                ^ table[13 * 256 + Int((low >> 16) & 0xFF)]
                ^ table[12 * 256 + Int(low >> 24)]
                ^ table[11 * 256 + Int(high & 0xFF)]
                ^ table[10 * 256 + Int((high >> 8) & 0xFF)]
                ^ table[9 * 256 + Int((high >> 16) & 0xFF)]
                ^ table[8 * 256 + Int(high >> 24)]
                ^ table[7 * 256 + Int(third & 0xFF)]
                ^ table[6 * 256 + Int((third >> 8) & 0xFF)]
                ^ table[5 * 256 + Int((third >> 16) & 0xFF)]
                ^ table[4 * 256 + Int(third >> 24)]
                ^ table[3 * 256 + Int(fourth & 0xFF)]
                ^ table[2 * 256 + Int((fourth >> 8) & 0xFF)]
                ^ table[1 * 256 + Int((fourth >> 16) & 0xFF)]
                ^ table[Int(fourth >> 24)]
            pointer += 16
            remaining -= 16
        }
        while remaining >= 8 {
            let word = UInt64(littleEndian: pointer.load(as: UInt64.self))
            let low = UInt32(truncatingIfNeeded: word) ^ value
            let high = UInt32(truncatingIfNeeded: word >> 32)
            value = table[7 * 256 + Int(low & 0xFF)]
                ^ table[6 * 256 + Int((low >> 8) & 0xFF)]
                ^ table[5 * 256 + Int((low >> 16) & 0xFF)]
                ^ table[4 * 256 + Int(low >> 24)]
                ^ table[3 * 256 + Int(high & 0xFF)]
                ^ table[2 * 256 + Int((high >> 8) & 0xFF)]
                ^ table[1 * 256 + Int((high >> 16) & 0xFF)]
                ^ table[Int(high >> 24)]
            pointer += 8
            remaining -= 8
        }
        while remaining > 0 {
            value = table[Int((value ^ UInt32(pointer.load(as: UInt8.self))) & 0xFF)] ^ (value >> 8)
            pointer += 1
            remaining -= 1
        }
        return ~value
    }
}

/// 16 × 256 tables, flat; allocated once and never freed or mutated, hence safe to share.
nonisolated(unsafe) private let crc32cTables: UnsafePointer<UInt32> = {
    let tables = UnsafeMutablePointer<UInt32>.allocate(capacity: 16 * 256)
    for index in 0..<256 {
        var value = UInt32(index)
        for _ in 0..<8 {
            value = (value & 1) != 0 ? (value >> 1) ^ 0x82F6_3B78 : value >> 1
        }
        tables[index] = value
    }
    for slice in 1..<16 {
        for index in 0..<256 {
            let previous = tables[(slice - 1) * 256 + index]
            tables[slice * 256 + index] = (previous >> 8) ^ tables[Int(previous & 0xFF)]
        }
    }
    return UnsafePointer(tables)
}()
