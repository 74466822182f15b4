/// The single error type of the event log.
///
/// Its description always says what is wrong, where (file and byte offset when known) and what to do.
public struct LogError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What went wrong, as an extensible set of constants (compare with `==`, do not switch exhaustively).
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        public let name: String
        private init(_ name: String) { self.name = name }
        public var description: String { name }

        /// A partition name outside [A-Za-z0-9._-]+ (or "." / "..", or longer than 255 bytes).
        public static let invalidPartitionName = Code("invalidPartitionName")
        /// A configuration value out of range.
        public static let invalidConfiguration = Code("invalidConfiguration")
        /// A payload larger than the configured maximum.
        public static let payloadTooLarge = Code("payloadTooLarge")
        /// Damage in stored data that is not a torn tail; the `problem` says which kind.
        public static let corruption = Code("corruption")
        /// `repair` found damage it must not fix (anything but a torn tail or a stale index); nothing was changed.
        public static let repairRefused = Code("repairRefused")
        /// A system call failed.
        public static let inputOutput = Code("inputOutput")
        /// The writer was closed (or failed earlier and refuses further work).
        public static let closed = Code("closed")
        /// The partition or directory does not exist.
        public static let notFound = Code("notFound")
        /// A segment written in another log format version (version 1: by sksim before atomic units).
        public static let unsupportedFormatVersion = Code("unsupportedFormatVersion")
        /// The directory given to `verify`/`repair` holds no partition with segment files.
        public static let notALog = Code("notALog")
        /// An atomic unit that cannot fit in one segment, or that holds no record.
        public static let invalidUnit = Code("invalidUnit")
    }

    public let code: Code
    /// What is wrong, in a sentence.
    public let message: String
    /// The file concerned, when there is one.
    public let path: String?
    /// Byte offset inside `path`, when known.
    public let byteOffset: UInt64?
    /// What the caller or operator should do about it.
    public let remedy: String?
    /// For `.corruption` and `.repairRefused`: the damage found.
    public let problems: [LogProblem]

    public init(
        _ code: Code, _ message: String, path: String? = nil, byteOffset: UInt64? = nil,
        remedy: String? = nil, problems: [LogProblem] = []
    ) {
        self.code = code
        self.message = message
        self.path = path
        self.byteOffset = byteOffset
        self.remedy = remedy
        self.problems = problems
    }

    /// Corruption error built from a problem found while scanning.
    init(corruption problem: LogProblem) {
        self.init(
            .corruption, problem.message, path: problem.path, byteOffset: problem.byteOffset,
            remedy: problem.remedy, problems: [problem])
    }

    public var description: String {
        var text = "\(code): \(message)"
        if let path {
            text += " (file \(path)"
            if let byteOffset { text += ", byte offset \(byteOffset)" }
            text += ")"
        }
        if let remedy { text += ". \(remedy)" }
        return text
    }
}

/// One finding of `verify` (and the detail of a corruption error).
public struct LogProblem: Sendable, Equatable, CustomStringConvertible {
    public enum Kind: String, Sendable, Equatable, CaseIterable {
        /// A partial or unchecked last record at the very end of the last segment: a crash during a write.
        case tornTail
        /// The last segment is shorter than its header (crash while creating it); it holds no records.
        case truncatedHeader
        /// Wrong magic, unknown version, bad header checksum, or header fields that contradict the file name/directory.
        case badHeader
        /// A record whose CRC32C does not match, with more data after it.
        case checksumMismatch
        /// A partial record at the end of a segment that is not the last one (sealed segments are fsynced whole).
        case truncatedRecord
        /// A record length field above the segment's payload limit.
        case invalidLength
        /// A missing or repeated sequence number (inside a segment or between segments).
        case sequenceGap
        /// A file in a partition directory whose name is not a valid segment name.
        case badFileName
        /// A sparse index missing, shorter than, or different from what its segment implies (derived data).
        case staleIndex
        /// The file could not be read.
        case unreadable
        /// A unit whose last record is missing, not at the very end of the last segment (e.g. a seal inside a unit).
        case incompleteUnit
        /// A segment that is not the last one ends without its seal: it was cut, records after it are missing.
        case missingSeal
        /// A malformed seal, or bytes after a seal.
        case badSeal
        /// The last segment is sealed: the segment its seal names (and any after it) is missing.
        case missingSegment
        /// The segment before an empty last segment lacks (part of) its seal: a crash during a roll. Repairable.
        case interruptedRoll
        /// A record whose checksum is valid but whose payload the caller's validator rejects.
        case invalidPayload
        /// An input record where none may be: inside a unit, or in a segment of log format 2.
        case badInput
    }

    public let kind: Kind
    public let path: String
    public let byteOffset: UInt64
    public let message: String

    public init(kind: Kind, path: String, byteOffset: UInt64, message: String) {
        self.kind = kind
        self.path = path
        self.byteOffset = byteOffset
        self.message = message
    }

    /// True when `repair` may fix it without dropping any whole record.
    public var isRepairable: Bool {
        switch kind {
        case .tornTail, .truncatedHeader, .staleIndex, .interruptedRoll: true
        default: false
        }
    }

    /// What to do about it.
    public var remedy: String {
        switch kind {
        case .tornTail, .truncatedHeader, .interruptedRoll:
            "Opening the partition for writing truncates it automatically; or run `sksim log repair DIR`"
        case .staleIndex:
            "The index is derived data; run `sksim log repair DIR` to rebuild it (readers fall back to scanning)"
        case .invalidPayload:
            "The record is intact on disk but its payload does not decode (written by another encoder version?); "
                + "repair cannot fix it: re-record the run with this version of sksim"
        default:
            "The log is damaged before its tail and will not be repaired automatically; run `sksim log verify DIR`, "
                + "then restore the partition from a backup or re-create it from its source"
        }
    }

    public var description: String {
        "\(kind.rawValue) in \(path) at byte offset \(byteOffset): \(message). \(remedy)"
    }
}
