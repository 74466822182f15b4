import ArgumentParser
import Foundation
import Logging
import StoreKitLive
import StoreKitModel
import StoreKitReplay
import StoreKitRoles
import StoreKitRuntime

/// What `sksim replay --live` passes to every process it starts (hidden: not for people).
struct LiveReplayChildOptions: ParsableArguments {
    @Option(name: .customLong("replay"), help: .hidden) var recording: String?
    @Option(name: .customLong("replay-speed"), parsing: .unconditional, help: .hidden) var speed: Double = 1
    @Option(name: .customLong("replay-observers"), help: .hidden) var observers: String?

    /// The topology with the recording's scenario (and `--observers`), so the queue decides
    /// against the recorded catalog and the apps run the observers under test.
    func replayed(_ topology: Topology) throws -> Topology {
        guard let recording else { return topology }
        var replayed = topology
        replayed.scenario = try LiveReplay.scenario(of: Recording.openPartitions(path: recording)[0], observers: observers)
        return replayed
    }

    /// The role a replaying process plays instead of its topology's: the recorded store, the
    /// recorded downloader, or apps with the recorded users and the observers under test.
    func role(for process: ProcessSpecification, topology: Topology) throws -> Role? {
        guard let recording else { return nil }
        var plan = try LiveReplayPlan(recordings: Recording.openPartitions(path: recording))
        plan.scenario = topology.scenario
        switch process.role {
        case .store: return RecordedWorldRole(name: process.name, kind: .store, plan: plan, speed: speed)
        case .downloader: return RecordedWorldRole(name: process.name, kind: .downloader, plan: plan, speed: speed)
        case .observer:
            return ReplayAppsRole(name: process.name, plan: plan, speed: speed, deviceIndices: process.deviceIndices,
                                  choices: SeededChoices(seed: topology.scenario.seed, stream: process.name))
        case .queue, .appStoreServer: return nil
        }
    }
}

enum LiveReplay {
    static func scenario(of recording: Recording, observers: String?) throws -> Scenario {
        var scenario: Scenario
        do {
            scenario = try Scenario(header: recording.header)
        } catch {
            throw UserFacingError("\(recording.location): \(error)", code: .invalidInput)
        }
        if let observers {
            scenario.apps.observers = try parseObservers(observers)
            // Built-in observers in place of the app a recording ran.
            scenario.apps.app = nil
        }
        return scenario
    }
}

