import Foundation
import StoreKitTestKit
import Testing

/// `sksim load --backend URL` against a real HTTP server started by the test (Python's http.server,
/// a thread per request), which records every POST it gets.
@Suite(.serialized) struct BackendLoadTests {
    /// The test backend: answers every POST with `status` after checking the body has the fixed JSON
    /// names (400 if not), appends the body as one line to `records`, and writes its port to `portFile`.
    static let server = """
    import json, sys, threading
    from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
    status, records, port_file = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    keys = {"transactionId", "originalTransactionId", "productId", "signedTransaction", "appReceipt", "device", "account"}
    lock = threading.Lock()
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            try:
                ok = set(json.loads(body)) == keys
            except ValueError:
                ok = False
            with lock, open(records, "ab") as out:
                out.write(body.replace(b"\\n", b" ") + b"\\n")
            code = status if ok else 400
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()
        def log_message(self, *arguments):
            pass
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(port_file + ".tmp", "w") as out:
        out.write(str(server.server_address[1]))
    import os
    os.rename(port_file + ".tmp", port_file)
    server.serve_forever()
    """

    final class Backend {
        let process = Process()
        let records: URL
        let url: String

        init(status: Int, scratch: LoadRunTests.Scratch) throws {
            let python = try #require(LoadRunTests.which("python3"), "python3 is needed for the test backend")
            records = scratch.url.appendingPathComponent("posts.jsonl")
            let portFile = scratch.url.appendingPathComponent("backend.port")
            process.executableURL = URL(fileURLWithPath: python)
            process.arguments = ["-c", BackendLoadTests.server, String(status), records.path, portFile.path]
            try process.run()
            // Bounded wait for the port it bound (written at once, renamed into place whole).
            let deadline = Date().addingTimeInterval(20)
            while !FileManager.default.fileExists(atPath: portFile.path), Date() < deadline, process.isRunning { usleep(20_000) }
            let port = try #require(try? String(contentsOf: portFile, encoding: .utf8), "the test backend did not start")
            url = "http://127.0.0.1:\(port)/purchases"
        }

        deinit {
            // SIGKILL: the child inherits the test process's blocked SIGTERM, so terminate() would leave it serving.
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }

        var posts: [[String: Any]] {
            ((try? String(contentsOf: records, encoding: .utf8)) ?? "").split(separator: "\n").compactMap {
                try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
            }
        }
    }

    @Test("every purchased and restored transaction is POSTed once, with the fixed JSON names, before it is finished; stage backend is timed")
    func backendGetsEveryTransaction() throws {
        let scratch = LoadRunTests.Scratch()
        let backend = try Backend(status: 200, scratch: scratch)
        let run = scratch.path("run")
        let outcome = try LoadRunTests.sksim(["load", "--backend", backend.url, "--rate", "100", "--duration", "2s", "--devices", "20",
                                              "--download-fraction", "0.3", "--restore-fraction", "0.1", "--out", run, "--json"])
        #expect(outcome.status == 0, "\(outcome.error)\n\(outcome.output)")
        let json = outcome.json
        #expect(json["errors"] as? Int == 0)
        #expect(json["backendErrors"] as? Int == 0)
        let posts = backend.posts
        let stages = try #require(json["stages"] as? [String: [String: Any]])
        let timed = try #require(stages["backend"], "no stage backend: \(stages.keys.sorted())")
        #expect(timed["count"] as? Int == posts.count)
        #expect(Set(timed.keys) == Set(try #require(stages["added"]).keys))

        let purchased = try CatalogLoadTests.events(run, "transactionPurchased").compactMap { $0["transactionIdentifier"] as? String }
        let restored = try CatalogLoadTests.events(run, "transactionRestored").compactMap { $0["transactionIdentifier"] as? String }
        #expect(!purchased.isEmpty && !restored.isEmpty, "purchased \(purchased.count), restored \(restored.count)")
        // Once per delivery: each transaction's id exactly once, and nothing else.
        let posted = posts.compactMap { $0["transactionId"] as? String }
        #expect(posted.count == Set(posted).count, "a transaction was POSTed twice")
        #expect(Set(posted) == Set(purchased + restored))
        for post in posts {
            #expect(Set(post.keys) == ["transactionId", "originalTransactionId", "productId", "signedTransaction", "appReceipt", "device", "account"])
            #expect((post["signedTransaction"] as? String)?.split(separator: ".", omittingEmptySubsequences: false).count == 3)
            #expect((post["device"] as? String)?.hasPrefix("driver-1-") == true)
        }
        // A purchase's original is itself; a restored transaction names its original purchase.
        let restoredPost = try #require(posts.first { restored.contains($0["transactionId"] as? String ?? "") })
        #expect(restoredPost["originalTransactionId"] as? String != restoredPost["transactionId"] as? String)
    }

    @Test("a backend that answers 503: the run exits 99, every refused transaction counts in backendErrors and errors, and none of them is finished")
    func refusingBackendFailsTheRun() throws {
        let scratch = LoadRunTests.Scratch()
        let backend = try Backend(status: 503, scratch: scratch)
        let run = scratch.path("run")
        let outcome = try LoadRunTests.sksim(["load", "--backend", backend.url, "--rate", "50", "--duration", "1s", "--devices", "10",
                                              "--drain", "2s", "--out", run, "--json"])
        #expect(outcome.status == 99, "\(outcome.error)\n\(outcome.output)")
        let json = outcome.json
        let posted = Set(backend.posts.compactMap { $0["transactionId"] as? String })
        #expect(!posted.isEmpty)
        #expect(json["backendErrors"] as? Int == posted.count)
        #expect((json["errors"] as? Int ?? 0) >= posted.count)
        let thresholds = try #require(json["thresholds"] as? [[String: Any]])
        #expect(thresholds.contains { $0["expression"] as? String == "errors==0" && $0["passed"] as? Bool == false })
        // transactionFinished names the key (device#number); the identifier is device.number.
        let finished = Set(try CatalogLoadTests.events(run, "transactionFinished").compactMap { ($0["transaction"] as? String)?.replacingOccurrences(of: "#", with: ".") })
        #expect(finished.isDisjoint(with: posted), "finished although the backend refused: \(finished.intersection(posted).sorted().prefix(5))")
        #expect(json["pending"] as? Int == posted.count)
    }

    @Test("a backend that nobody listens on: refused connections are backend errors, and the run exits 99")
    func unreachableBackend() throws {
        let scratch = LoadRunTests.Scratch()
        // Port 9 (discard) on the loopback: nothing of this machine listens there, so the connection is refused.
        let outcome = try LoadRunTests.sksim(["load", "--backend", "http://127.0.0.1:9/purchases", "--backend-timeout", "2s", "--rate", "20", "--duration", "1s",
                                              "--devices", "5", "--drain", "3s", "--out", scratch.path("run"), "--json"])
        #expect(outcome.status == 99, "\(outcome.error)\n\(outcome.output)")
        #expect((outcome.json["backendErrors"] as? Int ?? 0) > 0)
        #expect(outcome.json["stages"].flatMap { ($0 as? [String: Any])?["backend"] } == nil)
    }
}
