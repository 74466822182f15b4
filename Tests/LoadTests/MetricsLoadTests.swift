import Foundation
import StoreKitTestKit
import StoreKitTestSupport
import Testing

/// `sksim load --metrics HOST:PORT`: Prometheus's text format over real HTTP while the load runs.
@Suite(.serialized) struct MetricsLoadTests {
    @Test("while the load runs, GET /metrics answers Prometheus's text format with the run's counters and each stage's p99")
    func metricsDuringTheRun() throws {
        let python = try #require(LoadRunTests.which("python3"), "python3 fetches the metrics")
        let scratch = LoadRunTests.Scratch()
        let port = 46_000 + Int(getpid() % 2_000)
        let load = try SKSimProgram.start(try LoadRunTests.executable(), ["load", "--rate", "100", "--duration", "4s", "--devices", "20",
                                                                         "--metrics", "127.0.0.1:\(port)", "--out", scratch.path("run"), "--json"],
                                          in: LoadRunTests.repositoryRoot)
        let fetch = "import urllib.request,sys\ntry:\n print(urllib.request.urlopen('http://127.0.0.1:\(port)/metrics', timeout=2).read().decode())\nexcept Exception as e:\n print('unavailable', e)"
        // Bounded wait until a second of load has been merged and served.
        var text = ""
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline, load.process.isRunning {
            text = try LoadRunTests.run(python, ["-c", fetch]).output
            let started = text.split(separator: "\n").first { $0.hasPrefix("sksim_load_started_total ") }
            if let started, let value = Double(started.split(separator: " ").last ?? ""), value > 0 { break }
            usleep(200_000)
        }
        #expect(text.contains("# TYPE sksim_load_started_total counter"), "\(text)")
        #expect(text.contains("sksim_load_stage_p99_seconds{stage=\"added\"}"), "\(text)")
        #expect(text.contains("# TYPE sksim_load_in_flight gauge"), "\(text)")
        let outcome = load.finish()
        #expect(outcome.status == 0, "\(outcome.error)")
    }
}
