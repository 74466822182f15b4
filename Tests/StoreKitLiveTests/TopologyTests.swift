import Foundation
import Testing
@testable import StoreKitLive
import StoreKitRoles

@Suite struct TopologyTests {
    static let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test("Every shipped topology file loads", arguments: ["local.yaml", "tcp.yaml", "multi-host.yaml", "replay-live.yaml"])
    func shippedTopologies(name: String) throws {
        let topology = try Topology.load(path: Self.repositoryRoot.appendingPathComponent("topology/\(name)").path)
        #expect(topology.processes.filter { $0.role == .queue }.count == 1)
        #expect(topology.processes.filter { $0.role == .observer }.flatMap(\.deviceIndices).count == topology.scenario.devices)
    }

    @Test("The local topology runs over ipc with two observers per device")
    func localDefaults() throws {
        let topology = try Topology.load(path: Self.repositoryRoot.appendingPathComponent("topology/local.yaml").path)
        #expect(topology.queue.eventsEndpoint?.hasPrefix("ipc://") == true)
        #expect(topology.scenario.apps.observers.count == 2)
        #expect(topology.curve == nil)
        #expect(try Topology.load(path: Self.repositoryRoot.appendingPathComponent("topology/multi-host.yaml").path).curve != nil)
    }

    static let valid = """
    name: t
    scenario: {devices: 2}
    processes:
      - {name: queue, role: queue, events: "ipc://{run}/e", requests: "ipc://{run}/r"}
      - {name: store, role: store}
      - {name: downloader, role: downloader}
      - {name: apps, role: observer, devices: "1-2"}
    """

    /// `valid` with more keys in its scenario, e.g. `store: {maximumRenewals: 5}`.
    static func valid(scenario keys: String) -> String {
        valid.replacingOccurrences(of: "scenario: {devices: 2}", with: "scenario: {devices: 2, \(keys)}")
    }

    static let invalidTopologies: [(String, String, TopologyError.Code)] = [
            ("scenario: {devices: 2}\nprocesses: []\nbogus: 1", "bogus", .unknownKey),
            ("processes: []", "", .missingKey),
            (valid.replacingOccurrences(of: "devices: 2}", with: "devices: two}"), "scenario.devices", .wrongType),
            (valid.replacingOccurrences(of: "role: store", with: "role: shop"), "processes[1].role", .invalidValue),
            (valid.replacingOccurrences(of: "\"1-2\"", with: "\"1-1\""), "processes", .invalidValue),
            (valid.replacingOccurrences(of: "\"1-2\"", with: "\"1-5\""), "processes[3].devices", .outOfRange),
            (valid.replacingOccurrences(of: "ipc://{run}/e", with: "http://x"), "processes[0].events", .invalidValue),
            (valid.replacingOccurrences(of: "{name: store, role: store}", with: "{name: queue, role: store}"), "processes[1].name", .conflict),
            (valid.replacingOccurrences(of: "  - {name: downloader, role: downloader}\n", with: ""), "processes", .wrongRole),
            ("name: [unclosed", "", .malformedYAML),
            (valid.replacingOccurrences(of: "ipc://{run}/r", with: "ipc://{run}/e"), "processes[0].requests", .conflict),
            (valid.replacingOccurrences(of: "ipc://{run}/e", with: "tcp://127.0.0.1:port"), "processes[0].events", .invalidValue),
            (valid.replacingOccurrences(of: "ipc://{run}/e", with: "tcp://127.0.0.1:70000"), "processes[0].events", .invalidValue),
            (valid.replacingOccurrences(of: "ipc://{run}/e", with: "tcp://127.0.0.1"), "processes[0].events", .invalidValue),
            (valid.replacingOccurrences(of: "ipc://{run}/e", with: "tcp://:5000"), "processes[0].events", .invalidValue),
            (valid.replacingOccurrences(of: "ipc://{run}/e", with: "ipc://"), "processes[0].events", .invalidValue),
            ("durability: os\n" + valid, "durability", .invalidValue),
            // Once a stack overflow (a crash) at a few thousand levels, and minutes and gigabytes for ten lines of aliases.
            ("a: " + String(repeating: "[", count: 20_000) + String(repeating: "]", count: 20_000), "", .malformedYAML),
            ("a:\n  " + String(repeating: "- ", count: 20_000) + "x", "", .malformedYAML),
            (billionLaughs, "", .malformedYAML),
            // Found by Fuzz/FuzzTopology (minimised): a list or mapping as a key once crashed Yams's conversion.
            ("{}:", "", .malformedYAML),
            ("scenario:\n  ? [devices]\n  : 2", "", .malformedYAML),
            // The run directory is out/<name>-<seed>: once "../../x" put it outside out/.
            (valid.replacingOccurrences(of: "name: t\n", with: "name: ../../x\n"), "name", .invalidValue),
    ]

