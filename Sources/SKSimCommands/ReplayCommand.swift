import ArgumentParser
import EventLog
import Foundation
import StoreKitLive
import StoreKitModel
import StoreKitReplay
import StoreKitRoles
import StoreKitRuntime

/// `sksim replay`: re-drives a fresh run with a recording's inputs and compares the new log
/// with it, event by event (docs/replay.md).
struct ReplayCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "replay",
        abstract: "Replay a recorded run's inputs through the queue again, and show where the new log first differs.",
        discussion: """
            Every recorded input (users' actions, the store's and downloader's decisions, the observers' commands) \
            is handed to the queue again, which decides it again. With other --observers (a what-if replay) the \
            observers under test run instead of the recorded ones and their commands are decided anew. Exit status: \
            0 when nothing diverged, 1 when something did, 2 when the input cannot be replayed. See docs/replay.md.
            """)

    @Argument(help: "A recorded run: its directory or its log folder (from simulate, run, load or replay).") var run: String
    @Argument(help: "With --live: the topology to replay over (default: topology/local.yaml).") var liveTopology: String?
    @Option(help: "Write the replayed run's log to DIR/log (default: the log is compared, not kept).") var out: String?
    @Option(parsing: .unconditional, help: "max (as fast as possible; the default), or K: K times the recorded pace, 1 = real time (the default with --live).") var speed: String?
    @Option(help: "Observers per device instead of the recorded ones, comma-separated: \(ObserverBehavior.allCases.map(\.rawValue).joined(separator: ", ")); or the name of one app the executable registers (SKSim.main(apps:)), whose code runs instead.")
    var observers: String?
    @Option(parsing: .unconditional, help: "Compare from this recorded sequence on; the history before it is rebuilt silently.") var from: UInt64?
    @Option(parsing: .unconditional, help: "Compare up to this recorded sequence.") var to: UInt64?
    @Option(help: "Replay only these devices, comma-separated: names (device-0003) or numbers and ranges (3, 1-4).") var devices: String?
    @Option(parsing: .unconditional, help: "Replay N copies of the recording, device and account names rewritten per copy (NAME~k).") var loop = 1
    @Option(help: "How --loop copies run: side-by-side (all at once) or one-after-another.") var loopLayout = ReplayOptions.LoopLayout.sideBySide.rawValue
    @Option(help: "Of a recording of several queue partitions, replay only this one (default: every partition).") var partition: String?
    @Flag(help: "Replay over real processes (a topology) instead of the deterministic runtime.") var live = false
    @Flag(help: "Print one JSON object instead of the human summary.") var json = false

    func run() async throws {
        if liveTopology != nil && !live {
            throw UserFacingError("a second argument (\(liveTopology!)) is only taken with --live; give one recorded run")
        }
        if live {
            // A live replay's observer processes run the built-in behaviours only.
            if let observers, case .app(let name) = try parseObserversOrApp(observers) {
                throw UserFacingError("--live replays with built-in observers only; replay with the app '\(name)' without --live")
            }
            if let recordedApp = (try? Recording.openPartitions(path: run))?.first.flatMap({ try? Scenario(header: $0.header) })?.apps.app, observers == nil {
                throw UserFacingError("\(run) ran the app '\(recordedApp)'; --live replays with built-in observers only: give --observers, or replay without --live")
            }
            do {
                return try replayLive()
            } catch let error as ReplayInputError {
                throw UserFacingError(error)
            }
        }
        let outcome: Outcome
        do {
            outcome = try replay()
        } catch let error as ReplayInputError {
            throw UserFacingError(error)
        }
        let result = outcome.result
        // This process's peak resident memory: a replay runs in a process of its own (`sksim bench replay` reads it).
        var extra: [(String, JSONValue)] = [("peakMemoryMegabytes", .double((Double(peakResidentBytes()) / 1_048_576 * 10).rounded() / 10))]
        if let app = result.app { extra.append(("app", .string(app))) }
        if outcome.partitions.count > 1 { extra.append(("partitions", Self.partitionsJSON(outcome.partitions))) }
        if json {
            printLine(Self.json(result, recording: outcome.recording, logDirectory: outcome.logDirectory, speed: outcome.speed, extra: extra).serialized())
        } else {
            var text = Self.text(result, recording: outcome.recording, logDirectory: outcome.logDirectory)
            if outcome.partitions.count > 1 { text += "\n" + Self.partitionsText(outcome.partitions) }
            printLine(text)
        }
        if result.divergences > 0 { throw ExitCode(1) }
    }

    private struct Outcome {
        var result: ReplayResult
        var partitions: [(name: String, result: ReplayResult)]
        var recording: Recording
        var logDirectory: URL?
        var speed: Double?
    }

    private func replay() throws -> Outcome {
        var recordings = try Recording.openPartitions(path: run)
        if let partition {
            guard let chosen = recordings.first(where: { $0.partition == partition }) else {
                throw UserFacingError("--partition \(partition): \(recordings[0].location) has no partition '\(partition)'; it has \(recordings.map(\.partition).joined(separator: ", "))", code: .unknownName)
            }
            recordings = [chosen]
        }
        let recording = recordings[0]
        var options = ReplayOptions()
        options.speed = try Self.parseSpeed(speed ?? "max")
        try Self.chooseObservers(observers, recording: recording, into: &options)
        options.from = from ?? 1
        options.to = to ?? .max
        options.loop = loop
        guard let layout = ReplayOptions.LoopLayout(rawValue: loopLayout) else {
            throw UserFacingError("unknown --loop-layout '\(loopLayout)'; use side-by-side or one-after-another", code: .unknownName)
        }
        options.loopLayout = layout
        if let devices {
            let scenario = try Scenario(header: recording.header)
            options.devices = try Self.parseDevices(devices, names: scenario.deviceNames)
        }
        var logDirectory: URL?
        if let out {
            let directory = URL(fileURLWithPath: out, isDirectory: true).appendingPathComponent("log", isDirectory: true)
            let recorded = URL(fileURLWithPath: recording.location).standardizedFileURL.resolvingSymlinksInPath()
            if directory.standardizedFileURL.resolvingSymlinksInPath() == recorded
                || URL(fileURLWithPath: out).standardizedFileURL.resolvingSymlinksInPath() == recorded {
                throw UserFacingError("--out \(out) is the recording itself; a replay never writes to its recording: give a new directory", code: .outputExists)
            }
            if !((try? LogDirectory.partitions(in: directory)) ?? []).isEmpty {
                throw UserFacingError("\(directory.path) already holds a log; choose a new --out directory or remove the old one", code: .outputExists)
            }
            do {
                try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            } catch {
                throw UserFacingError("cannot write the replayed log: \(describeError(error)); give a new --out directory", code: .unwritable)
            }
            logDirectory = directory
        }
        // Each partition's replayed log goes to the partition of the same name.
        let replay = try PartitionedReplay(recordings: recordings, options: options) { partition in
            guard let logDirectory else { return DiscardingLogStorage() }
            do {
                return try DiskLogStorage(directory: logDirectory, partition: partition, durability: .defaultGroupCommit)
            } catch {
                throw UserFacingError("cannot write the replayed log to \(logDirectory.path): \(describeError(error))", code: .unwritable)
            }
        }
        let clock = SystemReplayClock()
        var (result, partitions) = try replay.run(clock: options.speed == nil ? nil : clock)
        result.lateness?.scheduling = clock.scheduling.rawValue
        return Outcome(result: result, partitions: partitions, recording: recording, logDirectory: logDirectory, speed: options.speed)
    }

    /// `--observers`: built-in behaviours, or a registered app; without it, the app the recording ran, if
    /// it ran one (this executable must register it).
    static func chooseObservers(_ observers: String?, recording: Recording, into options: inout ReplayOptions) throws {
        let choice: ObserversChoice
        if let observers {
            choice = try parseObserversOrApp(observers)
        } else if let recordedApp = (try? Scenario(header: recording.header))?.apps.app {
            choice = .app(recordedApp)
        } else {
            return
        }
        switch choice {
        case .builtIn(let behaviors): options.observers = behaviors
        case .app(let name): options.app = ReplayOptions.AppUnderTest(name: name, launch: try RegisteredApps.launch(for: name))
        }
    }

    static func partitionsJSON(_ partitions: [(name: String, result: ReplayResult)]) -> JSONValue {
        .array(partitions.map { name, result in
            .object([("partition", .string(name)), ("events", .int(result.events)), ("comparedEvents", .int(result.comparedEvents)),
                     ("identical", .bool(result.identical)), ("divergences", .int(result.divergences)),
                     ("violationCount", .int(result.violationCount))])
        })
    }

    static func partitionsText(_ partitions: [(name: String, result: ReplayResult)]) -> String {
        partitions.map { name, result in
            "partition       \(name): \(result.events) events, " + (result.identical ? "identical" : "\(result.divergences) divergences")
        }.joined(separator: "\n")
    }

    static func parseSpeed(_ text: String) throws -> Double? {
        if text == "max" { return nil }
        guard let value = Double(text), value.isFinite, value > 0 else {
            throw UserFacingError("--speed '\(text)' is not a pace; use max, or a number greater than 0 (1 = the recorded pace, 10 = ten times faster)")
        }
        return value
    }

    /// Names, 1-based numbers and ranges of numbers, against the recording's devices.
    static func parseDevices(_ list: String, names: [String]) throws -> Set<String> {
        var selected: Set<String> = []
        for item in list.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) where !item.isEmpty {
            if names.contains(item) {
                selected.insert(item)
                continue
            }
            let bounds = item.split(separator: "-", maxSplits: 1).map { Int($0) }
            guard let first = bounds.first ?? nil, let last = bounds.count == 2 ? bounds[1] : first,
                  first >= 1, first <= last, last <= names.count else {
                throw UserFacingError("--devices: '\(item)' is not a device of the recording; use names (\(names.first!)) or numbers 1 to \(names.count)", code: .unknownName)
            }
            for index in first...last { selected.insert(names[index - 1]) }
        }
        guard !selected.isEmpty else { throw UserFacingError("--devices names no device") }
        return selected
    }

    static func microseconds(_ nanoseconds: Int64) -> JSONValue { JSONValue.microseconds(nanoseconds) }

    static func json(_ result: ReplayResult, recording: Recording, logDirectory: URL?, speed: Double?, extra: [(String, JSONValue)] = []) -> JSONValue {
        let first: JSONValue = result.firstDivergence.map { divergence in
            .object([
                ("kind", .string(divergence.kind.rawValue)),
                ("sequence", .int(divergence.sequence)),
                ("partition", .optional(divergence.partition)),
                ("device", .string(divergence.device)),
                ("track", .optional(divergence.track)),
                ("recorded", divergence.recorded.map(JSONShapes.event) ?? .null),
                ("replayed", divergence.replayed.map(JSONShapes.event) ?? .null),
                ("context", divergence.context.map { context in
                    .object([("device", .string(context.device)),
                             ("precedingEvents", .array(context.precedingEvents.map(JSONShapes.event))),
                             ("projection", context.state.map(JSONShapes.device) ?? .null)])
                } ?? .null),
            ])
        } ?? .null
        let lateness: JSONValue = result.lateness.map { value in
            .object([("p50Microseconds", microseconds(value.p50Nanoseconds)), ("p99Microseconds", microseconds(value.p99Nanoseconds)),
                     ("maxMicroseconds", microseconds(value.maximumNanoseconds)), ("samples", .int(value.samples)),
                     ("firstTenthP99Microseconds", microseconds(value.firstTenthP99Nanoseconds)),
                     ("lastTenthP99Microseconds", microseconds(value.lastTenthP99Nanoseconds)),
                     ("scheduling", .optional(value.scheduling))])
        } ?? .null
        return .object([
            ("recording", .string(recording.location)),
            ("seed", .unsigned(recording.header.seed)),
            ("runtime", .string(recording.header.runtime)),
            ("observers", .array(result.observers.map { .string($0.rawValue) })),
            ("speed", speed.map { .double($0) } ?? .string("max")),
            ("events", .int(result.events)),
            ("comparedEvents", .int(result.comparedEvents)),
            ("commands", .int(result.commands)),
            ("identical", .bool(result.identical)),
            ("divergences", .int(result.divergences)),
            ("different", .int(result.different)),
            ("missing", .int(result.missing)),
            ("extra", .int(result.extra)),
            ("firstDivergence", first),
            ("lateness", lateness),
            ("seconds", .double((result.seconds * 1e6).rounded() / 1e6)),
            ("eventsPerSecond", .double(result.eventsPerSecond.rounded())),
            ("violationCount", .int(result.violationCount)),
            ("violations", JSONShapes.violations(result.violations)),
            ("logDirectory", logDirectory.map { .string($0.path) } ?? .null),
            ("warning", .optional(result.warning)),
        ] + extra)
    }

    static func text(_ result: ReplayResult, recording: Recording, logDirectory: URL?, live: Bool = false) -> String {
        let header = recording.header
        var lines = [
            "recording       \(recording.location) (seed \(header.seed), \(header.runtime) run, sksim \(header.sksimVersion))",
            result.app.map { "app             \($0)" } ?? "observers       \(result.observers.map(\.rawValue).joined(separator: ","))",
            String(format: "replayed        %d events (%d compared), %d commands in %.3f s: %.0f events/s",
                   result.events, result.comparedEvents, result.commands, result.seconds, result.eventsPerSecond),
        ]
        if live {
            lines.append(result.divergences == 0
                ? "result          no divergence: every device's app-side events, transaction outcome, download, restore, receipt and observer's actions match the recording"
                : "result          \(result.divergences) divergences (tracks that differ): \(result.different) differ in an event, \(result.missing) lack events the recording has, \(result.extra) have events the recording lacks")
        } else if result.divergences == 0 {
            lines.append(result.identical ? "result          identical: the replayed log is byte for byte the recording"
                                          : "result          no divergence (the log differs from the recording only where asked: header, slice or copies)")
        } else {
            lines.append("result          \(result.divergences) divergences: \(result.different) commands had other events, \(result.missing) recorded observer commands were not sent, \(result.extra) commands were sent that the recording does not have")
        }
        if let divergence = result.firstDivergence {
            lines.append("first divergence at #\(divergence.sequence)\(divergence.partition.map { " of partition \($0)" } ?? "") on \(divergence.device) (\(divergence.kind.rawValue)):")
            if let track = divergence.track { lines.append("  track         \(track)") }
            lines.append("  recorded      " + (divergence.recorded.map(LogCommand.Cat.text) ?? "nothing"))
            lines.append("  replayed      " + (divergence.replayed.map(LogCommand.Cat.text) ?? "nothing"))
            if let context = divergence.context {
                lines.append("  \(context.device) before it:")
                lines += context.precedingEvents.map { "    " + LogCommand.Cat.text($0) }
                if let state = context.state {
                    lines.append("  \(state.device) (\(state.account)) \(state.isRunning ? "running" : "not running"), observers: \(state.observers.joined(separator: ", ")), \(state.pendingTransactions.count) pending")
                    for transaction in state.pendingTransactions {
                        let downloads = transaction.downloads.map { "\($0.contentIdentifier) \($0.downloadState) \(Int($0.progress * 100))%" }
                        lines.append("    \(transaction.key) \(transaction.payment.productIdentifier) ×\(transaction.payment.quantity) \(transaction.transactionState)"
                                     + (downloads.isEmpty ? "" : " [" + downloads.joined(separator: "; ") + "]"))
                    }
                } else {
                    lines.append("  \(context.device) is not registered yet")
                }
            }
        }
        if let lateness = result.lateness {
            lines.append(String(format: "lateness        p50 %.1f µs, p99 %.1f µs, max %.1f µs over %d commands (p99 first tenth %.1f µs, last tenth %.1f µs)%@",
                                Double(lateness.p50Nanoseconds) / 1e3, Double(lateness.p99Nanoseconds) / 1e3, Double(lateness.maximumNanoseconds) / 1e3,
                                lateness.samples, Double(lateness.firstTenthP99Nanoseconds) / 1e3, Double(lateness.lastTenthP99Nanoseconds) / 1e3,
                                lateness.scheduling == "normal" ? "; normal priority (real-time refused)" : ""))
        }
        lines.append("log             " + (logDirectory?.path ?? "not kept (give --out DIR to keep it)"))
        lines.append(result.violationCount == 0 ? "violations      none" : "violations      \(result.violationCount) (first: \(result.violations.first.map { "\($0)" } ?? ""))")
        if let warning = result.warning { lines.append("warning         \(warning)") }
        if live, result.divergences > 0 {
            // An unchanged recording still diverges now and then live (docs/replay.md, "What a live replay
            // does not reproduce"): say how to tell timing from a changed behaviour.
            lines.append("note            live timing differs from the recording's: a divergence that a second live replay does not show is timing (an app heard an event later than recorded), not behaviour; replay without --live to replay exactly")
        }
        return lines.joined(separator: "\n")
    }
}

extension UserFacingError {
    /// A replay's refusal, its kind kept.
    init(_ error: ReplayInputError) {
        let code: Code = switch error.code {
        case .unusableRecording: .invalidInput
        case .invalidOption: .invalidOption
        case .appNotRegistered: .appNotRegistered
        case .outputNotEmpty: .outputExists
        }
        self.init(error.description, code: code)
    }
}
