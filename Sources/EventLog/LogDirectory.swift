import Foundation

/// Paths and listings of a log directory: `<log>/<partition>/<20-digit base>.segment|.index`.
public enum LogDirectory {
    /// Names of the partitions (valid-named subdirectories) of a log directory, sorted.
    public static func partitions(in directory: URL) throws(LogError) -> [String] {
        let path = directory.path
        return try FileIO.directoryEntries(path).filter { name in
            (try? SegmentFormat.validatePartitionName(name)) != nil && isDirectory(path + "/" + name)
        }
    }

    static func isDirectory(_ path: String) -> Bool {
        var isDirectory: ObjCBool = false
        return FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) && isDirectory.boolValue
    }

    package static func partitionPath(_ directory: URL, _ partition: String) -> String {
        directory.path + "/" + partition
    }

    package struct SegmentEntry: Equatable {
        var baseSequence: UInt64
        package var segmentPath: String
        var indexPath: String
    }

    package struct Listing {
        package var segments: [SegmentEntry]
        /// Files ending in ".segment" whose names are not 20 digits.
        var badNames: [String]
    }

    /// Segments of a partition sorted by base sequence. Leftover "*.tmp" files (interrupted index or segment
    /// creation) are ignored; unknown other files are ignored too.
    package static func listSegments(partitionPath: String) throws(LogError) -> Listing {
        var listing = Listing(segments: [], badNames: [])
        for name in try FileIO.directoryEntries(partitionPath) where name.hasSuffix(SegmentFormat.segmentSuffix) {
            if let base = SegmentFormat.baseSequence(fromSegmentFileName: name) {
                listing.segments.append(
                    SegmentEntry(
                        baseSequence: base, segmentPath: partitionPath + "/" + name,
                        indexPath: partitionPath + "/" + SegmentFormat.indexFileName(baseSequence: base)))
            } else {
                listing.badNames.append(partitionPath + "/" + name)
            }
        }
        listing.segments.sort { $0.baseSequence < $1.baseSequence }
        return listing
    }

    /// The index interval K to use when rebuilding a missing or unreadable index: the one recorded in the
    /// newest readable index of the partition, else the writer default.
    static func indexIntervalHint(_ segments: [SegmentEntry]) -> UInt32 {
        for segment in segments.reversed() {
            if let interval = LogMaintenance.existingInterval(indexPath: segment.indexPath) { return interval }
        }
        return UInt32(PartitionWriterConfiguration().indexIntervalRecords)
    }
}
