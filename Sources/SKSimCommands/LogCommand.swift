import ArgumentParser
import EventLog
import Foundation
import StoreKitLive
import StoreKitModel
import StoreKitRuntime
import StoreKitSimulation

struct LogCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "log",
        abstract: "Inspect, verify and repair an event log (a run's `log` directory).",
        subcommands: [Verify.self, Repair.self, Upgrade.self, Cat.self, Project.self, Stats.self, Receipt.self, Signed.self])

    /// Accepts a run directory too: its `log` folder is the log. Refuses a directory that holds
    /// no log (no partition folder with segment files), so nothing reports an empty folder "intact".
    static func logDirectory(_ path: String) throws -> URL {
        let url = URL(fileURLWithPath: path, isDirectory: true)
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory) else {
            throw UserFacingError("\(path) does not exist; give a run directory (e.g. out/simulate-1) or its log folder", code: .notFound)
        }
        guard isDirectory.boolValue else {
            throw UserFacingError("\(path) is a file; give a run directory (e.g. out/simulate-1) or its log folder", code: .notFound)
        }
        let nested = url.appendingPathComponent("log", isDirectory: true)
        let directory = FileManager.default.fileExists(atPath: nested.path, isDirectory: &isDirectory) && isDirectory.boolValue ? nested : url
        guard !(try partitions(directory)).isEmpty else {
            throw UserFacingError("\(path) holds no event log (no partition folder with .segment files); give a run directory (e.g. out/simulate-1) or its log folder", code: .notFound)
        }
        return directory
    }

    /// A log error reaches the user as one `error: …` line, not ArgumentParser's "Error:" with status 1
    /// whatever happened: status 1 when the log is damaged (as `verify` reports it), 2 when it cannot be
    /// read as a log of this build (another format version, a failing read).
    static func reportingLogErrors(_ body: () async throws -> Void) async throws {
        do {
            try await body()
        } catch let error as LogError {
            throw UserFacingError("\(error)", code: .invalidInput, exitStatus: error.code == .corruption || error.code == .repairRefused ? 1 : 2)
        } catch let error as LogContentError {
            // A record that holds no event is damage, as `verify` and `cat` report it (status 1).
            throw UserFacingError("\(error)", code: .invalidInput, exitStatus: 1)
        }
    }

    /// Why a record's payload is no event this build reads, or nil: `verify` and `repair` judge alike.
    static func payloadProblem(_ payload: UnsafeRawBufferPointer) -> String? {
        do throws(DecodingFailure) {
            _ = try EventCodec.decodeEvent(payload)
            return nil
        } catch {
            return "the payload is not an event of format \(EventCodec.formatVersion): \(error)"
        }
    }

    /// The partitions that hold at least one segment file.
    static func partitions(_ directory: URL) throws -> [String] {
        let names: [String]
        do {
            names = try LogDirectory.partitions(in: directory)
        } catch {
            throw UserFacingError("cannot list \(directory.path): \(error)", code: .invalidInput)
        }
        return names.filter { name in
            let entries = (try? FileManager.default.contentsOfDirectory(atPath: directory.appendingPathComponent(name).path)) ?? []
            return entries.contains { $0.hasSuffix(".segment") }
        }
    }

    /// The partition named by `--partition`, which must exist.
    static func partition(_ name: String, in directory: URL) throws -> String {
        let names = try partitions(directory)
        guard names.contains(name) else {
            throw UserFacingError("the log \(directory.path) has no partition '\(name)'; it has \(names.joined(separator: ", "))", code: .unknownName)
        }
        return name
    }

    struct Verify: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Exit 0 only when the log is intact; otherwise name each damaged file and byte offset.")
        @Argument(help: "A run directory or its log folder.") var directory: String

        func run() async throws { try await LogCommand.reportingLogErrors(perform) }

        func perform() async throws {
            let report = try LogMaintenance.verify(directory: try LogCommand.logDirectory(directory), validatePayload: LogCommand.payloadProblem)
            printLine(report.description)
            if !report.isIntact { throw ExitCode(1) }
        }
    }

    struct Repair: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Truncate a torn tail back to the last whole record; refuse to drop records in the middle.")
        @Argument(help: "A run directory or its log folder.") var directory: String

        func run() async throws { try await LogCommand.reportingLogErrors(perform) }

        func perform() async throws {
            // Judged as `verify` judges: a payload that is no event refuses the repair as it fails the verification.
            let actions = try LogMaintenance.repair(directory: try LogCommand.logDirectory(directory), validatePayload: LogCommand.payloadProblem)
            if actions.isEmpty { printLine("nothing to repair: the log is intact") }
            for action in actions { printLine(action.description) }
        }
    }

    struct Upgrade: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Rewrite a log of an older format (2) as the current one (3), so that it can be appended to; its records are kept.")
        @Argument(help: "A run directory or its log folder.") var directory: String

        func run() async throws { try await LogCommand.reportingLogErrors(perform) }

        func perform() async throws {
            let report = try LogUpgrade.upgrade(directory: try LogCommand.logDirectory(directory))
            let current = LogUpgrade.currentVersion
            if report.upgradedSegments.isEmpty {
                printLine("nothing to upgrade: the log is format \(current) already (\(report.currentSegments) segment(s))")
                return
            }
            let previous = report.previousVersions.sorted().map(String.init).joined(separator: ", ")
            printLine("upgraded \(report.upgradedSegments.count) segment(s) from log format \(previous) to \(current); "
                + "their records are unchanged and hold no input records (written before format \(current)), "
                + "so a replay rebuilds their commands from their events")
        }
    }

    struct Cat: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print events (JSON Lines with --json, whose schema docs/cli.md gives), filtered by sequence, device, transaction or type.",
            discussion: "Every whole record before any damage is printed; the damage is then reported and the exit status is 1.")
        @Argument(help: "A run directory or its log folder.") var directory: String
        @Option(parsing: .unconditional, help: "First sequence number to print.") var from: UInt64 = 1
        @Option(parsing: .unconditional, help: "Last sequence number to print.") var to: UInt64?
        @Option(help: "Only events of this device (repeatable).") var device: [String] = []
        @Option(help: "Only events of this transaction, as DEVICE#NUMBER, e.g. device-0001#3 (repeatable).") var transaction: [String] = []
        @Option(help: "Only events of these types, comma-separated, e.g. transactionPurchased,transactionFinished.") var type: String?
        @Option(help: "Partition (default: every partition in turn).") var partition: String?
        @Flag(help: "Keep printing new events as they are appended, until interrupted (one partition).") var follow = false
        @Flag(help: "One JSON object per line.") var json = false

        func validate() throws {
            if let to, to < from { throw ValidationError("--to \(to) is before --from \(from)") }
            // A key that matches nothing printed nothing and exited 0, as if the transaction had no events.
            for key in transaction {
                let parts = key.split(separator: "#", omittingEmptySubsequences: false)
                guard parts.count == 2, !parts[0].isEmpty, UInt64(parts[1]) != nil else {
                    throw ValidationError("--transaction '\(key)' is not DEVICE#NUMBER; write e.g. device-0001#3")
                }
            }
            if let type {
                let known = Set(Event.typeNames)
                for name in type.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) where !known.contains(name) {
                    throw ValidationError("unknown event type '\(name)'; types: \(Event.typeNames.joined(separator: ", "))")
                }
            }
        }

        func run() async throws { try await LogCommand.reportingLogErrors(perform) }

        func perform() async throws {
            let url = try LogCommand.logDirectory(directory)
            let names = try partition.map { [try LogCommand.partition($0, in: url)] } ?? LogCommand.partitions(url)
            if follow && names.count > 1 {
                throw UserFacingError("--follow reads one partition; choose one with --partition (\(names.joined(separator: ", ")))")
            }
            if follow { Shutdown.installSignalHandlers() }
            let types = type.map { Set($0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }) }
            let devices = Set(device)
            let transactions = Set(transaction)
            var output = OutputBuffer()
            var damaged = false
            for name in names {
                var next = from
                repeat {
                    let reader = try PartitionReader(directory: url, partition: name)
                    var summary: ReadSummary?
                    do {
                        summary = try reader.forEachRecord(from: next, through: to ?? .max) { view in
                            next = view.sequence + 1
                            let decoded = try EventCodec.decodeEvent(view.payload)
                            let event = decoded.event
                            if let types, !types.contains(event.name) { return }
                            if !devices.isEmpty, !(event.device.map { devices.contains($0) } ?? false) { return }
                            if !transactions.isEmpty, !(event.transactionKey.map { transactions.contains($0.description) } ?? false) { return }
                            let recorded = RecordedEvent(sequence: view.sequence, timestamp: view.timestampNanoseconds,
                                                         commandID: decoded.commandID, event: event)
                            // With several partitions, each text line names its partition (sequences restart in each).
                            output.append(json ? JSONShapes.event(recorded).serialized() : (names.count > 1 ? "\(name) " : "") + Self.text(recorded))
                        }
                    } catch let error as LogError where error.code == .unsupportedFormatVersion {
                        // Not damage: a log this build does not read (status 2, like the other log commands).
                        output.flush()
                        throw UserFacingError("\(url.path) partition \(name): \(error)", code: .invalidInput)
                    } catch {
                        // Whatever was read before the damage is printed first.
                        output.flush()
                        printError("error: \(url.path) partition \(name): \(error); records before it were printed; see `sksim log verify`")
                        damaged = true
                        break
                    }
                    output.flush()
                    if let torn = summary?.tornTail, !follow { printError("warning: \(torn)") }
                    if follow {
                        if let to, next > to { break }
                        usleep(100_000)
                    }
                } while follow && !Shutdown.isRequested
            }
            if damaged { throw ExitCode(1) }
        }

        static func text(_ recorded: RecordedEvent) -> String {
            let command = recorded.commandID.map { " (\($0))" } ?? ""
            let event: String
            if case .runStarted(let header) = recorded.event {
                // The header holds the whole scenario and catalog (kilobytes of JSON on one line); the
                // text form names them, `--json` has the scenario in full.
                event = "runStarted(seed: \(header.seed), sksim \(header.sksimVersion), \(header.runtime) run, "
                    + "catalog: \(header.catalogSource) (\(header.catalogDigest)), scenario: \(header.scenario.utf8.count) bytes of JSON)"
            } else {
                event = EventText.of(recorded.event)
            }
            return "#\(recorded.sequence) \(LogCommand.time(recorded.timestamp)) \(event)\(command)"
        }
    }

    /// Lines written in blocks of 64 KiB: fast for big logs, and flushed before any error is printed.
    struct OutputBuffer {
        private var text = ""

        mutating func append(_ line: String) {
            text += line
            text += "\n"
            if text.utf8.count > 1 << 16 { flush() }
        }

        mutating func flush() {
            guard !text.isEmpty else { return }
            writeStandardOutput(text)
            text = ""
        }
    }

    /// Every run's timestamps count from its start (the wall-clock start is in the first record).
    static func time(_ nanoseconds: Int64) -> String {
        String(format: "%10.3fs", Double(nanoseconds) / 1e9)
    }

    struct Project: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Fold the log into state as of a sequence number: devices, pending transactions, downloads.")
        @Argument(help: "A run directory or its log folder.") var directory: String
        @Option(parsing: .unconditional, help: "Project up to and including this sequence number (default: the end).") var at: UInt64?
        @Option(help: "Partition (default: every partition of the log, each folded on its own).") var partition: String?
        @Flag(help: "Print JSON.") var json = false

        func run() async throws { try await LogCommand.reportingLogErrors(perform) }

        func perform() async throws {
            let url = try LogCommand.logDirectory(directory)
            let names = try partition.map { [try LogCommand.partition($0, in: url)] } ?? LogCommand.partitions(url)
            if names.count > 1, let at {
                throw UserFacingError("--at \(at) is a sequence number of one partition, and this log has \(names.count) (\(names.joined(separator: ", "))); choose one with --partition")
            }
            let states = try names.map { name in (name, try LogProjection.build(directory: url, partition: name, through: at ?? .max)) }
            for (name, state) in states {
                if let torn = state.tornTail {
                    printError("warning: partition \(name) ends in a torn record (\(torn)); projected up to the last whole record")
                }
            }
            let combined = PartitionedLogProjection(partitions: states.map { (name: $0.0, projection: $0.1) })
            if json {
                let devices: [JSONValue] = states.flatMap { _, state in
                    state.projection.deviceNames.compactMap { state.projection.device($0) }.map(JSONShapes.device)
                }
                let seed: JSONValue = if let value = states[0].1.projection.header?.seed { .unsigned(value) } else { .null }
                var fields: [(String, JSONValue)] = [
                    // One partition: its last sequence; several: each has its own, under "partitions".
                    ("sequence", states.count == 1 ? .int(states[0].1.projection.lastSequence) : .null),
                    ("seed", seed),
                    ("events", .int(combined.totals.events)),
                    ("pending", .int(combined.pendingCount)),
                    ("devices", .array(devices)),
                    ("violations", JSONShapes.violations(combined.violations)),
                ]
                if states.count > 1 {
                    fields.append(("partitions", .array(states.map { name, state in
                        .object([("name", .string(name)), ("sequence", .int(state.projection.lastSequence)),
                                 ("events", .int(state.projection.totals.events)), ("pending", .int(state.projection.pendingCount))])
                    })))
                }
                printLine(JSONValue.object(fields).serialized())
                return
            }
            for (partitionName, state) in states {
                let projection = state.projection
                printLine((states.count > 1 ? "partition \(partitionName), " : "")
                          + "as of sequence \(projection.lastSequence): \(projection.devices.count) devices, \(projection.pendingCount) pending transactions")
                for name in projection.deviceNames {
                    guard let device = projection.device(name) else { continue }
                    printLine("\(name) (\(device.account)) \(device.isRunning ? "running" : "not running"), observers: \(device.observers.joined(separator: ", "))")
                    for transaction in device.pendingTransactions {
                        let downloads = transaction.downloads.map { "\($0.contentIdentifier) \($0.downloadState) \(Int($0.progress * 100))%" }
                        printLine("  \(transaction.key) \(transaction.payment.productIdentifier) ×\(transaction.payment.quantity) \(transaction.transactionState)"
                                  + (downloads.isEmpty ? "" : " [" + downloads.joined(separator: "; ") + "]"))
                    }
                }
            }
            if !combined.violations.isEmpty {
                printLine("violations:")
                for violation in combined.violations { printLine("  \(violation)") }
            }
        }
    }

    struct Stats: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Records, bytes, segments and time span per partition.")
        @Argument(help: "A run directory or its log folder.") var directory: String

        func run() async throws { try await LogCommand.reportingLogErrors(perform) }

        func perform() async throws {
            for partition in try LogMaintenance.statistics(directory: try LogCommand.logDirectory(directory)) {
                let span = zip(partition.firstTimestampNanoseconds.map { [$0] } ?? [], partition.lastTimestampNanoseconds.map { [$0] } ?? [])
                    .map { String(format: "%.3f s", Double($1 - $0) / 1e9) }.first ?? "empty"
                printLine("\(partition.partition): \(partition.recordCount) records (sequences \(partition.firstSequence ?? 0)…\(partition.lastSequence ?? 0)), \(partition.byteCount) bytes in \(partition.segmentCount) segments, spanning \(span)"
                          + (partition.isIntact ? "" : "; damaged: \(partition.problems.count == 1 ? "1 problem" : "\(partition.problems.count) problems") (`sksim log verify` names each)"))
            }
        }
    }
}
