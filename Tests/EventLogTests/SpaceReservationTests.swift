import Foundation
import Testing

@testable import EventLog

#if canImport(Glibc)
import Glibc
#endif

/// Segments reserve their disk space ahead of their records (so a sync allocates no blocks), without it
/// ever showing in their size or bytes, and give back what they did not use when sealed or closed.
@Suite struct SpaceReservationTests {
    private struct FileSpace {
        var size: UInt64
        var allocated: UInt64
    }

    private func space(_ path: String) throws -> FileSpace {
        var status = stat()
        guard stat(path, &status) == 0 else { throw FileIO.failure("stat", path) }
        return FileSpace(size: UInt64(status.st_size), allocated: UInt64(status.st_blocks) * 512)
    }

    private func segmentPaths(_ directory: URL, partition: String = "main") throws -> [String] {
        let partitionPath = directory.appendingPathComponent(partition).path
        return try FileManager.default.contentsOfDirectory(atPath: partitionPath)
            .filter { $0.hasSuffix(".segment") }.sorted().map { partitionPath + "/" + $0 }
    }

    /// Whether this directory's file system reserves space at all (tmpfs and ext4 do; some do not).
    private func reservationWorks(in directory: URL) throws -> Bool {
        let path = directory.appendingPathComponent("probe").path
        let descriptor = try FileIO.open(path, flags: O_WRONLY | O_CREAT | O_TRUNC)
        defer {
            FileIO.close(descriptor)
            unlink(path)
        }
        return FileIO.reserve(descriptor, from: 0, length: 1 << 20)
    }

    @Test("an open segment's space is reserved ahead of its records, and its size is only what was written")
    func reservedWhileOpen() throws {
        try withTemporaryDirectory { directory in
            var configuration = PartitionWriterConfiguration(durability: .always)
            configuration.maximumSegmentBytes = 8 << 20
            let writer = try PartitionWriter(directory: directory, partition: "main", configuration: configuration)
            for number in 1...20 { try writer.append(payload: samplePayload(number), timestampNanoseconds: sampleTimestamp(number)) }
            let segments = try segmentPaths(directory)
            #expect(segments.count == 1)
            let open = try space(segments[0])
            if try reservationWorks(in: directory) {
                #expect(open.allocated >= PartitionWriter.reservationBytes, "allocated \(open.allocated) of size \(open.size)")
            }
            #expect(open.size < 8_192, "the size counts written bytes only: \(open.size)")
            try writer.close()
            let closed = try space(segments[0])
            #expect(closed.size == open.size)
            // Released on close: at most the written bytes rounded up to the file system's blocks.
            #expect(closed.allocated < 64 << 10, "allocated \(closed.allocated) after close, size \(closed.size)")
            #expect(try readAll(directory) == expectedRecords(1...20))
        }
    }

    @Test("sealed segments keep no reserved space, and reserving changes no byte of the log")
    func sealedAndIdentical() throws {
        try withTemporaryDirectory { directory in
            let reserving = directory.appendingPathComponent("reserving")
            let plain = directory.appendingPathComponent("plain")
            var configuration = smallSegments(maximumSegmentBytes: 4_000, durability: .always)
            configuration.reservesSpace = true
            try writeSampleRecords(reserving, 1...120, configuration: configuration)
            configuration.reservesSpace = false
            try writeSampleRecords(plain, 1...120, configuration: configuration)
            let segments = try segmentPaths(reserving)
            #expect(segments.count > 3)
            for path in segments {
                #expect(try space(path).allocated < 64 << 10, "\(path) keeps reserved space")
            }
            let names = try FileManager.default.contentsOfDirectory(atPath: reserving.appendingPathComponent("main").path).sorted()
            #expect(names == (try FileManager.default.contentsOfDirectory(atPath: plain.appendingPathComponent("main").path).sorted()))
            for name in names {
                let left = try Data(contentsOf: reserving.appendingPathComponent("main").appendingPathComponent(name))
                let right = try Data(contentsOf: plain.appendingPathComponent("main").appendingPathComponent(name))
                #expect(left == right, "\(name) differs")
            }
        }
    }
}
