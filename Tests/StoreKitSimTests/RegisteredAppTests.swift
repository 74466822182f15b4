import ArgumentParser
import Foundation
import SKSimCommands
import StoreKitExplore
import StoreKitModel
import StoreKitReplay
import StoreKitRoles
import StoreKitSim
import StoreKitTestKit
import StoreKitTestSupport
import Testing

/// An app written on Apple's names, registered the way a team's own `sksim` registers it
/// (`SKSim.main(apps:)` → `RegisteredApps`), runs in `simulate` and in a what-if `replay` through the
/// command line itself; the invariants read the app's state as exploration reads it. Serialized: the
/// registry belongs to the process (an executable registers once).
@Suite(.serialized) struct RegisteredAppTests {
    static let checks = ServerChecks()

    /// The example's iOS observer (Examples/StoreKitApp), and the same app with an eager second SDK.
    static func register() throws {
        try RegisteredApps.register([
            "storeApp": StoreKitAppTests.app(checks: checks),
            "eagerSDKApp": SimulatedApp(storage: { EntitlementStore() },
                                        belief: { AppBelief(credits: $0.credits, restoresShownDone: $0.restoresShownDone) },
                                        launch: { BuiltInBugsTests.App.sdkFinishesEarly.launch($0) }),
        ])
    }

    /// Runs `sksim ARGUMENTS` in this process, as `SKSim.main` does; returns the exit status.
    static func sksim(_ arguments: [String]) async throws -> Int32 {
        var command = try SKSim.parseAsRoot(arguments)
        do {
            if var asynchronous = command as? AsyncParsableCommand { try await asynchronous.run() } else { try command.run() }
            return 0
        } catch let exit as ExitCode {
            return exit.rawValue
        }
    }

    /// What a log holds: its scenario, the apps' invariants over it, and counts of what the app did.
    struct LogSummary {
        var scenario: Scenario
        var violations: [AppViolation] = []
        var paidFinished = 0
        var grants = 0
        var attachments: Set<String> = []
    }

    static func summary(of path: String) throws -> LogSummary {
        let recording = try Recording.openPartitions(path: path)[0]
        var summary = LogSummary(scenario: try Scenario(header: recording.header))
        var monitor = AppInvariantMonitor()
        var paid: Set<TransactionKey> = []
        _ = try recording.forEachUnit { unit in
            for recorded in unit.events {
                monitor.check(recorded)
                switch recorded.event {
                case .transactionPurchased(let key, _, _, _), .transactionRestored(let key, _, _, _, _), .subscriptionRenewed(let key, _, _, _):
                    paid.insert(key)
                case .transactionFinished(let key) where paid.contains(key): summary.paidFinished += 1
                case .appActionRecorded(.contentGranted): summary.grants += 1
                case .observerAttached(_, let observer): summary.attachments.insert(observer)
                default: break
                }
            }
        }
        monitor.finish()
        summary.violations = monitor.violations
        return summary
    }

