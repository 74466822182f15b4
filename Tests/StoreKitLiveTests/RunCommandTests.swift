import Foundation
import StoreKitLive
import StoreKitModel
import StoreKitTestSupport
import Testing

/// `sksim run` as an operator meets it, through the real binary: the built-in topology from any
/// directory, run.json, the documented exit statuses, and no process left behind.
@Suite(.serialized) struct RunCommandTests {
    typealias Scratch = CommandLineTests.Scratch

    /// A started `sksim run` whose output is collected when it ends.
    /// `sksim` started in the background, in `directory`.
    static func started(_ arguments: [String], in directory: URL) throws -> SKSimProgram.StartedProgram {
        try SKSimProgram.start(try LiveRunTests.executable(), arguments, in: directory)
    }

    static func runFile(_ directory: String) throws -> RunFile? {
        guard let data = FileManager.default.contents(atPath: directory + "/run.json") else { return nil }
        return try JSONDecoder().decode(RunFile.self, from: data)
    }

    /// True while the process exists and is not a zombie.
    static func isAlive(_ pid: Int32) -> Bool {
        guard kill(pid, 0) == 0 else { return false }
        let stat = (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)) ?? ""
        return !stat.contains(") Z ")
    }

    @Test("--version prints the version")
    func version() throws {
        let outcome = try CommandLineTests.sksim(["--version"])
        #expect(outcome.status == 0)
        #expect(outcome.output.trimmingCharacters(in: .whitespacesAndNewlines) == sksimVersion)
    }

    @Test("run with no file works from any directory (the built-in topology); run.json is valid JSON whatever the path")
    func builtInFromAnyDirectory() throws {
        let scratch = Scratch()
        let out = scratch.path("odd \"name\"")
        let outcome = try CommandLineTests.sksim(["run", "--devices", "2", "--out", out, "--json"], in: scratch.url)
        #expect(outcome.status == 0, "\(outcome.error)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(outcome.output.utf8)) as? [String: Any])
        #expect(object["finished"] as? Bool == true)
        #expect(object["exitStatus"] as? Int == 0)
        let runFile = try #require(try Self.runFile(out))
        #expect(runFile.runDirectory == out)
        #expect(runFile.topology == Topology.builtInName)
        #expect(Set(runFile.processes.map(\.name)) == ["queue", "store", "downloader", "observer-1", "observer-2"])
        #expect(runFile.processes.first { $0.role == "queue" }?.binds != nil)
        // Nothing is written into the working directory but what --out names.
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch.url.path) == ["odd \"name\""])
    }

    @Test("stopped at --duration with work pending exits 3 and says so")
    func timeLimit() throws {
        let scratch = Scratch()
        let outcome = try CommandLineTests.sksim(["run", "--devices", "10", "--duration", "200ms", "--out", scratch.path("run"), "--json"],
                                                 in: scratch.url)
        #expect(outcome.status == 3, "\(outcome.error)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(outcome.output.utf8)) as? [String: Any])
        #expect(object["stoppedAtTimeLimit"] as? Bool == true)
        #expect(object["interrupted"] as? Bool == false)
    }

    @Test("Ctrl-C (SIGINT) is reported as interrupted, not as the time limit, and exits 130")
    func interrupted() throws {
        let scratch = Scratch()
        let run = try Self.started(["run", "--devices", "40", "--out", scratch.path("run"), "--json"], in: scratch.url)
        #expect(try SKSimProgram.eventually(seconds: 20) { try Self.runFile(scratch.path("run")) != nil })
        kill(run.process.processIdentifier, SIGINT)
        let outcome = run.finish()
        #expect(outcome.status == 130, "\(outcome.error)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(outcome.output.utf8)) as? [String: Any])
        #expect(object["interrupted"] as? Bool == true)
        #expect(object["stoppedAtTimeLimit"] as? Bool == false)
    }

    @Test("kill -9 of sksim run leaves no child running")
    func noOrphans() throws {
        let scratch = Scratch()
        let run = try Self.started(["run", "--devices", "40", "--out", scratch.path("run")], in: scratch.url)
        #expect(try SKSimProgram.eventually(seconds: 20) { try Self.runFile(scratch.path("run")) != nil })
        let children = try #require(try Self.runFile(scratch.path("run"))).processes.map(\.pid)
        #expect(children.count == 5)
        kill(run.process.processIdentifier, SIGKILL)
        _ = run.finish()
        #expect(SKSimProgram.eventually(seconds: 10) { !children.contains(where: Self.isAlive) }, "still running: \(children.filter(Self.isAlive))")
    }

    @Test("a port in use: the second run exits 2 naming the cause, and leaves nothing running")
    func portInUse() throws {
        let scratch = Scratch()
        let port = Int.random(in: 20_000...40_000)
        let topology = BuiltInTopology.local
            .replacingOccurrences(of: "ipc://{run}/queue-events.ipc", with: "tcp://127.0.0.1:\(port)")
            .replacingOccurrences(of: "ipc://{run}/queue-requests.ipc", with: "tcp://127.0.0.1:\(port + 1)")
        try topology.write(toFile: scratch.path("tcp.yaml"), atomically: true, encoding: .utf8)
        let first = try Self.started(["run", "tcp.yaml", "--devices", "40", "--out", scratch.path("first")], in: scratch.url)
        #expect(try SKSimProgram.eventually(seconds: 20) { try Self.runFile(scratch.path("first")) != nil })
        let second = try CommandLineTests.sksim(["run", "tcp.yaml", "--out", scratch.path("second"), "--maximum-restarts", "0"], in: scratch.url)
        kill(first.process.processIdentifier, SIGINT)
        _ = first.finish()
        #expect(second.status == 2)
        #expect(second.error.contains("the queue could not start"), "\(second.error)")
        #expect(second.error.contains("Address already in use"), "\(second.error)")
        // Besides the warning every tcp:// topology without CURVE gets (docs/reliability.md, "Roles").
        let lines = second.error.split(separator: "\n")
        #expect(lines.filter { !$0.contains("without CURVE") }.count == 1, "one line, not a dump: \(second.error)")
        #expect(lines.contains { $0.contains("warning") && $0.contains("without CURVE") }, "\(second.error)")
        #expect(try Self.runFile(scratch.path("second")) == nil, "nothing but the queue was started")
    }

    @Test("topology show prints the built-in topology; topology check validates a file without running it")
    func topologyCommands() throws {
        let show = try CommandLineTests.sksim(["topology", "show"])
        #expect(show.status == 0)
        #expect(show.output == BuiltInTopology.local)
        let check = try CommandLineTests.sksim(["topology", "check", "topology/tcp.yaml"], in: TopologyTests.repositoryRoot)
        #expect(check.status == 0, "\(check.error)")
        #expect(check.output.contains("valid"))
        let scratch = Scratch()
        try BuiltInTopology.local.replacingOccurrences(of: "queue-requests.ipc", with: "queue-events.ipc")
            .write(toFile: scratch.path("bad.yaml"), atomically: true, encoding: .utf8)
        let bad = try CommandLineTests.sksim(["topology", "check", scratch.path("bad.yaml")])
        #expect(bad.status == 2)
        #expect(bad.error.contains("processes[0].requests"), "\(bad.error)")
        // The `load:` section is checked as `sksim load` reads it: keys and values.
        for (section, fragment) in [("load:\n  bogus: 1\n", "load.bogus is not a load setting"), ("load:\n  rate: fast\n", "'fast' is not a rate")] {
            try (BuiltInTopology.local + section).write(toFile: scratch.path("load.yaml"), atomically: true, encoding: .utf8)
            let refused = try CommandLineTests.sksim(["topology", "check", scratch.path("load.yaml")])
            #expect(refused.status == 2, "\(section)")
            #expect(refused.error.contains(fragment), "\(refused.error)")
        }
        let load = try CommandLineTests.sksim(["topology", "check", "topology/load.yaml"], in: TopologyTests.repositoryRoot)
        #expect(load.status == 0, "\(load.error)")
    }

    @Test("Usage errors exit 64 and say what a valid value looks like", arguments: [
        (["run", "--duration", "0"], "longer than zero"),
        (["run", "--duration", "30 seconds"], "500ms, 30s"),
        (["run", "--duration=-5"], "500ms, 30s"),
        (["log", "cat", "x", "--type", "bogus"], "unknown event type 'bogus'"),
    ])
    func usage(arguments: [String], fragment: String) throws {
        let outcome = try CommandLineTests.sksim(arguments)
        #expect(outcome.status == 64)
        #expect(outcome.error.contains(fragment), "\(outcome.error)")
    }

    @Test("log commands refuse a directory that holds no log, and a file given as --out", arguments: [
        ["log", "verify", "."], ["log", "stats", "."], ["log", "project", "."], ["log", "cat", "."],
    ])
    func noLog(arguments: [String]) throws {
        let scratch = Scratch()
        let outcome = try CommandLineTests.sksim(arguments, in: scratch.url)
        #expect(outcome.status == 2)
        #expect(outcome.error.contains("holds no event log"), "\(outcome.error)")
    }

    @Test("--out naming a file is refused in one line")
    func outIsFile() throws {
        let scratch = Scratch()
        #expect(FileManager.default.createFile(atPath: scratch.path("file"), contents: Data("x".utf8)))
        let outcome = try CommandLineTests.sksim(["run", "--out", scratch.path("file")], in: scratch.url)
        #expect(outcome.status == 2)
        #expect(outcome.error.contains("is a file, not a directory"), "\(outcome.error)")
    }

    @Test("log cat filters by type, device, transaction and range")
    func catFilters() throws {
        let scratch = Scratch()
        #expect(try CommandLineTests.sksim(["simulate", "--devices", "3", "--seed", "2", "--out", scratch.path("run")]).status == 0)
        let finished = try CommandLineTests.sksim(["log", "cat", scratch.path("run"), "--type", "transactionFinished", "--device", "device-0002", "--json"])
        #expect(finished.status == 0)
        let objects = try finished.output.split(separator: "\n").map { try #require(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]) }
        #expect(!objects.isEmpty)
        #expect(objects.allSatisfy { object in
            object["type"] as? String == "transactionFinished" && (object["transaction"] as? String)?.hasPrefix("device-0002#") == true
        })
        let one = try CommandLineTests.sksim(["log", "cat", scratch.path("run"), "--transaction", "device-0001#1"])
        #expect(!one.output.isEmpty)
        #expect(one.output.split(separator: "\n").allSatisfy { $0.contains("device-0001#1") })
        let range = try CommandLineTests.sksim(["log", "cat", scratch.path("run"), "--from", "4", "--to", "6"])
        #expect(range.output.split(separator: "\n").map { $0.split(separator: " ").first.map(String.init) } == ["#4", "#5", "#6"])
    }
}

