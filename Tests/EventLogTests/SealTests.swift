import Foundation
import Testing

@testable import EventLog

@Suite struct SealTests {
    @Test("every segment but the last ends in a seal naming the next segment's base")
    func sealsNameTheNextSegment() throws {
        try withTemporaryDirectory { directory in
            try writeSampleRecords(directory, 1...40)
            let segments = try segmentURLs(directory)
            #expect(segments.count >= 3)
            for (position, segment) in segments.enumerated() {
                let seal = try SegmentFile(path: segment.path).trailingSeal()
                if position + 1 < segments.count {
                    #expect(seal == UInt64(segments[position + 1].deletingPathExtension().lastPathComponent))
                } else {
                    #expect(seal == nil)
                }
            }
        }
    }

    @Test("a sealed segment cut exactly at a record boundary is reported, and neither open, read nor repair hides it")
    func cutAtRecordBoundary() throws {
        try withTemporaryDirectory { directory in
            try writeSampleRecords(directory, 1...20)
            let segments = try segmentURLs(directory)
            let nextBase = Int(segments[1].deletingPathExtension().lastPathComponent)!
            let offsets = recordOffsets(base: 1, last: nextBase - 1)
            for cut in [offsets.last!, try Data(contentsOf: segments[0]).count - SegmentFormat.sealBytes] {
                let bytes = try Data(contentsOf: segments[0])
                try bytes.prefix(cut).write(to: segments[0])
                let report = try LogMaintenance.verify(directory: directory)
                #expect(report.problems.contains { $0.kind == .missingSeal && $0.path == segments[0].path && $0.byteOffset == UInt64(cut) })
                #expect(!report.isRepairable)
                #expect(throws: LogError.self) { try LogMaintenance.repair(directory: directory) }
                var delivered = 0
                #expect(throws: LogError.self) {
                    try PartitionReader(directory: directory, partition: "main").forEachRecord { _ in delivered += 1 }
                }
                #expect(delivered == (cut == offsets.last! ? nextBase - 2 : nextBase - 1))
                try bytes.write(to: segments[0])
            }
            // Against the segment before the last, opening a writer refuses too.
            for later in segments.dropFirst(2) { try FileManager.default.removeItem(at: later) }
            try Data(contentsOf: segments[0]).prefix(offsets.last!).write(to: segments[0])
            #expect(throws: LogError.self) { try PartitionWriter(directory: directory, partition: "main", configuration: smallSegments()) }
        }
    }

    @Test("a missing last segment is reported by verify, readers and writers")
    func missingLastSegment() throws {
        try withTemporaryDirectory { directory in
            try writeSampleRecords(directory, 1...20)
            let segments = try segmentURLs(directory)
            let last = segments.last!
            let lastBase = Int(last.deletingPathExtension().lastPathComponent)!
            try FileManager.default.removeItem(at: last)
            try FileManager.default.removeItem(at: indexURL(forSegment: last))
            let report = try LogMaintenance.verify(directory: directory)
            #expect(report.problems.map(\.kind) == [.missingSegment])
            #expect(report.problems[0].message.contains(last.lastPathComponent))
            #expect(!report.isRepairable)
            var delivered = 0
            let readError = #expect(throws: LogError.self) {
                try PartitionReader(directory: directory, partition: "main").forEachRecord { _ in delivered += 1 }
            }
            #expect(readError?.problems.first?.kind == .missingSegment)
            #expect(delivered == lastBase - 1)
            #expect(throws: LogError.self) { try PartitionReader(directory: directory, partition: "main").lastSequence() }
            let openError = #expect(throws: LogError.self) {
                try PartitionWriter(directory: directory, partition: "main", configuration: smallSegments())
            }
            #expect(openError?.problems.first?.kind == .missingSegment)
        }
    }

    @Test("a roll interrupted before its seal was written is completed by opening a writer or by repair, losing nothing")
    func interruptedRoll() throws {
        for completion in ["writer", "repair"] {
            for sealBytesWritten in [0, 10] {
                try withTemporaryDirectory { directory in
                    try writeSampleRecords(directory, 1...20)
                    let segments = try segmentURLs(directory)
                    for later in segments.dropFirst(2) {
                        try FileManager.default.removeItem(at: later)
                        try FileManager.default.removeItem(at: indexURL(forSegment: later))
                    }
                    let lastBase = Int(segments[1].deletingPathExtension().lastPathComponent)!
                    // The successor exists with its header only; the seal is missing or partial.
                    try Data(contentsOf: segments[1]).prefix(SegmentFormat.headerBytes(partitionNameLength: 4)).write(to: segments[1])
                    let sealed = try Data(contentsOf: segments[0])
                    let sealOffset = sealed.count - SegmentFormat.sealBytes
                    try sealed.prefix(sealOffset + sealBytesWritten).write(to: segments[0])

                    let report = try LogMaintenance.verify(directory: directory)
                    #expect(report.problems.contains { $0.kind == .interruptedRoll && $0.byteOffset == UInt64(sealOffset) })
                    #expect(report.isRepairable)
                    #expect(try readAll(directory) == expectedRecords(1...(lastBase - 1)))
                    if completion == "writer" {
                        let writer = try PartitionWriter(directory: directory, partition: "main", configuration: smallSegments())
                        #expect(writer.recoveries.contains { $0.path == segments[0].path && $0.byteOffset == UInt64(sealOffset) })
                        #expect(writer.lastSequence == UInt64(lastBase - 1))
                        try writer.close()
                    } else {
                        let actions = try LogMaintenance.repair(directory: directory)
                        #expect(actions.contains { $0.kind == .completedSeal && $0.droppedBytes == UInt64(sealBytesWritten) })
                    }
                    #expect(try Data(contentsOf: segments[0]) == sealed, "\(completion), \(sealBytesWritten)")
                    #expect(try LogMaintenance.verify(directory: directory).isIntact, "\(completion), \(sealBytesWritten)")
                }
            }
        }
    }

    @Test("zeros after a partial last record are still a torn tail")
    func zeroFilledTail() throws {
        try withTemporaryDirectory { directory in
            try writeSampleRecords(directory, 1...10, configuration: smallSegments(maximumSegmentBytes: 100_000))
            let segment = try segmentURLs(directory)[0]
            var bytes = try Data(contentsOf: segment)
            bytes = bytes.prefix(bytes.count - 7) + Data(repeating: 0, count: 4_096)
            try bytes.write(to: segment)
            let report = try LogMaintenance.verify(directory: directory)
            #expect(report.problems.map(\.kind).filter { $0 != .staleIndex } == [.tornTail])
            _ = try LogMaintenance.repair(directory: directory)
            #expect(try readAll(directory) == expectedRecords(1...9))
        }
    }
}

