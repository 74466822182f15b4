import Foundation

/// What a program printed and how it exited.
public struct ProgramOutcome: Sendable {
    public var status: Int32
    public var output: String
    public var error: String

    public init(status: Int32, output: String, error: String) {
        self.status = status
        self.output = output
        self.error = error
    }

    /// stdout as one JSON object (empty when it is not one).
    public var json: [String: Any] { (try? JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: Any]) ?? [:] }
}

/// The `sksim` binary as a user runs it, for this package's end-to-end tests.
public enum SKSimProgram {
    public struct NotBuilt: Error, CustomStringConvertible {
        public var description: String { "no sksim binary next to the tests or in .build/debug; build it first (swift build --build-tests)" }
    }

    /// The binary next to the running tests, or the package's debug build under `packageRoot`.
    public static func executable(packageRoot: URL) throws -> URL {
        let candidates = [
            URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("sksim"),
            packageRoot.appendingPathComponent(".build/debug/sksim"),
        ]
        guard let found = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0.path) }) else { throw NotBuilt() }
        return found
    }

    /// Waits, at most `seconds`, until `condition` holds (checked every 20 ms); false when it never did.
    /// For a condition a program makes true on its own, such as a file it writes once it got so far.
    public static func eventually(seconds: Double, _ condition: () throws -> Bool) rethrows -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if try condition() { return true }
            usleep(20_000)
        }
        return try condition()
    }

    /// Runs `executable` to its end. stdout and stderr are read at the same time, so a program
    /// that fills one pipe while the other is being read cannot stall.
    public static func run(_ executable: URL, _ arguments: [String], in directory: URL? = nil) throws -> ProgramOutcome {
        try start(executable, arguments, in: directory).finish()
    }

    /// `sksim replay RECORDING --live TOPOLOGY --out OUT --json`, once: its outcome (its run left in
    /// `out`) and its output for a failing test's message. Once only, so that a live replay that
    /// diverges now and then fails the test that made it rather than being retried until clean.
    public static func liveReplay(_ executable: URL, recording: String, topology: String, out: String)
        throws -> (outcome: ProgramOutcome, report: String) {
        try? FileManager.default.removeItem(atPath: out)
        let outcome = try run(executable, ["replay", recording, "--live", topology, "--out", out, "--json"])
        return (outcome, "exit \(outcome.status) \(outcome.output) \(outcome.error)")
    }

    /// Starts `executable` in the background (a run to kill, interrupt or watch); `finish` waits for it.
    public static func start(_ executable: URL, _ arguments: [String], in directory: URL? = nil) throws -> StartedProgram {
        try StartedProgram(executable, arguments, in: directory)
    }

    /// A program started by `start`, its output read as it comes.
    public final class StartedProgram {
        public let process = Process()
        private let outputReader: PipeReader
        private let errorReader: PipeReader

        init(_ executable: URL, _ arguments: [String], in directory: URL?) throws {
            process.executableURL = executable
            process.arguments = arguments
            if let directory { process.currentDirectoryURL = directory }
            let output = Pipe()
            let error = Pipe()
            process.standardOutput = output
            process.standardError = error
            process.standardInput = FileHandle.nullDevice
            try process.run()
            outputReader = PipeReader(output.fileHandleForReading)
            errorReader = PipeReader(error.fileHandleForReading)
        }

        /// Waits at most `seconds` for the program to end; nil when it had not (it is then killed, so a
        /// test of a program that should have stopped fails instead of hanging).
        public func finish(within seconds: Double) -> ProgramOutcome? {
            let ended = DispatchSemaphore(value: 0)
            let process = self.process
            Thread.detachNewThread {
                process.waitUntilExit()
                ended.signal()
            }
            guard ended.wait(timeout: .now() + seconds) == .success else {
                kill(process.processIdentifier, SIGKILL)
                _ = finish()
                return nil
            }
            return finish()
        }

        /// Waits for the program to end; what it printed and its status.
        public func finish() -> ProgramOutcome {
            let outputData = outputReader.wait()
            let errorData = errorReader.wait()
            process.waitUntilExit()
            return ProgramOutcome(status: process.terminationStatus, output: String(decoding: outputData, as: UTF8.self),
                                  error: String(decoding: errorData, as: UTF8.self))
        }
    }

    /// Reads one pipe to its end on a thread of its own.
    final class PipeReader: @unchecked Sendable {
        private var data = Data()
        private let done = DispatchSemaphore(value: 0)

        init(_ handle: FileHandle) {
            Thread.detachNewThread { [self] in
                data = handle.readDataToEndOfFile()
                done.signal()
            }
        }

        func wait() -> Data {
            done.wait()
            return data
        }
    }
}
