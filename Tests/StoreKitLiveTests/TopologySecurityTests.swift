import Foundation
import Testing
import Bus
import ZeroMQ
@testable import StoreKitLive

/// The `curve` section and `insecure` (docs/topology.md, security).
@Suite struct TopologySecurityTests {
    static let exposed = """
    name: t
    scenario: {devices: 1}
    processes:
      - {name: queue, role: queue, events: "tcp://10.0.0.1:1", requests: "tcp://10.0.0.1:2"}
      - {name: store, role: store}
      - {name: downloader, role: downloader}
      - {name: apps, role: observer, devices: "1"}
    """

    @Test("tcp:// beyond loopback without CURVE is an error naming the file, the key and the fix")
    func plainTCPNeedsInsecure() throws {
        let error = #expect(throws: TopologyError.self) { _ = try Topology.parse(Self.exposed, file: "net.yaml") }
        #expect(error?.code == .insecureEndpoint && error?.file == "net.yaml" && error?.keyPath == "processes[0].events", "\(String(describing: error))")
        let allowed = try Topology.parse(Self.exposed + "\ninsecure: true", file: "net.yaml")
        #expect(allowed.securityNotice?.contains("unauthenticated") == true)
        let loopback = try Topology.parse(Self.exposed.replacingOccurrences(of: "10.0.0.1", with: "127.0.0.1"), file: "lo.yaml")
        #expect(loopback.securityNotice == nil)
    }

    @Test("tcp:// without CURVE, loopback included, gets a warning that every client is trusted with every role; ipc:// does not")
    func tcpWithoutCurveWarns() throws {
        let loopback = try Topology.parse(Self.exposed.replacingOccurrences(of: "10.0.0.1", with: "127.0.0.1"), file: "lo.yaml")
        let warning = try #require(loopback.unauthenticatedTransportWarning)
        #expect(warning.contains("processes[0].events is tcp://127.0.0.1:1 without CURVE"))
        #expect(warning.contains("every role"))
        let local = try Topology.parse(Self.exposed.replacingOccurrences(of: "tcp://10.0.0.1:1", with: "ipc://{run}/e.ipc")
            .replacingOccurrences(of: "tcp://10.0.0.1:2", with: "ipc://{run}/r.ipc"), file: "ipc.yaml")
        #expect(local.unauthenticatedTransportWarning == nil)
    }

    @Test("each side reads only its own key file; the queue gets the allow-list")
    func keyFiles() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("keys-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let server = try CurveKeyPair.generate()
        let client = try CurveKeyPair.generate()
        func keyFile(_ pair: CurveKeyPair) -> String { "publicKey: \"\(pair.publicKey.z85)\"\nsecretKey: \"\(pair.secretKey.z85)\"\n" }
        try keyFile(server).write(to: directory.appendingPathComponent("server.key"), atomically: true, encoding: .utf8)
        let text = Self.exposed + """

        curve:
          serverPublicKey: "\(server.publicKey.z85)"
          serverKeyFile: server.key
          clientKeyFile: client.key
          allowedClientKeys: ["\(client.publicKey.z85)"]
        """
        let file = directory.appendingPathComponent("t.yaml").path
        let topology = try Topology.parse(text, file: file)
        let security = try #require(try topology.curveServerSecurity())
        #expect(security.secretKey == server.secretKey)
        #expect(security.allowedClientKeys == [client.publicKey])
        // This host has no client key file: the error says which key points at it and how to make it.
        let missing = #expect(throws: TopologyError.self) { _ = try topology.curveClientKeys() }
        #expect(missing?.code == .curveKey && missing?.keyPath == "curve.clientKeyFile", "\(String(describing: missing))")
        try keyFile(client).write(to: directory.appendingPathComponent("client.key"), atomically: true, encoding: .utf8)
        #expect(try topology.curveClientKeys()?.clientKeyPair == client)
        #expect(try topology.curveClientKeys()?.serverPublicKey == server.publicKey)
    }

    /// A directory holding the server's and this host's key files, and a topology text using them.
    static func keyedTopology(allowedClientKeys: String, client: CurveKeyPair) throws -> (directory: URL, file: String, text: String) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("keys-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let server = try CurveKeyPair.generate()
        func keyFile(_ pair: CurveKeyPair) -> String { "publicKey: \"\(pair.publicKey.z85)\"\nsecretKey: \"\(pair.secretKey.z85)\"\n" }
        try keyFile(server).write(to: directory.appendingPathComponent("server.key"), atomically: true, encoding: .utf8)
        try keyFile(client).write(to: directory.appendingPathComponent("client.key"), atomically: true, encoding: .utf8)
        let text = exposed + """

        curve:
          serverPublicKey: "\(server.publicKey.z85)"
          serverKeyFile: server.key
          clientKeyFile: client.key
          allowedClientKeys: \(allowedClientKeys)
        """
        return (directory, directory.appendingPathComponent("t.yaml").path, text)
    }

