import Foundation
import Testing

@testable import EventLog

@Suite struct IndexTests {
    @Test("reading from any sequence returns the right records across several segments")
    func readFromEverySequence() throws {
        try withTemporaryDirectory { directory in
            try writeSampleRecords(directory, 1...60)
            #expect(try segmentURLs(directory).count >= 5)
            let reader = try PartitionReader(directory: directory, partition: "main")
            for start in 1...61 {
                let records = try reader.records(from: UInt64(start))
                #expect(records == (start <= 60 ? expectedRecords(start...60) : []))
            }
        }
    }

    @Test("the index has one entry per K records pointing at those records")
    func indexEntries() throws {
        try withTemporaryDirectory { directory in
            try writeSampleRecords(directory, 1...60)
            let segments = try segmentURLs(directory)
            let bases = segments.map { Int($0.deletingPathExtension().lastPathComponent)! }
            let header = SegmentFormat.headerBytes(partitionNameLength: 4)
            for (position, segment) in segments.enumerated() {
                let count = (position + 1 < bases.count ? bases[position + 1] : 61) - bases[position]
                let size = UInt64(try Data(contentsOf: segment).count)
                let index = try #require(
                    SparseIndex.load(
                        path: indexURL(forSegment: segment).path, baseSequence: UInt64(bases[position]),
                        segmentHeaderBytes: header, segmentSize: size))
                #expect(index.entries.count == (count + 2) / 3)
                #expect(index.entries.map(\.sequence) == stride(from: bases[position], to: bases[position] + count, by: 3).map { UInt64($0) })
                #expect(index.entries.first?.byteOffset == UInt64(header))
            }
        }
    }

    @Test("a deleted, garbled or stale index of a sealed segment is rebuilt by a read")
    func sealedIndexRebuilt() throws {
        try withTemporaryDirectory { directory in
            try writeSampleRecords(directory, 1...60)
            let segments = try segmentURLs(directory)
            let sealed = segments[1]
            let index = indexURL(forSegment: sealed)
            let original = try Data(contentsOf: index)
            let base = Int(sealed.deletingPathExtension().lastPathComponent)!
            let target = UInt64(base + 4)
            let reader = try PartitionReader(directory: directory, partition: "main")
            let damages: [(String, () throws -> Void)] = [
                ("deleted", { try FileManager.default.removeItem(at: index) }),
                ("garbled", { try Data(repeating: 0xAB, count: original.count).write(to: index) }),
                ("stale", { try original.prefix(SparseIndex.headerBytes + SparseIndex.entryBytes).write(to: index) }),
                ("wrong offsets", {
                    var bytes = [UInt8](original)
                    bytes[SparseIndex.headerBytes + SparseIndex.entryBytes + 8] &+= 5
                    try Data(bytes).write(to: index)
                }),
            ]
            for (name, damage) in damages {
                try damage()
                #expect(try reader.records(from: target) == expectedRecords(Int(target)...60), "\(name)")
                #expect(try Data(contentsOf: index) == original, "\(name) index rebuilt")
            }
        }
    }

    @Test("opening a writer rebuilds the last segment's missing or stale index")
    func lastIndexRebuiltOnOpen() throws {
        try withTemporaryDirectory { directory in
            try writeSampleRecords(directory, 1...20)
            let index = indexURL(forSegment: try segmentURLs(directory).last!)
            let original = try Data(contentsOf: index)
            for damaged in [Data(), original.prefix(original.count - 3), Data("junk".utf8)] {
                try damaged.write(to: index)
                let report = try LogMaintenance.verify(directory: directory)
                #expect(report.problems.map(\.kind) == [.staleIndex])
                // Once "the log ends in a torn record" for a log whose every record is whole.
                #expect(report.verdict.hasPrefix("every record is whole; `sksim log repair` fixes"), "\(report.verdict)")
                try PartitionWriter(directory: directory, partition: "main", configuration: smallSegments()).close()
                #expect(try Data(contentsOf: index) == original)
            }
            try FileManager.default.removeItem(at: index)
            let actions = try LogMaintenance.repair(directory: directory)
            #expect(actions.map(\.kind) == [.rebuiltIndex])
            #expect(try Data(contentsOf: index) == original)
            #expect(try LogMaintenance.verify(directory: directory).isIntact)
        }
    }
}
