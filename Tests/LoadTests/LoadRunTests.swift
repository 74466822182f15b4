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

    /// The port a test server started as `process` bound, read from the file it writes at once (renamed
    /// into place whole); nil when the file did not come within 20 s or the server ended first.
    static func boundPort(written portFile: URL, by process: Process) -> String? {
        _ = SKSimProgram.eventually(seconds: 20) { FileManager.default.fileExists(atPath: portFile.path) || !process.isRunning }
        return try? String(contentsOf: portFile, encoding: .utf8)
    }

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
        // The rate counts only what completed while starts were offered (2 s): never above the offered
        // 300/s, and with the drain's completions it accounts for every lifecycle.
        let rate = try #require(json["lifecyclesPerSecond"] as? Double)
        let drain = try #require(json["drainLifecycles"] as? Int)
        #expect(rate > 0 && rate <= 300)
        #expect(abs(rate * 2 + Double(drain) - Double(lifecycles)) <= 0.02 * Double(lifecycles), "rate \(rate), drain \(drain)")
        #expect(json["violations"] as? Int == 0)
        let stages = try #require(json["stages"] as? [String: [String: Any]])
        for stage in ["added", "purchased", "removed"] {
            let figures = try #require(stages[stage], "stage \(stage) missing")
            #expect(Set(figures.keys) == ["count", "p50Microseconds", "p90Microseconds", "p95Microseconds", "p99Microseconds", "p999Microseconds",
                                          "maxMicroseconds", "meanMicroseconds"])
            #expect((figures["p90Microseconds"] as? Int ?? 0) <= (figures["p95Microseconds"] as? Int ?? 0))
            #expect((figures["p50Microseconds"] as? Int ?? 0) <= (figures["p99Microseconds"] as? Int ?? 0))
        }
        #expect(stages["added"]?["count"] as? Int == 600)
        let thresholds = try #require(json["thresholds"] as? [[String: Any]])
        // topology/load.yaml's own threshold first, then the command line's (each expression once), then
        // errors==0 and incomplete==0, judged whenever no threshold names them (no silent pass).
        #expect(thresholds.map { $0["expression"] as? String } == ["violations==0", "removed.p99<10s", "added.p50<1us", "errors==0", "incomplete==0"])
        #expect(thresholds.map { $0["passed"] as? Bool } == [true, true, false, true, true])
        #expect(json["errorRate"] as? Double == 0)
        #expect(json["report"] as? String == scratch.url.appendingPathComponent("report/report.html").path)

        // The report: every file, a CSV row per second per stage, and the log in HdrHistogram's format.
        let report = scratch.url.appendingPathComponent("report")
        let summary = try JSONSerialization.jsonObject(with: Data(contentsOf: report.appendingPathComponent("summary.json"))) as? [String: Any]
        #expect(summary?["lifecycles"] as? Int == 600)
        let csv = try String(contentsOf: report.appendingPathComponent("timeseries.csv"), encoding: .utf8).split(separator: "\n")
        #expect(csv.first?.hasPrefix("second,stage,count,p50Microseconds") == true)
        #expect(csv.first?.hasSuffix(",p95Microseconds,meanMicroseconds,time") == true)
        // The wall-clock time of each row: the run's start, in UTC, within a minute of now.
        let time = try #require(csv.dropFirst().first?.split(separator: ",").last.map(String.init))
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        let instant = try #require(formatter.date(from: time), "\(time) is not an ISO 8601 time")
        #expect(abs(instant.timeIntervalSinceNow) < 120)
        // A row is written for the second a stage was reached in: adds come at once, removals whenever
        // the system gets there (a loaded machine may reach none in the first second).
        #expect(csv.contains { $0.hasPrefix("0.000,added,") } && csv.contains { $0.hasPrefix("1.000,added,") })
        #expect(csv.contains { $0.contains(",removed,") })
        let log = try String(contentsOf: report.appendingPathComponent("histograms.hlog"), encoding: .utf8)
        #expect(log.hasPrefix("#[Histogram log format version 1.3]"))
        #expect(log.contains("Tag=added,0.000,1.000,"))
        try checkLogWithPython(log: report.appendingPathComponent("histograms.hlog"), csv: csv.map(String.init))
        try checkReportRendersInChromium(report.appendingPathComponent("report.html"))
        try checkBannerAndTable(report.appendingPathComponent("report.html"), passed: false, stages: stages, errors: 0)
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
        // The page's own script draws four charts and then says so; each chart holds real paths.
        #expect(dump.output.contains("data-charts-rendered=\"4\""))
        for chart in ["throughput", "errors", "percentiles", "distribution"] {
            let start = try #require(dump.output.range(of: "id=\"\(chart)\""))
            let end = try #require(dump.output.range(of: "</svg>", range: start.upperBound..<dump.output.endIndex))
            let svg = dump.output[start.lowerBound..<end.lowerBound]
            #expect(svg.contains("<path d=\"M"), "\(chart) has no drawn series")
            // Tooltips: every point of a series has a title.
            #expect(svg.contains("<circle") && svg.contains("<title>"), "\(chart) has no tooltips")
        }
    }

    /// The banner says whether the thresholds held; the table has a row per stage the run reached,
    /// with its count and percentiles, and a row of the lifecycles' errors.
    func checkBannerAndTable(_ page: URL, passed: Bool, stages: [String: [String: Any]], errors: Int) throws {
        guard let dump = try HeadlessChromium.dumpDOM(page) else {
            print(HeadlessChromium.skipMessage("report.html"))
            return
        }
        #expect(dump.status == 0, "\(dump.error)")
        #expect(dump.output.contains("id=\"verdict\" class=\"banner \(passed ? "pass" : "fail")\" data-passed=\"\(passed)\""))
        #expect(dump.output.contains(passed ? ">PASSED: " : ">FAILED: "))
        let start = try #require(dump.output.range(of: "<table id=\"stages\">"))
        let end = try #require(dump.output.range(of: "</table>", range: start.upperBound..<dump.output.endIndex))
        let table = String(dump.output[start.upperBound..<end.lowerBound])
        #expect(table.contains("<th>count</th><th>mean</th><th>p50</th><th>p90</th><th>p95</th><th>p99</th><th>max</th><th>errors</th>"))
        for (stage, figures) in stages {
            let count = try #require(figures["count"] as? Int)
            #expect(table.contains("<tr data-stage=\"\(stage)\"><td>\(stage)</td><td>\(count)</td>"), "no row for \(stage) with count \(count)")
        }
        #expect(table.components(separatedBy: "<tr data-stage=").count - 1 == stages.count + 1)
        #expect(table.contains("<td>\(errors)</td></tr>"))
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

    /// The coordinator's child running `sksim driver`, once `afterAdded` transactions are in the log
    /// (a bounded wait on the log).
    static func driverProcess(of load: SKSimProgram.StartedProgram, run: String, afterAdded: Int) throws -> Int32? {
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline, load.process.isRunning {
            let added = try Self.sksim(["log", "cat", run, "--type", "transactionAdded", "--json"]).output.split(separator: "\n").count
            // Each thread lists the children it started: the driver is started from any of the load's threads.
            let tasks = "/proc/\(load.process.processIdentifier)/task"
            let children = ((try? FileManager.default.contentsOfDirectory(atPath: tasks)) ?? []).flatMap { task in
                ((try? String(contentsOfFile: "\(tasks)/\(task)/children", encoding: .utf8)) ?? "").split(separator: " ").compactMap { Int32($0) }
            }
            if added >= afterAdded, let driver = children.first(where: { pid in
                ((try? String(contentsOfFile: "/proc/\(pid)/cmdline", encoding: .utf8)) ?? "").contains("driver\0--topology")
            }) { return driver }
            usleep(50_000)
        }
        return nil
    }

    @Test("a driver stopped (SIGSTOP) for 2.5 s: the starts its loop reaches more than --late-start-bound (1 s) behind their schedule are missed starts, not made; rate counts only completions while starts were offered")
    func lateStartsAreMissed() throws {
        let scratch = Scratch()
        let run = scratch.path("run")
        let load = try SKSimProgram.start(try Self.executable(), ["load", "--rate", "100", "--duration", "5s", "--devices", "20",
                                                                 "--out", run, "--json"], in: Self.repositoryRoot)
        let driver = try #require(try Self.driverProcess(of: load, run: run, afterAdded: 50), "no driver process found")
        #expect(kill(driver, SIGSTOP) == 0)
        // The stop is the situation under test, not synchronisation: the driver is frozen for 2.5 s of its schedule.
        usleep(2_500_000)
        #expect(kill(driver, SIGCONT) == 0)
        let outcome = load.finish()
        let json = outcome.json
        let started = try #require(json["started"] as? Int)
        let missed = try #require(json["missedStarts"] as? Int)
        #expect(started + missed == 500)
        // 2.5 s frozen, 1 s of it within the bound: about 150 starts more than 1 s late. The SIGSTOP
        // lands somewhere after the 50th add, so allow for the signal's and the loop's timing.
        #expect(missed >= 100 && missed <= 200, "\(json)")
        let rate = try #require(json["lifecyclesPerSecond"] as? Double)
        let drain = try #require(json["drainLifecycles"] as? Int)
        let lifecycles = try #require(json["lifecycles"] as? Int)
        #expect(abs(rate * (json["loadSeconds"] as? Double ?? 0) - Double(lifecycles - drain)) < 1.5)
    }

    @Test("a local driver killed with SIGKILL mid-load is reported at once, naming the driver and the signal; its reports are kept, its lifecycles in flight are errors, and the run ends with a summary and a report (exit 99)")
    func driverKilledMidLoad() throws {
        let scratch = Scratch()
        let run = scratch.path("run")
        let load = try SKSimProgram.start(try Self.executable(), ["load", "--rate", "100", "--duration", "8s", "--devices", "20", "--drivers", "2",
                                                                 "--out", run, "--report", scratch.path("report"), "--json"], in: Self.repositoryRoot)
        // After its first report (1 s in), so what it reported is there to keep.
        let killed = try #require(try Self.driverProcess(of: load, run: run, afterAdded: 150), "no driver process found")
        let killedName = ((try? String(contentsOfFile: "/proc/\(killed)/cmdline", encoding: .utf8)) ?? "").contains("driver-1\0") ? "driver-1" : "driver-2"
        #expect(kill(killed, SIGKILL) == 0)
        // The other driver goes on to the end of its 8 s; the run then ends with a report, failed.
        let outcome = try #require(load.finish(within: 60), "the load did not end within 60 s of its driver's death")
        #expect(outcome.status == 99, "\(outcome.error)")
        #expect(outcome.error.contains("\(killedName) was killed by signal 9 during the load"), "\(outcome.error)")
        let json = outcome.json
        let lost = try #require(json["lostDrivers"] as? [[String: Any]])
        #expect(lost.count == 1)
        #expect(lost.first?["name"] as? String == killedName)
        // Its reports up to its death are kept.
        #expect((lost.first?["lastInterval"] as? Int ?? -1) >= 0)
        #expect((json["started"] as? Int ?? 0) >= 400, "the surviving driver's 8 s at 50/s: \(json)")
        #expect(FileManager.default.fileExists(atPath: scratch.path("report/report.html")))
        #expect(try Self.sksim(["log", "verify", run]).status == 0)
    }

    /// A DEALER at the driver endpoint that is no driver: once its connection is made, it sends a HELLO
    /// that does not decode and a FAILED. Returned open, for more frames.
    static func stranger(at endpoint: String, in context: ZeroMQContext) throws -> Socket {
        let stranger = try context.socket(.dealer)
        let connection = try stranger.monitor([.handshakeSucceeded])
        defer { connection.close() }
        try stranger.connect(endpoint)
        #expect(try connection.receive(timeout: .seconds(60))?.event == .handshakeSucceeded)
        _ = try stranger.send([Array("HELLO".utf8), Array("{not json".utf8)])
        _ = try stranger.send([Array("FAILED".utf8), Array("I say so".utf8)])
        return stranger
    }

    @Test("frames from a peer that is no driver (a malformed HELLO, a FAILED, too many frames, a frame above 16 MiB) are ignored while drivers join; the load runs")
    func strangerAtTheDriverEndpoint() throws {
        let scratch = Scratch()
        let endpoint = "tcp://127.0.0.1:\(45_000 + Int(getpid() % 2_000))"
        let load = try SKSimProgram.start(try Self.executable(), ["load", "--drivers", "1", "--remote-drivers", "1", "--listen", endpoint,
                                                                 "--rate", "20", "--duration", "1s", "--out", scratch.path("run"), "--json"],
                                          in: Self.repositoryRoot)
        // The stranger's frames reach the coordinator while it still gathers drivers (the driver
        // started below has not joined). Each once ended the load: "a DriverHello message could not
        // be read", "a driver failed: …". They are sent once the stranger's connection is made: sent
        // before the coordinator listened, they waited for libzmq's next reconnection, and in a full
        // suite on two busy cores the driver once joined first; a coordinator past gathering ignores
        // a HELLO without a word, and the test missed its warning.
        let context = try ZeroMQContext()
        defer { context.terminate() }
        let stranger = try Self.stranger(at: endpoint, in: context)
        defer { stranger.close() }
        // Beyond the protocol's limits: 4 frames, which once ended the load ("inbound message of 4
        // frames … exceeds the limits"); then, from a second stranger, a frame above 16 MiB, which
        // closes that stranger's connection. (Sent by the first, the close could race the reading of
        // its earlier messages: in 1 of about 20 runs the malformed HELLO was never logged.)
        _ = try stranger.send([Array("REPORT".utf8), [1], [2], [3]])
        let bigSender = try context.socket(.dealer)
        defer { bigSender.close() }
        try bigSender.connect(endpoint)
        _ = try bigSender.send([Array("HELLO".utf8), [UInt8](repeating: 0, count: 17 << 20)])
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

    @Test("a HELLO and a FAILED from a peer that is no driver, arriving while the load runs, are ignored and logged; the load runs")
    func strangerDuringTheLoad() throws {
        let scratch = Scratch()
        let endpoint = "tcp://127.0.0.1:\(49_000 + Int(getpid() % 1_000))"
        let load = try SKSimProgram.start(try Self.executable(), ["load", "--drivers", "1", "--listen", endpoint, "--rate", "20",
                                                                 "--duration", "6s", "--out", scratch.path("run"), "--json"],
                                          in: Self.repositoryRoot)
        // The coordinator creates histograms.hlog once every driver has joined and the START is out:
        // from then on it collects reports, and a stranger's frames meet that loop, not the gathering.
        #expect(SKSimProgram.eventually(seconds: 60) { FileManager.default.fileExists(atPath: scratch.path("run/histograms.hlog")) })
        let context = try ZeroMQContext()
        defer { context.terminate() }
        let stranger = try Self.stranger(at: endpoint, in: context)
        defer { stranger.close() }
        let outcome = load.finish()
        #expect(outcome.status == 0, "\(outcome.error)")
        #expect(outcome.json["lifecycles"] as? Int == 120, "\(outcome.output)")
        #expect(outcome.error.contains("ignored a HELLO from a peer that is no driver of this load"), "\(outcome.error)")
        #expect(outcome.error.contains("ignored a FAILED from a peer that is no driver of this load"), "\(outcome.error)")
    }

    @Test("--abort-on-fail stops the load early when a latency threshold fails, but not before --abort-delay (k6's delayAbortEval)")
    func abortOnFail() throws {
        let scratch = Scratch()
        let outcome = try Self.sksim(["load", "--rate", "100", "--duration", "30s", "--threshold", "added.p99<1us", "--abort-on-fail",
                                      "--abort-delay", "3s", "--out", scratch.path("run"), "--json"])
        #expect(outcome.status == 99)
        let json = outcome.json
        #expect((json["aborted"] as? String)?.contains("added.p99<1us") == true)
        // Failed from the first interval on, judged from the third: the load ran 3 s, and stopped well before its 30 s.
        let loadSeconds = try #require(json["loadSeconds"] as? Double)
        #expect(loadSeconds >= 2.9 && loadSeconds < 10, "\(loadSeconds)")
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
