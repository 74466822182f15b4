import Foundation
import StoreKitLive
import Testing

/// The topology's `appStoreServer:` section and the role it starts (docs/topology.md).
@Suite struct AppStoreTopologyTests {
    static let base = """
        name: shop
        scenario:
          devices: 2
        processes:
          - { name: queue, role: queue, events: "ipc://{run}/e.ipc", requests: "ipc://{run}/r.ipc" }
          - { name: store, role: store }
          - { name: downloader, role: downloader }
          - { name: apps, role: observer, devices: "1-2" }
        """

    @Test func theSectionAddsTheRoleWithItsSettings() throws {
        let topology = try Topology.parse(Self.base + """

            appStoreServer:
              listen: "127.0.0.1:8090"
              bundleIdentifier: com.example.shop
              notificationURL: "http://127.0.0.1:9000/hook"
              apiKeys: { 2X9R4HXF34: keys/api.pem }
              notificationDrainSeconds: 5
            """, file: "shop.yaml")
        let section = try #require(topology.appStoreServer)
        #expect(section.listen == "127.0.0.1:8090")
        #expect(section.bundleIdentifier == "com.example.shop")
        #expect(section.environment == "Sandbox")
        #expect(section.apiKeys == ["2X9R4HXF34": "keys/api.pem"])
        #expect(section.notificationDrainSeconds == 5)
        #expect(topology.processes.filter { $0.role == .appStoreServer }.map(\.name) == ["appStoreServer"])
    }

    @Test func withoutTheSectionThereIsNoRole() throws {
        let topology = try Topology.parse(Self.base, file: "shop.yaml")
        #expect(topology.appStoreServer == nil)
        #expect(!topology.processes.contains { $0.role == .appStoreServer })
    }

    @Test(arguments: [
        "appStoreServer: { listen: nowhere }",
        "appStoreServer: { environment: Staging }",
        "appStoreServer: { notificationURL: ftp://example.com }",
        "appStoreServer: { colour: blue }",
    ])
    func aWrongSectionIsRefusedNamingTheKey(_ section: String) {
        #expect(throws: TopologyError.self) { try Topology.parse(Self.base + "\n" + section + "\n", file: "shop.yaml") }
    }
}
