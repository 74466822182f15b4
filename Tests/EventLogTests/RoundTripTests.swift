import Foundation
import Testing

@testable import EventLog

@Suite struct RoundTripTests {
    @Test("records read back identical after reopening, and appending continues the sequence")
    func roundTrip() throws {
        try withTemporaryDirectory { directory in
            try writeSampleRecords(directory, 1...40)
            #expect(try segmentURLs(directory).count > 3)
            #expect(try readAll(directory) == expectedRecords(1...40))

            let writer = try PartitionWriter(directory: directory, partition: "main", configuration: smallSegments())
            #expect(writer.recoveries.isEmpty)
            #expect(writer.lastSequence == 40)
            #expect(writer.durableSequence == 40)
            for number in 41...55 {
                #expect(try writer.append(payload: samplePayload(number), timestampNanoseconds: sampleTimestamp(number)) == UInt64(number))
            }
            try writer.close()
            #expect(try readAll(directory) == expectedRecords(1...55))
            #expect(try PartitionReader(directory: directory, partition: "main").lastSequence() == 55)
        }
    }

    @Test("reading a range and through a limit returns exactly those records")
    func ranges() throws {
        try withTemporaryDirectory { directory in
            try writeSampleRecords(directory, 1...30)
            let reader = try PartitionReader(directory: directory, partition: "main")
            #expect(try reader.records(from: 7, through: 19) == expectedRecords(7...19))
            #expect(try reader.records(from: 31).isEmpty)
            #expect(try reader.records(from: 0, through: 1) == expectedRecords(1...1))
        }
    }

    @Test("an empty partition reads as empty and its first append is sequence 1")
    func emptyPartition() throws {
        try withTemporaryDirectory { directory in
            let writer = try PartitionWriter(directory: directory, partition: "empty", configuration: smallSegments())
            #expect(writer.lastSequence == 0)
            try writer.close()
            #expect(try readAll(directory, partition: "empty").isEmpty)
            #expect(try LogDirectory.partitions(in: directory) == ["empty"])
            let reopened = try PartitionWriter(directory: directory, partition: "empty", configuration: smallSegments())
            #expect(try reopened.append(payload: [1, 2, 3], timestampNanoseconds: 5) == 1)
            try reopened.close()
        }
    }

    @Test("partitions are independent and listed by name")
    func partitions() throws {
        try withTemporaryDirectory { directory in
            try writeSampleRecords(directory, partition: "b-2", 1...5)
            try writeSampleRecords(directory, partition: "a.1", 1...3)
            #expect(try LogDirectory.partitions(in: directory) == ["a.1", "b-2"])
            #expect(try readAll(directory, partition: "a.1") == expectedRecords(1...3))
            #expect(try readAll(directory, partition: "b-2") == expectedRecords(1...5))
        }
    }

    @Test("invalid partition names, oversized payloads and closed writers give clear errors")
    func invalidUse() throws {
        try withTemporaryDirectory { directory in
            for name in ["", ".", "..", "a/b", "späti", String(repeating: "x", count: 256)] {
                #expect(throws: LogError.self) { try PartitionWriter(directory: directory, partition: name) }
            }
            let writer = try PartitionWriter(directory: directory, partition: "main", configuration: smallSegments())
            let error = #expect(throws: LogError.self) {
                try writer.append(payload: [UInt8](repeating: 0, count: 4_097), timestampNanoseconds: 0)
            }
            #expect(error?.code == .payloadTooLarge)
            #expect(error?.description.contains("4097") == true)
            try writer.close()
            try writer.close()
            let closed = #expect(throws: LogError.self) { try writer.append(payload: [1], timestampNanoseconds: 0) }
            #expect(closed?.code == .closed)
        }
    }
}
