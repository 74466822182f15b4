import ArgumentParser
import Foundation
import SKSimCommands
import StoreKitModel

/// Where `sksim bench` keeps its figures: one JSON file per run, with the commit and the machine,
/// so figures can be compared over time (docs/performance.md).
struct BenchResultsOptions: ParsableArguments {
    @Option(help: "Directory for this run's JSON record (default: Benchmarks/results when the working directory has Benchmarks/; none otherwise).")
    var results: String?
    @Flag(help: "Write no record of this run.") var noResults = false

    var directory: URL? {
        if noResults { return nil }
        if let results { return URL(fileURLWithPath: results, isDirectory: true) }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: "Benchmarks", isDirectory: &isDirectory), isDirectory.boolValue else { return nil }
        return URL(fileURLWithPath: "Benchmarks/results", isDirectory: true)
    }

    /// Writes `{bench, date, commit, machine, figures}`; a failure to write is reported, not fatal.
    func record(bench: String, figures: JSONValue) {
        guard let directory else { return }
        let date = Date()
        let commit = Self.commit()
        let stamp = ISO8601DateFormatter.string(from: date, timeZone: TimeZone(identifier: "UTC")!, formatOptions: [.withYear, .withMonth, .withDay, .withTime])
        let record = JSONValue.object([
            ("bench", .string(bench)),
            ("date", .string(ISO8601DateFormatter().string(from: date))),
            ("commit", commit.map { .string($0) } ?? .null),
            ("machine", Self.machine()),
            ("figures", figures),
        ])
        let file = directory.appendingPathComponent("\(bench)-\(stamp)-\(commit.map { String($0.prefix(10)) } ?? "unknown").json")
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            try Data((record.serialized() + "\n").utf8).write(to: file, options: .atomic)
            printError("figures recorded in \(file.relativePath)")
        } catch {
            printError("warning: could not record the figures in \(file.path): \(describeError(error, withPath: false))")
        }
    }

    /// The checked-out commit, with `+changes` when the tree differs from it; nil outside a git checkout.
    static func commit() -> String? {
        guard let head = run("/usr/bin/git", ["rev-parse", "HEAD"]), !head.isEmpty else { return nil }
        let dirty = !(run("/usr/bin/git", ["status", "--porcelain", "--untracked-files=no"]) ?? "").isEmpty
        return head + (dirty ? "+changes" : "")
    }

    static func machine() -> JSONValue {
        var system = utsname()
        uname(&system)
        func text<T>(_ value: T) -> String {
            withUnsafeBytes(of: value) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        }
        let model = (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8))?
            .split(separator: "\n").first { $0.hasPrefix("model name") }?
            .split(separator: ":", maxSplits: 1).last.map { $0.trimmingCharacters(in: .whitespaces) }
        #if DEBUG
        let build = "debug"
        #else
        let build = "release"
        #endif
        return .object([
            ("host", .string(ProcessInfo.processInfo.hostName)),
            ("cores", .int(ProcessInfo.processInfo.activeProcessorCount)),
            ("processor", model.map { .string($0) } ?? .null),
            ("memoryGigabytes", .double((Double(ProcessInfo.processInfo.physicalMemory) / 1_073_741_824 * 10).rounded() / 10)),
            ("kernel", .string("\(text(system.sysname)) \(text(system.release))")),
            ("build", .string(build)),
        ])
    }

    private static func run(_ executable: String, _ arguments: [String]) -> String? {
        guard FileManager.default.isExecutableFile(atPath: executable) else { return nil }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return nil }
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { return nil }
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
