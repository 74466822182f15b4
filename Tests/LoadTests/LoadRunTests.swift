import Foundation
import StoreKitTestSupport
import Testing
import ZeroMQ

/// `sksim load` as a user runs it: real queue, store, downloader and driver processes over
/// ZeroMQ, a real log, the report opened in a real browser.
@Suite(.serialized) struct LoadRunTests {
    static let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    typealias Outcome = ProgramOutcome

    static func executable() throws -> URL { try SKSimProgram.executable(packageRoot: repositoryRoot) }

    static func run(_ executable: String, _ arguments: [String]) throws -> Outcome {
        try SKSimProgram.run(URL(fileURLWithPath: executable), arguments, in: repositoryRoot)
    }

    static func sksim(_ arguments: [String]) throws -> Outcome { try run(try executable().path, arguments) }

    /// Short run directories: ipc socket paths must stay under 100 bytes.
    final class Scratch {
        let url = URL(fileURLWithPath: "/tmp/skl-\(UUID().uuidString.prefix(8))", isDirectory: true)
        init() { try? FileManager.default.createDirectory(at: url, withIntermediateDirectories: true) }
        deinit { try? FileManager.default.removeItem(at: url) }
        func path(_ name: String) -> String { url.appendingPathComponent(name).path }
    }

    static func which(_ program: String) -> String? { InstalledProgram.path(of: program) }

    @Test("without a topology file, from a directory with no topology/ in it, sksim load runs the built-in load topology and its settings")
    func builtInTopologyAnywhere() throws {
        let scratch = Scratch()
        let outcome = try SKSimProgram.run(try Self.executable(), ["load", "--rate", "50/s", "--duration", "1s", "--devices", "5", "--out", "run", "--json"],
                                           in: scratch.url)
        #expect(outcome.status == 0, "\(outcome.error)")
        #expect(outcome.json["started"] as? Int == 50)
        // The built-in topology's own `load:` threshold applies, as topology/load.yaml's did.
        #expect((outcome.json["thresholds"] as? [[String: Any]])?.first?["expression"] as? String == "violations==0")
        let runFile = try JSONSerialization.jsonObject(with: Data(contentsOf: scratch.url.appendingPathComponent("run/run.json"))) as? [String: Any]
        #expect(runFile?["topology"] as? String == "built-in:load")
    }

    @Test("two drivers: --json has the issue's fields, a failed threshold exits 99 after writing the report, and the report renders in Chromium")
    func openModelReport() throws {
        let scratch = Scratch()
        let outcome = try Self.sksim(["load", "--rate", "300/s", "--duration", "2s", "--drivers", "2", "--devices", "40",
                                      "--threshold", "removed.p99<10s", "--threshold", "violations==0", "--threshold", "added.p50<1us",
                                      "--out", scratch.path("run"), "--report", scratch.path("report"), "--json"])
        #expect(outcome.status == 99, "\(outcome.error)")
        let json = outcome.json
        let lifecycles = try #require(json["lifecycles"] as? Int)
        // Both drivers' shares add up to the schedule: 300/s for 2 s, every one completed.
        #expect(json["started"] as? Int == 600)
        #expect(lifecycles == 600)
        #expect(json["missedStarts"] as? Int == 0)
        #expect((json["lifecyclesPerSecond"] as? Double ?? 0) > 250)
        #expect(json["violations"] as? Int == 0)
        let stages = try #require(json["stages"] as? [String: [String: Any]])
        for stage in ["added", "purchased", "removed"] {
            let figures = try #require(stages[stage], "stage \(stage) missing")
            #expect(Set(figures.keys) == ["count", "p50Microseconds", "p90Microseconds", "p99Microseconds", "p999Microseconds", "maxMicroseconds"])
            #expect((figures["p50Microseconds"] as? Int ?? 0) <= (figures["p99Microseconds"] as? Int ?? 0))
        }
        #expect(stages["added"]?["count"] as? Int == 600)
        let thresholds = try #require(json["thresholds"] as? [[String: Any]])
        // topology/load.yaml's own threshold first, then the command line's (each expression once).
        #expect(thresholds.map { $0["expression"] as? String } == ["violations==0", "removed.p99<10s", "added.p50<1us"])
        #expect(thresholds.map { $0["passed"] as? Bool } == [true, true, false])

        // The report: every file, a CSV row per second per stage, and the log in HdrHistogram's format.
        let report = scratch.url.appendingPathComponent("report")
        let summary = try JSONSerialization.jsonObject(with: Data(contentsOf: report.appendingPathComponent("summary.json"))) as? [String: Any]
        #expect(summary?["lifecycles"] as? Int == 600)
        let csv = try String(contentsOf: report.appendingPathComponent("timeseries.csv"), encoding: .utf8).split(separator: "\n")
        #expect(csv.first?.hasPrefix("second,stage,count,p50Microseconds") == true)
        // A row is written for the second a stage was reached in: adds come at once, removals whenever
        // the system gets there (a loaded machine may reach none in the first second).
        #expect(csv.contains { $0.hasPrefix("0.000,added,") } && csv.contains { $0.hasPrefix("1.000,added,") })
        #expect(csv.contains { $0.contains(",removed,") })
        let log = try String(contentsOf: report.appendingPathComponent("histograms.hlog"), encoding: .utf8)
        #expect(log.hasPrefix("#[Histogram log format version 1.3]"))
        #expect(log.contains("Tag=added,0.000,1.000,"))
        try checkLogWithPython(log: report.appendingPathComponent("histograms.hlog"), csv: csv.map(String.init))
        try checkReportRendersInChromium(report.appendingPathComponent("report.html"))
    }

