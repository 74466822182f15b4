import Foundation
import StoreKitModel
import StoreKitTestKit
import Testing

/// `sksim load --backend URL` against a real HTTP server started by the test (Python's http.server,
/// a thread per request), which records every POST it gets.
@Suite(.serialized) struct BackendLoadTests {
    /// The test backend: answers every POST with `status` after checking the body has the fixed JSON
    /// names and, given a root certificate, that Apple's App Store Server Library verifies its
    /// `signedTransaction` (carrying the body's identifiers) and reads a transaction id from its
    /// `appReceipt` (400 if not). It appends the body as one line to `records` and its verdict (the
    /// receipt's transaction id, or why it refused) as one line to `records.verdicts`, and writes its
    /// port to `portFile`.
    static let server = """
    import json, os, sys, threading
    from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
    status, records, port_file, root = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    keys = {"transactionId", "originalTransactionId", "productId", "signedTransaction", "appReceipt", "device", "account"}
    lock = threading.Lock()
    verifier = None
    def verdict(purchase):
        global verifier
        if set(purchase) != keys:
            return "refused: keys " + ",".join(sorted(purchase))
        if not root:
            return "unchecked"
        from appstoreserverlibrary.models.Environment import Environment
        from appstoreserverlibrary.receipt_utility import ReceiptUtility
        from appstoreserverlibrary.signed_data_verifier import SignedDataVerifier
        if verifier is None:
            with open(root, "rb") as certificate:
                verifier = SignedDataVerifier([certificate.read()], False, Environment.SANDBOX, "com.example.sksim")
        try:
            decoded = verifier.verify_and_decode_signed_transaction(purchase["signedTransaction"])
        except Exception as error:
            return "refused: signature " + repr(error)
        for name in ("transactionId", "originalTransactionId", "productId"):
            if getattr(decoded, name) != purchase[name]:
                return "refused: %s %s signed, %s posted" % (name, getattr(decoded, name), purchase[name])
        receipt_transaction = ReceiptUtility().extract_transaction_id_from_app_receipt(purchase["appReceipt"])
        return receipt_transaction if receipt_transaction else "refused: no transaction in the receipt"
    refused_notifications = set()
    def notification(body):
        # App Store Server Notifications: verified with Apple's library; the first notification's first
        # attempt is answered 503, so that it is retried with the same notificationUUID.
        from appstoreserverlibrary.models.Environment import Environment
        from appstoreserverlibrary.signed_data_verifier import SignedDataVerifier
        with open(root, "rb") as certificate:
            decoded = SignedDataVerifier([certificate.read()], False, Environment.SANDBOX, "com.example.sksim").verify_and_decode_notification(json.loads(body)["signedPayload"])
        uuid = decoded.notificationUUID
        with lock:
            first = not refused_notifications
            if first:
                refused_notifications.add(uuid)
            with open(records + ".notifications", "a") as out:
                out.write("%s %s %s\\n" % (uuid, decoded.rawNotificationType, 503 if first else 200))
        return 503 if first else 200
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path.startswith("/notifications"):
                try:
                    code = notification(body)
                except Exception as error:
                    with lock, open(records + ".notifications", "a") as out:
                        out.write("refused %s 400\\n" % repr(error).replace(" ", "_").replace("\\n", "_"))
                    code = 400
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            with lock:
                try:
                    judged = verdict(json.loads(body))
                except Exception as error:
                    judged = "refused: " + repr(error)
                with open(records, "ab") as out:
                    out.write(body.replace(b"\\n", b" ") + b"\\n")
                with open(records + ".verdicts", "a") as out:
                    out.write(judged.replace("\\n", " ") + "\\n")
            code = 400 if judged.startswith("refused") else status
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()
        def log_message(self, *arguments):
            pass
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(port_file + ".tmp", "w") as out:
        out.write(str(server.server_address[1]))
    os.rename(port_file + ".tmp", port_file)
    server.serve_forever()
    """

    final class Backend {
        let process = Process()
        let records: URL
        let url: String

