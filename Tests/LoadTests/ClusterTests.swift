import Foundation
import StoreKitTestKit
import Testing

/// scripts/cluster: three hosts in network namespaces, a queue partition and a driver on each
/// over tcp:// with CURVE. Needs root (ip netns) and iproute2; skipped with a message otherwise.
@Suite(.serialized) struct ClusterTests {
    static var canRun: Bool { getuid() == 0 && LoadRunTests.which("ip") != nil }

    @Test("scripts/cluster: a load across three namespaced hosts passes, every host's partition intact with nothing pending, nothing left behind",
          .enabled(if: canRun, "scripts/cluster needs root and iproute2 (ip netns); run the tests as root to include it"))
    func clusterAcrossNamespaces() throws {
        let script = LoadRunTests.repositoryRoot.appendingPathComponent("scripts/cluster").path
        let outcome = try LoadRunTests.run(script, ["--sksim", try LoadRunTests.executable().path, "--rate", "200", "--duration", "2s"])
        #expect(outcome.status == 0, "\(outcome.output)\n\(outcome.error)")
        #expect(outcome.output.contains("thresholds passed"))
        for host in 1...3 { #expect(outcome.output.contains("host \(host) (") && outcome.output.contains("queue-\(host): ")) }
        // The teardown removed every namespace it made.
        let namespaces = try LoadRunTests.run(try #require(LoadRunTests.which("ip")), ["netns", "list"])
        #expect(!namespaces.output.contains("skc"), "left behind: \(namespaces.output)")
    }
}
