import Foundation
import StoreKitModel

/// A cap on the CPU time of some processes, enforced by the kernel's CPU controller (a cgroup
/// with a CFS quota). `sksim bench load --queue-cores` puts each queue in one, so that the queue
/// is what limits a load even on a machine with fewer cores than processes: the figure then
/// says how partitions scale when each queue has its own share, as on hosts of their own.
///
/// Works with cgroup v1 (`/sys/fs/cgroup/cpu`, `cpu.cfs_quota_us`) and v2 (`/sys/fs/cgroup`,
/// `cpu.max`); needs permission to create a group there (root, as a rule).
public final class CPULimit: Sendable {
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public var description: String
        package init(description: String) { self.description = description }
    }

    enum Hierarchy: Sendable {
        /// cgroup v1: the `cpu` controller's own mount.
        case version1(URL)
        /// cgroup v2: the unified hierarchy with the `cpu` controller enabled below its root.
        case version2(URL)
    }

    /// The group's directory (removed by `remove()`).
    public let directory: URL
    public let cores: Double
    private let hierarchy: Hierarchy
    /// The quota's period: short, so a capped process runs in small slices instead of 100 ms on and
    /// off (the kernel's default period), which would add up to 100 ms to the latency it is measured
    /// by; longer only for a limit under 0.1 cores, whose quota would be below the kernel's least (1 ms).
    static func periodMicroseconds(cores: Double) -> Int { min(1_000_000, max(10_000, Int((1_000 / cores).rounded(.up)))) }

    /// Creates a group named `name` limited to `cores` cores (0.01–1,024): its processes together
    /// get at most `cores` × 10 ms of CPU in every 10 ms period (longer periods below 0.1 cores).
    public init(name: String, cores: Double, root: URL = URL(fileURLWithPath: "/sys/fs/cgroup", isDirectory: true)) throws {
        guard cores >= 0.01, cores <= 1_024 else {
            throw Failure(description: "a CPU limit of \(cores) cores is out of range; give 0.01 to 1024 (e.g. 0.25 for a quarter of a core)")
        }
        guard FolderName.isSingleComponent(name) else {
            throw Failure(description: "'\(name)' cannot name a cgroup: use letters, digits and dashes")
        }
        self.cores = cores
        let fileManager = FileManager.default
        let version1 = root.appendingPathComponent("cpu", isDirectory: true)
        if fileManager.fileExists(atPath: version1.appendingPathComponent("cpu.cfs_quota_us").path) {
            hierarchy = .version1(version1)
            directory = version1.appendingPathComponent(name, isDirectory: true)
        } else if let controllers = try? String(contentsOf: root.appendingPathComponent("cgroup.controllers"), encoding: .utf8),
                  controllers.split(whereSeparator: \.isWhitespace).contains("cpu") {
            hierarchy = .version2(root)
            directory = root.appendingPathComponent(name, isDirectory: true)
        } else {
            throw Failure(description: "this machine has no cgroup CPU controller under \(root.path) (neither cpu/cpu.cfs_quota_us nor "
                + "a cgroup.controllers listing cpu), so the CPU of a process cannot be limited; leave out the CPU limit")
        }
        do {
            if case .version2(let root) = hierarchy {
                // Child groups get the cpu controller only when their parent hands it down.
                try Self.write("+cpu", to: root.appendingPathComponent("cgroup.subtree_control"))
            }
            try fileManager.createDirectory(at: directory, withIntermediateDirectories: false)
            let period = Self.periodMicroseconds(cores: cores)
            let quota = max(1_000, Int((cores * Double(period)).rounded()))
            switch hierarchy {
            case .version1:
                try Self.write("\(period)", to: directory.appendingPathComponent("cpu.cfs_period_us"))
                try Self.write("\(quota)", to: directory.appendingPathComponent("cpu.cfs_quota_us"))
            case .version2:
                try Self.write("\(quota) \(period)", to: directory.appendingPathComponent("cpu.max"))
            }
        } catch {
            try? fileManager.removeItem(at: directory)
            throw Failure(description: "cannot create the CPU-limited cgroup \(directory.path): \(error) "
                + "(creating cgroups needs root; run as root or leave out the CPU limit)")
        }
    }

    /// Moves a process (all its threads) into the group.
    public func add(pid: Int32) throws {
        do {
            try Self.write("\(pid)", to: directory.appendingPathComponent("cgroup.procs"))
        } catch {
            throw Failure(description: "cannot move process \(pid) into the cgroup \(directory.path): \(error) "
                + "(the process may have exited, or this user may not move it: run as root, or leave out the CPU limit)")
        }
    }

    /// The processes now in the group.
    public var processes: [Int32] {
        let text = (try? String(contentsOf: directory.appendingPathComponent("cgroup.procs"), encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { Int32($0) }
    }

    /// Moves any process still in the group back to the hierarchy's root and removes the group.
    public func remove() {
        let rootProcesses: URL
        switch hierarchy {
        case .version1(let root), .version2(let root): rootProcesses = root.appendingPathComponent("cgroup.procs")
        }
        for pid in processes { try? Self.write("\(pid)", to: rootProcesses) }
        // A group is removed with rmdir (its control files cannot be deleted one by one).
        rmdir(directory.path)
    }

    private static func write(_ text: String, to file: URL) throws {
        // Control files take one write of the whole value, without truncation or a temporary file.
        let handle = try FileHandle(forWritingTo: file)
        defer { try? handle.close() }
        try handle.write(contentsOf: Data(text.utf8))
    }
}