        /// `root`: the root certificate the backend trusts (nil: it checks the JSON names only).
        init(status: Int, scratch: LoadRunTests.Scratch, root: URL? = nil) throws {
            let python = try #require(LoadRunTests.which("python3"), "python3 is needed for the test backend")
            records = scratch.url.appendingPathComponent("posts.jsonl")
            let portFile = scratch.url.appendingPathComponent("backend.port")
            process.executableURL = URL(fileURLWithPath: python)
            process.arguments = ["-c", BackendLoadTests.server, String(status), records.path, portFile.path, root?.path ?? ""]
            try process.run()
            let port = try #require(LoadRunTests.boundPort(written: portFile, by: process), "the test backend did not start")
            url = "http://127.0.0.1:\(port)/purchases"
        }

        deinit {
            // SIGKILL: the child inherits the test process's blocked SIGTERM, so terminate() would leave it serving.
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }

        /// Per POST, in order: the receipt's transaction id, or why the backend refused it.
        var verdicts: [String] {
            ((try? String(contentsOf: records.appendingPathExtension("verdicts"), encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
        }

        /// Per notification POST: `UUID TYPE STATUS` (or `refused WHY 400`).
        var notifications: [[Substring]] {
            ((try? String(contentsOf: records.appendingPathExtension("notifications"), encoding: .utf8)) ?? "").split(separator: "\n").map { $0.split(separator: " ") }
        }

        var posts: [[String: Any]] {
            ((try? String(contentsOf: records, encoding: .utf8)) ?? "").split(separator: "\n").compactMap {
                try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
            }
        }
    }

    /// Apple's decimal `transactionId` of a log identifier (`device.number`), or the identifier itself when decimal already.
    static func decimal(_ identifier: String) -> String {
        identifier.allSatisfy(\.isNumber) ? identifier : AppStoreIdentifier.transactionIdentifier(identifier)
    }

    /// Issue 31 item 2 with issue 29's contract: the backend verifies every POST with Apple's App Store
    /// Server Library, trusting the run's root.cer.
    @Test("every purchased and restored transaction is POSTed once, before it is finished, signed so that Apple's library verifies it, with an app receipt naming a transaction of the log; stage backend is timed")
    func backendGetsEveryTransaction() throws {
        let scratch = LoadRunTests.Scratch()
        let run = scratch.path("run")
        let backend = try Backend(status: 200, scratch: scratch, root: URL(fileURLWithPath: run).appendingPathComponent("app-store/root.cer"))
        let outcome = try LoadRunTests.sksim(["load", "--backend", backend.url, "--rate", "100", "--duration", "2s", "--devices", "20",
                                              "--download-fraction", "0.3", "--restore-fraction", "0.1", "--out", run, "--json"])
        let verdicts = backend.verdicts
        #expect(outcome.status == 0, "\(outcome.error)\n\(outcome.output)\n\(verdicts.filter { $0.hasPrefix("refused") }.prefix(3))")
        let json = outcome.json
        #expect(json["errors"] as? Int == 0)
        #expect(json["backendErrors"] as? Int == 0)
        let posts = backend.posts
        let stages = try #require(json["stages"] as? [String: [String: Any]])
        let timed = try #require(stages["backend"], "no stage backend: \(stages.keys.sorted())")
        #expect(timed["count"] as? Int == posts.count)
        #expect(Set(timed.keys) == Set(try #require(stages["added"]).keys))

        let purchasedEvents = try CatalogLoadTests.events(run, "transactionPurchased")
        let purchased = purchasedEvents.compactMap { ($0["transactionIdentifier"] as? String).map(Self.decimal) }
        let charged = purchasedEvents.filter { $0["charged"] as? Bool == true }.compactMap { ($0["transactionIdentifier"] as? String).map(Self.decimal) }
        let restoredEvents = try CatalogLoadTests.events(run, "transactionRestored")
        #expect(!purchased.isEmpty && !restoredEvents.isEmpty, "purchased \(purchased.count), restored \(restoredEvents.count)")
        // Once per delivery: every charged purchase under its own id; a restore (or a re-purchase of
        // something held, not charged) under the purchase it stands for, the one its signed transaction carries.
        #expect(posts.count == purchased.count + restoredEvents.count)
        let postedOnce = Set(posts.compactMap { $0["transactionId"] as? String })
        #expect(Set(charged).isSubset(of: postedOnce))
        #expect(postedOnce.isSubset(of: Set(charged)), "a POST names a transaction that is no charged purchase of the log")
        for post in posts {
            #expect(Set(post.keys) == ["transactionId", "originalTransactionId", "productId", "signedTransaction", "appReceipt", "device", "account"])
            #expect((post["device"] as? String)?.hasPrefix("driver-1-") == true)
        }
        // Every POST verified by Apple's library, its receipt naming a transaction of the log.
        #expect(verdicts.count == posts.count)
        let refused = verdicts.filter { $0.hasPrefix("refused") || $0 == "unchecked" }
        #expect(refused.isEmpty, "\(refused.count) POSTs refused: \(refused.prefix(3))")
        #expect(Set(verdicts).isSubset(of: Set(charged)), "a receipt names no purchase of the log: \(Set(verdicts).subtracting(charged).prefix(3))")
    }

    /// Issue 31 item 2, stage notified: notifications sent to --notification-url timed from the event's
    /// log time to the webhook's 2xx, with the counts delivered and retried.
    @Test("--notification-url: every charged purchase's notification is verified and delivered, one retried with the same UUID; stage notified times each delivery")
    func notificationsAreTimed() throws {
        let scratch = LoadRunTests.Scratch()
        let run = scratch.path("run")
        let backend = try Backend(status: 200, scratch: scratch, root: URL(fileURLWithPath: run).appendingPathComponent("app-store/root.cer"))
        let notificationURL = backend.url.replacingOccurrences(of: "/purchases", with: "/notifications")
        let outcome = try LoadRunTests.sksim(["load", "--notification-url", notificationURL, "--rate", "50", "--duration", "1s", "--devices", "10",
                                              "--threshold", "notified.p99<60s", "--out", run, "--json"])
        #expect(outcome.status == 0, "\(outcome.error)\n\(outcome.output)")
        let json = outcome.json
        let received = backend.notifications
        #expect(!received.contains { $0.first == "refused" }, "\(received.filter { $0.first == "refused" }.prefix(3))")
        let charged = try CatalogLoadTests.events(run, "transactionPurchased").filter { $0["charged"] as? Bool == true }
        #expect(!charged.isEmpty)
        let delivered = Set(received.filter { $0.count == 3 && $0[2] == "200" }.map { String($0[0]) })
        #expect(delivered.count == charged.count)
        let retried = received.filter { $0.count == 3 && $0[2] == "503" }.map { String($0[0]) }
        #expect(retried.count == 1 && delivered.contains(retried[0]), "the refused notification came again with its UUID")
        let counts = try #require(json["notifications"] as? [String: Int], "no notifications in \(json.keys.sorted())")
        #expect(counts == ["delivered": charged.count, "retried": 1, "undelivered": 0])
        let stages = try #require(json["stages"] as? [String: [String: Any]])
        let notified = try #require(stages["notified"], "no stage notified: \(stages.keys.sorted())")
        #expect(notified["count"] as? Int == charged.count)
        #expect(Set(notified.keys) == Set(try #require(stages["added"]).keys))
        let thresholds = try #require(json["thresholds"] as? [[String: Any]])
        #expect(thresholds.contains { $0["expression"] as? String == "notified.p99<60s" && $0["passed"] as? Bool == true }, "\(thresholds)")
        // The retried one waited for its retry (1 s at test speed).
        #expect((notified["maxMicroseconds"] as? Int ?? 0) >= 1_000_000)
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
        let finished = Set(try CatalogLoadTests.events(run, "transactionFinished").compactMap {
            ($0["transaction"] as? String).map { Self.decimal($0.replacingOccurrences(of: "#", with: ".")) }
        })
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
