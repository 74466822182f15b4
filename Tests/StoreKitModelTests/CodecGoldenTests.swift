import Foundation
import Testing
@testable import StoreKitModel

/// The encoding of every event and command kind, byte for byte, against hex checked into
/// Tests/StoreKitModelTests/Golden: a renumbered tag or a reordered field fails here, and
/// a change of format must come with a new version and new golden files.
@Suite struct CodecGoldenTests {
    static let goldenDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Golden")

    static func encodedLines() -> [String] {
        let events = EventCodecTests.everyEvent.map { event in
            "event \(event.name) " + hex(EventCodec.encode(event, commandID: CommandID(origin: "golden", number: 300)))
        }
        let commands = EventCodecTests.everyCommand.map { body in
            "command \(body.name) " + hex(EventCodec.encode(Command(id: CommandID(origin: "golden", number: 1), body: body)))
        }
        return events + commands
    }

    static func hex(_ bytes: [UInt8]) -> String {
        bytes.map { String(format: "%02x", $0) }.joined()
    }

    @Test("Every event and command encodes to the checked-in bytes of format version 2")
    func goldenBytes() throws {
        let file = Self.goldenDirectory.appendingPathComponent("codec-v\(EventCodec.formatVersion).txt")
        if ProcessInfo.processInfo.environment["SKSIM_WRITE_GOLDEN"] == "1" {
            try (Self.encodedLines().joined(separator: "\n") + "\n").write(to: file, atomically: true, encoding: .utf8)
        }
        let expected = try String(contentsOf: file, encoding: .utf8).split(separator: "\n").map(String.init)
        let actual = Self.encodedLines()
        #expect(actual.count == expected.count)
        for (line, golden) in zip(actual, expected) { #expect(line == golden) }
    }

    @Test("Golden bytes decode back to the same values")
    func goldenDecodes() throws {
        for (event, line) in zip(EventCodecTests.everyEvent, Self.encodedLines()) {
            let bytes = try #require(Self.bytes(fromHex: String(line.split(separator: " ")[2])))
            #expect(try EventCodec.decodeEvent(bytes).event == event)
        }
    }

    @Test("Fuzzed bytes never trap the decoders (recorded seed 20261122)")
    func fuzz() {
        var generator = FuzzGenerator(state: 20_261_122)
        let valid = EventCodecTests.everyEvent.map { EventCodec.encode($0, commandID: nil) }
        for round in 0..<20_000 {
            var bytes = valid[round % valid.count]
            // Flip, cut or extend: every mutation must give a value or a DecodingFailure, never a trap.
            switch generator.next() % 3 {
            case 0: bytes[Int(generator.next() % UInt64(bytes.count))] ^= UInt8(truncatingIfNeeded: generator.next() | 1)
            case 1: bytes.removeLast(Int(generator.next() % UInt64(bytes.count)))
            default: bytes += (0..<Int(generator.next() % 16)).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
            }
            _ = try? EventCodec.decodeEvent(bytes)
            _ = try? EventCodec.decodeCommand(bytes)
        }
        #expect(generator.state != 20_261_122)
    }

    static func bytes(fromHex text: String) -> [UInt8]? {
        var result: [UInt8] = []
        var index = text.startIndex
        while index < text.endIndex {
            let next = text.index(index, offsetBy: 2)
            guard let byte = UInt8(text[index..<next], radix: 16) else { return nil }
            result.append(byte)
            index = next
        }
        return result
    }
}

/// SplitMix64, so a fuzz run is the same on every machine.
struct FuzzGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var mixed = state
        mixed = (mixed ^ (mixed >> 30)) &* 0xBF58_476D_1CE4_E5B9
        mixed = (mixed ^ (mixed >> 27)) &* 0x94D0_49BB_1331_11EB
        return mixed ^ (mixed >> 31)
    }
}
