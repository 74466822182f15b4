import EventLog
import Foundation
import StoreKitModel
import StoreKitTestSupport
import Testing

/// The `sksim` command line as a user runs it: a real process, its output and exit code.
@Suite(.serialized) struct CommandLineTests {
    typealias Outcome = ProgramOutcome

    static func sksim(_ arguments: [String], in directory: URL? = nil) throws -> Outcome {
        try SKSimProgram.run(try LiveRunTests.executable(), arguments, in: directory)
    }

    final class Scratch {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("sksim-cli-\(UUID().uuidString.prefix(8))")
        init() { try? FileManager.default.createDirectory(at: url, withIntermediateDirectories: true) }
        deinit { try? FileManager.default.removeItem(at: url) }
        func path(_ name: String) -> String { url.appendingPathComponent(name).path }
    }

    @Test("simulate --json prints the documented fields and exits 0")
    func simulateJSON() throws {
        let scratch = Scratch()
        let outcome = try Self.sksim(["simulate", "--devices", "3", "--purchases-per-device", "2", "--seed", "8", "--out", scratch.path("run"), "--json"])
        #expect(outcome.status == 0, "\(outcome.error)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(outcome.output.utf8)) as? [String: Any])
        #expect(object["seed"] as? Int == 8)
        #expect((object["events"] as? Int ?? 0) > 0)
        let transactions = try #require(object["transactions"] as? [String: Int])
        #expect(Set(transactions.keys).isSuperset(of: ["purchased", "failed", "restored", "deferred", "finished", "pending"]))
        #expect(Set((object["downloads"] as? [String: Int] ?? [:]).keys) == ["finished", "failed", "cancelled"])
        #expect((object["violations"] as? [Any])?.isEmpty == true)
        #expect(object["logDirectory"] as? String == scratch.path("run") + "/log")
    }