/// A full disk during `sksim run`, for real: a 400 KiB tmpfs (needs root to mount; skipped otherwise).
@Suite(.serialized) struct FullDiskTests {
    /// Mounts a small tmpfs; nil when this machine does not let us (not root, no CAP_SYS_ADMIN).
    static func mountSmallDisk(at path: String) -> Bool {
        guard getuid() == 0 else { return false }
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        let mount = Process()
        mount.executableURL = URL(fileURLWithPath: "/bin/mount")
        mount.arguments = ["-t", "tmpfs", "-o", "size=400k", "tmpfs", path]
        mount.standardError = FileHandle.nullDevice
        guard (try? mount.run()) != nil else { return false }
        mount.waitUntilExit()
        return mount.terminationStatus == 0
    }

    static func unmount(_ path: String) {
        let umount = Process()
        umount.executableURL = URL(fileURLWithPath: "/bin/umount")
        umount.arguments = [path]
        try? umount.run()
        umount.waitUntilExit()
    }

    static let canMount: Bool = {
        let probe = FileManager.default.temporaryDirectory.appendingPathComponent("sksim-mount-probe-\(getpid())").path
        defer { try? FileManager.default.removeItem(atPath: probe) }
        guard mountSmallDisk(at: probe) else { return false }
        unmount(probe)
        return true
    }()

