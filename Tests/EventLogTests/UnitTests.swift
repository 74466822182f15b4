import Foundation
import Testing

@testable import EventLog

/// Sizes of the units written by `writeUnits`: several records each, so cuts and flips land inside units.
let sampleUnitSizes = [1, 3, 2, 4, 1, 3, 2, 5, 1, 2, 3, 1]

/// Writes units of `sizes` records (payloads `samplePayload(sequence)`), closes, and returns each unit's sequences.
@discardableResult
func writeUnits(
    _ directory: URL, sizes: [Int] = sampleUnitSizes, configuration: PartitionWriterConfiguration = smallSegments()
) throws -> [ClosedRange<Int>] {
    let writer = try PartitionWriter(directory: directory, partition: "main", configuration: configuration)
    var units: [ClosedRange<Int>] = []
    var next = Int(writer.lastSequence) + 1
    for size in sizes {
        let range = next...(next + size - 1)
        let first = try writer.appendUnit(range.map { samplePayload($0) }, timestampNanoseconds: sampleTimestamp(range.lowerBound))
        #expect(first == UInt64(range.lowerBound))
        units.append(range)
        next += size
    }
    try writer.close()
    return units
}

func unitRecords(_ units: some Sequence<ClosedRange<Int>>) -> [LogRecord] {
    units.flatMap { unit in
        unit.map { LogRecord(sequence: UInt64($0), timestampNanoseconds: sampleTimestamp(unit.lowerBound), payload: samplePayload($0)) }
    }
}

/// Byte offsets where each record starts in the segment that begins with `base` (records `base...last`).
func recordOffsets(base: Int, last: Int) -> [Int] {
    var offsets: [Int] = []
    var offset = SegmentFormat.headerBytes(partitionNameLength: 4)
    for sequence in base...last {
        offsets.append(offset)
        offset += SegmentFormat.recordHeaderBytes + samplePayload(sequence).count
    }
    return offsets
}

@Suite struct UnitTests {
    @Test("a crash at any byte of the last segment never shows part of a unit to readers, writers or repair")
    func crashInsideUnits() throws {
        try withTemporaryDirectory { root in
            let original = root.appendingPathComponent("original")
            let configuration = smallSegments(maximumSegmentBytes: 2_000)
            let units = try writeUnits(original, configuration: configuration)
            let segments = try segmentURLs(original)
            #expect(segments.count >= 2)
            let lastBytes = try Data(contentsOf: segments.last!)
            let lastBase = Int(segments.last!.deletingPathExtension().lastPathComponent)!
            let lastUnits = units.filter { $0.lowerBound >= lastBase }
            #expect(lastUnits.contains { $0.count > 1 })
            // End offset of each unit of the last segment.
            var unitEnds: [(end: Int, unit: ClosedRange<Int>)] = []
            var offset = SegmentFormat.headerBytes(partitionNameLength: 4)
            for unit in lastUnits {
                for sequence in unit { offset += SegmentFormat.recordHeaderBytes + samplePayload(sequence).count }
                unitEnds.append((offset, unit))
            }
            #expect(offset == lastBytes.count)

            for cut in SegmentFormat.headerBytes(partitionNameLength: 4)...lastBytes.count {
                let copy = root.appendingPathComponent("cut-\(cut)")
                try FileManager.default.copyItem(at: original, to: copy)
                try lastBytes.prefix(cut).write(to: try segmentURLs(copy).last!)
                let whole = units.filter { $0.upperBound < lastBase } + unitEnds.filter { $0.end <= cut }.map(\.unit)
                let expected = unitRecords(whole)

                #expect(try readAll(copy) == expected, "cut \(cut)")
                let verified = try LogMaintenance.verify(directory: copy)
                #expect(verified.isRepairable, "cut \(cut)")
                #expect(verified.problems.allSatisfy { $0.kind == .tornTail || $0.kind == .staleIndex }, "cut \(cut)")
                let writer = try PartitionWriter(directory: copy, partition: "main", configuration: configuration)
                #expect(writer.lastSequence == expected.last!.sequence, "cut \(cut)")
                #expect(writer.durableSequence == writer.lastSequence, "cut \(cut)")
                try writer.close()
                #expect(try LogMaintenance.verify(directory: copy).isIntact, "cut \(cut)")
                #expect(try readAll(copy) == expected, "cut \(cut)")
                try FileManager.default.removeItem(at: copy)
            }
        }
    }

    @Test("readers mark the last record of each unit")
    func endsUnit() throws {
        try withTemporaryDirectory { directory in
            let units = try writeUnits(directory)
            var ends: [Bool] = []
            try PartitionReader(directory: directory, partition: "main").forEachRecord { ends.append($0.endsUnit) }
            #expect(ends == units.flatMap { unit in unit.map { $0 == unit.upperBound } })
            #expect(try readAll(directory) == unitRecords(units))
        }
    }

