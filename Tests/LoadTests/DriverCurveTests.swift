import Foundation
import StoreKitTestKit
import Testing

/// CURVE on the coordinator's driver endpoint: with a `curve` section, a driver on "another
/// host" (here: started by hand, over tcp://127.0.0.1) joins only with an allowed client key.
/// Real queue, store, coordinator and driver processes.
@Suite(.serialized) struct DriverCurveTests {
    typealias CLI = LoadRunTests

    static func topology(clientKeyFile: String, allowed: [String], serverPublicKey: String) -> String {
        """
        name: load-curve
        seed: 3
        durability: group
        heartbeatMilliseconds: 250
        scenario:
          devices: 1
          purchasesPerDevice: 0
          store: {failureProbability: 0, deferralProbability: 0, cancellationProbability: 0, latencyMilliseconds: {minimum: 0, mean: 1}}
        processes:
          - {name: queue, role: queue, events: "ipc://{run}/e.ipc", requests: "ipc://{run}/r.ipc"}
          - {name: store, role: store}
          - {name: downloader, role: downloader}
          - {name: apps, role: observer, devices: "1-1"}
        curve:
          serverPublicKey: "\(serverPublicKey)"
          serverKeyFile: server.key
          clientKeyFile: \(clientKeyFile)
          allowedClientKeys: [\(allowed.map { "\"\($0)\"" }.joined(separator: ", "))]
        """
    }

    static func publicKey(_ file: String) throws -> String {
        let text = try String(contentsOfFile: file, encoding: .utf8)
        let line = try #require(text.split(separator: "\n").first { $0.hasPrefix("publicKey:") })
        return String(line.split(separator: "\"")[1])
    }

    @Test("A driver started by hand joins a CURVE-secured coordinator over tcp with an allowed key; one whose key is not allowed never gets a plan")
    func curveOnDriverEndpoint() throws {
        let scratch = CLI.Scratch()
        for name in ["server", "client", "intruder"] {
            let keys = try CLI.sksim(["keys"])
            #expect(keys.status == 0)
            try keys.output.write(toFile: scratch.path("\(name).key"), atomically: true, encoding: .utf8)
        }
        let server = try Self.publicKey(scratch.path("server.key"))
        let client = try Self.publicKey(scratch.path("client.key"))
        try Self.topology(clientKeyFile: "client.key", allowed: [client], serverPublicKey: server)
            .write(toFile: scratch.path("t.yaml"), atomically: true, encoding: .utf8)
        try Self.topology(clientKeyFile: "intruder.key", allowed: [client], serverPublicKey: server)
            .write(toFile: scratch.path("intruder.yaml"), atomically: true, encoding: .utf8)

        // The intruder first: refused during the handshake, it never hears from the coordinator.
        let port = 47_000 + Int(getpid() % 2_000)
        let endpoint = "tcp://127.0.0.1:\(port)"
        let coordinator = Process()
        coordinator.executableURL = try CLI.executable()
        coordinator.arguments = ["load", scratch.path("t.yaml"), "--drivers", "1", "--remote-drivers", "1", "--listen", endpoint,
                                 "--rate", "100", "--duration", "1s", "--threshold", "violations==0", "--out", scratch.path("run"), "--json"]
        let output = Pipe()
        coordinator.standardOutput = output
        coordinator.standardError = FileHandle.nullDevice
        try coordinator.run()
        defer { if coordinator.isRunning { coordinator.terminate() } }

        let intruder = try CLI.sksim(["driver", "--topology", scratch.path("intruder.yaml"), "--name", "intruder", "--coordinator", endpoint,
                                      "--run-directory", scratch.path("run"), "--coordinator-timeout", "3s"])
        #expect(intruder.status != 0)
        #expect(intruder.error.contains("allowedClientKeys"), "\(intruder.error)")

        let driver = try CLI.sksim(["driver", "--topology", scratch.path("t.yaml"), "--name", "remote-1", "--coordinator", endpoint,
                                    "--run-directory", scratch.path("run")])
        #expect(driver.status == 0, "\(driver.error)")
        let summary = output.fileHandleForReading.readDataToEndOfFile()
        coordinator.waitUntilExit()
        #expect(coordinator.terminationStatus == 0)
        let json = try #require(try JSONSerialization.jsonObject(with: summary) as? [String: Any])
        #expect(json["drivers"] as? Int == 2, "\(json)")
        #expect((json["lifecycles"] as? Int ?? 0) > 0)
        #expect(json["violations"] as? Int == 0)
    }
}