    /// HdrHistogram's own Python implementation decodes every histogram of the log, and its counts and
    /// percentiles are the CSV's (an independent reader of the format).
    func checkLogWithPython(log: URL, csv: [String]) throws {
        guard let python = Self.which("python3"), try Self.run(python, ["-c", "import hdrh"]).status == 0 else {
            print("skipped the HdrHistogram log cross-check: python3 with the hdrhistogram package is missing (scripts/setup installs it)")
            return
        }
        let script = """
        import sys
        from hdrh.histogram import HdrHistogram
        for line in open(sys.argv[1]):
            if line.startswith('Tag='):
                tag, start, length, maximum, encoded = line.strip().split(',')
                h = HdrHistogram.decode(encoded)
                print('%.3f,%s,%d,%d,%d' % (float(start), tag[4:], h.get_total_count(), h.get_value_at_percentile(50), h.get_max_value()))
        """
        let decoded = try Self.run(python, ["-c", script, log.path])
        #expect(decoded.status == 0, "\(decoded.error)")
        let lines = decoded.output.split(separator: "\n")
        #expect(!lines.isEmpty)
        for line in lines {
            let fields = line.split(separator: ",").map(String.init)
            let row = try #require(csv.first { $0.hasPrefix("\(fields[0]),\(fields[1]),") }, "no CSV row for \(line)")
            let columns = row.split(separator: ",").map(String.init)
            // The count exactly; p50 and max (CSV columns 3 and 7) to the histogram's precision: the
            // CSV's come from the histograms that keep the exact maximum, which the log's encoding
            // has no field for. (Higher percentiles are not compared: the Python port rounds the
            // rank to the nearest sample where HdrHistogram's Java and Swift versions round it up.)
            #expect(columns[2] == fields[2], "\(line) vs \(row)")
            for (csvColumn, pythonField) in [(3, 3), (7, 4)] {
                let ours = try #require(Double(columns[csvColumn]))
                let theirs = try #require(Double(fields[pythonField]))
                #expect(abs(ours - theirs) <= theirs * 0.001 + 1, "\(line) vs \(row)")
            }
        }
    }

    func checkReportRendersInChromium(_ page: URL) throws {
        guard let dump = try HeadlessChromium.dumpDOM(page) else {
            print(HeadlessChromium.skipMessage("report.html"))
            return
        }
        #expect(dump.status == 0, "\(dump.error)")
        // The page's own script draws three charts and then says so; each chart holds real paths.
        #expect(dump.output.contains("data-charts-rendered=\"3\""))
        for chart in ["throughput", "percentiles", "distribution"] {
            let start = try #require(dump.output.range(of: "id=\"\(chart)\""))
            let end = try #require(dump.output.range(of: "</svg>", range: start.upperBound..<dump.output.endIndex))
            let svg = dump.output[start.lowerBound..<end.lowerBound]
            #expect(svg.contains("<path d=\"M"), "\(chart) has no drawn series")
        }
    }

