import Foundation

// What a process used, read from the kernel; every role reports it the same way
// (load drivers in their reports, queues in their statistics file).

/// CPU time of this process so far (user + system), in nanoseconds.
public func processCPUNanoseconds() -> Int64 {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    let user = Int64(usage.ru_utime.tv_sec) * 1_000_000_000 + Int64(usage.ru_utime.tv_usec) * 1_000
    let system = Int64(usage.ru_stime.tv_sec) * 1_000_000_000 + Int64(usage.ru_stime.tv_usec) * 1_000
    return user + system
}

/// Peak resident memory of this process, in bytes (Linux: VmHWM).
public func peakResidentBytes() -> Int64 {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
          let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
          let kilobytes = Int64(line.split(separator: " ").dropFirst().first ?? "") else { return -1 }
    return kilobytes * 1_024
}

/// CPU time (user + system) another process of this machine has used so far, in nanoseconds,
/// from /proc/<pid>/stat; nil when it cannot be read (the process is gone).
public func processCPUNanoseconds(pid: Int32) -> Int64? {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
          let close = text.lastIndex(of: ")") else { return nil }
    // After the command name (which may hold spaces): state is field 3; utime and stime are 14 and 15.
    let fields = text[text.index(after: close)...].split(separator: " ")
    guard fields.count > 12, let user = Int64(fields[11]), let system = Int64(fields[12]) else { return nil }
    let ticksPerSecond = Int64(sysconf(Int32(_SC_CLK_TCK)))
    return (user + system) * 1_000_000_000 / max(1, ticksPerSecond)
}
