import EventLog
import Foundation
import StoreKitTestSupport
import Testing

/// `sksim replay` as a user runs it: real processes, real logs on disk, exit codes.
@Suite(.serialized) struct ReplayCommandLineTests {
    typealias Outcome = ProgramOutcome

    static let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func executable() throws -> URL { try SKSimProgram.executable(packageRoot: repositoryRoot) }

    static func sksim(_ arguments: [String]) throws -> Outcome { try SKSimProgram.run(try executable(), arguments) }

    final class Scratch {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("sksim-replay-\(UUID().uuidString.prefix(8))")
        init() { try? FileManager.default.createDirectory(at: url, withIntermediateDirectories: true) }
        deinit { if ProcessInfo.processInfo.environment["SKSIM_KEEP_TEST_RUNS"] == nil { try? FileManager.default.removeItem(at: url) } }
        func path(_ name: String) -> String { url.appendingPathComponent(name).path }
    }

    /// One live replay of a recording (`SKSimProgram.liveReplay` with one attempt): an intermittent
    /// divergence fails the test that made it.
    static func liveReplay(_ recording: String, topology: String, out: String) throws -> (outcome: Outcome, report: String) {
        try SKSimProgram.liveReplay(try executable(), recording: recording, topology: topology, out: out)
    }

    /// Records a live run of the topology file `topology` (in `scratch`) into `rec` and replays it live
    /// once into `same`. Returns the replay, its report, and the recording's log files as they were
    /// before it was replayed.
    static func recordAndReplayLive(_ scratch: Scratch, topology: String) throws -> (same: Outcome, report: String, recordedLog: [String: Data]) {
        let run = try sksim(["run", scratch.path(topology), "--out", scratch.path("rec"), "--duration", "60"])
        #expect(run.status == 0, "\(run.output) \(run.error)")
        let recordedLog = try snapshot(scratch.path("rec/log"))
        let (outcome, report) = try liveReplay(scratch.path("rec"), topology: scratch.path(topology), out: scratch.path("same"))
        return (outcome, report, recordedLog)
    }