    static func scratch() throws -> URL {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("registered-app-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory
    }

    @Test("sksim simulate --observers storeApp runs the registered app's own code on every device, and the log records the app by name")
    func simulateRunsTheApp() async throws {
        try Self.register()
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let asked = Self.checks.asked
        let status = try await Self.sksim(["simulate", "--devices", "3", "--purchases-per-device", "4", "--seed", "11",
                                           "--catalog", "sample", "--observers", "storeApp", "--out", directory.path, "--json"])
        #expect(status == 0)
        let log = try Self.summary(of: directory.path)
        #expect(log.scenario.apps.app == "storeApp")
        #expect(log.scenario.apps.observers.isEmpty)
        // The app's server was asked, and every transaction it finished it had credited: in its own storage,
        // read as exploration reads it (no simulator call in the app).
        #expect(Self.checks.asked > asked)
        #expect(log.paidFinished >= 6)
        #expect(log.grants == log.paidFinished)
        #expect(log.violations.isEmpty, "\(log.violations.map(\.description))")
        // The app's observer attached under its class's name, not a built-in behaviour's.
        #expect(!log.attachments.isEmpty && !log.attachments.contains { $0.hasPrefix("downloadThenFinish") }, "\(log.attachments)")
        // Same seed, same log, with the app's code too (its storage and receipts live elsewhere for each run).
        let again = directory.appendingPathComponent("again").path
        #expect(try await Self.sksim(["simulate", "--devices", "3", "--purchases-per-device", "4", "--seed", "11",
                                      "--catalog", "sample", "--observers", "storeApp", "--out", again, "--json"]) == 0)
        #expect(try Self.payloads(of: directory.path) == Self.payloads(of: again))
    }

    /// Every record's bytes, in order.
    static func payloads(of path: String) throws -> [[UInt8]] {
        var payloads: [[UInt8]] = []
        _ = try Recording.openPartitions(path: path)[0].forEachUnit { unit in payloads.append(contentsOf: unit.payloads) }
        return payloads
    }

    @Test("a what-if replay of a recording made with the built-in observers runs the registered app in their place, its server replies on the replay's timers")
    func whatIfReplayRunsTheApp() async throws {
        try Self.register()
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let recording = directory.appendingPathComponent("recorded").path
        #expect(try await Self.sksim(["simulate", "--devices", "4", "--purchases-per-device", "4", "--seed", "5", "--out", recording, "--json"]) == 0)
        let recorded = try Self.summary(of: recording)
        #expect(recorded.scenario.apps.app == nil)

        let asked = Self.checks.asked
        let replayed = directory.appendingPathComponent("replayed").path
        let status = try await Self.sksim(["replay", recording, "--observers", "storeApp", "--out", replayed, "--json"])
        // Decided anew, the app's commands are not the built-in observers' (its product request, its later
        // finishes), so the replay differs from the recording: status 1, not 2 (it could replay).
        #expect(status == 1)
        let log = try Self.summary(of: replayed)
        #expect(log.scenario.apps.app == "storeApp")
        #expect(Self.checks.asked > asked)
        #expect(log.paidFinished >= recorded.paidFinished / 2)
        #expect(log.grants == log.paidFinished)
        #expect(log.violations.isEmpty, "\(log.violations.map(\.description))")
    }

    @Test("a what-if replay with an app that lets a second SDK finish first breaks grant-before-finish, read from the app's own storage")
    func whatIfReplayFindsTheAppsBug() async throws {
        try Self.register()
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let recording = directory.appendingPathComponent("recorded").path
        #expect(try await Self.sksim(["simulate", "--devices", "6", "--purchases-per-device", "5", "--seed", "5", "--out", recording, "--json"]) == 0)
        let replayed = directory.appendingPathComponent("replayed").path
        _ = try await Self.sksim(["replay", recording, "--observers", "eagerSDKApp", "--out", replayed, "--json"])
        let log = try Self.summary(of: replayed)
        #expect(log.violations.contains { $0.invariant == .grantBeforeFinish }, "\(log.violations.map(\.description))")
    }

    @Test("a recording made with an app replays only where that app is registered; elsewhere one clear error")
    func recordingOfAnAppNeedsTheApp() async throws {
        try Self.register()
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let recording = directory.appendingPathComponent("recorded").path
        #expect(try await Self.sksim(["simulate", "--devices", "2", "--purchases-per-device", "2", "--seed", "3",
                                      "--observers", "storeApp", "--out", recording, "--json"]) == 0)
        // With the app registered, the replay runs it again (what-if: its work's timing is not in the log).
        let again = try await Self.sksim(["replay", recording, "--out", directory.appendingPathComponent("again").path, "--json"])
        #expect(again == 0 || again == 1)
        #expect(try Self.summary(of: directory.appendingPathComponent("again").path).scenario.apps.app == "storeApp")
        try RegisteredApps.register([:])
        defer { try? Self.register() }
        await #expect {
            _ = try await Self.sksim(["replay", recording, "--json"])
        } throws: { error in
            (error as? UserFacingError)?.code == .appNotRegistered
        }
        await #expect {
            _ = try await Self.sksim(["simulate", "--observers", "storeApp", "--out", directory.appendingPathComponent("none").path])
        } throws: { error in
            (error as? UserFacingError)?.code == .unknownName
        }
    }

    @Test("sksim load with a topology naming the app: a real coordinator, queue, store and downloader; the driver runs the app's code, which finishes every purchase after its server's reply")
    func loadDriverRunsTheApp() async throws {
        try Self.register()
        // Short: ipc socket paths must stay under 100 bytes.
        let scratch = URL(fileURLWithPath: "/tmp/skapp-\(UUID().uuidString.prefix(8))", isDirectory: true)
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: scratch) }
        let topology = scratch.appendingPathComponent("t.yaml").path
        try Data("""
            name: apps
            seed: 3
            scenario:
              devices: 1
              purchasesPerDevice: 0
              app: storeApp
              store: {failureProbability: 0.1, deferralProbability: 0, cancellationProbability: 0, latencyMilliseconds: {minimum: 0, mean: 1}}
            processes:
              - {name: queue, role: queue, events: "ipc://{run}/e.ipc", requests: "ipc://{run}/r.ipc"}
              - {name: store, role: store}
              - {name: downloader, role: downloader}
              - {name: apps, role: observer, devices: "1-1"}

            """.utf8).write(to: URL(fileURLWithPath: topology))
        let run = scratch.appendingPathComponent("run").path
        let endpoint = "ipc://\(scratch.path)/c.ipc"
        // The coordinator and the services are the plain sksim (they run no app); the one driver is this process,
        // where the app is registered, as in the team's own executable.
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let load = try SKSimProgram.start(try SKSimProgram.executable(packageRoot: root),
                                          ["load", topology, "--drivers", "0", "--remote-drivers", "1", "--listen", endpoint, "--rate", "20",
                                           "--duration", "1s", "--devices", "4", "--out", run, "--json"])
        let asked = Self.checks.asked
        let driver = try await Self.sksim(["driver", "--topology", topology, "--name", "app", "--coordinator", endpoint, "--run-directory", run])
        let outcome = load.finish()
        #expect(driver == 0)
        #expect(outcome.status == 0, "\(outcome.output) \(outcome.error)")
        #expect(outcome.json["started"] as? Int == 20, "\(outcome.output)")
        #expect(outcome.json["incomplete"] as? Int == 0, "\(outcome.output)")
        #expect(outcome.json["violations"] as? Int == 0, "\(outcome.output)")
        let log = try Self.summary(of: run)
        #expect(log.scenario.apps.app == "storeApp")
        #expect(Self.checks.asked > asked)
        // Every purchase the store made was credited by the app, read from its storage, and finished by it.
        #expect(log.paidFinished > 10)
        #expect(log.grants == log.paidFinished)
        #expect(!log.attachments.contains("load"), "\(log.attachments)")
    }

    @Test("sksim explore --observers storeApp explores the registered app on two worker threads and finds nothing wrong with it")
    func exploreRunsTheApp() async throws {
        try Self.register()
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let asked = Self.checks.asked
        let status = try await Self.sksim(["explore", "--observers", "storeApp", "--strategy", "random", "--schedules", "200", "--seconds", "60",
                                           "--seed", "3", "--jobs", "2", "--report", directory.path, "--json"])
        #expect(status == 0)
        #expect(Self.checks.asked > asked + 200)
    }

    @Test("an app cannot be registered under a built-in behaviour's name")
    func builtInNamesAreRefused() {
        let error = #expect(throws: RegisteredApps.RegistrationError.self) {
            try RegisteredApps.register(["audit": StoreKitAppTests.app(checks: Self.checks)])
        }
        #expect(error?.code == .builtInName)
    }
}