@Suite struct MaintenanceTests {
    @Test("segments of log format 1 are refused with a message naming the file, both versions and what to do")
    func formatOneRefused() throws {
        try withTemporaryDirectory { directory in
            try writeSampleRecords(directory, 1...3)
            let segment = try segmentURLs(directory)[0]
            var bytes = [UInt8](try Data(contentsOf: segment))
            bytes[8] = 1
            let headerBytes = SegmentFormat.headerBytes(partitionNameLength: 4)
            let checksum = CRC32C.checksum(bytes[0..<(headerBytes - 4)])
            withUnsafeBytes(of: checksum.littleEndian) { bytes.replaceSubrange((headerBytes - 4)..<headerBytes, with: $0) }
            try Data(bytes).write(to: segment)
            let attempts: [(String, () throws -> Void)] = [
                ("writer", { _ = try PartitionWriter(directory: directory, partition: "main", configuration: smallSegments()) }),
                ("reader", { _ = try readAll(directory) }),
                ("verify", { _ = try LogMaintenance.verify(directory: directory) }),
                ("repair", { _ = try LogMaintenance.repair(directory: directory) }),
            ]
            for (name, attempt) in attempts {
                let error = #expect(throws: LogError.self, "\(name)") { try attempt() }
                #expect(error?.code == .unsupportedFormatVersion, "\(name)")
                let text = error?.description ?? ""
                #expect(text.contains(segment.path) && text.contains("older sksim (log format 1)"), "\(name)")
                #expect(text.contains("reads log formats 2 and 3") && text.contains("Re-record the run"), "\(name)")
            }
        }
    }

    @Test("verify and repair of a directory that holds no log say so instead of calling it intact")
    func notALog() throws {
        try withTemporaryDirectory { directory in
            let sources = directory.appendingPathComponent("Sources/EventLog")
            try FileManager.default.createDirectory(at: sources, withIntermediateDirectories: true)
            try Data("let x = 1".utf8).write(to: sources.appendingPathComponent("File.swift"))
            for candidate in [directory, directory.appendingPathComponent("Sources")] {
                let error = #expect(throws: LogError.self) { try LogMaintenance.verify(directory: candidate) }
                #expect(error?.code == .notALog)
                #expect(error?.description.contains("holds no event log") == true)
                #expect(error?.description.contains("log/ folder") == true)
                #expect(throws: LogError.self) { try LogMaintenance.repair(directory: candidate) }
            }
        }
    }

    @Test("records whose payload does not decode are reported by verify and never repaired away")
    func payloadValidator() throws {
        try withTemporaryDirectory { directory in
            try writeSampleRecords(directory, 1...30)
            let report = try LogMaintenance.verify(directory: directory) { payload in
                payload.count == samplePayload(7).count ? "unknown event tag" : nil
            }
            let invalid = report.problems.filter { $0.kind == .invalidPayload }
            #expect(invalid.count == (1...30).filter { samplePayload($0).count == samplePayload(7).count }.count)
            #expect(invalid.first?.message.contains("record 7") == true)
            #expect(invalid.first?.message.contains("unknown event tag") == true)
            #expect(!report.isRepairable)
            #expect(try LogMaintenance.verify(directory: directory).isIntact)
        }
    }
}
