import EventLog
import Foundation
import Logging
import Testing
import Bus
import ZeroMQ
import StoreKitModel
import StoreKitSimulation
import StoreKitRuntime
@testable import StoreKitLive
import StoreKitTestSupport

/// End-to-end: real `sksim` processes talking over real ZeroMQ sockets.
@Suite(.serialized) struct LiveRunTests {
    static func executable() throws -> URL {
        try SKSimProgram.executable(packageRoot: TopologyTests.repositoryRoot)
    }

    static func topology(devices: Int, purchases: Int, transport: String, thinkMilliseconds: Int = 5) -> String {
        let port = 20_000 + Int(getpid() % 20_000) + Int.random(in: 0..<500) * 2
        let (events, requests) = transport == "tcp"
            ? ("tcp://127.0.0.1:\(port)", "tcp://127.0.0.1:\(port + 1)")
            : ("ipc://{run}/e.ipc", "ipc://{run}/r.ipc")
        let half = devices / 2
        return """
        name: test-\(transport)
        seed: 5
        heartbeatMilliseconds: 100
        scenario:
          devices: \(devices)
          purchasesPerDevice: \(purchases)
          observers: [downloadThenFinish, audit]
          relaunchProbability: 0.1
          thinkTimeMilliseconds: {minimum: 1, mean: \(thinkMilliseconds)}
          store: {latencyMilliseconds: {minimum: 1, mean: 5}}
          downloader: {minimumBytesPerSecond: 5000000, maximumBytesPerSecond: 20000000, tickMilliseconds: 5}
        processes:
          - {name: queue, role: queue, events: "\(events)", requests: "\(requests)"}
          - {name: store, role: store}
          - {name: downloader, role: downloader}
          - {name: observer-1, role: observer, devices: "1-\(half)"}
          - {name: observer-2, role: observer, devices: "\(half + 1)-\(devices)"}
        """
    }

    /// Runs a supervisor on its own thread; `wait` returns its result or nil on timeout.
    final class BackgroundRun: @unchecked Sendable {
        let directory: URL
        private let done = DispatchSemaphore(value: 0)
        private var outcome: Result<Supervisor.Result, any Error>?
        private var supervisor: Supervisor?

        /// `catalog` is written beside the topology file, under its name, for a topology that names it.
        init(topologyText: String, options: Supervisor.Options = Supervisor.Options(), catalog: (name: String, text: String)? = nil) throws {
            directory = FileManager.default.temporaryDirectory.appendingPathComponent("sksim-live-\(UUID().uuidString.prefix(8))")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            if let catalog { try catalog.text.write(to: directory.appendingPathComponent(catalog.name), atomically: true, encoding: .utf8) }
            let path = directory.appendingPathComponent("topology.yaml").path
            try topologyText.write(toFile: path, atomically: true, encoding: .utf8)
            let topology = try Topology.load(path: path)
            var options = options
            options.showProgress = false
            supervisor = Supervisor(topology: topology, topologyPath: path, runDirectory: directory.appendingPathComponent("run"),
                                        executable: try LiveRunTests.executable(), options: options, logger: Logger(label: "test"))
            Thread.detachNewThread { [self] in
                outcome = Result { try supervisor!.run() }
                done.signal()
            }
        }

        var runDirectory: URL { directory.appendingPathComponent("run") }

        func wait(seconds: Double) throws -> Supervisor.Result? {
            guard done.wait(timeout: .now() + seconds) == .success else { return nil }
            return try outcome?.get()
        }

        func pid(of name: String) throws -> Int32? {
            guard let data = FileManager.default.contents(atPath: runDirectory.appendingPathComponent("run.json").path),
                  let object = try JSONSerialization.jsonObject(with: data) as? [String: Any],
                  let processes = object["processes"] as? [[String: Any]] else { return nil }
            return (processes.first { $0["name"] as? String == name }?["pid"] as? Int).map(Int32.init)
        }

        /// The process id of `name` once the run has written it, waiting at most `seconds`; nil when it never did.
        func waitForPid(of name: String, seconds: Double = 20) throws -> Int32? {
            var found: Int32?
            _ = try SKSimProgram.eventually(seconds: seconds) {
                found = try pid(of: name)
                return found != nil
            }
            return found
        }