    @Test("a queue started on the log of another run refuses in one line and writes nothing to it (it once carried on as if the log were its own; issue 30: with a torn tail, it once truncated it first)",
          arguments: [false, true])
    func queueRefusesAnotherRunsLog(tornTail: Bool) throws {
        let scratch = Scratch()
        let simulated = try Self.sksim(["simulate", "--devices", "3", "--purchases-per-device", "2", "--seed", "8", "--out", scratch.path("run")])
        #expect(simulated.status == 0, "\(simulated.error)")
        if tornTail {
            // Half a record header at the end: what opening the log for writing would cut off.
            let segment = URL(fileURLWithPath: scratch.path("run/log/queue/00000000000000000001.segment"))
            let handle = try FileHandle(forWritingTo: segment)
            try handle.seekToEnd()
            try handle.write(contentsOf: Data([0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A]))
            try handle.close()
        }
        let topology = try Self.sksim(["topology", "show"])
        try topology.output.write(toFile: scratch.path("local.yaml"), atomically: true, encoding: .utf8)
        func logBytes() throws -> [String: Data] {
            let folder = scratch.url.appendingPathComponent("run/log", isDirectory: true)
            var files: [String: Data] = [:]
            for case let url as URL in FileManager.default.enumerator(at: folder, includingPropertiesForKeys: nil)! {
                if let data = try? Data(contentsOf: url) { files[url.path] = data }
            }
            return files
        }
        let before = try logBytes()
        #expect(!before.isEmpty)
        let started = try SKSimProgram.start(try LiveRunTests.executable(), [
            "queue", "--topology", scratch.path("local.yaml"), "--name", "queue", "--run-directory", scratch.path("run"), "--quiet"])
        let outcome = try #require(started.finish(within: 60), "the queue went on with another run's log")
        #expect(outcome.status == 2, "\(outcome.output) \(outcome.error)")
        let message = outcome.error.split(separator: "\n").last.map(String.init) ?? ""
        #expect(message.hasPrefix("error: the log in ") && message.contains("holds another run (seed 8, not ")
                && message.contains("give this queue a new --run-directory"), "\(outcome.error)")
        #expect(try logBytes() == before)
    }

    @Test("simulate exits 1 and lists violations when an observer loses content (R-D3)")
    func simulateViolation() throws {
        let scratch = Scratch()
        let outcome = try Self.sksim(["simulate", "--devices", "4", "--purchases-per-device", "10", "--seed", "13",
                                      "--observers", "finishBeforeDownloads", "--out", scratch.path("run")])
        #expect(outcome.status == 1)
        #expect(outcome.output.contains("[R-D3]"))
    }

    @Test("log verify names the damaged file and byte offset; repair refuses damage in the middle")
    func verifyDamage() throws {
        let scratch = Scratch()
        #expect(try Self.sksim(["simulate", "--devices", "2", "--seed", "3", "--out", scratch.path("run")]).status == 0)
        #expect(try Self.sksim(["log", "verify", scratch.path("run")]).status == 0)
        let partition = URL(fileURLWithPath: scratch.path("run/log/queue"))
        let segment = try #require(try FileManager.default.contentsOfDirectory(atPath: partition.path).first { $0.hasSuffix(".segment") })
        let file = partition.appendingPathComponent(segment)
        var bytes = try Data(contentsOf: file)
        bytes[bytes.count / 2] ^= 0xFF
        try bytes.write(to: file)
        let verify = try Self.sksim(["log", "verify", scratch.path("run")])
        #expect(verify.status != 0)
        #expect((verify.output + verify.error).contains(segment))
        #expect((verify.output + verify.error).contains("offset"))
        let repair = try Self.sksim(["log", "repair", scratch.path("run")])
        #expect(repair.status != 0)
        #expect(try Data(contentsOf: file) == bytes)  // Nothing changed.
    }

    @Test("Every log command reports damage, or a log of another format version, in one 'error:' line: status 1 for damage, 2 for a log it cannot read")
    func logErrorsAreOneLine() throws {
        let scratch = Scratch()
        #expect(try Self.sksim(["simulate", "--devices", "2", "--seed", "3", "--out", scratch.path("run")]).status == 0)
        let segment = URL(fileURLWithPath: scratch.path("run/log/queue/00000000000000000001.segment"))
        let original = try Data(contentsOf: segment)
        var damaged = original
        damaged[damaged.count / 2] ^= 0xFF
        try damaged.write(to: segment)
        // Once ArgumentParser's "Error: corruption: …" with status 1 for project, and the same for repair.
        for command in ["project", "repair"] {
            let outcome = try Self.sksim(["log", command, scratch.path("run")])
            #expect(outcome.status == 1, "\(command): \(outcome.error)")
            #expect(outcome.error.hasPrefix("error: ") && outcome.error.split(separator: "\n").count == 1, "\(command): \(outcome.error)")
        }
        var newer = original
        newer[8] = 4  // format version 4, from a future sksim
        try newer.write(to: segment)
        for command in ["verify", "repair", "project", "stats", "cat"] {
            let outcome = try Self.sksim(["log", command, scratch.path("run")])
            #expect(outcome.status == 2, "\(command): \(outcome.error)")
            #expect(outcome.error.hasPrefix("error: ") && outcome.error.contains("newer sksim (log format 4)"), "\(command): \(outcome.error)")
        }
    }

    @Test("issue 30: a record whose payload holds no event (a valid checksum) is damage to every log command: verify, repair, cat and project exit 1")
    func undecodablePayloadIsDamageToEveryCommand() throws {
        let scratch = Scratch()
        #expect(try Self.sksim(["simulate", "--devices", "2", "--seed", "3", "--out", scratch.path("run")]).status == 0)
        let writer = try PartitionWriter(directory: URL(fileURLWithPath: scratch.path("run/log")), partition: "queue",
                                         configuration: PartitionWriterConfiguration(durability: .always))
        _ = try writer.append(payload: [EventCodec.formatVersion, 0xFF, 0xFF, 0xFF], timestampNanoseconds: 1)
        try writer.close()
        let segment = URL(fileURLWithPath: scratch.path("run/log/queue/00000000000000000001.segment"))
        let before = try Data(contentsOf: segment)
        for command in ["verify", "repair", "cat", "project"] {
            let outcome = try Self.sksim(["log", command, scratch.path("run")])
            #expect(outcome.status == 1, "\(command): \(outcome.output.suffix(300)) \(outcome.error)")
        }
        let repair = try Self.sksim(["log", "repair", scratch.path("run")])
        #expect(!repair.output.contains("intact"), "\(repair.output)")
        #expect(try Data(contentsOf: segment) == before)
    }

    @Test("Output that cannot be written (a full disk) ends a command with one line and status 2, not Foundation's trap")
    func unwritableOutput() throws {
        let scratch = Scratch()
        let executable = try LiveRunTests.executable().path
        func shell(_ script: String) throws -> Outcome {
            try SKSimProgram.run(URL(fileURLWithPath: "/bin/sh"), ["-c", script, executable])
        }
        // Once "Fatal error: 'try!' expression unexpectedly raised an error" and signal 4 (status 132).
        let simulate = try shell("exec \"$0\" simulate --devices 2 --out \(scratch.path("run")) > /dev/full")
        #expect(simulate.status == 2, "\(simulate.error)")
        #expect(simulate.error == "error: cannot write to standard output: No space left on device; free some space or send the output elsewhere\n")
        // A role whose log file (its stderr) is on a full disk exits with its own status.
        let failing = try shell("exec \"$0\" log verify \(scratch.path("missing")) 2> /dev/full")
        #expect(failing.status == 2)
    }

    @Test("`catalog show sample` lists the built-in catalog a topology's `catalog: sample` names (once 'There is no file at this path')")
    func builtInCatalogByName() throws {
        let scratch = Scratch()
        let outcome = try Self.sksim(["catalog", "show", "sample", "--json"], in: scratch.url)
        #expect(outcome.status == 0, "\(outcome.error)")
        #expect(outcome.json["source"] as? String == "built-in sample")
        #expect((outcome.json["products"] as? [Any])?.count == 9)
        let simulate = try Self.sksim(["simulate", "--catalog", "sample", "--devices", "1", "--out", scratch.path("run"), "--json"], in: scratch.url)
        #expect(simulate.status == 0, "\(simulate.error)")
    }

    @Test("--out naming a file: simulate and replay say so in one line, status 2 (once an NSError dump under 'Error:', status 1)")
    func outputDirectoryIsAFile() throws {
        let scratch = Scratch()
        try Data().write(to: URL(fileURLWithPath: scratch.path("file")))
        #expect(try Self.sksim(["simulate", "--devices", "1", "--out", scratch.path("run")]).status == 0)
        for arguments in [["simulate", "--devices", "1", "--out", scratch.path("file")], ["replay", scratch.path("run"), "--out", scratch.path("file")]] {
            let outcome = try Self.sksim(arguments)
            #expect(outcome.status == 2, "\(arguments[0]): \(outcome.error)")
            #expect(outcome.error.hasPrefix("error: ") && outcome.error.contains("is a file, not a folder; give a new --out directory"), "\(outcome.error)")
            #expect(!outcome.error.contains("NSCocoaErrorDomain"), "\(outcome.error)")
        }
    }

    @Test("log repair truncates a torn tail and says what it dropped; the log is then intact")
    func repairTornTail() throws {
        let scratch = Scratch()
        #expect(try Self.sksim(["simulate", "--devices", "2", "--seed", "4", "--out", scratch.path("run")]).status == 0)
        let partition = URL(fileURLWithPath: scratch.path("run/log/queue"))
        let segment = try #require(try FileManager.default.contentsOfDirectory(atPath: partition.path).first { $0.hasSuffix(".segment") })
        let handle = try FileHandle(forWritingTo: partition.appendingPathComponent(segment))
        let size = try handle.seekToEnd()
        try handle.truncate(atOffset: size - 5)
        try handle.close()
        #expect(try Self.sksim(["log", "verify", scratch.path("run")]).status != 0)
        let repair = try Self.sksim(["log", "repair", scratch.path("run")])
        #expect(repair.status == 0, "\(repair.error)")
        #expect(repair.output.contains("dropped") || repair.output.contains("truncat"))
        #expect(try Self.sksim(["log", "verify", scratch.path("run")]).status == 0)
    }

    @Test("log cat --json prints one JSON object per event; log project --at folds to that sequence")
    func catAndProject() throws {
        let scratch = Scratch()
        #expect(try Self.sksim(["simulate", "--devices", "2", "--seed", "5", "--out", scratch.path("run")]).status == 0)
        let cat = try Self.sksim(["log", "cat", scratch.path("run"), "--json", "--from", "3"])
        let lines = cat.output.split(separator: "\n")
        #expect(!lines.isEmpty)
        let first = try #require(try JSONSerialization.jsonObject(with: Data(lines[0].utf8)) as? [String: Any])
        #expect(first["sequence"] as? Int == 3)
        #expect(first["type"] is String)
        let project = try Self.sksim(["log", "project", scratch.path("run"), "--at", "10", "--json"])
        let state = try #require(try JSONSerialization.jsonObject(with: Data(project.output.utf8)) as? [String: Any])
        #expect(state["sequence"] as? Int == 10)
    }

    @Test("Bad input gets a clear error and a non-zero exit", arguments: [
        (["simulate", "--catalog", "/nonexistent.storekit"], "/nonexistent.storekit"),
        (["simulate", "--devices", "0"], "devices"),
        (["simulate", "--observers", "psychic"], "unknown observer behaviour 'psychic'"),
        (["run", "/nonexistent/topology.yaml"], "no such file"),
        (["log", "verify", "/nonexistent-log"], "does not exist"),
        (["store", "--name", "queue"], "'queue' is a queue"),
        (["run", "topology/multi-host.yaml"], "is meant for host 10.0.0.1"),
        // Foundation's "The operation could not be completed" is not a reason.
        (["explore", "--reproduce", "/nonexistent-reproduce.json"], "cannot read reproduce file /nonexistent-reproduce.json: no such file or directory"),
        // A negative number is a value, not an option: the command says what it must be.
        (["load", "--rate", "-1"], "'-1' is not a rate"),
        (["explore", "--depth", "-1"], "--depth is -1; use 1 to 100"),
    ])
    func badInput(arguments: [String], fragment: String) throws {
        let outcome = try Self.sksim(arguments, in: TopologyTests.repositoryRoot)
        #expect(outcome.status == 2)
        #expect(outcome.error.contains(fragment), "\(outcome.error)")
        #expect(!outcome.error.contains("Fatal error"))
    }

    @Test("Option values that cannot mean anything are usage errors (64), not hours of work or silent empty output", arguments: [
        (["simulate", "--purchases-per-device", "99999999"], "use 0 to 1000000"),
        (["log", "cat", "/nonexistent-log", "--transaction", "bad"], "is not DEVICE#NUMBER"),
    ])
    func unusableOptionValues(arguments: [String], fragment: String) throws {
        let outcome = try Self.sksim(arguments)
        #expect(outcome.status == 64, "\(outcome.error)")
        #expect(outcome.error.contains(fragment), "\(outcome.error)")
    }
}