    /// Ten lines whose aliases expand to 10^10 values.
    static let billionLaughs = (1..<10).reduce("a0: &a0 [" + Array(repeating: "lol", count: 10).joined(separator: ",") + "]") { text, level in
        text + "\na\(level): &a\(level) [" + Array(repeating: "*a\(level - 1)", count: 10).joined(separator: ",") + "]"
    }

    @Test("A missing catalog is looked for beside the topology file, and the error says so (once: 'from the current directory')")
    func missingCatalogNamesTheTopologyFolder() {
        let text = Self.valid(scenario: "catalog: missing.storekit")
        let error = #expect(throws: TopologyError.self) { _ = try Topology.parse(text, file: "/nonexistent-folder/t.yaml") }
        #expect(error?.code == .scenario && error?.keyPath == "scenario.catalog")
        #expect(error?.description.contains("/nonexistent-folder/missing.storekit: There is no file at this path") == true, "\(error?.description ?? "")")
        #expect(error?.description.contains("taken from the topology file's folder (/nonexistent-folder)") == true, "\(error?.description ?? "")")
        #expect(error?.description.contains("..") == false, "\(error?.description ?? "")")
    }

    @Test("A YAML error is one line; quoted brackets, comments and anchors of a real file do not count as nesting")
    func yamlErrorsAreOneLine() throws {
        let error = #expect(throws: TopologyError.self) { _ = try Topology.parse("name: [unclosed", file: "bad.yaml") }
        #expect(error?.description.contains("\n") == false, "\(error?.description ?? "")")
        let deepLooking = "# [[[[ ]]]] don't\noutput: \"]]]]]]]\"\n" + Self.valid
        #expect(try Topology.parse(deepLooking, file: "ok.yaml").name == "t")
        #expect(ConfigurationNode.nestingBound(String(repeating: "x: \"]\"\n", count: 5_000) + "y: [[[1]]]") <= 4)
    }

    @Test("Errors name the file, the key and the kind of problem", arguments: invalidTopologies)
    func errors(text: String, keyPath: String, code: TopologyError.Code) {
        let error = #expect(throws: TopologyError.self) { _ = try Topology.parse(text, file: "bad.yaml") }
        #expect(error?.file == "bad.yaml" && error?.keyPath == keyPath && error?.code == code, "\(String(describing: error))")
    }

    @Test("An error reads as one line: the file, the key path (or \"(top level)\"), the problem and where the format is described")
    func errorDescription() {
        let error = TopologyError(file: "bad.yaml", keyPath: "", problem: "not valid YAML (x).", code: .malformedYAML)
        #expect(error.description == "bad.yaml: (top level): not valid YAML (x). See docs/topology.md for the format.")
    }

    @Test("The built-in topology is topology/local.yaml, byte for byte, and loads without a file")
    func builtIn() throws {
        let file = try String(contentsOf: Self.repositoryRoot.appendingPathComponent("topology/local.yaml"), encoding: .utf8)
        #expect(file == BuiltInTopology.local)
        let topology = try Topology.load(path: nil)
        #expect(topology.name == "local")
        #expect(topology.file == Topology.builtInName)
    }

    @Test("The built-in load topology is topology/load.yaml, byte for byte; `topology show load` prints it, an unknown name is refused")
    func builtInLoad() throws {
        let file = try String(contentsOf: Self.repositoryRoot.appendingPathComponent("topology/load.yaml"), encoding: .utf8)
        #expect(file == BuiltInTopology.load)
        let topology = try Topology.load(path: Topology.builtInLoadName)
        #expect(topology.name == "load" && topology.file == Topology.builtInLoadName)
        let shown = try CommandLineTests.sksim(["topology", "show", "load"])
        #expect(shown.status == 0 && shown.output == BuiltInTopology.load)
        let unknown = try CommandLineTests.sksim(["topology", "show", "cluster"])
        #expect(unknown.status != 0 && unknown.error.contains("there is no built-in topology 'cluster'"), "\(unknown.error)")
    }

    @Test("--seed and --devices override a topology; the devices are shared evenly by its observer processes")
    func overrides() throws {
        let topology = try Topology.load(path: nil).overriding(seed: 9, devices: 5)
        #expect(topology.scenario.seed == 9)
        #expect(topology.scenario.devices == 5)
        let observers = topology.processes.filter { $0.role == .observer }.map(\.deviceIndices)
        #expect(observers == [[0, 1, 2], [3, 4]])
        #expect(throws: TopologyError.self) { _ = try Topology.load(path: nil).overriding(seed: nil, devices: 1) }
    }

