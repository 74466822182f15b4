import Foundation
import StoreKitLoad
import StoreKitTestKit
import Testing

/// `CPULimit` (the cgroup behind `bench load --queue-cores`): refusals everywhere; the real
/// kernel groups only as root on a machine with a cgroup CPU controller.
@Suite(.serialized) struct CPULimitTests {
    /// Root, a CPU controller, and a group can really be made (a container may mount cgroups read-only).
    static let canRun: Bool = {
        guard getuid() == 0, let probe = try? CPULimit(name: "sksim-probe-\(getpid())", cores: 1) else { return false }
        probe.remove()
        return true
    }()

    @Test("a limit out of range, a name that is not one directory, and a machine without a CPU controller are refused clearly")
    func refusals() throws {
        let scratch = LoadRunTests.Scratch()
        let root = URL(fileURLWithPath: scratch.path("cgroup"), isDirectory: true)
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        #expect(throws: CPULimit.Failure.self) { try CPULimit(name: "a", cores: 0, root: root) }
        do {
            _ = try CPULimit(name: "../escape", cores: 0.5, root: root)
            Issue.record("a name with a slash was taken")
        } catch let failure as CPULimit.Failure {
            #expect(failure.description.contains("cannot name a cgroup"))
        }
        do {
            _ = try CPULimit(name: "queue", cores: 0.5, root: root)
            Issue.record("a directory without a CPU controller was taken for one")
        } catch let failure as CPULimit.Failure {
            #expect(failure.description.contains("no cgroup CPU controller under \(root.path)"), "\(failure)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: root.path).isEmpty, "nothing is created when refused")
    }

    @Test("a real group: the kernel holds the quota and the process, and removing it returns the process and leaves nothing",
          .enabled(if: canRun, "needs root and a cgroup CPU controller; run the tests as root to include it"))
    func realGroup() throws {
        let limit = try CPULimit(name: "sksim-test-\(getpid())", cores: 1.5)
        let child = Process()
        child.executableURL = URL(fileURLWithPath: "/bin/sleep")
        child.arguments = ["60"]
        try child.run()
        defer {
            kill(child.processIdentifier, SIGKILL)
            child.waitUntilExit()
        }
        let quotaFile = limit.directory.appendingPathComponent("cpu.cfs_quota_us")
        if FileManager.default.fileExists(atPath: quotaFile.path) {
            #expect(try String(contentsOf: quotaFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines) == "15000")
        } else {
            let max = try String(contentsOf: limit.directory.appendingPathComponent("cpu.max"), encoding: .utf8)
            #expect(max.trimmingCharacters(in: .whitespacesAndNewlines) == "15000 10000")
        }
        try limit.add(pid: child.processIdentifier)
        #expect(limit.processes == [child.processIdentifier])
        let membership = try String(contentsOfFile: "/proc/\(child.processIdentifier)/cgroup", encoding: .utf8)
        #expect(membership.contains("sksim-test-\(getpid())"))
        limit.remove()
        #expect(!FileManager.default.fileExists(atPath: limit.directory.path))
        #expect(child.isRunning, "the process outlives its group")
        #expect(!(try String(contentsOfFile: "/proc/\(child.processIdentifier)/cgroup", encoding: .utf8)).contains("sksim-test"))

        // Below 0.1 cores the period grows, so the quota stays at the kernel's least (1 ms) or above.
        let small = try CPULimit(name: "sksim-test-small-\(getpid())", cores: 0.05)
        defer { small.remove() }
        let periodFile = small.directory.appendingPathComponent("cpu.cfs_period_us")
        if FileManager.default.fileExists(atPath: periodFile.path) {
            #expect(try String(contentsOf: periodFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines) == "20000")
            #expect(try String(contentsOf: small.directory.appendingPathComponent("cpu.cfs_quota_us"), encoding: .utf8)
                .trimmingCharacters(in: .whitespacesAndNewlines) == "1000")
        } else {
            #expect(try String(contentsOf: small.directory.appendingPathComponent("cpu.max"), encoding: .utf8)
                .trimmingCharacters(in: .whitespacesAndNewlines) == "1000 20000")
        }
    }

    @Test("bench load --queue-cores limits every queue, says so in its JSON and leaves no group behind",
          .enabled(if: canRun, "needs root and a cgroup CPU controller; run the tests as root to include it"))
    func benchLoadWithLimitedQueues() throws {
        let outcome = try LoadRunTests.sksim(["bench", "load", "--durations", "1s", "--rate", "200", "--devices", "20", "--baseline-seconds", "0.5",
                                              "--partitions", "1,2", "--queue-cores", "0.5", "--json", "--no-results"])
        #expect(outcome.status == 0, "\(outcome.error)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(outcome.output.utf8)) as? [String: Any])
        let runs = try #require(object["runs"] as? [[String: Any]])
        #expect(runs.count == 2 && runs.allSatisfy { $0["queueCoresLimit"] as? Double == 0.5 && ($0["lifecycles"] as? Int ?? 0) > 0 })
        let groups = ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup"].flatMap { (try? FileManager.default.contentsOfDirectory(atPath: $0)) ?? [] }
        #expect(!groups.contains { $0.hasPrefix("sksim-") && !$0.hasPrefix("sksim-test") }, "left behind: \(groups.filter { $0.hasPrefix("sksim-") })")
    }
}