    @Test("issue 30: allowedClientKeys binds a key to the roles of the processes it runs, an observer's key to its devices, a load driver's key to its drivers' devices")
    func keysBoundToRoles() throws {
        let (store, apps, driver, open) = (try CurveKeyPair.generate(), try CurveKeyPair.generate(), try CurveKeyPair.generate(), try CurveKeyPair.generate())
        let drivers = try CurveKeyPair.generate()
        let list = "[{key: \"\(store.publicKey.z85)\", processes: [store, downloader]}, {key: \"\(apps.publicKey.z85)\", processes: [apps]}, "
            + "{key: \"\(driver.publicKey.z85)\", roles: [app]}, \"\(open.publicKey.z85)\", {key: \"\(drivers.publicKey.z85)\", drivers: [driver-1, driver-2]}]"
        let (directory, file, text) = try Self.keyedTopology(allowedClientKeys: list, client: store)
        defer { try? FileManager.default.removeItem(at: directory) }
        let topology = try Topology.parse(text, file: file)
        let security = try #require(try topology.curveServerSecurity())
        #expect(security.allowedClientKeys.count == 5)
        #expect(security.permissions[store.publicKey] == ClientPermissions(roles: [.store, .downloader], devices: []))
        #expect(security.permissions[apps.publicKey] == ClientPermissions(roles: [.app], devices: [topology.scenario.deviceNames[0]]))
        #expect(security.permissions[driver.publicKey] == ClientPermissions(roles: [.app], devices: nil))
        #expect(security.permissions[open.publicKey] == nil, "a key written alone may send every role's command")
        let driverKey = try #require(security.permissions[drivers.publicKey])
        #expect(driverKey == ClientPermissions(roles: [.app], devices: [], devicePrefixes: ["driver-1-", "driver-2-"]))
        #expect(driverKey.hears(device: "driver-2-17") && !driverKey.hears(device: "driver-3-0") && !driverKey.hears(device: "device-0001"))
        #expect(driverKey.refusal(of: .launchApp(device: "driver-1-0")) == nil)
        #expect(driverKey.refusal(of: .launchApp(device: "driver-10-0"))?.contains("devices named driver-1-") == true)
        // The observer's key hears only its device, so its process follows that device alone; the store's key, everything.
        #expect(topology.followedDevices(process: "apps", clientKey: apps.publicKey) == [topology.scenario.deviceNames[0]])
        #expect(topology.followedDevices(process: "apps", clientKey: store.publicKey) == nil)
        #expect(topology.followedDevices(process: "apps", clientKey: open.publicKey) == nil)
        #expect(topology.observerKeyWarnings().isEmpty, "one device is one topic group: nothing to warn about")
        let unknown = #expect(throws: TopologyError.self) {
            _ = try Topology.parse(text.replacingOccurrences(of: "processes: [apps]", with: "processes: [nobody]"), file: file)
        }
        #expect(unknown?.code == .unknownName && unknown?.keyPath == "curve.allowedClientKeys[1].key", "\(String(describing: unknown))")
    }

    @Test("issue 30: this host's client key missing from allowedClientKeys is named, with its file")
    func missingClientKeyNamed() throws {
        let client = try CurveKeyPair.generate()
        let other = try CurveKeyPair.generate()
        let (directory, file, text) = try Self.keyedTopology(allowedClientKeys: "[\"\(other.publicKey.z85)\"]", client: client)
        defer { try? FileManager.default.removeItem(at: directory) }
        let topology = try Topology.parse(text, file: file)
        let error = #expect(throws: TopologyError.self) { try topology.checkClientKeyAllowed() }
        #expect(error?.code == .clientKeyNotAllowed && error?.keyPath == "curve.allowedClientKeys", "\(String(describing: error))")
    }

    @Test("issue 30: the queue's key file is looked for only on the queue's host: a queue on loopback, or the file present")
    func serverKeyFileOnlyOnTheQueuesHost() throws {
        let client = try CurveKeyPair.generate()
        let (directory, file, text) = try Self.keyedTopology(allowedClientKeys: "[\"\(client.publicKey.z85)\"]", client: client)
        defer { try? FileManager.default.removeItem(at: directory) }
        #expect(try Topology.parse(text, file: file).holdsServerKeyFile, "a queue on this machine needs its key file")
        let remote = try Topology.parse(text.replacingOccurrences(of: "{name: queue, role: queue,", with: "{name: queue, role: queue, host: 10.0.0.1,"), file: file)
        #expect(remote.holdsServerKeyFile, "the server's key file is here")
        try FileManager.default.removeItem(at: directory.appendingPathComponent("server.key"))
        #expect(!remote.holdsServerKeyFile, "a client host has no server key file to check")
        try remote.checkClientKeyAllowed()
    }

    @Test("issue 30: a malformed key in allowedClientKeys is refused with its file and key path")
    func badAllowedKeyNamed() throws {
        let client = try CurveKeyPair.generate()
        let bad = String(repeating: "~", count: 40)
        let (directory, file, text) = try Self.keyedTopology(allowedClientKeys: "[\"\(client.publicKey.z85)\", \"\(bad)\"]", client: client)
        defer { try? FileManager.default.removeItem(at: directory) }
        let error = #expect(throws: TopologyError.self) { _ = try Topology.parse(text, file: file).curveServerSecurity() }
        #expect(error?.code == .curveKey && error?.file == file && error?.keyPath == "curve.allowedClientKeys[1]", "\(String(describing: error))")
    }
}
