import Foundation
import Testing

@testable import EventLog

@Suite struct CorruptionTests {
    @Test("a bit flip in a middle record is reported with file and offset, and open and repair refuse without changes")
    func bitFlipInTheMiddle() throws {
        try withTemporaryDirectory { directory in
            try writeSampleRecords(directory, 1...20, configuration: smallSegments(maximumSegmentBytes: 100_000))
            let segment = try segmentURLs(directory)[0]
            var bytes = [UInt8](try Data(contentsOf: segment))
            var recordOffset = SegmentFormat.headerBytes(partitionNameLength: 4)
            for number in 1..<10 { recordOffset += SegmentFormat.recordHeaderBytes + samplePayload(number).count }
            bytes[recordOffset + 20] ^= 0x10  // inside record 10's timestamp
            try Data(bytes).write(to: segment)
            let before = try snapshot(directory)

            let report = try LogMaintenance.verify(directory: directory)
            #expect(report.problems.count == 1)
            let problem = try #require(report.problems.first)
            #expect(problem.kind == .checksumMismatch)
            #expect(problem.path == segment.path)
            #expect(problem.byteOffset == UInt64(recordOffset))
            #expect(!report.isRepairable)
            #expect(problem.description.contains("sksim log verify"))

            let openError = #expect(throws: LogError.self) {
                try PartitionWriter(directory: directory, partition: "main", configuration: smallSegments())
            }
            #expect(openError?.code == .corruption)
            #expect(openError?.byteOffset == UInt64(recordOffset))
            #expect(openError?.description.contains(segment.path) == true)

            let repairError = #expect(throws: LogError.self) { try LogMaintenance.repair(directory: directory) }
            #expect(repairError?.code == .repairRefused)

            let readError = #expect(throws: LogError.self) { try readAll(directory) }
            #expect(readError?.problems.first?.kind == .checksumMismatch)
            #expect(try PartitionReader(directory: directory, partition: "main").records(through: 9) == expectedRecords(1...9))
            #expect(try snapshot(directory) == before)
        }
    }

    @Test("issue 30: a crafted segment header (valid CRC, small payload limit) is damage: repair refuses and deletes no record that verifies")
    func craftedHeaderPayloadLimit() throws {
        try withTemporaryDirectory { directory in
            try writeSampleRecords(directory, 1...100, configuration: smallSegments(maximumSegmentBytes: 1_000_000))
            let segment = try segmentURLs(directory)[0]
            var bytes = [UInt8](try Data(contentsOf: segment))
            // The same header with a payload limit below every record's length; its own CRC is right.
            let crafted = SegmentFormat.encodeHeader(partition: "main", baseSequence: 1, maximumPayloadBytes: 8)
            bytes.replaceSubrange(0..<crafted.count, with: crafted)
            try Data(bytes).write(to: segment)
            let before = try snapshot(directory)

            let report = try LogMaintenance.verify(directory: directory)
            #expect(!report.isIntact)
            #expect(!report.isRepairable, "\(report)")
            #expect(report.problems.first?.kind == .invalidLength)
            #expect(report.problems.first?.message.contains("not a torn tail") == true)
            let repairError = #expect(throws: LogError.self) { try LogMaintenance.repair(directory: directory) }
            #expect(repairError?.code == .repairRefused)
            #expect(try snapshot(directory) == before, "nothing changed: every record still verifies under a right header")
            // A writer refuses it too, rather than truncating it as a torn tail.
            #expect(throws: LogError.self) { try PartitionWriter(directory: directory, partition: "main", configuration: smallSegments()) }
            #expect(try snapshot(directory) == before)
        }
    }

    @Test("issue 30: repair judges payloads as verify does: a record that holds no event refuses the repair")
    func repairAgreesWithVerifyOnPayloads() throws {
        try withTemporaryDirectory { directory in
            try writeSampleRecords(directory, 1...10, configuration: smallSegments(maximumSegmentBytes: 100_000))
            let before = try snapshot(directory)
            let refuseRecordFive: (UnsafeRawBufferPointer) -> String? = { payload in
                payload.elementsEqual(samplePayload(5)) ? "not an event" : nil
            }
            let report = try LogMaintenance.verify(directory: directory, validatePayload: refuseRecordFive)
            #expect(!report.isIntact)
            let repairError = #expect(throws: LogError.self) { try LogMaintenance.repair(directory: directory, validatePayload: refuseRecordFive) }
            #expect(repairError?.code == .repairRefused)
            #expect(try snapshot(directory) == before)
        }
    }

    @Test("a missing middle segment is a sequence gap that nothing repairs")
    func missingSegment() throws {
        try withTemporaryDirectory { directory in
            try writeSampleRecords(directory, 1...40)
            let segments = try segmentURLs(directory)
            try FileManager.default.removeItem(at: segments[1])
            let report = try LogMaintenance.verify(directory: directory)
            #expect(report.problems.contains { $0.kind == .sequenceGap && $0.path == segments[2].path })
            #expect(throws: LogError.self) { try readAll(directory) }
            #expect(throws: LogError.self) { try LogMaintenance.repair(directory: directory) }
            #expect(segments.count >= 4)
            for later in segments.dropFirst(3) { try FileManager.default.removeItem(at: later) }
            // Now the gap sits right before the last segment: open must see it.
            #expect(throws: LogError.self) {
                try PartitionWriter(directory: directory, partition: "main", configuration: smallSegments())
            }
        }
    }

    @Test("garbage, empty, wrong-magic and huge-length files are rejected with clear errors")
    func garbageFiles() throws {
        try withTemporaryDirectory { directory in
            var generator = SystemRandomNumberGenerator()
            let partition = directory.appendingPathComponent("main")
            let first = partition.appendingPathComponent("00000000000000000001.segment")
            let header = SegmentFormat.encodeHeader(partition: "main", baseSequence: 1, maximumPayloadBytes: 4_096)
            var hugeLength = header + [UInt8](repeating: 0, count: 24)
            hugeLength.replaceSubrange(header.count + 4..<(header.count + 8), with: [0xFF, 0xFF, 0xFF, 0x0F])
            // A whole valid record after the huge length makes it damage rather than a torn tail.
            var follower = [UInt8](repeating: 0, count: SegmentFormat.recordHeaderBytes)
            follower.withUnsafeMutableBytes { buffer in
                SegmentFormat.encodeRecord(at: buffer.baseAddress!, payloadCount: 0, lengthFlags: 0, sequence: 2, timestamp: 0) { _ in }
            }
            hugeLength += follower
            let cases: [(String, [UInt8], LogProblem.Kind)] = [
                ("random", (0..<5_000).map { _ in UInt8.random(in: 0...255, using: &generator) }, .badHeader),
                ("wrong magic", Array("NOTALOG!".utf8) + header.dropFirst(8), .badHeader),
                ("huge length", hugeLength, .invalidLength),
            ]
            for (name, bytes, kind) in cases {
                try? FileManager.default.removeItem(at: partition)
                try FileManager.default.createDirectory(at: partition, withIntermediateDirectories: true)
                try Data(bytes).write(to: first)
                let report = try LogMaintenance.verify(directory: directory)
                #expect(report.problems.first?.kind == kind, "\(name)")
                #expect(report.problems.first?.path == first.path, "\(name)")
                let error = #expect(throws: LogError.self, "\(name)") {
                    try PartitionWriter(directory: directory, partition: "main", configuration: smallSegments())
                }
                #expect(error?.description.contains(first.path) == true, "\(name)")
                #expect(throws: LogError.self, "\(name)") { try readAll(directory) }
                #expect(throws: LogError.self, "\(name)") { try LogMaintenance.repair(directory: directory) }
            }
        }
    }

    @Test("an empty segment file is a torn creation only when it is the last segment")
    func emptySegmentFile() throws {
        try withTemporaryDirectory { directory in
            try writeSampleRecords(directory, 1...10)
            let segments = try segmentURLs(directory)
            let extra = directory.appendingPathComponent("main/00000000000000000011.segment")
            try Data().write(to: extra)
            let report = try LogMaintenance.verify(directory: directory)
            #expect(report.problems.map(\.kind) == [.truncatedHeader])
            #expect(try readAll(directory) == expectedRecords(1...10))

            try Data().write(to: segments[0])
            let middle = try LogMaintenance.verify(directory: directory)
            #expect(middle.problems.contains { $0.kind == .badHeader && $0.path == segments[0].path })
            #expect(throws: LogError.self) {
                try PartitionWriter(directory: directory, partition: "main", configuration: smallSegments())
            }
            #expect(throws: LogError.self) { try LogMaintenance.repair(directory: directory) }
        }
    }

    @Test("a segment in the wrong partition directory or with a mismatched name is a bad header")
    func misplacedSegment() throws {
        try withTemporaryDirectory { directory in
            try writeSampleRecords(directory, partition: "one", 1...3)
            let source = directory.appendingPathComponent("one/00000000000000000001.segment")
            try FileManager.default.createDirectory(at: directory.appendingPathComponent("two"), withIntermediateDirectories: true)
            try FileManager.default.copyItem(at: source, to: directory.appendingPathComponent("two/00000000000000000001.segment"))
            let error = #expect(throws: LogError.self) { try readAll(directory, partition: "two") }
            #expect(error?.problems.first?.kind == .badHeader)
            #expect(error?.message.contains("partition") == true)
        }
    }
}
