import Foundation
import StoreKitModel
import StoreKitRoles

/// `<run>/run.json`: what `sksim run` started, for people and tools (kill a role, read its log).
public struct RunFile: Codable, Sendable {
    public struct Endpoints: Codable, Sendable {
        public var events: String
        public var requests: String
    }

    public struct Entry: Codable, Sendable {
        public var role: String
        public var name: String
        public var pid: Int32
        public var host: String
        /// For the queue: what it binds.
        public var binds: Endpoints?
        /// For every other role: what it connects to.
        public var connects: Endpoints?
        /// For observers: the devices hosted, 1-based and inclusive ("1-5").
        public var devices: String?
        public var log: String
        /// For a queue of a topology with several: the log partition it writes.
        public var partition: String?
    }

    /// One queue partition and where it binds (only in topologies with several queues).
    public struct Partition: Codable, Sendable {
        public var name: String
        public var events: String
        public var requests: String
    }

    public var topology: String
    public var runDirectory: String
    public var seed: UInt64
    public var supervisor: Int32
    public var processes: [Entry]
    /// Every partition, in routing order; every role but the queues connects to all of them.
    public var partitions: [Partition]?

    func write(to url: URL) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        try encoder.encode(self).write(to: url, options: .atomic)
    }
}

/// `<run>/<partition>-stats.json` (`queue-stats.json` for a topology's only queue), written by
/// each queue when it stops; read by `sksim run` and `sksim load` for their reports.
public struct QueueStatistics: Codable, Sendable {
    public var duplicateCommands: Int
    public var commandsHandled: Int
    public var refusedFrames: Int
    /// This queue's CPU time (user + system) and peak resident memory over its life, and the log's
    /// durability rounds (fsyncs of group commit): what limits a partition (docs/load-testing.md).
    public var cpuSeconds: Double?
    public var peakMemoryBytes: Int64?
    public var durabilityRounds: Int?
    public var records: UInt64?
    /// Commands answered `unavailable` (overload, or ahead of an earlier one of their sender): each is sent again.
    public var commandsAnsweredUnavailable: Int?
    /// Replies dropped because the peer's reply queue was full (`replyHighWaterMark`): the sender retries.
    public var repliesDropped: Int?

    public init(duplicateCommands: Int = 0, commandsHandled: Int = 0, refusedFrames: Int = 0, cpuSeconds: Double? = nil,
                peakMemoryBytes: Int64? = nil, durabilityRounds: Int? = nil, records: UInt64? = nil,
                commandsAnsweredUnavailable: Int? = nil, repliesDropped: Int? = nil) {
        self.duplicateCommands = duplicateCommands
        self.commandsHandled = commandsHandled
        self.refusedFrames = refusedFrames
        self.cpuSeconds = cpuSeconds
        self.peakMemoryBytes = peakMemoryBytes
        self.durabilityRounds = durabilityRounds
        self.records = records
        self.commandsAnsweredUnavailable = commandsAnsweredUnavailable
        self.repliesDropped = repliesDropped
    }

    static func file(in runDirectory: URL, partition: String) -> URL { runDirectory.appendingPathComponent("\(partition)-stats.json") }

    func write(in runDirectory: URL, partition: String) throws {
        try JSONEncoder().encode(self).write(to: Self.file(in: runDirectory, partition: partition), options: .atomic)
    }

    public static func read(in runDirectory: URL, partition: String) -> QueueStatistics? {
        guard let data = FileManager.default.contents(atPath: file(in: runDirectory, partition: partition).path) else { return nil }
        return try? JSONDecoder().decode(QueueStatistics.self, from: data)
    }

    /// Duplicates ignored by every queue of the topology; nil when none wrote its statistics.
    public static func duplicateCommands(in runDirectory: URL, topology: Topology) -> Int? {
        let read = topology.queues.compactMap { Self.read(in: runDirectory, partition: $0.partition!) }
        return read.isEmpty ? nil : read.reduce(0) { $0 + $1.duplicateCommands }
    }
}

/// `<run>/<process>.failure`: the one-line cause a role process gives when it fails for good
/// (a full disk, a port in use, a wrong key), so `sksim run` can print the cause itself
/// instead of pointing at a log file. The supervisor reserves the file's space before it starts
/// the process, so the cause can be written even when the disk is full.
public enum FailureNote {
    static let reservedBytes = 4_096

    static func file(for name: String, in runDirectory: URL) -> URL { runDirectory.appendingPathComponent("\(name).failure") }

    /// Allocates the note's blocks (blank), before the process starts.
    static func reserve(process name: String, runDirectory: URL) {
        try? Data(repeating: UInt8(ascii: " "), count: reservedBytes).write(to: file(for: name, in: runDirectory))
    }

    /// Best effort: the process is failing already; the message is also in its log. Overwrites
    /// the reserved blocks in place (no new space needed), or creates the file.
    public static func write(_ message: String, process name: String, runDirectory: URL) {
        let bytes = Array((message + "\n").utf8.prefix(reservedBytes))
        let path = file(for: name, in: runDirectory).path
        let descriptor = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { return }
        defer { close(descriptor) }
        let written = bytes.withUnsafeBytes { pwrite(descriptor, $0.baseAddress, $0.count, 0) }
        if written == bytes.count { _ = ftruncate(descriptor, off_t(bytes.count)) }
    }

    /// Removes the note if it is still the blank reservation: a process that stopped without
    /// failing leaves no `.failure` file in the run directory.
    static func discardBlank(process name: String, runDirectory: URL) {
        let url = file(for: name, in: runDirectory)
        guard let data = FileManager.default.contents(atPath: url.path),
              data.allSatisfy({ $0 == UInt8(ascii: " ") }) else { return }
        try? FileManager.default.removeItem(at: url)
    }

    /// The cause left by the process's last failure, removed once read (a restarted process starts clean).
    static func take(process name: String, runDirectory: URL) -> String? {
        let url = file(for: name, in: runDirectory)
        guard let data = FileManager.default.contents(atPath: url.path) else { return nil }
        try? FileManager.default.removeItem(at: url)
        let text = String(decoding: data.prefix(reservedBytes), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return text.isEmpty ? nil : text
    }
}

extension EnvironmentFailure {
    /// One line for people: what could not be written (under the content root `root`), why, and what
    /// to do (`then`: how to go on, e.g. "run again").
    public func message(contentRoot root: URL, then: String) -> String {
        "\(role) could not write \(root.appendingPathComponent(path).path): \(describeError(underlying)); free some space or fix the folder's permissions, then \(then)"
    }
}


/// `<run>/<name>.ready`, holding the process's pid: written by the queue once it has bound its
/// endpoints (`sksim run` waits for it, so a queue of another run answering on the same tcp port
/// is never taken for its own), and by a role process once it has caught up on the log (loads
/// and benches wait for the services' before their first lifecycle).
public enum ReadyNote {
    static func file(for name: String, in runDirectory: URL) -> URL { runDirectory.appendingPathComponent("\(name).ready") }

    public static func write(process name: String, runDirectory: URL) throws {
        try Data("\(getpid())\n".utf8).write(to: file(for: name, in: runDirectory), options: .atomic)
    }

    static func clear(process name: String, runDirectory: URL) {
        try? FileManager.default.removeItem(at: file(for: name, in: runDirectory))
    }

    /// The pid the named process wrote, if it is ready.
    public static func pid(process name: String, runDirectory: URL) -> Int32? {
        guard let data = FileManager.default.contents(atPath: file(for: name, in: runDirectory).path) else { return nil }
        return Int32(String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
    }
}
