#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation

/// What `LogUpgrade.upgrade` did.
public struct UpgradeReport: Sendable, Equatable {
    /// Segments whose header now names the current format.
    public var upgradedSegments: [String] = []
    /// Segments already of the current format, left alone.
    public var currentSegments = 0
    /// The format the upgraded segments were written in.
    public var previousVersions: Set<UInt16> = []
}

public enum LogUpgrade {
    /// The log format this build writes.
    public static var currentVersion: UInt16 { SegmentFormat.version }

    /// Rewrites every older segment of the log in `directory` as the current format, so that a writer can
    /// append to it. A format 2 segment's records are format 3 records already (format 3 only adds input
    /// records, which an upgraded segment does not have): only its header changes, each file replaced
    /// atomically (temporary file, fsync, rename, directory fsync). The segments must be intact first
    /// (`verify`; a stale index does not matter); a damaged or torn log is refused, nothing changed.
    public static func upgrade(directory: URL) throws(LogError) -> UpgradeReport {
        let verification = try LogMaintenance.verify(directory: directory)
        // An index is derived data, rebuilt by readers and writers: only damage to the segments stops an upgrade.
        let damage = verification.problems.filter { $0.kind != .staleIndex }
        guard damage.isEmpty else {
            let first = damage[0]
            throw LogError(
                .repairRefused, "the log is not intact, so it was not upgraded (nothing was changed). First: \(first)",
                path: first.path, byteOffset: first.byteOffset,
                remedy: "Run `sksim log repair DIR` for a torn tail, then upgrade", problems: damage)
        }
        var report = UpgradeReport()
        for partition in try LogDirectory.partitions(in: directory) {
            let partitionPath = LogDirectory.partitionPath(directory, partition)
            for entry in try LogDirectory.listSegments(partitionPath: partitionPath).segments {
                let file = try SegmentFile(path: entry.segmentPath)
                guard case .valid(let header) = try file.readHeader(partition: partition, baseSequence: entry.baseSequence) else {
                    throw LogError(.corruption, "the segment header cannot be read", path: entry.segmentPath)
                }
                guard header.version < SegmentFormat.version else {
                    report.currentSegments += 1
                    continue
                }
                let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: max(1, Int(file.size)), alignment: 8)
                defer { scratch.deallocate() }
                let count = try FileIO.read(
                    file.descriptor, into: UnsafeMutableRawBufferPointer(rebasing: scratch[0..<Int(file.size)]), at: 0,
                    path: entry.segmentPath)
                var bytes = Array(scratch[0..<Int(file.size)])
                guard count == Int(file.size) else {
                    throw LogError(.inputOutput, "the segment changed while it was read", path: entry.segmentPath,
                                   remedy: "Stop whatever writes the log, then upgrade")
                }
                let upgraded = SegmentFormat.encodeHeader(
                    partition: partition, baseSequence: header.baseSequence, maximumPayloadBytes: header.maximumPayloadBytes)
                precondition(upgraded.count == header.byteCount, "a header's length depends only on the partition name")
                bytes.replaceSubrange(0..<header.byteCount, with: upgraded)
                try FileIO.replaceFile(entry.segmentPath, with: bytes, directory: partitionPath, durable: true)
                report.upgradedSegments.append(entry.segmentPath)
                report.previousVersions.insert(header.version)
            }
        }
        return report
    }
}
