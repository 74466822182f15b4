import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// One change made by `repair`.
public struct RepairAction: Sendable, Equatable, CustomStringConvertible {
    public enum Kind: String, Sendable, Equatable {
        case truncatedTornTail
        case removedTornSegment
        /// Wrote the missing seal of a segment whose roll a crash interrupted.
        case completedSeal
        case rebuiltIndex
    }

    public var kind: Kind
    public var path: String
    public var byteOffset: UInt64
    public var droppedBytes: UInt64

    public var description: String {
        switch kind {
        case .truncatedTornTail: "truncated \(path) at byte offset \(byteOffset), dropped \(droppedBytes) bytes"
        case .removedTornSegment: "removed \(path) (ended inside its header, \(droppedBytes) bytes, no records)"
        case .completedSeal: "sealed \(path) at byte offset \(byteOffset) (a crash had interrupted its roll), dropped \(droppedBytes) bytes of partial seal"
        case .rebuiltIndex: "rebuilt \(path)"
        }
    }
}

extension LogMaintenance {
    /// Truncates torn tails back to the last whole unit, removes a last segment cut inside its header, completes
    /// the seal of a segment whose roll a crash interrupted, and rebuilds stale indexes. Refuses with `.repairRefused` (changing nothing) when any other damage exists:
    /// it never drops records from the middle of a partition.
    ///
    /// - Parameter validatePayload: as for `verify`: a record whose checksum is right but whose payload
    ///   it refuses is damage, so repair refuses as `verify` fails (the two never disagree).
    public static func repair(directory: URL, validatePayload: ((UnsafeRawBufferPointer) -> String?)? = nil) throws(LogError) -> [RepairAction] {
        var plans: [(partition: String, partitionPath: String, problems: [LogProblem], findings: [SegmentFinding])] = []
        var refused: [LogProblem] = []
        for partition in try logPartitions(in: directory) {
            let (report, findings) = try verifyPartition(directory: directory, partition: partition, validatePayload: validatePayload)
            refused += report.problems.filter { !$0.isRepairable }
            plans.append((partition, LogDirectory.partitionPath(directory, partition), report.problems, findings))
        }
        guard refused.isEmpty else {
            throw LogError(
                .repairRefused,
                "\(refused.count) problem(s) are not a torn tail; repairing would drop whole records, so nothing was changed. "
                    + "First: \(refused[0])",
                path: refused[0].path, byteOffset: refused[0].byteOffset,
                remedy: "Restore the damaged partition from a backup or re-create it from its source", problems: refused)
        }
        var actions: [RepairAction] = []
        for plan in plans {
            for problem in plan.problems {
                switch problem.kind {
                case .tornTail:
                    let descriptor = try FileIO.open(problem.path, flags: O_WRONLY)
                    defer { FileIO.close(descriptor) }
                    let size = try FileIO.size(descriptor, path: problem.path)
                    try FileIO.truncate(descriptor, to: problem.byteOffset, path: problem.path)
                    try FileIO.synchronizeData(descriptor, path: problem.path)
                    actions.append(
                        RepairAction(
                            kind: .truncatedTornTail, path: problem.path, byteOffset: problem.byteOffset,
                            droppedBytes: size - problem.byteOffset))
                case .truncatedHeader:
                    let size = (try? SegmentFile(path: problem.path).size) ?? 0
                    try FileIO.remove(problem.path)
                    let base = SegmentFormat.baseSequence(fromSegmentFileName: (problem.path as NSString).lastPathComponent)
                    if let base {
                        try FileIO.remove(plan.partitionPath + "/" + SegmentFormat.indexFileName(baseSequence: base))
                    }
                    try FileIO.synchronizeDirectory(plan.partitionPath)
                    // Removing a segment that the previous one's seal names would lose the log's end: re-create it empty.
                    if let base, let previous = plan.findings.dropLast().last, let file = try? SegmentFile(path: previous.entry.segmentPath),
                        try file.trailingSeal() == base, case .success(let header) = try file.validHeader(partition: plan.partition, baseSequence: previous.entry.baseSequence)
                    {
                        let bytes = SegmentFormat.encodeHeader(partition: plan.partition, baseSequence: base, maximumPayloadBytes: header.maximumPayloadBytes)
                        try FileIO.replaceFile(problem.path, with: bytes, directory: plan.partitionPath, durable: true)
                    }
                    actions.append(RepairAction(kind: .removedTornSegment, path: problem.path, byteOffset: 0, droppedBytes: size))
                default:
                    break
                }
            }
            for finding in plan.findings {
                guard let seal = finding.missingSeal else { continue }
                let size = (try? SegmentFile(path: finding.entry.segmentPath).size) ?? seal.offset
                try SealedSegmentEnd.completeSeal(path: finding.entry.segmentPath, at: seal.offset, nextBaseSequence: seal.nextBaseSequence)
                actions.append(
                    RepairAction(
                        kind: .completedSeal, path: finding.entry.segmentPath, byteOffset: seal.offset,
                        droppedBytes: size - seal.offset))
            }
            // Indexes derive from whole records only, so after truncation they match the repaired segment.
            for finding in plan.findings {
                guard let index = finding.expectedIndex, FileIO.exists(finding.entry.segmentPath),
                    SparseIndex.fileBytes(path: finding.entry.indexPath) != index.encoded()
                else { continue }
                try index.write(path: finding.entry.indexPath, directory: plan.partitionPath)
                actions.append(RepairAction(kind: .rebuiltIndex, path: finding.entry.indexPath, byteOffset: 0, droppedBytes: 0))
            }
        }
        return actions
    }
}
