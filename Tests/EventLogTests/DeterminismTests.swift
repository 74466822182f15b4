import Foundation
import Testing

@testable import EventLog

@Suite struct DeterminismTests {
    @Test("the same appends give byte-identical files under every durability policy")
    func byteIdentical() throws {
        try withTemporaryDirectory { root in
            let policies: [DurabilityPolicy] = [.always, .groupCommit(maximumRecords: 3, maximumDelayMilliseconds: 1), .operatingSystem]
            var snapshots: [[String: Data]] = []
            for (number, policy) in policies.enumerated() {
                let directory = root.appendingPathComponent("run-\(number)")
                try writeSampleRecords(directory, 1...30, configuration: smallSegments(durability: policy))
                try writeSampleRecords(directory, 31...45, configuration: smallSegments(durability: policy))
                snapshots.append(try snapshot(directory))
            }
            #expect(snapshots[0].count > 4)
            #expect(snapshots[0] == snapshots[1])
            #expect(snapshots[0] == snapshots[2])
        }
    }

    @Test("statistics count records, segments, bytes and timestamps per partition")
    func statistics() throws {
        try withTemporaryDirectory { directory in
            try writeSampleRecords(directory, 1...25)
            let partitions = try LogMaintenance.statistics(directory: directory)
            #expect(partitions.count == 1)
            let stats = partitions[0]
            #expect(stats.recordCount == 25)
            #expect(stats.firstSequence == 1 && stats.lastSequence == 25)
            #expect(stats.firstTimestampNanoseconds == sampleTimestamp(1))
            #expect(stats.lastTimestampNanoseconds == sampleTimestamp(25))
            let segments = try segmentURLs(directory)
            #expect(stats.segmentCount == segments.count)
            #expect(stats.byteCount == UInt64(try segments.map { try Data(contentsOf: $0).count }.reduce(0, +)))
            #expect(stats.isIntact)
        }
    }
}
