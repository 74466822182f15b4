import Foundation

/// A malformed payload: what was wrong and where. Input from outside (log files,
/// network frames) can be anything, so decoding never traps; it throws this.
public struct DecodingFailure: Error, Sendable, Hashable, CustomStringConvertible {
    public var offset: Int
    public var reason: String

    public init(offset: Int, reason: String) {
        self.offset = offset
        self.reason = reason
    }

    public var description: String { "malformed payload at byte \(offset): \(reason)" }
}

/// Appends the project's compact binary encoding: LEB128 varints for integers,
/// zigzag for signed ones, little-endian IEEE 754 for doubles, length-prefixed UTF-8.
public struct BinaryWriter: Sendable {
    public private(set) var bytes: [UInt8]

    public init(capacity: Int = 128) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    public mutating func removeAll() { bytes.removeAll(keepingCapacity: true) }

    public mutating func write(_ byte: UInt8) { bytes.append(byte) }

    /// A one-byte tag; named so that an integer literal never picks the varint overload.
    public mutating func write(tag: UInt8) { bytes.append(tag) }

    public mutating func write(varint value: UInt64) {
        var remaining = value
        while remaining >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: remaining) | 0x80)
            remaining >>= 7
        }
        bytes.append(UInt8(remaining))
    }

    public mutating func write(signed value: Int64) {
        write(varint: UInt64(bitPattern: (value << 1) ^ (value >> 63)))
    }

    public mutating func write(_ value: Int) { write(signed: Int64(value)) }

    public mutating func write(_ value: Bool) { bytes.append(value ? 1 : 0) }

    public mutating func write(_ value: Double) {
        var bits = value.bitPattern
        for _ in 0..<8 {
            bytes.append(UInt8(truncatingIfNeeded: bits))
            bits >>= 8
        }
    }

    public mutating func write(_ value: String) {
        var value = value
        value.withUTF8 { utf8 in
            write(varint: UInt64(utf8.count))
            bytes.append(contentsOf: utf8)
        }
    }

    public mutating func write(_ value: [UInt8]) {
        write(varint: UInt64(value.count))
        bytes.append(contentsOf: value)
    }

    public mutating func write(optional value: String?) {
        if let value {
            write(true)
            write(value)
        } else {
            write(false)
        }
    }
}

/// Reads what `BinaryWriter` wrote, checking every bound. Use it only inside the
/// scope that keeps `buffer` alive (`withUnsafeBytes`).
public struct BinaryReader {
    private let buffer: UnsafeRawBufferPointer
    public private(set) var offset: Int = 0
    /// Strings and byte arrays longer than this are refused rather than allocated.
    public static let maximumLength = 1 << 20
    public init(_ buffer: UnsafeRawBufferPointer) {
        self.buffer = buffer
    }

    public var isAtEnd: Bool { offset == buffer.count }

    public func failure(_ reason: String) -> DecodingFailure { DecodingFailure(offset: offset, reason: reason) }

    @inline(__always)
    public mutating func readByte() throws(DecodingFailure) -> UInt8 {
        guard offset < buffer.count else { throw failure("unexpected end of data") }
        let byte = buffer[offset]
        offset += 1
        return byte
    }

    @inline(__always)
    public mutating func readVarint() throws(DecodingFailure) -> UInt64 {
        // One byte (below 128) is the usual case: lengths, tags, small numbers.
        if offset < buffer.count, buffer[offset] < 0x80 {
            offset += 1
            return UInt64(buffer[offset - 1])
        }
        return try readLongVarint()
    }

    private mutating func readLongVarint() throws(DecodingFailure) -> UInt64 {
        var result: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            let byte = try readByte()
            if shift == 63 && byte > 1 { throw failure("varint overflows 64 bits") }
            result |= UInt64(byte & 0x7F) << shift
            if byte < 0x80 { return result }
            shift += 7
            if shift > 63 { throw failure("varint longer than 10 bytes") }
        }
    }

    public mutating func readSigned() throws(DecodingFailure) -> Int64 {
        let raw = try readVarint()
        return Int64(bitPattern: (raw >> 1) ^ (0 &- (raw & 1)))
    }

    public mutating func readInt() throws(DecodingFailure) -> Int {
        let value = try readSigned()
        guard let result = Int(exactly: value) else { throw failure("integer out of range") }
        return result
    }

    @inline(__always)
    public mutating func readBool() throws(DecodingFailure) -> Bool {
        switch try readByte() {
        case 0: return false
        case 1: return true
        case let other: throw failure("expected a boolean (0 or 1), found \(other)")
        }
    }

    public mutating func readDouble() throws(DecodingFailure) -> Double {
        guard buffer.count - offset >= 8 else { throw failure("unexpected end of data in a double") }
        var bits: UInt64 = 0
        for index in 0..<8 { bits |= UInt64(buffer[offset + index]) << (8 * UInt64(index)) }
        offset += 8
        return Double(bitPattern: bits)
    }

    @inline(__always)
    private mutating func readLength() throws(DecodingFailure) -> Int {
        let length = try readVarint()
        guard length <= UInt64(Self.maximumLength) else { throw failure("length \(length) exceeds \(Self.maximumLength)") }
        guard Int(length) <= buffer.count - offset else { throw failure("length \(length) runs past the end of data") }
        return Int(length)
    }

    public mutating func readString() throws(DecodingFailure) -> String {
        let bytes = try readStringBytes()
        guard let string = Self.string(bytes) else {
            offset -= bytes.count
            throw failure("string is not valid UTF-8")
        }
        return string
    }

    /// A length-prefixed string's bytes, not yet checked to be UTF-8 (`string(_:)` does),
    /// valid as long as the buffer is.
    @inline(__always)
    public mutating func readStringBytes() throws(DecodingFailure) -> UnsafeBufferPointer<UInt8> {
        let length = try readLength()
        let bytes = UnsafeBufferPointer(start: buffer.baseAddress.map { $0.advanced(by: offset).assumingMemoryBound(to: UInt8.self) },
                                        count: length)
        offset += length
        return bytes
    }

    /// The string of these bytes, or nil when they are not valid UTF-8.
    @inline(__always)
    public static func string(_ bytes: UnsafeBufferPointer<UInt8>) -> String? {
        if isASCII(bytes) {
            // ASCII is valid UTF-8: the concrete, non-generic initializer is several times faster
            // than the validating one (which looks up generic metadata on every call).
            return String(decoding: bytes, as: UTF8.self)
        }
        return String(validating: bytes, as: UTF8.self)
    }

    /// True when the bytes are valid UTF-8, without making a string of ASCII (the usual case).
    @inline(__always)
    public static func isValidUTF8(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        isASCII(bytes) || String(validating: bytes, as: UTF8.self) != nil
    }

    /// True when every byte is below 0x80; eight at a time.
    @usableFromInline
    static func isASCII(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let base = bytes.baseAddress else { return true }
        var index = 0
        var combined: UInt64 = 0
        while index + 8 <= bytes.count {
            combined |= UnsafeRawPointer(base + index).loadUnaligned(as: UInt64.self)
            index += 8
        }
        while index < bytes.count {
            combined |= UInt64(base[index])
            index += 1
        }
        return combined & 0x8080_8080_8080_8080 == 0
    }

    public mutating func readBytes() throws(DecodingFailure) -> [UInt8] {
        let length = try readLength()
        let result = [UInt8](buffer[offset..<(offset + length)])
        offset += length
        return result
    }

    public mutating func readOptionalString() throws(DecodingFailure) -> String? {
        try readBool() ? try readString() : nil
    }
}