extension ReplayCommand {
    /// `--live`: the topology's processes replay the recording over ZeroMQ (a real queue writing
    /// a real log), then the new log is compared with the recording track by track
    /// (`LiveComparison`, docs/replay.md).
    func replayLive() throws {
        if from != nil || to != nil || devices != nil || loop != 1 || partition != nil {
            throw UserFacingError("--from, --to, --devices, --loop and --partition are for deterministic replays; replay the whole recording with --live, or drop --live")
        }
        let pace: Double
        if speed == nil || speed == "max" {
            guard speed == nil else {
                throw UserFacingError("--speed max is for deterministic replays: a live replay runs in real time; give K (1 = the recorded pace, 10 = ten times faster)")
            }
            pace = 1
        } else {
            pace = try Self.parseSpeed(speed!)!
        }
        let recordings = try Recording.openPartitions(path: run)
        let recording = recordings[0]
        let scenario = try LiveReplay.scenario(of: recording, observers: observers)
        var topology = try loadTopology(liveTopology, seed: scenario.seed, devices: scenario.devices)
        topology.scenario = scenario
        let topologyPath = liveTopology.map { URL(fileURLWithPath: $0).standardizedFileURL.path } ?? Topology.builtInName
        // Each recorded partition is replayed by the topology's queue of the same partition name
        // (devices are routed by account over the queues' order, as when it was recorded).
        let replayedPartitions = topology.partitionEndpoints(runDirectory: URL(fileURLWithPath: "/")).map(\.partition)
        guard replayedPartitions.sorted() == recordings.map(\.partition).sorted() else {
            throw UserFacingError("\(recording.location) holds the partitions \(recordings.map(\.partition).joined(separator: ", ")), and the topology \(topology.name) has queues for \(replayedPartitions.joined(separator: ", ")); replay it over the topology it was recorded with (or one with the same queues)")
        }
        do {
            try Supervisor.checkAllLocal(topology, topologyPath: liveTopology ?? Topology.builtInName)
        } catch {
            throw UserFacingError("\(error)", code: .invalidInput)
        }
        let plan = try LiveReplayPlan(recordings: recordings)
        let runDirectory = try liveRunDirectory(recording: recording)
        var options = Supervisor.Options()
        options.showProgress = false
        // A replay is over when the apps settle; the limit only stops an observer that never does.
        options.durationSeconds = Double(plan.lengthNanoseconds) / pace / 1e9 + 60
        // A restarted process would replay its inputs again from the start: a crash fails the replay.
        options.maximumRestarts = 0
        options.relaunchObserversForLateTransactions = false
        options.childArguments = ["--seed", "\(scenario.seed)", "--devices", "\(scenario.devices)",
                                  "--replay", URL(fileURLWithPath: recording.location).standardizedFileURL.path, "--replay-speed", "\(pace)"]
            + (observers.map { ["--replay-observers", $0] } ?? [])
        var logger = Logger(label: "sksim.replay")
        logger.logLevel = .warning
        let supervisor = Supervisor(topology: topology, topologyPath: topologyPath, runDirectory: runDirectory,
                                    executable: currentExecutable(), options: options, logger: logger)
        let run: Supervisor.Result
        do {
            run = try supervisor.run()
        } catch {
            throw UserFacingError("the live replay could not run: \(describeError(error))", code: .failed)
        }
        if let failure = run.failure { throw UserFacingError("the live replay failed: \(failure); its processes' logs are in \(runDirectory.path)", code: .failed) }
        let logDirectory = runDirectory.appendingPathComponent("log", isDirectory: true)
        // Each partition compared with its own recording, reported as one (as deterministic replays of several queues are).
        let replayedLogs = try Recording.openPartitions(path: logDirectory.path)
        var comparisons: [(name: String, comparison: LiveComparison.Outcome)] = []
        for recorded in recordings {
            guard let replayed = replayedLogs.first(where: { $0.partition == recorded.partition }) else {
                throw UserFacingError("the live replay wrote no partition '\(recorded.partition)' in \(logDirectory.path); its processes' logs are in \(runDirectory.path)", code: .failed)
            }
            comparisons.append((recorded.partition, try LiveComparison.compare(recording: recorded, replayed: replayed)))
        }
        let partitions = comparisons.map { (name: $0.name, result: $0.comparison.result) }
        let comparison = (tracks: comparisons.reduce(0) { $0 + $1.comparison.tracks },
                          differingTracks: comparisons.flatMap(\.comparison.differingTracks))
        var result = PartitionedReplay.merge(partitions)
        result.header = recording.header
        result.observers = scenario.apps.observers
        result.seconds = run.wallSeconds
        result.violations = run.report.violations
        result.violationCount = run.report.violationCount
        if !run.finished { result.warning = "the apps had not settled when the replay stopped (after \(Int(options.durationSeconds)) s)" }
        let extra: [(String, JSONValue)] = [
            ("live", .object([
                ("topology", .string(topology.name)), ("runDirectory", .string(runDirectory.path)),
                ("tracks", .int(comparison.tracks)), ("differingTracks", .int(comparison.differingTracks.count)),
                ("firstTrack", .optional(result.firstDivergence?.track)),
                ("processes", .int(topology.processes.count)), ("settled", .bool(run.finished)),
            ])),
        ] + (partitions.count > 1 ? [("partitions", Self.partitionsJSON(partitions))] : [])
        if json {
            printLine(Self.json(result, recording: recording, logDirectory: logDirectory, speed: pace, extra: extra).serialized())
        } else {
            printLine(Self.text(result, recording: recording, logDirectory: logDirectory, live: true))
            if partitions.count > 1 { printLine(Self.partitionsText(partitions)) }
            printLine("live            \(topology.processes.count) processes of \(topology.name); \(comparison.tracks) tracks compared, \(comparison.differingTracks.count) differ")
        }
        if result.divergences > 0 { throw ExitCode(1) }
    }

    /// `--out DIR`, or a new directory under the system's temporary folder (short, for ipc paths).
    private func liveRunDirectory(recording: Recording) throws -> URL {
        let directory = URL(fileURLWithPath: out ?? FileManager.default.temporaryDirectory
            .appendingPathComponent("sksim-replay-\(UUID().uuidString.prefix(8))").path, isDirectory: true).standardizedFileURL
        let recorded = URL(fileURLWithPath: recording.location).standardizedFileURL.resolvingSymlinksInPath()
        if directory.resolvingSymlinksInPath() == recorded || directory.appendingPathComponent("log").resolvingSymlinksInPath() == recorded {
            throw UserFacingError("--out \(out ?? "") is the recording itself; a replay never writes to its recording: give a new directory", code: .outputExists)
        }
        if FileManager.default.fileExists(atPath: directory.appendingPathComponent("log").path) {
            throw UserFacingError("\(directory.path) already holds a run; choose a new --out directory or remove the old one", code: .outputExists)
        }
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        } catch {
            throw UserFacingError("cannot create \(directory.path) for the live replay (\(describeError(error))); choose a writable --out directory", code: .unwritable)
        }
        return directory
    }
}