    /// Every file of a log directory with its bytes, to prove nothing was written there.
    static func snapshot(_ directory: String) throws -> [String: Data] {
        var files: [String: Data] = [:]
        let root = URL(fileURLWithPath: directory)
        for case let path as String in FileManager.default.enumerator(atPath: directory)! {
            var isDirectory: ObjCBool = false
            let url = root.appendingPathComponent(path)
            if FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory), !isDirectory.boolValue {
                files[path] = try Data(contentsOf: url)
            }
        }
        return files
    }

    static func segments(_ logDirectory: String) throws -> [Data] {
        let partition = URL(fileURLWithPath: logDirectory).appendingPathComponent("queue")
        return try FileManager.default.contentsOfDirectory(atPath: partition.path).filter { $0.hasSuffix(".segment") }.sorted()
            .map { try Data(contentsOf: partition.appendingPathComponent($0)) }
    }

    @Test("replay --json of an unchanged recording: identical, 0 divergences, exit 0; --out writes the same segment bytes; the recording is untouched")
    func unchangedReplay() throws {
        let scratch = Scratch()
        let simulate = try Self.sksim(["simulate", "--devices", "3", "--purchases-per-device", "4", "--seed", "21", "--out", scratch.path("rec")])
        #expect(simulate.status == 0, "\(simulate.error)")
        let before = try Self.snapshot(scratch.path("rec"))
        let outcome = try Self.sksim(["replay", scratch.path("rec"), "--json", "--out", scratch.path("again")])
        #expect(outcome.status == 0, "\(outcome.error)")
        let json = outcome.json
        for field in ["events", "identical", "divergences", "firstDivergence", "lateness", "eventsPerSecond"] { #expect(json.keys.contains(field), "\(field)") }
        #expect(json["identical"] as? Bool == true)
        #expect(json["divergences"] as? Int == 0)
        #expect(json["firstDivergence"] is NSNull)
        #expect(json["lateness"] is NSNull)
        #expect((json["events"] as? Int ?? 0) > 10)
        #expect(try Self.segments(scratch.path("again/log")) == Self.segments(scratch.path("rec/log")))
        #expect(try Self.snapshot(scratch.path("rec")) == before)
    }

    @Test("replay --observers: exit 1 and a readable first divergence with the device's context")
    func changedObserver() throws {
        let scratch = Scratch()
        #expect(try Self.sksim(["simulate", "--devices", "2", "--purchases-per-device", "3", "--seed", "22", "--out", scratch.path("rec")]).status == 0)
        let text = try Self.sksim(["replay", scratch.path("rec"), "--observers", "deliverThenFinish"])
        #expect(text.status == 1)
        #expect(text.output.contains("first divergence at #"))
        #expect(text.output.contains("deliverThenFinish-1"))
        let json = try Self.sksim(["replay", scratch.path("rec"), "--observers", "deliverThenFinish", "--json"]).json
        let first = try #require(json["firstDivergence"] as? [String: Any])
        #expect(first["sequence"] is Int)
        // One observer fewer is a behaviour (an observer's new name is not): the recorded second attachment is missing.
        #expect(first["kind"] as? String == "missing", "\(first)")
        #expect((first["recorded"] as? [String: Any])?["observer"] as? String == "audit-2", "\(first)")
        let context = try #require(first["context"] as? [String: Any])
        #expect(!(context["precedingEvents"] as? [Any] ?? []).isEmpty)
        #expect((context["projection"] as? [String: Any])?["running"] as? Bool == true)
    }

    @Test("replay --from/--to, --devices and --loop replay cleanly from the command line")
    func sliceDevicesLoop() throws {
        let scratch = Scratch()
        #expect(try Self.sksim(["simulate", "--devices", "4", "--purchases-per-device", "4", "--seed", "23", "--out", scratch.path("rec")]).status == 0)
        for arguments in [["--from", "20", "--to", "60"], ["--devices", "2,device-0004"], ["--devices", "1-2", "--loop", "2"],
                          ["--loop", "2", "--loop-layout", "one-after-another"]] {
            let outcome = try Self.sksim(["replay", scratch.path("rec"), "--json"] + arguments)
            #expect(outcome.status == 0, "\(arguments): \(outcome.output) \(outcome.error)")
            #expect(outcome.json["divergences"] as? Int == 0, "\(arguments)")
        }
    }

    @Test("A live recording (real processes over ZeroMQ) replays deterministically with 0 divergences, also timed at 10x")
    func liveRecording() throws {
        let scratch = Scratch()
        var live = ReplayTopology(seed: 9, purchasesPerDevice: 8, relaunchProbability: 0.2)
        live.thinkTimeMeanMilliseconds = 5
        let topology = live.text
        try topology.write(toFile: scratch.path("live.yaml"), atomically: true, encoding: .utf8)
        let run = try Self.sksim(["run", scratch.path("live.yaml"), "--out", scratch.path("live"), "--duration", "60"])
        #expect(run.status == 0, "\(run.output) \(run.error)")
        let replay = try Self.sksim(["replay", scratch.path("live"), "--json"])
        #expect(replay.status == 0, "\(replay.output)")
        #expect(replay.json["runtime"] as? String == "live")
        #expect(replay.json["divergences"] as? Int == 0)
        #expect(replay.json["identical"] as? Bool == true)
        let timed = try Self.sksim(["replay", scratch.path("live"), "--json", "--speed", "10"])
        #expect(timed.status == 0, "\(timed.output)")
        let lateness = try #require(timed.json["lateness"] as? [String: Any])
        for field in ["p50Microseconds", "p99Microseconds", "maxMicroseconds"] { #expect(lateness[field] is Double, "\(field)") }
    }

    @Test("Bad input: one clear line naming the file, exit 2, nothing written", arguments: [
        ("missing", [String](), "does not exist"),
        ("file", [], "is a file"),
        ("empty", [], "holds no sksim log"),
        ("damaged", [], "damaged"),
        ("version", [], "log format"),
        ("good", ["--speed", "fast"], "--speed 'fast'"),
        ("good", ["--observers", "psychic"], "unknown observer behaviour 'psychic'"),
        ("good", ["--devices", "device-9999"], "--devices"),
        ("good", ["--loop", "0"], "--loop 0"),
        ("good", ["--from", "9", "--to", "3"], "empty slice"),
        ("good", ["--out", "SELF"], "the recording itself"),
    ])
    func badInput(kind: String, arguments: [String], fragment: String) throws {
        let scratch = Scratch()
        let target = scratch.path("rec")
        switch kind {
        case "missing": break
        case "file": try "not a log".write(toFile: target, atomically: true, encoding: .utf8)
        case "empty": try FileManager.default.createDirectory(atPath: target, withIntermediateDirectories: true)
        default:
            #expect(try Self.sksim(["simulate", "--devices", "2", "--seed", "24", "--out", target]).status == 0)
        }
        if kind == "damaged" || kind == "version" {
            let partition = URL(fileURLWithPath: target).appendingPathComponent("log/queue")
            let name = try #require(try FileManager.default.contentsOfDirectory(atPath: partition.path).first { $0.hasSuffix(".segment") })
            var bytes = try Data(contentsOf: partition.appendingPathComponent(name))
            if kind == "damaged" { bytes[bytes.count / 2] ^= 0xFF } else { bytes[8] = 9 }
            try bytes.write(to: partition.appendingPathComponent(name))
        }
        let before = kind == "missing" || kind == "file" ? [:] : try Self.snapshot(target)
        let outcome = try Self.sksim(["replay", target] + arguments.map { $0 == "SELF" ? target : $0 })
        #expect(outcome.status == 2, "\(outcome.output) \(outcome.error)")
        #expect(outcome.error.contains(fragment), "\(outcome.error)")
        #expect(outcome.error.split(separator: "\n").count == 1, "\(outcome.error)")
        #expect(!outcome.error.contains("Fatal error"))
        if kind == "damaged" || kind == "version" { #expect(outcome.error.contains(".segment")) }
        if !(kind == "missing" || kind == "file") { #expect(try Self.snapshot(target) == before) }
    }
}

struct ReplayTestError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
