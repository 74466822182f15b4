import Foundation
import Testing

@testable import EventLog

/// Runs `body` with a fresh, uniquely named directory under the temporary directory, removed afterwards.
func withTemporaryDirectory<Result>(_ body: (URL) throws -> Result) throws -> Result {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("eventlog-tests-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: url) }
    return try body(url)
}

/// Deterministic payload of varied length for record `number`.
func samplePayload(_ number: Int, maximumBytes: Int = 200) -> [UInt8] {
    let length = (number * 37) % maximumBytes
    return (0..<length).map { UInt8(truncatingIfNeeded: number &* 7 &+ $0) }
}

func sampleTimestamp(_ number: Int) -> Int64 { Int64(number) * 1_000_000 + 17 }

func expectedRecords(_ range: ClosedRange<Int>) -> [LogRecord] {
    range.map { LogRecord(sequence: UInt64($0), timestampNanoseconds: sampleTimestamp($0), payload: samplePayload($0)) }
}

/// Writes records `range` (their sequences must continue the partition) and closes the writer.
func writeSampleRecords(
    _ directory: URL, partition: String = "main", _ range: ClosedRange<Int>,
    configuration: PartitionWriterConfiguration = smallSegments()
) throws {
    let writer = try PartitionWriter(directory: directory, partition: partition, configuration: configuration)
    for number in range {
        let sequence = try writer.append(payload: samplePayload(number), timestampNanoseconds: sampleTimestamp(number))
        #expect(sequence == UInt64(number))
    }
    try writer.close()
}

func smallSegments(
    maximumSegmentBytes: UInt64 = 1_000, indexIntervalRecords: Int = 3, durability: DurabilityPolicy = .operatingSystem
) -> PartitionWriterConfiguration {
    PartitionWriterConfiguration(
        durability: durability, maximumSegmentBytes: maximumSegmentBytes, maximumPayloadBytes: 4_096,
        indexIntervalRecords: indexIntervalRecords)
}

func readAll(_ directory: URL, partition: String = "main") throws -> [LogRecord] {
    try PartitionReader(directory: directory, partition: partition).records()
}

/// Every file under `directory` (relative path -> bytes), to prove an operation changed nothing.
func snapshot(_ directory: URL) throws -> [String: Data] {
    var files: [String: Data] = [:]
    let enumerator = FileManager.default.enumerator(at: directory, includingPropertiesForKeys: [.isRegularFileKey])
    while let url = enumerator?.nextObject() as? URL {
        if (try url.resourceValues(forKeys: [.isRegularFileKey])).isRegularFile == true {
            files[String(url.path.dropFirst(directory.path.count))] = try Data(contentsOf: url)
        }
    }
    return files
}

func segmentURLs(_ directory: URL, partition: String = "main") throws -> [URL] {
    try FileManager.default.contentsOfDirectory(atPath: directory.appendingPathComponent(partition).path)
        .filter { $0.hasSuffix(".segment") }.sorted()
        .map { directory.appendingPathComponent(partition).appendingPathComponent($0) }
}

func indexURL(forSegment segment: URL) -> URL {
    segment.deletingPathExtension().appendingPathExtension("index")
}
