import Foundation
import Testing

@testable import EventLog

/// Units as the queue engine writes them from log format 3 on: an input record (the command), then the
/// command's events, or the input alone (a command that changed nothing); the header's unit has none.
private struct SampleUnit {
    var hasInput: Bool
    var events: Int
}

private let sampleInputUnits: [SampleUnit] = [
    SampleUnit(hasInput: false, events: 1), SampleUnit(hasInput: true, events: 2), SampleUnit(hasInput: true, events: 0),
    SampleUnit(hasInput: true, events: 1), SampleUnit(hasInput: true, events: 0), SampleUnit(hasInput: true, events: 0),
    SampleUnit(hasInput: true, events: 3), SampleUnit(hasInput: true, events: 1), SampleUnit(hasInput: true, events: 0),
    SampleUnit(hasInput: true, events: 2), SampleUnit(hasInput: true, events: 1), SampleUnit(hasInput: true, events: 0),
]

private func inputPayload(_ unit: Int) -> [UInt8] { [0xA0, UInt8(unit)] + samplePayload(unit + 100, maximumBytes: 40) }

/// One record as a reader with inputs sees it.
private struct SeenRecord: Equatable {
    var sequence: UInt64
    var isInput: Bool
    var endsUnit: Bool
    var payload: [UInt8]
}

/// Writes the units and returns, per unit, the records a reader with inputs must see and the byte
/// offset where the unit ends in its segment (all in one segment).
private func writeInputUnits(_ directory: URL, configuration: PartitionWriterConfiguration) throws -> [(records: [SeenRecord], end: Int)] {
    let writer = try PartitionWriter(directory: directory, partition: "main", configuration: configuration)
    var written: [(records: [SeenRecord], end: Int)] = []
    var next: UInt64 = 1
    var offset = SegmentFormat.headerBytes(partitionNameLength: 4)
    for (number, unit) in sampleInputUnits.enumerated() {
        let payloads = (0..<unit.events).map { samplePayload(Int(next) + $0) }
        var bytes: [UInt8] = []
        var ends: [Int] = []
        for payload in payloads {
            bytes += payload
            ends.append(bytes.count)
        }
        var records: [SeenRecord] = []
        let first: UInt64
        if unit.hasInput {
            let input = inputPayload(number)
            first = try input.withUnsafeBytes { input in
                try bytes.withUnsafeBytes { bytes in
                    try writer.appendUnit(input: input, bytes: bytes, ends: ends, timestampNanoseconds: sampleTimestamp(number))
                }
            }
            records.append(SeenRecord(sequence: next, isInput: true, endsUnit: unit.events == 0, payload: input))
            offset += SegmentFormat.recordHeaderBytes + input.count
        } else {
            first = try writer.appendUnit(payloads, timestampNanoseconds: sampleTimestamp(number))
        }
        #expect(first == next)
        for (index, payload) in payloads.enumerated() {
            records.append(SeenRecord(sequence: next + UInt64(index), isInput: false, endsUnit: index == payloads.count - 1, payload: payload))
            offset += SegmentFormat.recordHeaderBytes + payload.count
        }
        next += UInt64(unit.events)
        #expect(writer.lastSequence == next - 1)
        written.append((records, offset))
    }
    try writer.close()
    return written
}

private func readWithInputs(_ directory: URL) throws -> [SeenRecord] {
    var seen: [SeenRecord] = []
    try PartitionReader(directory: directory, partition: "main").forEachRecord(includingInputs: true) { view in
        seen.append(SeenRecord(sequence: view.sequence, isInput: view.isInput, endsUnit: view.endsUnit, payload: Array(view.payload)))
    }
    return seen
}

@Suite struct InputRecordTests {
    @Test("an input record takes no sequence: readers see events alone by default, and each input before its unit's events on request")
    func inputsTakeNoSequence() throws {
        try withTemporaryDirectory { directory in
            let units = try writeInputUnits(directory, configuration: smallSegments(maximumSegmentBytes: 1 << 20))
            let all = units.flatMap(\.records)
            #expect(try readWithInputs(directory) == all)
            let events = all.filter { !$0.isInput }
            #expect(try readAll(directory).map(\.payload) == events.map(\.payload))
            #expect(try readAll(directory).map(\.sequence) == Array(1...UInt64(events.count)))
            #expect(try LogMaintenance.verify(directory: directory).isIntact)
            // A writer opened again goes on after the last event; a read from the middle finds events through the index.
            let writer = try PartitionWriter(directory: directory, partition: "main", configuration: smallSegments(maximumSegmentBytes: 1 << 20))
            #expect(writer.lastSequence == UInt64(events.count))
            try writer.close()
            let middle = try PartitionReader(directory: directory, partition: "main").records(from: 5)
            #expect(middle.map(\.sequence) == Array(5...UInt64(events.count)))
        }
    }

