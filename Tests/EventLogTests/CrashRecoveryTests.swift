import Foundation
import Testing

@testable import EventLog

@Suite struct CrashRecoveryTests {
    @Test("cutting the last segment at every byte recovers exactly the whole-record prefix")
    func crashAtEveryByte() throws {
        try withTemporaryDirectory { root in
            let original = root.appendingPathComponent("original")
            // 20 records of varied sizes across 2 segments.
            try writeSampleRecords(original, 1...20, configuration: smallSegments(maximumSegmentBytes: 1_500))
            let segments = try segmentURLs(original)
            #expect(segments.count == 2)
            let lastBytes = try Data(contentsOf: segments[1])
            let lastBase = Int(segments[1].deletingPathExtension().lastPathComponent)!
            let headerBytes = SegmentFormat.headerBytes(partitionNameLength: 4)
            // Record end offsets inside the last segment, to know how many records a cut keeps.
            var recordEnds: [Int] = []
            var offset = headerBytes
            for number in lastBase...20 {
                offset += SegmentFormat.recordHeaderBytes + samplePayload(number).count
                recordEnds.append(offset)
            }
            #expect(recordEnds.last == lastBytes.count)

            for cut in 0...lastBytes.count {
                let copy = root.appendingPathComponent("cut-\(cut)")
                try FileManager.default.copyItem(at: original, to: copy)
                try lastBytes.prefix(cut).write(to: try segmentURLs(copy)[1])
                let kept = recordEnds.filter { $0 <= cut }.count
                let lastWhole = lastBase - 1 + kept

                #expect(try PartitionReader(directory: copy, partition: "main").lastSequence() == UInt64(lastWhole), "cut \(cut)")
                let writer = try PartitionWriter(directory: copy, partition: "main", configuration: smallSegments(maximumSegmentBytes: 1_500))
                let isWholePrefix = cut >= headerBytes && (cut == headerBytes || recordEnds.contains(cut))
                #expect(writer.recoveries.isEmpty == isWholePrefix, "cut \(cut)")
                if let recovery = writer.recoveries.first {
                    #expect(recovery.removedSegment == (cut < headerBytes))
                    #expect(recovery.droppedBytes == UInt64(cut - (recovery.removedSegment ? 0 : Int(recovery.byteOffset))))
                }
                #expect(writer.lastSequence == UInt64(lastWhole), "cut \(cut)")
                let next = lastWhole + 1
                #expect(try writer.append(payload: samplePayload(next), timestampNanoseconds: sampleTimestamp(next)) == UInt64(next))
                try writer.close()
                #expect(try readAll(copy) == expectedRecords(1...next), "cut \(cut)")
                #expect(try LogMaintenance.verify(directory: copy).isIntact, "cut \(cut)")
                try FileManager.default.removeItem(at: copy)
            }
        }
    }

    @Test("verify reports a torn tail and repair truncates it, reporting what was dropped")
    func repairTornTail() throws {
        try withTemporaryDirectory { directory in
            try writeSampleRecords(directory, 1...10)
            let last = try segmentURLs(directory).last!
            let bytes = try Data(contentsOf: last)
            try bytes.dropLast(5).write(to: last)

            let summary = try PartitionReader(directory: directory, partition: "main").forEachRecord { _ in }
            #expect(summary.tornTail?.kind == .tornTail)
            #expect(summary.lastSequence == 9)

            let report = try LogMaintenance.verify(directory: directory)
            #expect(report.problems.map(\.kind) == [.tornTail])
            #expect(report.isRepairable)
            #expect(report.problems[0].path == last.path)
            let actions = try LogMaintenance.repair(directory: directory)
            let recordBytes = SegmentFormat.recordHeaderBytes + samplePayload(10).count
            #expect(actions.first == RepairAction(
                kind: .truncatedTornTail, path: last.path, byteOffset: UInt64(bytes.count - recordBytes),
                droppedBytes: UInt64(recordBytes - 5)))
            #expect(try LogMaintenance.verify(directory: directory).isIntact)
            #expect(try readAll(directory) == expectedRecords(1...9))
        }
    }
}