    @Test("flipping any bit of a length word is damage, never a torn tail, when a valid record follows")
    func lengthBitFlips() throws {
        try withTemporaryDirectory { root in
            let original = root.appendingPathComponent("original")
            try writeUnits(original, sizes: [2, 3, 1, 2], configuration: smallSegments(maximumSegmentBytes: 100_000))
            let segment = try segmentURLs(original)[0]
            let bytes = [UInt8](try Data(contentsOf: segment))
            let offsets = recordOffsets(base: 1, last: 8)
            let copy = root.appendingPathComponent("copy")
            for (position, recordOffset) in offsets.enumerated().dropLast() {
                for bit in 0..<32 {
                    try? FileManager.default.removeItem(at: copy)
                    try FileManager.default.copyItem(at: original, to: copy)
                    var flipped = bytes
                    flipped[recordOffset + 4 + bit / 8] ^= UInt8(1 << (bit % 8))
                    try Data(flipped).write(to: try segmentURLs(copy)[0])
                    let before = try snapshot(copy)
                    let report = try LogMaintenance.verify(directory: copy)
                    #expect(!report.problems.isEmpty, "record \(position + 1) bit \(bit)")
                    #expect(!report.problems.contains { $0.kind == .tornTail }, "record \(position + 1) bit \(bit)")
                    #expect(report.problems.first?.byteOffset == UInt64(recordOffset), "record \(position + 1) bit \(bit)")
                    #expect(!report.isRepairable, "record \(position + 1) bit \(bit)")
                    #expect(throws: LogError.self) { try LogMaintenance.repair(directory: copy) }
                    #expect(throws: LogError.self) { try PartitionWriter(directory: copy, partition: "main", configuration: smallSegments()) }
                    #expect(try snapshot(copy) == before, "record \(position + 1) bit \(bit): nothing may be dropped")
                }
            }
        }
    }

