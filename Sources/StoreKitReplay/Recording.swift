import EventLog
import Foundation
import StoreKitModel
import StoreKitRuntime

/// A recorded run: the `queue` partition of a log, read only (nothing is ever written to it).
/// A run directory or its `log` folder on disk, or a log in memory (tests, benchmarks).
public struct Recording {
    /// Where it is, for messages.
    public let location: String
    /// The run's first record: everything it was started with.
    public let header: RunHeader
    private let reader: PartitionReader?
    private let storage: LogStorage?
    /// The log partition it is (`queue` for a run of one queue).
    public let partition: String

    /// Opens the recording in `path` (a run directory or its log folder); throws a one-line
    /// error naming the file when it is missing, not a log, of another format, or damaged.
    /// A log of several partitions is refused here: open them with `openPartitions(path:)`.
    public static func open(path: String) throws(ReplayInputError) -> Recording {
        let (directory, partitions) = try locate(path: path)
        guard partitions.count <= 1 else {
            throw ReplayInputError("\(directory.path) holds \(partitions.count) partitions (\(partitions.joined(separator: ", "))), recorded by a topology with several queues; this reads one queue: give a recording of one queue")
        }
        return try open(directory: directory, partition: LogProjection.partition)
    }

    /// Opens every partition of the recording in `path`, in name order: one for a run of one queue,
    /// one per queue for a topology with several (each the log of its own queue engine, its
    /// devices routed by account: `PartitionRouting`).
    public static func openPartitions(path: String) throws(ReplayInputError) -> [Recording] {
        let (directory, partitions) = try locate(path: path)
        if partitions.count <= 1 { return [try open(directory: directory, partition: LogProjection.partition)] }
        var recordings: [Recording] = []
        for partition in partitions { recordings.append(try open(directory: directory, partition: partition)) }
        return recordings
    }

    /// The log folder of `path` and its partitions.
    private static func locate(path: String) throws(ReplayInputError) -> (URL, [String]) {
        let url = URL(fileURLWithPath: path, isDirectory: true)
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory) else {
            throw ReplayInputError("\(path) does not exist; give the directory of a recorded run (from simulate, run, load or replay) or its log folder")
        }
        guard isDirectory.boolValue else {
            throw ReplayInputError("\(path) is a file, not a run; give the directory of a recorded run or its log folder")
        }
        let nested = url.appendingPathComponent("log", isDirectory: true)
        let directory = FileManager.default.fileExists(atPath: nested.path, isDirectory: &isDirectory) && isDirectory.boolValue ? nested : url
        let partitions: [String]
        do {
            partitions = try LogDirectory.partitions(in: directory)
        } catch {
            throw ReplayInputError("\(directory.path) cannot be read as a log: \(error)")
        }
        guard partitions.count > 1 || partitions.contains(LogProjection.partition) else {
            throw ReplayInputError("\(directory.path) holds no sksim log (no '\(LogProjection.partition)' partition with .segment files); give the directory of a recorded run")
        }
        return (directory, partitions)
    }

    private static func open(directory: URL, partition: String) throws(ReplayInputError) -> Recording {
        let reader: PartitionReader
        do {
            reader = try PartitionReader(directory: directory, partition: partition)
        } catch {
            throw ReplayInputError(describe(error, directory))
        }
        let header = try readHeader(location: directory.path) { body in
            _ = try reader.forEachRecord(from: 1, through: 1) { view in try body(view.sequence, view.timestampNanoseconds, view.payload) }
        }
        return Recording(location: directory.path, header: header, reader: reader, storage: nil, partition: partition)
    }

    /// A recording held by a `LogStorage` (a run made in memory).
    public static func storage(_ storage: LogStorage, location: String = "memory") throws(ReplayInputError) -> Recording {
        let header = try readHeader(location: location) { body in
            try storage.forEachRecord(from: 1) { sequence, timestamp, payload in
                guard sequence == 1 else { return }
                try body(sequence, timestamp, payload)
            }
        }
        return Recording(location: location, header: header, reader: nil, storage: storage, partition: LogProjection.partition)
    }

    private static func readHeader(location: String,
                                   _ read: ((UInt64, Int64, UnsafeRawBufferPointer) throws -> Void) throws -> Void) throws(ReplayInputError) -> RunHeader {
        var first: RecordedEvent?
        do {
            try read { sequence, timestamp, payload in
                first = try LogProjection.decode(sequence: sequence, timestamp: timestamp, payload: payload)
            }
        } catch {
            throw ReplayInputError(describe(error, URL(fileURLWithPath: location)))
        }
        guard let first else { throw ReplayInputError("\(location) holds an empty log: nothing was recorded") }
        guard case .runStarted(let header) = first.event else {
            throw ReplayInputError("\(location) is not a recorded run: its first record is \(first.event.name), not runStarted; record runs with sksim simulate or sksim run")
        }
        return header
    }

    /// Reads every record through `through`, in order. A torn tail (a run cut by a crash) ends
    /// the recording where its last whole unit ends and is returned as a warning.
    @discardableResult
    public func forEachRecord(through: UInt64 = .max,
                              _ body: (_ sequence: UInt64, _ timestamp: Int64, _ payload: UnsafeRawBufferPointer) throws -> Void) throws -> String? {
        if let reader {
            let summary: ReadSummary
            do {
                summary = try reader.forEachRecord(from: 1, through: through) { view in
                    try body(view.sequence, view.timestampNanoseconds, view.payload)
                }
            } catch let error as LogError {
                throw ReplayInputError(Self.describe(error, URL(fileURLWithPath: location)))
            } catch let error as LogContentError {
                throw ReplayInputError("\(location): \(error)")
            }
            return summary.tornTail.map { "the recording ends in a torn tail (\($0)); replaying what is whole" }
        }
        if let storage {
            try storage.forEachRecord(from: 1) { sequence, timestamp, payload in
                guard sequence <= through else { return }
                try body(sequence, timestamp, payload)
            }
        }
        return nil
    }

    /// Reads every record, each unit's input record (log format 3) before its events, in order;
    /// returns the torn-tail warning as `forEachRecord` does.
    @discardableResult
    public func forEachRecordIncludingInputs(_ body: (StoredRecord) throws -> Void) throws -> String? {
        if let reader {
            let summary: ReadSummary
            do {
                summary = try reader.forEachRecord(from: 1, includingInputs: true) { view in
                    try body(StoredRecord(sequence: view.sequence, timestamp: view.timestampNanoseconds, payload: view.payload,
                                          isInput: view.isInput, endsUnit: view.endsUnit))
                }
            } catch let error as LogError {
                throw ReplayInputError(Self.describe(error, URL(fileURLWithPath: location)))
            } catch let error as LogContentError {
                throw ReplayInputError("\(location): \(error)")
            }
            return summary.tornTail.map { "the recording ends in a torn tail (\($0)); replaying what is whole" }
        }
        if let storage { try storage.forEachRecordIncludingInputs(body) }
        return nil
    }

    static func describe(_ error: any Error, _ directory: URL) -> String {
        if let logError = error as? LogError {
            if logError.code == .unsupportedFormatVersion { return "\(logError)" }
            if logError.code == .corruption { return "the recording is damaged and cannot be replayed: \(logError)" }
            return "\(logError)"
        }
        if let contentError = error as? LogContentError { return "\(directory.path): \(contentError)" }
        return "\(directory.path): \(error)"
    }
}
