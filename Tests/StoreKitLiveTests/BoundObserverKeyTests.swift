import Bus
import EventLog
import Foundation
import StoreKitModel
import StoreKitRuntime
import StoreKitTestSupport
@testable import StoreKitLive
import Testing
import ZeroMQ

/// Issue 30 (roles): with CURVE, each observer process on a "host" of its own, its key bound to its own
/// process (its devices) only, and the store and downloader under a key of their own. Real `sksim`
/// processes over real sockets, started by hand as on several hosts (`sksim run` gives every process
/// of a topology this host's one key).
@Suite(.serialized) struct BoundObserverKeyTests {
    static func topology(serverPublicKey: String, clientKeyFile: String, services: String, observers: [String]) -> String {
        """
        name: bound-keys
        seed: 11
        heartbeatMilliseconds: 100
        scenario:
          devices: 4
          purchasesPerDevice: 4
          observers: [downloadThenFinish, audit]
          thinkTimeMilliseconds: {minimum: 1, mean: 5}
          store: {latencyMilliseconds: {minimum: 1, mean: 5}}
          downloader: {minimumBytesPerSecond: 5000000, maximumBytesPerSecond: 20000000, tickMilliseconds: 5}
        processes:
          - {name: queue, role: queue, events: "ipc://{run}/e.ipc", requests: "ipc://{run}/r.ipc"}
          - {name: store, role: store}
          - {name: downloader, role: downloader}
          - {name: observer-1, role: observer, devices: "1-2"}
          - {name: observer-2, role: observer, devices: "3-4"}
        curve:
          serverPublicKey: "\(serverPublicKey)"
          serverKeyFile: server.key
          clientKeyFile: \(clientKeyFile)
          allowedClientKeys:
            - {key: "\(services)", processes: [store, downloader]}
            - {key: "\(observers[0])", processes: [observer-1]}
            - {key: "\(observers[1])", processes: [observer-2]}
        """
    }

    /// A started `sksim` process, its stderr in a file.
    final class Started {
        let process = Process()
        let log: URL

        init(_ arguments: [String], log: URL) throws {
            self.log = log
            FileManager.default.createFile(atPath: log.path, contents: nil)
            process.executableURL = try LiveRunTests.executable()
            process.arguments = arguments
            process.standardOutput = FileHandle.nullDevice
            process.standardError = try FileHandle(forWritingTo: log)
            try process.run()
        }

        /// Waits up to `seconds` for the process to end; its status, or nil when it did not.
        func wait(seconds: Double) -> Int32? {
            _ = SKSimProgram.eventually(seconds: seconds) { !process.isRunning }
            return process.isRunning ? nil : process.terminationStatus
        }

        func stop() {
            if process.isRunning { process.terminate() }
            _ = wait(seconds: 10)
        }

        var text: String { (try? String(contentsOf: log, encoding: .utf8)) ?? "" }
    }

    @Test("issue 30: observer processes whose keys are bound to their own devices alone complete every lifecycle with nothing lost; a client holding such a key is still refused the store's command",
          .timeLimit(.minutes(10)))
    func observersBoundToTheirDevices() throws {
        let scratch = URL(fileURLWithPath: "/tmp/skb-\(UUID().uuidString.prefix(8))", isDirectory: true)
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        defer { if ProcessInfo.processInfo.environment["SKSIM_KEEP_TEST_RUNS"] == nil { try? FileManager.default.removeItem(at: scratch) } }
        let names = ["server", "services", "observer-1", "observer-2"]
        var pairs: [String: CurveKeyPair] = [:]
        for name in names {
            let pair = try CurveKeyPair.generate()
            pairs[name] = pair
            try "publicKey: \"\(pair.publicKey.z85)\"\nsecretKey: \"\(pair.secretKey.z85)\"\n"
                .write(to: scratch.appendingPathComponent("\(name).key"), atomically: true, encoding: .utf8)
        }
        // One topology file per "host", alike but for the host's own key file.
        for host in ["services", "observer-1", "observer-2"] {
            try Self.topology(serverPublicKey: pairs["server"]!.publicKey.z85, clientKeyFile: "\(host).key", services: pairs["services"]!.publicKey.z85,
                              observers: [pairs["observer-1"]!.publicKey.z85, pairs["observer-2"]!.publicKey.z85])
                .write(to: scratch.appendingPathComponent("\(host).yaml"), atomically: true, encoding: .utf8)
        }
        let run = scratch.appendingPathComponent("run")
        func start(_ role: String, _ name: String, host: String) throws -> Started {
            try Started([role, "--topology", scratch.appendingPathComponent("\(host).yaml").path, "--name", name, "--run-directory", run.path],
                        log: scratch.appendingPathComponent("\(name).log"))
        }
        func waitReady(_ name: String) -> Bool {
            SKSimProgram.eventually(seconds: 30) { ReadyNote.pid(process: name, runDirectory: run) != nil }
        }
        var services: [Started] = []
        defer { services.reversed().forEach { $0.stop() } }
        services.append(try start("queue", "queue", host: "services"))
        try #require(waitReady("queue"), "the queue did not start: \(services[0].text)")
        services.append(try start("store", "store", host: "services"))
        services.append(try start("downloader", "downloader", host: "services"))
        try #require(waitReady("store") && waitReady("downloader"), "\(services[1].text)\n\(services[2].text)")

        let observers = try ["observer-1", "observer-2"].map { try start("observer", $0, host: $0) }
        defer { observers.forEach { $0.stop() } }
        for observer in observers {
            let status = observer.wait(seconds: 90)
            #expect(status == 0, "\(observer.process.arguments ?? []) ended with \(String(describing: status)): \(observer.text)")
        }
        // Each followed its own devices: nothing of theirs was refused.
        let queueLog = services[0].text
        #expect(!queueLog.contains("refused subscription"), "\(queueLog)")

        // A forger holding observer-1's key: the store's decision for its own device is refused and logged.
        let context = try ZeroMQContext()
        defer { context.terminate() }
        let forger = try context.socket(.dealer)
        defer { forger.close() }
        try CurveClientKeys(serverPublicKey: pairs["server"]!.publicKey, clientKeyPair: pairs["observer-1"]!).apply(to: forger)
        try forger.connect("ipc://\(run.path)/r.ipc")
        let forged = Command(id: CommandID(origin: "forger", number: 1),
                             body: .decidePurchase(TransactionKey(device: "device-0001", number: 1), .purchased(charged: false)))
        try forger.send([Array(BusWire.RequestVerb.command.rawValue.utf8), EventCodec.encode(forged)])
        let answer = try #require(try forger.receive(timeout: .seconds(10)), "the queue did not answer the forger")
        let acknowledgement = try CommandAcknowledgement.decode(answer)
        #expect(acknowledgement.status == .rejected)
        #expect(acknowledgement.message.contains("store command"), "\(acknowledgement.message)")

        services.reversed().forEach { $0.stop() }
        services.removeAll()
        let logged = (try? String(contentsOf: scratch.appendingPathComponent("queue.log"), encoding: .utf8)) ?? ""
        #expect(logged.contains("roleRefused") && logged.contains(pairs["observer-1"]!.publicKey.z85), "\(logged)")

        let built = try PartitionedLogProjection.build(directory: run.appendingPathComponent("log"))
        #expect(built.violations.isEmpty, "\(built.violations)")
        #expect(built.totals.purchased + built.totals.failed + built.totals.declined == 16)
        #expect(built.pendingCount == built.totals.declined)  // Declined Ask to Buy stays deferred (F-A1).
        #expect(try LogMaintenance.verify(directory: run.appendingPathComponent("log")).isIntact)
    }
}