        /// Waits until the named log partition holds at least `count` events, polling its files, so
        /// a test acts mid-run however fast or slow the machine is. False when it did not happen in time.
        func waitForEvents(_ count: Int, partition: String = "queue", seconds: Double = 30) -> Bool {
            let log = runDirectory.appendingPathComponent("log")
            return SKSimProgram.eventually(seconds: seconds) {
                var seen = 0
                // A record being written is a torn tail to a reader: count what is whole, try again.
                _ = try? PartitionReader(directory: log, partition: partition).forEachRecord { _ in seen += 1 }
                return seen >= count
            }
        }

        // SKSIM_KEEP_TEST_RUNS=1 keeps the run directories (logs of every process) for a post-mortem.
        deinit { if ProcessInfo.processInfo.environment["SKSIM_KEEP_TEST_RUNS"] == nil { try? FileManager.default.removeItem(at: directory) } }
    }

    @Test("sksim run completes every purchase over ipc and over tcp, with nothing pending and no violations", arguments: ["ipc", "tcp"])
    func completesRun(transport: String) throws {
        let run = try BackgroundRun(topologyText: Self.topology(devices: 4, purchases: 5, transport: transport))
        let result = try #require(try run.wait(seconds: 90), "the run did not end within 90 s")
        #expect(result.failure == nil)
        #expect(result.finished)
        // No process failed, so no failure note stays (their blank reservations are removed).
        let leftNotes = (FileManager.default.enumerator(atPath: run.directory.path)?.allObjects as? [String] ?? []).filter { $0.hasSuffix(".failure") }
        #expect(leftNotes.isEmpty, "\(leftNotes)")
        #expect(result.report.pending == result.report.totals.declined)  // Declined Ask to Buy stays deferred (F-A1).
        #expect(result.report.violations.isEmpty)
        #expect(result.report.totals.purchased + result.report.totals.failed + result.report.totals.declined == 20)
        #expect(try LogMaintenance.verify(directory: run.runDirectory.appendingPathComponent("log")).isIntact)
        for name in ["queue", "store", "downloader", "observer-1", "observer-2"] { #expect(try run.pid(of: name) != nil) }
    }

    @Test("R-Q4: kill -9 of an observer mid-run loses nothing; restarted, it gets its unfinished transactions again")
    func observerKilled() throws {
        let run = try BackgroundRun(topologyText: Self.topology(devices: 4, purchases: 60, transport: "ipc", thinkMilliseconds: 40))
        let victim = try run.waitForPid(of: "observer-1")
        let pid = try #require(victim)
        #expect(run.waitForEvents(300), "the run did not get under way")
        #expect(kill(pid, SIGKILL) == 0)
        let result = try #require(try run.wait(seconds: 120), "the run did not end within 120 s")
        #expect(result.failure == nil)
        #expect(result.restarts["observer-1"] == 1)
        #expect(result.report.pending == result.report.totals.declined)  // Declined Ask to Buy stays deferred (F-A1).
        #expect(result.report.violations.isEmpty)
        #expect(result.report.totals.purchased + result.report.totals.failed + result.report.totals.declined == 4 * 60)
        // The restarted app relaunched its devices: a terminate, then a launch and new attachments.
        let log = try PartitionReader(directory: run.runDirectory.appendingPathComponent("log"), partition: "queue").records()
        let events = try log.map { try EventCodec.decodeEvent($0.payload).event }
        let terminated = events.filter { if case .appTerminated(let device) = $0 { device == "device-0001" } else { false } }
        #expect(!terminated.isEmpty)
    }

    @Test("kill -9 of the store, the downloader or the queue mid-run: restarted from the log, the run finishes with nothing lost",
          arguments: ["store", "downloader", "queue"])
    func serverKilled(name: String) throws {
        let run = try BackgroundRun(topologyText: Self.topology(devices: 4, purchases: 40, transport: "ipc", thinkMilliseconds: 30))
        let victim = try run.waitForPid(of: name)
        #expect(run.waitForEvents(200), "the run did not get under way")
        #expect(kill(try #require(victim), SIGKILL) == 0)
        let result = try #require(try run.wait(seconds: 120), "the run did not end within 120 s")
        #expect(result.failure == nil, "\(result.failure ?? "")")
        #expect(result.restarts[name] == 1)
        #expect(result.report.pending == result.report.totals.declined)  // Declined Ask to Buy stays deferred (F-A1).
        #expect(result.report.violations.isEmpty, "\(result.report.violations)")
        #expect(result.report.totals.purchased + result.report.totals.failed + result.report.totals.declined == 4 * 40)
        #expect(try LogMaintenance.verify(directory: run.runDirectory.appendingPathComponent("log")).isIntact)
    }

    @Test("a forged command under an observer's id fails the run loudly instead of being taken for the observer's own")
    func forgedCommandFailsTheRun() throws {
        let run = try BackgroundRun(topologyText: Self.topology(devices: 2, purchases: 400, transport: "ipc", thinkMilliseconds: 20))
        let context = try ZeroMQContext()
        defer { context.terminate() }
        var configuration = EventSubscriberConfiguration(eventsEndpoint: "ipc://\(run.runDirectory.path)/e.ipc",
                                                         requestsEndpoint: "ipc://\(run.runDirectory.path)/r.ipc")
        configuration.silenceTimeout = .seconds(5)
        let forger = try context.socket(.dealer)
        defer { forger.close() }
        try forger.connect(configuration.requestsEndpoint)
        var subscriber: EventSubscriber?
        defer { subscriber?.close() }
        // Anyone can read the events, and with them every sender's origin and highest number.
        var highest: (origin: String, number: UInt64)?
        var forgedAccepted = false
        let deadline = Date().addingTimeInterval(60)
        while !forgedAccepted && Date() < deadline {
            if subscriber == nil {
                guard FileManager.default.fileExists(atPath: run.runDirectory.appendingPathComponent("e.ipc").path) else { usleep(50_000); continue }
                subscriber = try EventSubscriber(context: context, configuration: configuration)
            }
            for recorded in try subscriber!.receive(timeout: .milliseconds(20)) {
                guard let id = recorded.commandID, id.origin.hasPrefix("observer-1.") else { continue }
                if id.number > highest?.number ?? 0 { highest = (id.origin, id.number) }
            }
            guard let (origin, number) = highest else { continue }
            let forged = Command(id: CommandID(origin: origin, number: number + 1), body: .launchApp(device: "device-0001"))
            try forger.send([Array(BusWire.RequestVerb.command.rawValue.utf8), EventCodec.encode(forged)])
            guard let answer = try forger.receive(timeout: .seconds(2)) else { continue }
            let status = try CommandAcknowledgement.decode(answer).status
            forgedAccepted = status == .accepted || status == .rejected  // recorded, either way
        }
        #expect(forgedAccepted, "the forger never got a command in")
        let result = try #require(try run.wait(seconds: 90), "the run did not end within 90 s")
        let failure = try #require(result.failure, "the run ended as if nothing happened")
        #expect(failure.contains("observer process 'observer-1' stopped the run"), "\(failure)")
        #expect(failure.contains("although this sender sent it only once"), "\(failure)")
        #expect(result.restarts["observer-1"] == nil, "restarting cannot help a run whose log holds forged commands")
        #expect(result.exitStatus == 2)
    }

    @Test("R-Q4: a renewal the store sends after its app was done is finished at the app's next launch, so the run ends with nothing pending")
    func lateRenewalFinishedAtNextLaunch() throws {
        let catalog = """
        {"format": "sksim-catalog", "version": 1, "products": [
          {"identifier": "com.example.late.monthly", "kind": "autoRenewableSubscription", "displayPrice": "2.99",
           "subscriptionGroup": "Late", "subscriptionPeriod": "P1M"}]}
        """
        let text = """
        name: late-renewal
        seed: 3
        heartbeatMilliseconds: 100
        scenario:
          catalog: late.json
          devices: 2
          devicesPerAccount: 1
          purchasesPerDevice: 1
          observers: [downloadThenFinish]
          relaunchProbability: 0
          restoreProbability: 0
          store: {latencyMilliseconds: {minimum: 1, mean: 5}, failureProbability: 0, deferralProbability: 0, cancellationProbability: 0}
        processes:
          - {name: queue, role: queue, events: "ipc://{run}/e.ipc", requests: "ipc://{run}/r.ipc"}
          - {name: store, role: store}
          - {name: downloader, role: downloader}
          - {name: observer-1, role: observer, devices: "1"}
          - {name: observer-2, role: observer, devices: "2"}
        """
        let run = try BackgroundRun(topologyText: text, catalog: ("late.json", catalog))
        // Hold observer-2 so the run goes on after observer-1's app is done.
        let observer2 = try #require(try run.waitForPid(of: "observer-2"))
        #expect(kill(observer2, SIGSTOP) == 0)
        defer { kill(observer2, SIGCONT) }
        let observer1 = try #require(try run.pid(of: "observer-1"))
        #expect(SKSimProgram.eventually(seconds: 30) { kill(observer1, 0) != 0 }, "observer-1 never finished")

        // Now, as the store would at a period end, renew device-0001's subscription.
        let log = run.runDirectory.appendingPathComponent("log")
        var original: OriginalTransaction?
        try PartitionReader(directory: log, partition: "queue").forEachRecord { view in
            let recorded = try LogProjection.decode(sequence: view.sequence, timestamp: view.timestampNanoseconds, payload: view.payload)
            if case .transactionAdded(let key, let payment) = recorded.event, key.device == "device-0001" {
                original = OriginalTransaction(transactionIdentifier: "", payment: payment, transactionDate: 0)
            }
            if case .transactionPurchased(let key, let identifier, _, _) = recorded.event, key.device == "device-0001", let payment = original?.payment {
                original = OriginalTransaction(transactionIdentifier: identifier, payment: payment, transactionDate: recorded.timestamp)
            }
        }
        let renewed = try #require(original, "device-0001 bought nothing")
        let context = try ZeroMQContext()
        defer { context.terminate() }
        let sender = try CommandSender(context: context, configuration: CommandSenderConfiguration(
            origin: "test-store", requestsEndpoint: "ipc://\(run.runDirectory.path)/r.ipc"))
        defer { sender.close() }
        _ = try sender.submit(.renewSubscription(device: "device-0001", original: renewed))
        var completions: [CommandCompletion] = []
        let answerDeadline = ContinuousClock.now + .seconds(10)
        while completions.isEmpty, ContinuousClock.now < answerDeadline { completions += try sender.poll(timeout: .milliseconds(20)) }
        guard case .acknowledged(let answer) = try #require(completions.first) else { Issue.record("\(completions)"); return }
        #expect(answer.status == .accepted, "\(answer)")
        kill(observer2, SIGCONT)

        let result = try #require(try run.wait(seconds: 60), "the run did not end within 60 s")
        #expect(result.failure == nil, "\(result.failure ?? "")")
        #expect(result.report.totals.renewed == 1)
        #expect(result.report.pending == 0, "the renewal was left pending")
        var launches = 0
        var renewalFinished = false
        var renewalKey: TransactionKey?
        try PartitionReader(directory: log, partition: "queue").forEachRecord { view in
            let recorded = try LogProjection.decode(sequence: view.sequence, timestamp: view.timestampNanoseconds, payload: view.payload)
            switch recorded.event {
            case .appLaunched(let device) where device == "device-0001": launches += 1
            case .subscriptionRenewed(let key, _, _, _): renewalKey = key
            case .transactionFinished(let key) where key == renewalKey: renewalFinished = true
            default: break
            }
        }
        #expect(launches == 2, "device-0001's app was launched \(launches) times; the relaunch delivers the renewal")
        #expect(renewalFinished)
    }

    @Test("A queue that dies for good (no restarts left) ends the run with an error naming it")
    func queueKilled() throws {
        var options = Supervisor.Options()
        options.maximumRestarts = 0
        let run = try BackgroundRun(topologyText: Self.topology(devices: 2, purchases: 200, transport: "ipc", thinkMilliseconds: 50), options: options)
        let queue = try run.waitForPid(of: "queue")
        #expect(run.waitForEvents(100), "the run did not get under way")
        #expect(kill(try #require(queue), SIGKILL) == 0)
        let result = try #require(try run.wait(seconds: 60), "the run did not end within 60 s")
        let failure = try #require(result.failure)
        #expect(failure.contains("queue process 'queue' was killed by signal 9"))
    }
}