    @Test("a crash at any byte of units with inputs never shows part of a unit, nor an input without its events")
    func crashInsideUnitsWithInputs() throws {
        try withTemporaryDirectory { root in
            let original = root.appendingPathComponent("original")
            let configuration = smallSegments(maximumSegmentBytes: 1 << 20)
            let units = try writeInputUnits(original, configuration: configuration)
            let segment = try segmentURLs(original)[0]
            let bytes = try Data(contentsOf: segment)
            #expect(units.last!.end == bytes.count)
            for cut in SegmentFormat.headerBytes(partitionNameLength: 4)...bytes.count {
                let copy = root.appendingPathComponent("cut-\(cut)")
                try FileManager.default.copyItem(at: original, to: copy)
                try bytes.prefix(cut).write(to: try segmentURLs(copy)[0])
                let expected = units.filter { $0.end <= cut }.flatMap(\.records)
                #expect(try readWithInputs(copy) == expected, "cut \(cut)")
                let writer = try PartitionWriter(directory: copy, partition: "main", configuration: configuration)
                #expect(writer.lastSequence == UInt64(expected.filter { !$0.isInput }.count), "cut \(cut)")
                try writer.close()
                #expect(try LogMaintenance.verify(directory: copy).isIntact, "cut \(cut)")
                #expect(try readWithInputs(copy) == expected, "cut \(cut)")
                try FileManager.default.removeItem(at: copy)
            }
        }
    }

    @Test("a log of format 2 is read, refused for appending with a message naming `sksim log upgrade`, and upgraded with its records kept")
    func formatTwoIsReadAndUpgraded() throws {
        try withTemporaryDirectory { directory in
            try writeSampleRecords(directory, 1...20, configuration: smallSegments(maximumSegmentBytes: 1_500))
            // Format 2's records are format 3's without inputs: only the header names the older version.
            for url in try segmentURLs(directory) {
                var bytes = [UInt8](try Data(contentsOf: url))
                let base = UInt64(url.deletingPathExtension().lastPathComponent)!
                let header = SegmentFormat.encodeHeader(partition: "main", baseSequence: base, maximumPayloadBytes: 4_096, version: 2)
                bytes.replaceSubrange(0..<header.count, with: header)
                try Data(bytes).write(to: url)
            }
            #expect(try readAll(directory) == expectedRecords(1...20))
            #expect(try LogMaintenance.verify(directory: directory).isIntact)
            do {
                _ = try PartitionWriter(directory: directory, partition: "main", configuration: smallSegments(maximumSegmentBytes: 1_500))
                Issue.record("a writer appended to a log of format 2")
            } catch let error as LogError {
                #expect(error.code == .unsupportedFormatVersion)
                #expect("\(error)".contains("log format 2") && "\(error)".contains("sksim log upgrade"))
            }

            let report = try LogUpgrade.upgrade(directory: directory)
            let segmentCount = try segmentURLs(directory).count
            #expect(report.upgradedSegments.count == segmentCount)
            #expect(report.previousVersions == [2])
            #expect(try readAll(directory) == expectedRecords(1...20))
            #expect(try LogMaintenance.verify(directory: directory).isIntact)
            let writer = try PartitionWriter(directory: directory, partition: "main", configuration: smallSegments(maximumSegmentBytes: 1_500))
            #expect(try writer.append(payload: samplePayload(21), timestampNanoseconds: sampleTimestamp(21)) == 21)
            try writer.close()
            #expect(try readAll(directory) == expectedRecords(1...21))
            let again = try LogUpgrade.upgrade(directory: directory)
            #expect(again.upgradedSegments.isEmpty && again.currentSegments == segmentCount)
        }
    }

    @Test("an input record inside a unit is damage, not a unit")
    func inputInsideUnitIsDamage() throws {
        try withTemporaryDirectory { directory in
            let writer = try PartitionWriter(directory: directory, partition: "main", configuration: smallSegments(maximumSegmentBytes: 1 << 20))
            // Two records of one unit; the second is then rewritten as an input record (with a valid checksum).
            try writer.appendUnit([samplePayload(1), samplePayload(2)], timestampNanoseconds: 5)
            try writer.close()
            let url = try segmentURLs(directory)[0]
            var bytes = [UInt8](try Data(contentsOf: url))
            let second = SegmentFormat.headerBytes(partitionNameLength: 4) + SegmentFormat.recordHeaderBytes + samplePayload(1).count
            let payload = samplePayload(2)
            bytes.withUnsafeMutableBytes { buffer in
                SegmentFormat.encodeRecord(
                    at: buffer.baseAddress! + second, payloadCount: payload.count, lengthFlags: SegmentFormat.inputFlag, sequence: 2,
                    timestamp: 5
                ) { $0.copyMemory(from: payload, byteCount: payload.count) }
            }
            try Data(bytes).write(to: url)
            let report = try LogMaintenance.verify(directory: directory)
            #expect(report.problems.map(\.kind) == [.badInput])
        }
    }
}