    @Test("A missing file is a clear error")
    func missingFile() {
        let error = #expect(throws: TopologyError.self) { _ = try Topology.load(path: "/nonexistent/topology.yaml") }
        #expect(error?.code == .unreadableFile && error?.keyPath == "", "\(String(describing: error))")
    }
}

/// The subscription keys of a topology's store (F-U1, F-U2).
@Suite struct SubscriptionTopologyTests {
    @Test("F-U1, F-U2: store.maximumRenewals, cancellationAtRenewalProbability and subscriptionTimeRate are read; out of range is refused")
    func subscriptionKeys() throws {
        let text = TopologyTests.valid(scenario: "store: {maximumRenewals: 5, cancellationAtRenewalProbability: 0.5, subscriptionTimeRate: 6}")
        let topology = try Topology.parse(text, file: "subscriptions.yaml")
        #expect(topology.scenario.store.maximumRenewals == 5)
        #expect(topology.scenario.store.cancellationAtRenewalProbability == 0.5)
        #expect(topology.scenario.store.subscriptionTimeRate == 6)
        let wrong = TopologyTests.valid(scenario: "store: {maximumRenewals: 5000}")
        #expect(throws: TopologyError.self) { _ = try Topology.parse(wrong, file: "bad.yaml") }
        // Xcode's fixed renewal rates (one renewal every 15 minutes to every 2 seconds) are rates too.
        let fixed = try Topology.parse(TopologyTests.valid(scenario: "store: {subscriptionTimeRate: 1005}"), file: "fixed.yaml")
        #expect(fixed.scenario.store.subscriptionTimeRate == 1005)
        for notARate in [7, 14, 999, 1006] {
            let error = #expect(throws: TopologyError.self) {
                _ = try Topology.parse(TopologyTests.valid(scenario: "store: {subscriptionTimeRate: \(notARate)}"), file: "bad.yaml")
            }
            #expect(error?.code == (notARate > 1_005 ? .outOfRange : .invalidValue) && error?.keyPath.hasSuffix("subscriptionTimeRate") == true,
                    "\(String(describing: error))")
        }
    }
}

/// The interrupted-purchase keys of a topology's store (F-I1).
@Suite struct InterruptedPurchaseTopologyTests {
    @Test("F-I1: store.interruptedPurchaseProbability and interruptionResolvedProbability are read; out of range is refused with the key path")
    func interruptionKeys() throws {
        let text = TopologyTests.valid(scenario: "store: {interruptedPurchaseProbability: 0.25, interruptionResolvedProbability: 0.5}")
        let topology = try Topology.parse(text, file: "interrupted.yaml")
        #expect(topology.scenario.store.interruptedPurchaseProbability == 0.25)
        #expect(topology.scenario.store.interruptionResolvedProbability == 0.5)
        let wrong = TopologyTests.valid(scenario: "store: {interruptedPurchaseProbability: 2}")
        #expect { _ = try Topology.parse(wrong, file: "bad.yaml") } throws: { "\($0)".contains("store.interruptedPurchaseProbability") }
    }
}

/// Timed store actions in a topology's scenario (F-T2).
@Suite struct StoreActionTopologyTests {
    @Test("F-T2: scenario.storeActions is read; an unknown action or device is refused with its key path")
    func storeActionsKey() throws {
        let text = TopologyTests.valid(scenario: "storeActions: [{atMilliseconds: 500, action: failNext, device: device-0001, error: paymentCancelled}, {atMilliseconds: 9000, action: clearTransactions, device: device-0002}]")
        let topology = try Topology.parse(text, file: "actions.yaml")
        #expect(topology.scenario.store.actions == [
            StoreAction(atMilliseconds: 500, action: .failNext, device: "device-0001", error: "paymentCancelled"),
            StoreAction(atMilliseconds: 9000, action: .clearTransactions, device: "device-0002"),
        ])
        let unknownAction = TopologyTests.valid(scenario: "storeActions: [{atMilliseconds: 5, action: explode, device: device-0001}]")
        #expect { _ = try Topology.parse(unknownAction, file: "bad.yaml") } throws: { "\($0)".contains("scenario.storeActions[0].action") }
        let unknownDevice = TopologyTests.valid(scenario: "storeActions: [{atMilliseconds: 5, action: approve, device: device-0042}]")
        #expect { _ = try Topology.parse(unknownDevice, file: "bad.yaml") } throws: { "\($0)".contains("storeActions[0].device 'device-0042'") }
    }
}