    @Test("a reader delivers every good record before it throws on damage in the middle")
    func streamingBeforeDamage() throws {
        try withTemporaryDirectory { directory in
            try writeSampleRecords(directory, 1...20, configuration: smallSegments(maximumSegmentBytes: 100_000))
            let segment = try segmentURLs(directory)[0]
            var bytes = [UInt8](try Data(contentsOf: segment))
            bytes[recordOffsets(base: 1, last: 20)[12] + 30] ^= 0x01  // payload of record 13
            try Data(bytes).write(to: segment)
            var delivered: [LogRecord] = []
            let error = #expect(throws: LogError.self) {
                try PartitionReader(directory: directory, partition: "main").forEachRecord { delivered.append($0.record) }
            }
            #expect(error?.problems.first?.kind == .checksumMismatch)
            #expect(delivered == expectedRecords(1...12))
        }
    }

    @Test("durableSequence and onDurable stop only at unit ends under every policy, even when a unit is written in parts")
    func durableAtUnitBoundaries() throws {
        let policies: [DurabilityPolicy] = [.always, .groupCommit(maximumRecords: 2, maximumDelayMilliseconds: 0), .operatingSystem]
        for policy in policies {
            try withTemporaryDirectory { directory in
                let recorder = DurabilityRecorder()
                var configuration = smallSegments(maximumSegmentBytes: 3_000, durability: policy)
                configuration.writeBufferBytes = 64  // forces units out in several writes
                configuration.onDurable = { recorder.record($0) }
                let writer = try PartitionWriter(directory: directory, partition: "main", configuration: configuration)
                var unitEnds: Set<UInt64> = [0]
                var next = 1
                for round in 0..<30 {
                    let size = round % 4 + 1
                    try writer.appendUnit((next..<(next + size)).map { samplePayload($0) }, timestampNanoseconds: 0)
                    next += size
                    unitEnds.insert(UInt64(next - 1))
                    #expect(unitEnds.contains(writer.durableSequence), "\(policy)")
                    if policy == .always { #expect(writer.durableSequence == UInt64(next - 1)) }
                }
                try writer.close()
                #expect(writer.durableSequence == UInt64(next - 1), "\(policy)")
                #expect(recorder.recorded.allSatisfy { unitEnds.contains($0) }, "\(policy): \(recorder.recorded)")
                #expect(recorder.recorded.last == UInt64(next - 1), "\(policy)")
            }
        }
    }

    @Test("empty units and units larger than a segment are refused with clear errors")
    func invalidUnits() throws {
        try withTemporaryDirectory { directory in
            let writer = try PartitionWriter(directory: directory, partition: "main", configuration: smallSegments(maximumSegmentBytes: 1_000))
            let empty = #expect(throws: LogError.self) { try writer.appendUnit([], timestampNanoseconds: 0) }
            #expect(empty?.code == .invalidUnit)
            let large = #expect(throws: LogError.self) {
                try writer.appendUnit(Array(repeating: [UInt8](repeating: 1, count: 400), count: 3), timestampNanoseconds: 0)
            }
            #expect(large?.code == .invalidUnit)
            #expect(large?.message.contains("never spans two segments") == true)
            #expect(writer.lastSequence == 0)
            #expect(try writer.appendUnit([[1], [2]], timestampNanoseconds: 0) == 1)
            try writer.close()
        }
    }

    @Test("a unit given as one buffer and its payload ends is written as the same records as one given as payloads")
    func unitFromOneBuffer() throws {
        try withTemporaryDirectory { first in
            try withTemporaryDirectory { second in
                let units = try writeUnits(first)
                let writer = try PartitionWriter(directory: second, partition: "main", configuration: smallSegments())
                for unit in units {
                    let payloads = unit.map { samplePayload($0) }
                    var ends: [Int] = []
                    for payload in payloads { ends.append((ends.last ?? 0) + payload.count) }
                    let bytes = payloads.flatMap { $0 }
                    let sequence = try bytes.withUnsafeBytes {
                        try writer.appendUnit(bytes: $0, ends: ends, timestampNanoseconds: sampleTimestamp(unit.lowerBound))
                    }
                    #expect(sequence == UInt64(unit.lowerBound))
                }
                try writer.close()
                #expect(try readAll(second) == readAll(first))
                var unitEnds: [Bool] = []
                try PartitionReader(directory: second, partition: "main").forEachRecord { unitEnds.append($0.endsUnit) }
                #expect(unitEnds.enumerated().filter(\.element).count == units.count)
            }
        }
    }

    @Test("payload ends outside the buffer or out of order are refused, and nothing is written")
    func unitFromOneBufferRefusesWrongEnds() throws {
        try withTemporaryDirectory { directory in
            let writer = try PartitionWriter(directory: directory, partition: "main", configuration: smallSegments())
            let bytes: [UInt8] = [1, 2, 3, 4]
            for ends in [[5], [3, 2], [-1, 4], [Int]()] {
                let error = #expect(throws: LogError.self) {
                    try bytes.withUnsafeBytes { try writer.appendUnit(bytes: $0, ends: ends, timestampNanoseconds: 0) }
                }
                #expect(error?.code == .invalidUnit, "ends \(ends)")
            }
            #expect(writer.lastSequence == 0)
            try writer.close()
        }
    }

    @Test("a unit that does not fit the current segment starts the next one whole")
    func unitsDoNotSpanSegments() throws {
        try withTemporaryDirectory { directory in
            let units = try writeUnits(directory, configuration: smallSegments(maximumSegmentBytes: 700))
            let segments = try segmentURLs(directory)
            #expect(segments.count >= 3)
            let bases = Set(segments.map { Int($0.deletingPathExtension().lastPathComponent)! })
            #expect(bases.isSubset(of: Set(units.map(\.lowerBound))))
            #expect(try LogMaintenance.verify(directory: directory).isIntact)
        }
    }
}

@Suite struct ConcurrentReadTests {
    @Test("a reader running while the writer appends units and rolls segments sees whole units only, and never damage")
    func readWhileWriting() throws {
        try withTemporaryDirectory { directory in
            var configuration = smallSegments(maximumSegmentBytes: 700, durability: .operatingSystem)
            configuration.writeBufferBytes = 48  // units reach the file in pieces
            let writer = try PartitionWriter(directory: directory, partition: "main", configuration: configuration)
            try writer.append(payload: [0], timestampNanoseconds: 0)
            let finished = DurabilityRecorder()
            let thread = Thread {
                var next = 2
                for round in 0..<3_000 {
                    let size = round % 3 + 1
                    _ = try? writer.appendUnit((next..<(next + size)).map { samplePayload($0, maximumBytes: 60) }, timestampNanoseconds: 0)
                    next += size
                }
                try? writer.close()
                finished.record(UInt64(next - 1))
            }
            thread.start()
            let reader = try PartitionReader(directory: directory, partition: "main")
            var reads = 0
            while finished.recorded.isEmpty || reads < 2 {
                var sequences: [UInt64] = []
                var lastEndsUnit = true
                try reader.forEachRecord { record in
                    sequences.append(record.sequence)
                    lastEndsUnit = record.endsUnit
                }
                #expect(sequences.enumerated().allSatisfy { $0.element == UInt64($0.offset + 1) })
                #expect(lastEndsUnit)
                reads += 1
            }
            #expect(try readAll(directory).count == Int(finished.recorded[0]))
            #expect(try LogMaintenance.verify(directory: directory).isIntact)
        }
    }
}
