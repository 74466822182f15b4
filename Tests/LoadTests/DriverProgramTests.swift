import Foundation
import StoreKitLoad
import StoreKitTestSupport
import Testing

/// `sksim load --driver PATH` with the example driver (Examples/LoadDriver, built by this package as
/// `shop-load-driver`) against the example's own server (Examples/LoadDriver/shop_server.py), both
/// real processes: the users' behaviour decides the lifecycles, the app's observer finishes them, and
/// the behaviour's HTTP calls, counters and checks reach the summary as stages and figures of their own.
@Suite(.serialized) struct DriverProgramTests {
    static func driverExecutable() throws -> URL {
        let sksim = try LoadRunTests.executable()
        let driver = sksim.deletingLastPathComponent().appendingPathComponent("shop-load-driver")
        try #require(FileManager.default.isExecutableFile(atPath: driver.path), "build the example driver first (swift build --build-tests)")
        return driver
    }

    /// The example's server on a free port, stopped when the test ends.
    final class ShopServer {
        let process = Process()
        let url: String

        init(scratch: LoadRunTests.Scratch) throws {
            let python = try #require(LoadRunTests.which("python3"), "python3 is needed for the example's server")
            let portFile = scratch.url.appendingPathComponent("shop.port")
            process.executableURL = URL(fileURLWithPath: python)
            process.arguments = [LoadRunTests.repositoryRoot.appendingPathComponent("Examples/LoadDriver/shop_server.py").path, "0", portFile.path]
            process.standardOutput = FileHandle.nullDevice
            try process.run()
            let port = try #require(LoadRunTests.boundPort(written: portFile, by: process), "the example's server did not start")
            url = "http://127.0.0.1:\(port)"
        }

        deinit {
            // SIGKILL: the child inherits the test process's blocked SIGTERM.
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    @Test("sksim load --driver runs the example driver: its users' purchases, restores and Ask to Buy requests, its entitlements calls timed as a stage, its counter and checks in the summary")
    func exampleDriver() throws {
        let scratch = LoadRunTests.Scratch()
        let server = try ShopServer(scratch: scratch)
        let driver = try Self.driverExecutable()
        let process = Process()
        process.executableURL = try LoadRunTests.executable()
        process.arguments = ["load", "--driver", driver.path, "--model", "closed", "--devices", "16", "--duration", "4s", "--drivers", "2",
                             "--backend", server.url + "/purchases", "--threshold", "entitlements.count>0",
                             "--out", scratch.path("run"), "--report", scratch.path("report"), "--json"]
        var environment = ProcessInfo.processInfo.environment
        environment["SHOP_SERVER_URL"] = server.url
        process.environment = environment
        process.currentDirectoryURL = LoadRunTests.repositoryRoot
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let json = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any], "\(String(decoding: data, as: UTF8.self))")
        #expect(process.terminationStatus == 0, "\(json["thresholds"] ?? "")")
        let stages = try #require(json["stages"] as? [String: [String: Any]])
        // The behaviour's own stage, merged like the built-in ones: one call per purchase it saw complete.
        let entitlements = try #require(stages["entitlements"]?["count"] as? Int)
        let checks = try #require(json["checks"] as? [String: [String: Int]])
        let completed = try #require(checks["purchase completed"])
        #expect(completed["failed"] == 0)
        // (A purchase the store failed, or a parent declined, completes with no transaction to ask about.)
        #expect(entitlements > 0 && entitlements <= completed["passed"] ?? 0)
        // Every purchase the server was sent (--backend) is listed when the user asks, after the app finished it.
        #expect(checks["entitlement listed"]?["passed"] == entitlements)
        #expect(checks["entitlement listed"]?["failed"] == 0)
        #expect(checks["entitlements answered"]?["failed"] == 0)
        // The users' own choices: every fifth lifecycle of a device restores, children ask a parent.
        #expect(stages["restoreFinished"] != nil)
        #expect(stages["deferred"] != nil)
        // Coins: 100 for a small pack, 1,000 for a large; the users buy both.
        let coins = try #require((json["counters"] as? [String: Int])?["coins"])
        #expect(coins >= 100 * entitlements && coins % 100 == 0)
        #expect(json["errors"] as? Int == 0)
        let csv = try String(contentsOfFile: scratch.path("report/timeseries.csv"), encoding: .utf8)
        #expect(csv.contains(",entitlements,"))
    }

    @Test("a behaviour's failed checks fail the run by default: without --backend the server grants nothing, and the run exits 99 naming checksFailed")
    func failedChecksFailTheRun() throws {
        let scratch = LoadRunTests.Scratch()
        let server = try ShopServer(scratch: scratch)
        let process = Process()
        process.executableURL = try LoadRunTests.executable()
        process.arguments = ["load", "--driver", try Self.driverExecutable().path, "--rate", "40/s", "--duration", "1s", "--devices", "8",
                             "--out", scratch.path("run"), "--json"]
        var environment = ProcessInfo.processInfo.environment
        environment["SHOP_SERVER_URL"] = server.url
        process.environment = environment
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let json = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any], "\(String(decoding: data, as: UTF8.self))")
        #expect(process.terminationStatus == 99)
        let thresholds = try #require(json["thresholds"] as? [[String: Any]])
        let checksFailed = try #require(thresholds.first { $0["expression"] as? String == "checksFailed==0" })
        #expect(checksFailed["passed"] as? Bool == false)
        #expect(((json["checks"] as? [String: [String: Int]])?["entitlement listed"]?["failed"] ?? 0) > 0)
    }

    @Test("load.driver in the topology, relative to its file, runs the team's driver as --driver does; the command line's --driver wins")
    func topologyDriver() throws {
        let scratch = LoadRunTests.Scratch()
        let server = try ShopServer(scratch: scratch)
        try FileManager.default.createDirectory(at: scratch.url.appendingPathComponent("bin"), withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(at: scratch.url.appendingPathComponent("bin/shop-driver"), withDestinationURL: try Self.driverExecutable())
        let topology = try String(contentsOf: LoadRunTests.repositoryRoot.appendingPathComponent("topology/load.yaml"), encoding: .utf8)
            + "  driver: bin/shop-driver\n"
        try topology.write(to: scratch.url.appendingPathComponent("mine.yaml"), atomically: true, encoding: .utf8)
        let settings = try LoadSettings.fromTopology(path: scratch.path("mine.yaml"))
        #expect(settings.driver == scratch.url.appendingPathComponent("bin/shop-driver").standardizedFileURL.path)
        var commandLine = LoadSettings()
        commandLine.driver = "/elsewhere/driver"
        #expect(settings.overridden(by: commandLine).driver == "/elsewhere/driver")

        let process = Process()
        process.executableURL = try LoadRunTests.executable()
        process.arguments = ["load", scratch.path("mine.yaml"), "--model", "closed", "--devices", "8", "--duration", "2s", "--drivers", "1",
                             "--out", scratch.path("run"), "--json"]
        var environment = ProcessInfo.processInfo.environment
        environment["SHOP_SERVER_URL"] = server.url
        process.environment = environment
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let json = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any], "\(String(decoding: data, as: UTF8.self))")
        // The example driver's behaviour ran (the built-in drivers have no checks): its users' purchases completed.
        let checks = try #require(json["checks"] as? [String: [String: Int]], "\(json)")
        #expect((checks["purchase completed"]?["passed"] ?? 0) > 0)
    }
}