    @Test("hosted content that cannot be written stops the downloader with the path and the cause; nothing fake is logged (exit 2)")
    func contentUnwritable() throws {
        let scratch = CommandLineTests.Scratch()
        let run = scratch.path("run")
        try FileManager.default.createDirectory(atPath: run, withIntermediateDirectories: true)
        try Data("not a folder".utf8).write(to: URL(fileURLWithPath: run + "/content"))
        let outcome = try CommandLineTests.sksim(["run", "--devices", "10", "--out", run, "--maximum-restarts", "0"], in: scratch.url)
        #expect(outcome.status == 2, "\(outcome.output) \(outcome.error)")
        #expect(outcome.error.contains("the downloader process 'downloader'"), "\(outcome.error)")
        #expect(outcome.error.contains("could not write \(run)/content/"), "\(outcome.error)")
        #expect(!outcome.error.contains("NSCocoaErrorDomain"), "\(outcome.error)")
        // The failed write was not turned into a simulated download failure.
        let failures = try CommandLineTests.sksim(["log", "cat", run, "--type", "downloadFailed"], in: scratch.url)
        #expect(failures.status == 0)
        #expect(failures.output.isEmpty, "\(failures.output)")
    }

    @Test("simulate --write-content stops, with the path and the cause, when content cannot be written (exit 2), instead of logging a download failure")
    func simulatedContentUnwritable() throws {
        let scratch = CommandLineTests.Scratch()
        let out = scratch.path("sim")
        try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
        try Data("not a folder".utf8).write(to: URL(fileURLWithPath: out + "/content"))
        let outcome = try CommandLineTests.sksim(["simulate", "--devices", "4", "--seed", "3", "--write-content", "--out", out], in: scratch.url)
        #expect(outcome.status == 2, "\(outcome.output) \(outcome.error)")
        #expect(outcome.error.contains("the downloader could not write \(out)/content/"), "\(outcome.error)")
        #expect(outcome.error.contains("is a file, not a folder"), "\(outcome.error)")
        #expect(!outcome.error.contains("NSCocoaErrorDomain"), "\(outcome.error)")
    }

    @Test("a full disk: the queue exits with the error and the path, and sksim run prints that cause (exit 2)",
          .enabled(if: canMount, "needs root to mount a small tmpfs"))
    func diskFull() throws {
        let scratch = CommandLineTests.Scratch()
        let disk = scratch.path("disk")
        #expect(Self.mountSmallDisk(at: disk))
        defer { Self.unmount(disk) }
        let outcome = try CommandLineTests.sksim(["run", "--devices", "40", "--out", disk + "/run", "--maximum-restarts", "0"], in: scratch.url)
        #expect(outcome.status == 2)
        #expect(outcome.error.lowercased().contains("no space left on"), "\(outcome.error)")
        #expect(outcome.error.contains(disk + "/run/"), "the path is named: \(outcome.error)")
        #expect(!outcome.error.contains("NSCocoaErrorDomain"))
        #expect(!outcome.error.contains("is it running"), "the cause, not a guess: \(outcome.error)")
    }
}