    @Test("the closed model with restores and downloads times every stage and the log shows no violation")
    func closedModel() throws {
        let scratch = Scratch()
        let outcome = try Self.sksim(["load", "--model", "closed", "--devices", "20", "--think-time", "10ms", "--duration", "2s",
                                      "--restore-fraction", "0.2", "--download-fraction", "0.3", "--threshold", "violations==0",
                                      "--threshold", "pending==0", "--out", scratch.path("run"), "--json"])
        #expect(outcome.status == 0, "\(outcome.error)")
        let json = outcome.json
        let stages = try #require(json["stages"] as? [String: Any])
        for stage in ["added", "purchased", "downloaded", "finished", "removed", "restored", "restoreFinished"] {
            #expect(stages[stage] != nil, "stage \(stage) missing")
        }
        #expect(json["lifecycles"] as? Int == json["started"] as? Int)
        #expect(json["incomplete"] as? Int == 0)
    }

    @Test("a queue killed with SIGKILL mid-load is restarted and every lifecycle still completes: the driver handles events it catches up by FETCH")
    func queueKilledMidLoad() throws {
        let scratch = Scratch()
        let run = scratch.path("run")
        let load = try SKSimProgram.start(try Self.executable(), ["load", "--rate", "100", "--duration", "4s", "--devices", "60",
                                                                 "--out", run, "--json"], in: Self.repositoryRoot)
        // Kill the queue once lifecycles are under way (bounded wait on the log, no fixed sleep).
        let deadline = Date().addingTimeInterval(60)
        var added = 0
        while added < 100, Date() < deadline, load.process.isRunning {
            let lines = try Self.sksim(["log", "cat", run, "--type", "transactionAdded", "--json"]).output
            added = lines.split(separator: "\n").count
            if added < 100 { usleep(50_000) }
        }
        let ready = try String(contentsOfFile: run + "/queue.ready", encoding: .utf8)
        let queue = try #require(Int32(ready.trimmingCharacters(in: .whitespacesAndNewlines)))
        #expect(kill(queue, SIGKILL) == 0)
        let outcome = load.finish()
        #expect(outcome.status == 0, "\(outcome.error)")
        // Once a few dozen lifecycles stalled to the drain's end: events the driver's SUB missed while the
        // queue restarted came back by FETCH without a topic, and the driver skipped them as device-less.
        #expect(outcome.json["incomplete"] as? Int == 0, "\(outcome.output)")
        #expect(outcome.json["pending"] as? Int == 0, "\(outcome.output)")
        #expect(outcome.json["lifecycles"] as? Int == outcome.json["started"] as? Int)
        #expect(outcome.error.contains("queue died; restarting it from the log"), "\(outcome.error)")
        #expect(try Self.sksim(["log", "verify", run]).status == 0)
    }

    @Test("a local driver killed with SIGKILL mid-load fails the load at once, naming the driver and the signal, not after 15 s of its silence")
    func driverKilledMidLoad() throws {
        let scratch = Scratch()
        let run = scratch.path("run")
        let load = try SKSimProgram.start(try Self.executable(), ["load", "--rate", "100", "--duration", "30s", "--devices", "20",
                                                                 "--out", run, "--json"], in: Self.repositoryRoot)
        // The coordinator's child running `sksim driver`, once lifecycles are under way (bounded wait on the log).
        let deadline = Date().addingTimeInterval(60)
        var driver: Int32?
        while driver == nil, Date() < deadline, load.process.isRunning {
            let added = try Self.sksim(["log", "cat", run, "--type", "transactionAdded", "--json"]).output.split(separator: "\n").count
            // Each thread lists the children it started: the driver is started from any of the load's threads.
            let tasks = "/proc/\(load.process.processIdentifier)/task"
            let children = ((try? FileManager.default.contentsOfDirectory(atPath: tasks)) ?? []).flatMap { task in
                ((try? String(contentsOfFile: "\(tasks)/\(task)/children", encoding: .utf8)) ?? "").split(separator: " ").compactMap { Int32($0) }
            }
            driver = added < 20 ? nil : children.first { pid in
                ((try? String(contentsOfFile: "/proc/\(pid)/cmdline", encoding: .utf8)) ?? "").contains("driver\0--topology")
            }
            if driver == nil { usleep(50_000) }
        }
        #expect(kill(try #require(driver, "no driver process found"), SIGKILL) == 0)
        // Before: "driver 'driver-1' sent no report for 15 s", 15 s later.
        let outcome = try #require(load.finish(within: 12), "the load did not end within 12 s of its driver's death")
        #expect(outcome.status == 2)
        #expect(outcome.error.contains("driver-1 was killed by signal 9 during the load"), "\(outcome.error)")
        #expect(try Self.sksim(["log", "verify", run]).status == 0)
    }

