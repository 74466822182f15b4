import ArgumentParser
import EventLog
import Foundation
import StoreKitModel
import StoreKitRuntime
import StoreKitSimulation

struct LogCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "log",
        abstract: "Inspect, verify and repair an event log (a run's `log` directory).",
        subcommands: [Verify.self, Repair.self, Cat.self, Project.self, Stats.self])

    /// Accepts a run directory too: its `log` folder is the log.
    static func logDirectory(_ path: String) throws -> URL {
        let url = URL(fileURLWithPath: path, isDirectory: true)
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw UserFacingError("\(path) is not a directory; give the log directory of a run (e.g. out/simulate-1/log)")
        }
        let nested = url.appendingPathComponent("log", isDirectory: true)
        if FileManager.default.fileExists(atPath: nested.path, isDirectory: &isDirectory), isDirectory.boolValue { return nested }
        return url
    }

    static func partitions(_ directory: URL) throws -> [String] {
        let partitions = try LogDirectory.partitions(in: directory)
        guard !partitions.isEmpty else { throw UserFacingError("\(directory.path) holds no log partitions") }
        return partitions
    }

    struct Verify: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Exit 0 only when the log is intact; otherwise name each damaged file and byte offset.")
        @Argument(help: "The log directory.") var directory: String

        func run() async throws {
            // A record whose checksum is right but whose payload is no event this build reads is damage too.
            let report = try LogMaintenance.verify(directory: try LogCommand.logDirectory(directory)) { payload in
                do throws(DecodingFailure) {
                    _ = try EventCodec.decodeEvent(payload)
                    return nil
                } catch {
                    return "the payload is not an event of format \(EventCodec.formatVersion): \(error)"
                }
            }
            printLine(report.description)
            if !report.isIntact { throw ExitCode(1) }
        }
    }

    struct Repair: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Truncate a torn tail back to the last whole record; refuse to drop records in the middle.")
        @Argument(help: "The log directory.") var directory: String

        func run() async throws {
            let actions = try LogMaintenance.repair(directory: try LogCommand.logDirectory(directory))
            if actions.isEmpty { printLine("nothing to repair: the log is intact") }
            for action in actions { printLine(action.description) }
        }
    }

    struct Cat: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print events from a sequence number on (JSON Lines with --json).")
        @Argument(help: "The log directory.") var directory: String
        @Option(help: "First sequence number to print.") var from: UInt64 = 1
        @Option(help: "Partition (default: every partition in turn).") var partition: String?
        @Flag(help: "One JSON object per line.") var json = false

        func run() async throws {
            let url = try LogCommand.logDirectory(directory)
            let names = try partition.map { [$0] } ?? LogCommand.partitions(url)
            for name in names {
                let reader = try PartitionReader(directory: url, partition: name)
                var output = ""
                let summary = try reader.forEachRecord(from: from) { view in
                    let decoded = try EventCodec.decodeEvent(view.payload)
                    let recorded = RecordedEvent(sequence: view.sequence, timestamp: view.timestampNanoseconds,
                                                 commandID: decoded.commandID, event: decoded.event)
                    output += json ? JSONShapes.event(recorded).serialized() : Self.text(recorded)
                    output += "\n"
                    if output.utf8.count > 1 << 16 {
                        FileHandle.standardOutput.write(Data(output.utf8))
                        output = ""
                    }
                }
                FileHandle.standardOutput.write(Data(output.utf8))
                if let torn = summary.tornTail { printError("warning: \(torn)") }
            }
        }

        static func text(_ recorded: RecordedEvent) -> String {
            let command = recorded.commandID.map { " (\($0))" } ?? ""
            return "#\(recorded.sequence) \(LogCommand.time(recorded.timestamp)) \(recorded.event)\(command)"
        }
    }

    /// Every run's timestamps count from its start (the wall-clock start is in the first record).
    static func time(_ nanoseconds: Int64) -> String {
        String(format: "%10.3fs", Double(nanoseconds) / 1e9)
    }

    struct Project: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Fold the log into state as of a sequence number: devices, pending transactions, downloads.")
        @Argument(help: "The log directory.") var directory: String
        @Option(help: "Project up to and including this sequence number (default: the end).") var at: UInt64?
        @Option(help: "Partition.") var partition = LogProjection.partition
        @Flag(help: "Print JSON.") var json = false

        func run() async throws {
            let state = try LogProjection.build(directory: try LogCommand.logDirectory(directory), partition: partition,
                                                through: at ?? .max)
            let projection = state.projection
            if json {
                let devices: [JSONValue] = projection.deviceNames.compactMap { projection.device($0) }.map(JSONShapes.device)
                let seed: JSONValue = if let value = projection.header?.seed { .unsigned(value) } else { .null }
                printLine(JSONValue.object([
                    ("sequence", .int(projection.lastSequence)),
                    ("seed", seed),
                    ("events", .int(projection.totals.events)),
                    ("pending", .int(projection.pendingCount)),
                    ("devices", .array(devices)),
                    ("violations", JSONShapes.violations(state.checker.violations)),
                ]).serialized())
                return
            }
            printLine("as of sequence \(projection.lastSequence): \(projection.devices.count) devices, \(projection.pendingCount) pending transactions")
            for name in projection.deviceNames {
                guard let device = projection.device(name) else { continue }
                printLine("\(name) (\(device.account)) \(device.isRunning ? "running" : "not running"), observers: \(device.observers.joined(separator: ", "))")
                for transaction in device.pendingTransactions {
                    let downloads = transaction.downloads.map { "\($0.contentIdentifier) \($0.downloadState) \(Int($0.progress * 100))%" }
                    printLine("  \(transaction.key) \(transaction.payment.productIdentifier) ×\(transaction.payment.quantity) \(transaction.transactionState)"
                              + (downloads.isEmpty ? "" : " [" + downloads.joined(separator: "; ") + "]"))
                }
            }
            if !state.checker.violations.isEmpty {
                printLine("violations:")
                for violation in state.checker.violations { printLine("  \(violation)") }
            }
        }
    }

    struct Stats: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Records, bytes, segments and time span per partition.")
        @Argument(help: "The log directory.") var directory: String

        func run() async throws {
            for partition in try LogMaintenance.statistics(directory: try LogCommand.logDirectory(directory)) {
                let span = zip(partition.firstTimestampNanoseconds.map { [$0] } ?? [], partition.lastTimestampNanoseconds.map { [$0] } ?? [])
                    .map { String(format: "%.3f s", Double($1 - $0) / 1e9) }.first ?? "empty"
                printLine("\(partition.partition): \(partition.recordCount) records (sequences \(partition.firstSequence ?? 0)…\(partition.lastSequence ?? 0)), \(partition.byteCount) bytes in \(partition.segmentCount) segments, spanning \(span)"
                          + (partition.isIntact ? "" : "; \(partition.problems.count) problems (run `sksim log verify`)"))
            }
        }
    }
}
