import Testing

@testable import EventLog

@Suite struct CRC32CTests {
    /// Bit-at-a-time reference implementation.
    func referenceChecksum(_ bytes: [UInt8]) -> UInt32 {
        var value: UInt32 = 0xFFFF_FFFF
        for byte in bytes {
            value ^= UInt32(byte)
            for _ in 0..<8 { value = (value & 1) != 0 ? (value >> 1) ^ 0x82F6_3B78 : value >> 1 }
        }
        return ~value
    }

    @Test("CRC32C of \"123456789\" is 0xE3069283")
    func checkValue() {
        #expect(CRC32C.checksum(Array("123456789".utf8)) == 0xE306_9283)
    }

    @Test("matches the iSCSI vectors of RFC 3720 B.4")
    func rfc3720Vectors() {
        #expect(CRC32C.checksum([UInt8](repeating: 0, count: 32)) == 0x8A91_36AA)
        #expect(CRC32C.checksum([UInt8](repeating: 0xFF, count: 32)) == 0x62A8_AB43)
        #expect(CRC32C.checksum((0..<32).map { UInt8($0) }) == 0x46DD_794E)
        #expect(CRC32C.checksum((0..<32).map { UInt8(31 - $0) }) == 0x113F_DB5C)
    }

    @Test("the CPU's instruction (where used) and slicing-by-16 agree with the bitwise reference at every length and alignment")
    func agreesWithReference() {
        var generator = SystemRandomNumberGenerator()
        let data = (0..<300).map { _ in UInt8.random(in: 0...255, using: &generator) }
        for start in 0..<9 {
            for end in stride(from: start, through: data.count, by: 7) {
                let slice = Array(data[start..<end])
                let reference = referenceChecksum(slice)
                #expect(CRC32C.checksum(data[start..<end]) == reference)
                #expect(slice.withUnsafeBytes { CRC32C.softwareChecksum($0) } == reference)
                #expect(slice.withUnsafeBytes { CRC32C.softwareChecksum($0, continuing: 0x1234_5678) }
                        == slice.withUnsafeBytes { CRC32C.checksum($0, continuing: 0x1234_5678) })
            }
        }
    }

    @Test("continuing a checksum equals checksumming the concatenation")
    func continuation() {
        let first = Array("hello, ".utf8)
        let second = Array("world".utf8)
        #expect(CRC32C.checksum(second, continuing: CRC32C.checksum(first)) == CRC32C.checksum(first + second))
    }
}