    @Test("frames from a peer that is no driver (a malformed HELLO, a FAILED, too many frames, a frame above 16 MiB) are ignored while drivers join; the load runs")
    func strangerAtTheDriverEndpoint() throws {
        let scratch = Scratch()
        let endpoint = "tcp://127.0.0.1:\(45_000 + Int(getpid() % 2_000))"
        let load = try SKSimProgram.start(try Self.executable(), ["load", "--drivers", "1", "--remote-drivers", "1", "--listen", endpoint,
                                                                 "--rate", "20", "--duration", "1s", "--out", scratch.path("run"), "--json"],
                                          in: Self.repositoryRoot)
        // The stranger's frames wait in its DEALER until the coordinator listens, and arrive long
        // before the driver started below has registered its devices (the coordinator is still
        // gathering drivers). Each once ended the load: "a DriverHello message could not be read",
        // "a driver failed: …".
        let context = try ZeroMQContext()
        defer { context.terminate() }
        let stranger = try context.socket(.dealer)
        defer { stranger.close() }
        try stranger.connect(endpoint)
        _ = try stranger.send([Array("HELLO".utf8), Array("{not json".utf8)])
        _ = try stranger.send([Array("FAILED".utf8), Array("I say so".utf8)])
        // Beyond the protocol's limits: 4 frames, which once ended the load ("inbound message of 4
        // frames … exceeds the limits"); then a frame above 16 MiB, which closes the stranger's connection.
        _ = try stranger.send([Array("REPORT".utf8), [1], [2], [3]])
        _ = try stranger.send([Array("HELLO".utf8), [UInt8](repeating: 0, count: 17 << 20)])
        let driver = try Self.sksim(["driver", "--topology", Self.repositoryRoot.appendingPathComponent("topology/load.yaml").path,
                                     "--name", "remote-1", "--coordinator", endpoint, "--run-directory", scratch.path("run")])
        #expect(driver.status == 0, "\(driver.error)")
        let outcome = load.finish()
        #expect(outcome.status == 0, "\(outcome.error)")
        #expect(outcome.json["drivers"] as? Int == 2)
        #expect(outcome.json["lifecycles"] as? Int == 20, "\(outcome.output)")
        #expect(outcome.error.contains("ignored a HELLO that no driver sent"), "\(outcome.error)")
        #expect(outcome.error.contains("ignored a message beyond the driver protocol's limits"), "\(outcome.error)")
    }

    @Test("--abort-on-fail stops the load early when a latency threshold fails")
    func abortOnFail() throws {
        let scratch = Scratch()
        let outcome = try Self.sksim(["load", "--rate", "100", "--duration", "30s", "--threshold", "added.p99<1us", "--abort-on-fail",
                                      "--out", scratch.path("run"), "--json"])
        #expect(outcome.status == 99)
        let json = outcome.json
        #expect((json["aborted"] as? String)?.contains("added.p99<1us") == true)
        #expect((json["loadSeconds"] as? Double ?? 30) < 10)
    }

    @Test("bad settings are one clear line and start nothing", arguments: [
        (["--threshold", "finished.p99"], "threshold"), (["--stages", "30s"], "--stages"), (["--duration", "ten"], "duration"),
        (["--rate", "10", "--stages", "1s:10"], "either --rate or --stages"), (["--model", "closed", "--rate", "5"], "closed model"),
    ])
    func badSettings(arguments: [String], expected: String) throws {
        let scratch = Scratch()
        let outcome = try Self.sksim(["load"] + arguments + ["--out", scratch.path("run")])
        #expect(outcome.status != 0 && outcome.status != 99)
        let lines = outcome.error.split(separator: "\n")
        #expect(lines.count == 1, "\(outcome.error)")
        #expect(outcome.error.contains(expected))
        #expect(!FileManager.default.fileExists(atPath: scratch.path("run/log")))
    }
}
