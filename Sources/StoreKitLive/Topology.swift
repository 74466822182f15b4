import Bus
import EventLog
import Foundation
import StoreKitModel
import StoreKitRoles
import StoreKitRuntime
import ZeroMQ

/// The roles a process can play.
public enum RoleKind: String, Sendable, CaseIterable {
    case queue, store, downloader, observer
    /// The App Store's server side (docs/app-store-server.md): reads the log, never writes it.
    case appStoreServer
}

/// A topology's `appStoreServer:` section (docs/app-store-server.md, docs/topology.md): where the App
/// Store Server API listens and what it signs with. Its process reads the log only.
public struct AppStoreServerSection: Sendable, Hashable {
    /// HOST:PORT (port 0: any free one, written to `RUN/app-store-server.json`).
    public var listen = "127.0.0.1:0"
    /// The signing chain's folder (default: `RUN/app-store`).
    public var certificates: String?
    public var environment = "Sandbox"
    public var bundleIdentifier = "com.example.sksim"
    public var notificationURL: String?
    /// API keys: key id → PEM file of its public (or .p8 private) key.
    public var apiKeys: [String: String] = [:]
    /// How long `sksim run` lets outstanding notifications be delivered before it stops the server.
    public var notificationDrainSeconds: Double = 30

    public init() {}

    /// The process a topology with the section but none of that role runs it in.
    public static let defaultProcessName = "appStoreServer"
}

/// One process of a topology.
public struct ProcessSpecification: Sendable {
    public var name: String
    public var role: RoleKind
    /// Informative: where the process is meant to run (`sksim run` starts the local ones).
    public var host: String
    /// For the queue: where it publishes events and takes requests.
    public var eventsEndpoint: String?
    public var requestsEndpoint: String?
    /// For observers: 0-based indices of the devices whose apps this process hosts.
    public var deviceIndices: [Int]
    /// For a queue: the log partition it is the single writer of. A topology's only queue writes
    /// "queue" (`LogProjection.partition`); with several, each writes the partition named by its
    /// `partition` key, or else by its process name.
    public var partition: String? = nil
}

/// CURVE keys for a topology that crosses hosts: the queue is the server. The file holds
/// only public keys; each host keeps its own secret key in a key file (`sksim keys` output)
/// that never leaves it.
public struct CurveConfiguration: Sendable {
    public var serverPublicKey: String
    /// The queue's key pair; read only by the queue, so only its host needs the file.
    public var serverKeyFile: String
    /// This host's client key pair; read by every other process.
    public var clientKeyFile: String
    /// Public keys of the client pairs the queue lets in.
    public var allowedClientKeys: [String]
    /// What each bound key may send (an `allowedClientKeys` entry written as a mapping): the
    /// processes that run with it and the roles given outright. A key written as a plain string is
    /// not here and may send every role's command.
    public var bindings: [String: ClientKeyBinding] = [:]
}

/// One `allowedClientKeys` entry written as `{key, processes, roles, drivers}` (docs/topology.md).
public struct ClientKeyBinding: Sendable {
    /// Processes of the topology that run with this key: their roles, and an observer's devices.
    public var processes: [String]
    /// Roles given outright, for any device.
    public var roles: [CommandRole]
    /// Load drivers (`sksim driver --name`) that run with this key: the app role for the devices each
    /// invents (`loadDriverDevicePrefix`), and only their topic group.
    public var drivers: [String] = []
    /// Where the entry is, for messages.
    public var keyPath: String
}

/// A topology file: which processes run where, how they connect, and what they simulate.
public struct Topology: Sendable {
    public var name: String
    public var file: String
    public var scenario: Scenario
    public var durability: DurabilityPolicy
    public var durabilityName: String
    public var heartbeatMilliseconds: Int
    public var processes: [ProcessSpecification]
    public var curve: CurveConfiguration?
    /// Set to run tcp:// on a non-loopback address without CURVE, knowingly.
    public var insecure = false
    /// Default output directory (relative to the working directory) when `--out` is not given.
    public var output: String?
    /// The App Store's server side, when the topology (or `run`'s flags) asks for it.
    public var appStoreServer: AppStoreServerSection? {
        get { appStoreServerStorage.first }
        set { appStoreServerStorage = newValue.map { [$0] } ?? [] }
    }
    /// Held out of line (an array's one element): a topology is parsed and copied through deep call
    /// chains, and every byte it holds inline is on each of their stack frames.
    var appStoreServerStorage: [AppStoreServerSection] = []

    /// The first queue (the only one in a topology without partitions).
    public var queue: ProcessSpecification { processes.first { $0.role == .queue }! }
    /// Every queue, in the file's order: a partition's index in `PartitionRouting` is its position here.
    public var queues: [ProcessSpecification] { processes.filter { $0.role == .queue } }

    /// Every partition's endpoints with `{run}` resolved, in routing order.
    public func partitionEndpoints(runDirectory: URL) -> [PartitionEndpoints] {
        queues.map { queue in
            PartitionEndpoints(partition: queue.partition!, eventsEndpoint: resolved(queue.eventsEndpoint!, runDirectory: runDirectory),
                               requestsEndpoint: resolved(queue.requestsEndpoint!, runDirectory: runDirectory))
        }
    }

    public func process(named name: String) throws(TopologyError) -> ProcessSpecification {
        guard let process = processes.first(where: { $0.name == name }) else {
            throw TopologyError(file: file, keyPath: "processes", problem: "no process is named '\(name)'; the file names \(processes.map(\.name).joined(separator: ", "))", code: .unknownName)
        }
        return process
    }

    /// Endpoints with `{run}` replaced by the run's output directory.
    public func resolved(_ endpoint: String, runDirectory: URL) -> String {
        endpoint.replacingOccurrences(of: "{run}", with: runDirectory.path)
    }

    /// What `--topology` names when no file is given: the built-in local topology.
    public static let builtInName = "built-in:local"
    /// What `sksim load` and `sksim driver` use, and pass to their processes, when no file is given.
    public static let builtInLoadName = "built-in:load"

    /// The text of a built-in topology by its name, or nil for a file's path.
    public static func builtInText(_ name: String) -> String? {
        switch name {
        case builtInName: BuiltInTopology.local
        case builtInLoadName: BuiltInTopology.load
        default: nil
        }
    }

    /// Loads a topology file, or the built-in local one for `nil` or `built-in:local` (`built-in:load`: the load one).
    public static func load(path: String?) throws(TopologyError) -> Topology {
        guard let path else { return try parse(BuiltInTopology.local, file: builtInName) }
        if let text = builtInText(path) { return try parse(text, file: path) }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
            throw TopologyError(file: path, keyPath: "", problem: "no such file (relative paths start at \(FileManager.default.currentDirectoryPath)); "
                                + "give the path of a topology YAML file, or no file for the built-in one (`sksim topology show` prints it)", code: .unreadableFile)
        }
        guard !isDirectory.boolValue else {
            throw TopologyError(file: path, keyPath: "", problem: "is a directory, not a topology file; give the path of a YAML file such as "
                                + "\(URL(fileURLWithPath: path).appendingPathComponent("local.yaml").relativePath)", code: .unreadableFile)
        }
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw TopologyError(file: path, keyPath: "", problem: "cannot be read as UTF-8 text; give the path of a topology YAML file", code: .unreadableFile)
        }
        return try parse(text, file: path)
    }

    /// The same topology with another seed or number of devices (`sksim run --seed/--devices`).
    /// With a new number of devices, the observer processes share them evenly, in order.
    public func overriding(seed: UInt64?, devices: Int?) throws(TopologyError) -> Topology {
        var result = self
        if let seed { result.scenario.seed = seed }
        guard let devices else { return result }
        guard (1...Scenario.maximumDevices).contains(devices) else {
            throw TopologyError(file: file, keyPath: "scenario.devices", problem: "--devices must be within 1-\(Scenario.maximumDevices), found \(devices)", code: .outOfRange)
        }
        let observers = processes.indices.filter { processes[$0].role == .observer }
        guard devices >= observers.count else {
            throw TopologyError(file: file, keyPath: "processes", problem: "--devices \(devices) is fewer than the \(observers.count) observer processes; give at least \(observers.count)", code: .outOfRange)
        }
        result.scenario.devices = devices
        var next = 0
        for (position, index) in observers.enumerated() {
            let share = devices / observers.count + (position < devices % observers.count ? 1 : 0)
            result.processes[index].deviceIndices = Array(next..<(next + share))
            next += share
        }
        do {
            try result.scenario.validate()
        } catch {
            throw TopologyError(file: file, keyPath: "scenario", problem: error.message, code: .scenario)
        }
        return result
    }

    public static func parse(_ text: String, file: String) throws(TopologyError) -> Topology {
        let root = try ConfigurationNode.parse(text, file: file)
        let top = try root.mapping(allowedKeys: ["name", "seed", "durability", "heartbeatMilliseconds", "scenario", "processes", "curve", "insecure", "output", "load", "appStoreServer"])
        func required(_ key: String) throws(TopologyError) -> ConfigurationNode {
            guard let node = top[key], node.isPresent else { throw root.error("missing key '\(key)'", code: .missingKey) }
            return node
        }
        let name = try top["name"]?.string() ?? URL(fileURLWithPath: file).deletingPathExtension().lastPathComponent
        // The run directory is out/<name>-<seed>: a name with '/' or '..' would put it elsewhere.
        if let nameNode = top["name"], name.isEmpty || name == "." || name == ".."
            || !name.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" || $0 == "." }) {
            throw nameNode.error("expected a name of letters, digits, '-', '_' or '.' (it names the run directory out/<name>-<seed>), found '\(name)'")
        }
        let seed = try top["seed"]?.unsigned() ?? 1
        let durabilityNode = top["durability"]
        let durabilityName = try durabilityNode?.oneOf(["always", "group", "os"]) ?? "group"
        // The queue publishes an event only once it is durable; under `os` nothing ever is (no fsync), so the
        // choice is refused rather than silently changed. `sksim simulate --durability os` and `bench log` have it.
        if durabilityName == "os", let durabilityNode {
            throw durabilityNode.error("'os' (no fsync) cannot be used by a live queue, which publishes only what is durable; use 'group' (fsync batches, the default) or 'always'")
        }
        let durability: DurabilityPolicy = durabilityName == "always" ? .always : .defaultGroupCommit
        let heartbeat = try top["heartbeatMilliseconds"]?.integer(in: 10...60_000) ?? 250
        let scenario = try parseScenario(try required("scenario"), seed: seed, file: file)
        let processesNode = try required("processes")
        let processes = try parseProcesses(processesNode, devices: scenario.devices)
        try checkEndpoints(processes, node: processesNode)
        let curve = try top["curve"].flatMap { node throws(TopologyError) in node.isPresent ? try parseCurve(node) : nil }
        for binding in curve?.bindings.values.sorted(by: { $0.keyPath < $1.keyPath }) ?? [] {
            for name in binding.processes where !processes.contains(where: { $0.name == name }) {
                throw TopologyError(file: file, keyPath: binding.keyPath, problem: "binds process '\(name)', which the topology does not have", code: .unknownName)
            }
        }
        let insecure = try top["insecure"]?.bool() ?? false
        try checkTransportSecurity(processes, curve: curve, insecure: insecure, file: file)
        var topology = Topology(name: name, file: file, scenario: scenario, durability: durability, durabilityName: durabilityName,
                                heartbeatMilliseconds: heartbeat, processes: processes, curve: curve, insecure: insecure,
                                output: try top["output"]?.string())
        if let section = top["appStoreServer"], section.isPresent {
            topology = topology.withAppStoreServer(try parseAppStoreServer(section))
        } else if processes.contains(where: { $0.role == .appStoreServer }) {
            topology.appStoreServer = AppStoreServerSection()
        }
        return topology
    }

    private static func parseScenario(_ node: ConfigurationNode, seed: UInt64, file: String) throws(TopologyError) -> Scenario {
        let keys = try node.mapping(allowedKeys: ["devices", "devicesPerAccount", "purchasesPerDevice", "catalog", "observers", "app",
                                                  "restoreProbability", "relaunchProbability", "thinkTimeMilliseconds", "store", "downloader",
                                                  "restrictedDeviceShare", "storeActions", "receiptRefreshProbability",
                                                  "promotionalOfferProbability", "startDate"])
        guard let devicesNode = keys["devices"] else { throw node.error("missing key 'devices'", code: .missingKey) }
        var catalog = Catalog.sample
        var catalogSource = "built-in sample"
        if let catalogNode = keys["catalog"], try catalogNode.string() != "sample" {
            let relative = try catalogNode.string()
            let url = URL(fileURLWithPath: relative, relativeTo: URL(fileURLWithPath: file).deletingLastPathComponent())
            do {
                catalog = try Catalog.load(contentsOf: url)
            } catch {
                throw catalogNode.error("cannot load catalog \(url.path): \(error)", code: .scenario)
            }
            catalogSource = url.lastPathComponent
        }
        var scenario = Scenario(seed: seed, devices: try devicesNode.integer(in: 1...Scenario.maximumDevices), catalog: catalog, catalogSource: catalogSource)
        if let value = keys["devicesPerAccount"] { scenario.apps.devicesPerAccount = try value.integer(in: 1...1_000) }
        if let value = keys["purchasesPerDevice"] { scenario.apps.purchasesPerDevice = try value.integer(in: 0...1_000_000) }
        if let value = keys["restoreProbability"] { scenario.apps.restoreProbability = try value.double(in: 0...1) }
        if let value = keys["relaunchProbability"] { scenario.apps.relaunchProbability = try value.double(in: 0...1) }
        if let value = keys["restrictedDeviceShare"] { scenario.apps.restrictedDeviceShare = try value.double(in: 0...1) }
        if let value = keys["receiptRefreshProbability"] { scenario.apps.receiptRefreshProbability = try value.double(in: 0...1) }
        if let value = keys["promotionalOfferProbability"] { scenario.apps.promotionalOfferProbability = try value.double(in: 0...1) }
        if let value = keys["startDate"] {
            // YAML reads an unquoted ISO 8601 date as a timestamp; written back as text, both are checked alike.
            let text: String
            if let date = value.value as? Date { text = Scenario.startDateText(date) } else { text = try value.string() }
            guard let date = Scenario.startDate(text: text), Scenario.startDateRange.contains(date) else {
                throw value.error("startDate '\(text)' is not a date from 2000-01-01 to 2098-12-31 in ISO 8601 with a time zone, e.g. 2026-01-01T00:00:00Z")
            }
            scenario.startDate = date
        }
        if let value = keys["storeActions"] {
            // SKTestSession's controls at set times (F-T2); names are checked against the run below.
            scenario.store.actions = try value.sequence().map { item throws(TopologyError) in
                let fields = try item.mapping(allowedKeys: ["atMilliseconds", "action", "device", "product", "error"])
                func required(_ key: String) throws(TopologyError) -> ConfigurationNode {
                    guard let node = fields[key] else { throw item.error("missing key '\(key)'", code: .missingKey) }
                    return node
                }
                let kind = StoreAction.Kind(rawValue: try required("action").oneOf(StoreAction.Kind.allCases.map(\.rawValue)))!
                return StoreAction(atMilliseconds: try required("atMilliseconds").double(in: 0...86_400_000), action: kind,
                                   device: try required("device").string(), product: try fields["product"]?.string(),
                                   error: try fields["error"]?.oneOf(StoreError.Code.allCases.map { "\($0)" }))
            }
        }
        if let value = keys["thinkTimeMilliseconds"] {
            let think = try value.mapping(allowedKeys: ["minimum", "mean"])
            scenario.apps.thinkTime = .exponential(minimumMilliseconds: try think["minimum"]?.double(in: 0...3_600_000) ?? 0,
                                                   meanMilliseconds: try think["mean"]?.double(in: 0...3_600_000) ?? 100)
        }
        if let value = keys["observers"] {
            scenario.apps.observers = try value.sequence().map { item throws(TopologyError) in
                ObserverBehavior(rawValue: try item.oneOf(ObserverBehavior.allCases.map(\.rawValue)))!
            }
            guard !scenario.apps.observers.isEmpty else { throw value.error("expected at least one observer behaviour") }
        }
        if let value = keys["app"] {
            // The team's own app code, registered under this name by the executable that runs the topology.
            guard keys["observers"] == nil else { throw value.error("give either 'app' or 'observers': the app's code attaches its own observers", code: .conflict) }
            let name = try value.string()
            guard !name.isEmpty else { throw value.error("expected the name of an app the executable registers") }
            scenario.apps.app = name
            scenario.apps.observers = []
        }
        if let value = keys["store"] { try parseStore(value, into: &scenario.store) }
        if let value = keys["downloader"] {
            let downloader = try value.mapping(allowedKeys: ["minimumBytesPerSecond", "maximumBytesPerSecond", "tickMilliseconds", "failureProbabilityPerTick"])
            if let item = downloader["minimumBytesPerSecond"] { scenario.downloader.minimumBytesPerSecond = try item.double(in: 1...1e12) }
            if let item = downloader["maximumBytesPerSecond"] { scenario.downloader.maximumBytesPerSecond = try item.double(in: 1...1e12) }
            if let item = downloader["tickMilliseconds"] { scenario.downloader.tickMilliseconds = try item.double(in: 1...60_000) }
            if let item = downloader["failureProbabilityPerTick"] { scenario.downloader.failureProbabilityPerTick = try item.double(in: 0...1) }
        }
        do {
            try scenario.validate()
        } catch {
            throw node.error(error.message, code: .scenario)
        }
        return scenario
    }

    /// The scenario's `store` section: the simulated App Store's decisions, latencies and subscription controls.
    private static func parseStore(_ value: ConfigurationNode, into behavior: inout StoreBehavior) throws(TopologyError) {
        let store = try value.mapping(allowedKeys: ["failureProbability", "deferralProbability", "cancellationProbability",
                                                    "approvalProbability", "restoreFailureProbability", "latencyMilliseconds",
                                                    "cancellationAtRenewalProbability", "maximumRenewals", "subscriptionTimeRate",
                                                    "interruptedPurchaseProbability", "interruptionResolvedProbability",
                                                    "billingIssueProbability", "billingRecoveryProbability", "billingGracePeriodEnabled",
                                                    "promotionalOfferKey"])
        if let item = store["failureProbability"] { behavior.failureProbability = try item.double(in: 0...1) }
        if let item = store["deferralProbability"] { behavior.deferralProbability = try item.double(in: 0...1) }
        if let item = store["cancellationProbability"] { behavior.cancellationProbability = try item.double(in: 0...1) }
        if let item = store["approvalProbability"] { behavior.approvalProbability = try item.double(in: 0...1) }
        if let item = store["restoreFailureProbability"] { behavior.restoreFailureProbability = try item.double(in: 0...1) }
        if let item = store["cancellationAtRenewalProbability"] { behavior.cancellationAtRenewalProbability = try item.double(in: 0...1) }
        if let item = store["maximumRenewals"] { behavior.maximumRenewals = try item.integer(in: 0...StoreBehavior.maximumRenewalsLimit) }
        if let item = store["subscriptionTimeRate"] {
            let rate = try item.integer(in: 0...1_005)
            guard StoreKitTestSettings.isTimeRate(rate) else {
                throw item.error("\(rate) is not an SKTestSession.TimeRate raw value; use 0-6, 10-13, 15, or 1000-1005 (one renewal every 15 minutes to every 2 seconds)")
            }
            behavior.subscriptionTimeRate = rate
        }
        if let item = store["interruptedPurchaseProbability"] { behavior.interruptedPurchaseProbability = try item.double(in: 0...1) }
        if let item = store["interruptionResolvedProbability"] { behavior.interruptionResolvedProbability = try item.double(in: 0...1) }
        if let item = store["billingIssueProbability"] { behavior.billingIssueProbability = try item.double(in: 0...1) }
        if let item = store["billingRecoveryProbability"] { behavior.billingRecoveryProbability = try item.double(in: 0...1) }
        if let item = store["billingGracePeriodEnabled"] { behavior.billingGracePeriodEnabled = try item.bool() }
        if let item = store["promotionalOfferKey"] {
            // The key promotional offer signatures are made and checked with (F-O6).
            let key = try item.mapping(allowedKeys: ["identifier", "secret"])
            guard let identifier = try key["identifier"]?.string(), !identifier.isEmpty,
                  let secret = try key["secret"]?.string(), !secret.isEmpty else {
                throw item.error("promotionalOfferKey needs a non-empty identifier and secret", code: .missingKey)
            }
            behavior.promotionalOfferKey = PromotionalOfferKey(identifier: identifier, secret: secret)
        }
        if let item = store["latencyMilliseconds"] {
            let latency = try item.mapping(allowedKeys: ["minimum", "mean"])
            let minimum = try latency["minimum"]?.double(in: 0...600_000) ?? 0
            let mean = try latency["mean"]?.double(in: 0...600_000) ?? 10
            behavior.purchaseLatency = .exponential(minimumMilliseconds: minimum, meanMilliseconds: mean)
            behavior.restoreLatency = .exponential(minimumMilliseconds: minimum, meanMilliseconds: mean)
            behavior.approvalLatency = .exponential(minimumMilliseconds: minimum * 5, meanMilliseconds: mean * 5)
        }
    }

    private static func parseProcesses(_ node: ConfigurationNode, devices: Int) throws(TopologyError) -> [ProcessSpecification] {
        var processes: [ProcessSpecification] = []
        var claimed = [String?](repeating: nil, count: devices)
        for item in try node.sequence() {
            let keys = try item.mapping(allowedKeys: ["name", "role", "host", "events", "requests", "devices", "partition"])
            guard let nameNode = keys["name"] else { throw item.error("missing key 'name'", code: .missingKey) }
            guard let roleNode = keys["role"] else { throw item.error("missing key 'role' (queue, store, downloader or observer)", code: .missingKey) }
            let name = try nameNode.string()
            guard !name.isEmpty, name.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" || $0 == "." }) else {
                throw nameNode.error("expected a name of letters, digits, '-', '_' or '.', found '\(name)'")
            }
            guard !processes.contains(where: { $0.name == name }) else { throw nameNode.error("the name '\(name)' is used twice", code: .conflict) }
            let role = RoleKind(rawValue: try roleNode.oneOf(RoleKind.allCases.map(\.rawValue)))!
            var process = ProcessSpecification(name: name, role: role, host: try keys["host"]?.string() ?? "localhost",
                                               eventsEndpoint: nil, requestsEndpoint: nil, deviceIndices: [])
            if role == .queue {
                guard let events = keys["events"], let requests = keys["requests"] else {
                    throw item.error("a queue needs 'events' and 'requests' endpoints (ipc://… or tcp://host:port)", code: .wrongRole)
                }
                process.eventsEndpoint = try endpoint(events)
                process.requestsEndpoint = try endpoint(requests)
                process.partition = name
                if let partition = keys["partition"] { process.partition = try partitionName(partition) }
            } else if keys["events"] != nil || keys["requests"] != nil {
                throw item.error("only the queue binds 'events' and 'requests'; other roles connect to the queue's", code: .wrongRole)
            } else if keys["partition"] != nil {
                throw item.error("only a queue writes a log partition; other roles connect to every queue", code: .wrongRole)
            }
            if role == .observer {
                guard let range = keys["devices"] else { throw item.error("an observer needs 'devices', e.g. \"1-10\" (1-based, inclusive)", code: .wrongRole) }
                process.deviceIndices = try deviceRange(range, devices: devices)
                for index in process.deviceIndices {
                    if let owner = claimed[index] { throw range.error("device \(index + 1) is already hosted by '\(owner)'", code: .conflict) }
                    claimed[index] = name
                }
            } else if keys["devices"] != nil {
                throw item.error("only observers host devices", code: .wrongRole)
            }
            processes.append(process)
        }
        let queueIndices = processes.indices.filter { processes[$0].role == .queue }
        guard !queueIndices.isEmpty else { throw node.error("expected at least one process with role queue", code: .wrongRole) }
        if queueIndices.count == 1 {
            // One queue: the partition every single-queue run has always written.
            processes[queueIndices[0]].partition = LogProjection.partition
        } else {
            var owners: [String: String] = [:]
            for index in queueIndices {
                let process = processes[index]
                if let owner = owners[process.partition!] {
                    throw TopologyError(file: node.file, keyPath: "processes[\(index)].partition",
                                        problem: "queues '\(owner)' and '\(process.name)' both write partition '\(process.partition!)'; every queue needs its own partition (give one another 'partition' or name)", code: .conflict)
                }
                owners[process.partition!] = process.name
            }
        }
        for role in [RoleKind.store, .downloader] where !processes.contains(where: { $0.role == role }) {
            throw node.error("expected a process with role \(role.rawValue)", code: .wrongRole)
        }
        if let unhosted = claimed.firstIndex(where: { $0 == nil }) {
            throw node.error("device \(unhosted + 1) of \(devices) is hosted by no observer; give every device to one observer's 'devices'")
        }
        return processes
    }

    /// A log partition's name is a directory name: ASCII letters, digits, '.', '_', '-'.
    private static func partitionName(_ node: ConfigurationNode) throws(TopologyError) -> String {
        let text = try node.string()
        let valid = !text.isEmpty && text.utf8.count <= 255 && text != "." && text != ".."
            && text.unicodeScalars.allSatisfy { $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || "._-".unicodeScalars.contains($0)) }
        guard valid else { throw node.error("expected a partition name of ASCII letters, digits, '.', '_' or '-', found '\(text)'") }
        return text
    }

    private static func endpoint(_ node: ConfigurationNode) throws(TopologyError) -> String {
        let text = try node.string()
        if text.hasPrefix("ipc://") {
            guard text.count > "ipc://".count else { throw node.error("expected a socket path after ipc://, e.g. ipc://{run}/queue-events.ipc") }
            return text
        }
        guard text.hasPrefix("tcp://") else {
            throw node.error("expected an endpoint starting with ipc:// or tcp://, found '\(text)'")
        }
        let address = text.dropFirst("tcp://".count)
        guard let colon = address.lastIndex(of: ":") else {
            throw node.error("expected tcp://HOST:PORT, e.g. tcp://127.0.0.1:5570, found '\(text)' (no port)")
        }
        let host = address[..<colon]
        let port = address[address.index(after: colon)...]
        guard !host.isEmpty, !host.contains(where: \.isWhitespace), !host.contains("/") else {
            throw node.error("expected tcp://HOST:PORT with a host name or address (or * for every interface), found '\(text)'")
        }
        guard let number = Int(port), (1...65_535).contains(number) else {
            throw node.error("expected a port number within 1-65535 in '\(text)', found '\(port)'")
        }
        return text
    }

    /// The events and requests endpoints must be distinct: two binds to one address fail at start.
    /// On one host, tcp:// endpoints overlap when their ports are equal and their addresses are
    /// equal or one is every interface (`*`, `0.0.0.0`).
    private static func checkEndpoints(_ processes: [ProcessSpecification], node: ConfigurationNode) throws(TopologyError) {
        var seen: [(endpoint: String, host: String, path: String)] = []
        for (index, process) in processes.enumerated() {
            for (key, endpoint) in [("events", process.eventsEndpoint), ("requests", process.requestsEndpoint)] {
                guard let endpoint else { continue }
                let path = "processes[\(index)].\(key)"
                if let other = seen.first(where: { $0.endpoint == endpoint || ($0.host == process.host && tcpOverlap($0.endpoint, endpoint)) }) {
                    let clash = other.endpoint == endpoint ? "is also \(other.path)" : "overlaps '\(other.endpoint)' (\(other.path))"
                    throw TopologyError(file: node.file, keyPath: path, problem: "'\(endpoint)' \(clash); every endpoint needs its own address (another port or socket path)", code: .conflict)
                }
                seen.append((endpoint, process.host, path))
            }
        }
    }

    private static func tcpOverlap(_ first: String, _ second: String) -> Bool {
        func split(_ endpoint: String) -> (address: Substring, port: Substring)? {
            guard endpoint.hasPrefix("tcp://"), let colon = endpoint.lastIndex(of: ":") else { return nil }
            return (endpoint[endpoint.index(endpoint.startIndex, offsetBy: 6)..<colon], endpoint[endpoint.index(after: colon)...])
        }
        guard let one = split(first), let other = split(second), one.port == other.port else { return false }
        let everywhere: Set<Substring> = ["*", "0.0.0.0"]
        return one.address == other.address || everywhere.contains(one.address) || everywhere.contains(other.address)
    }

    private static func deviceRange(_ node: ConfigurationNode, devices: Int) throws(TopologyError) -> [Int] {
        let text = try node.string()
        if text == "all" { return Array(0..<devices) }
        let parts = text.split(separator: "-").map { Int($0.trimmingCharacters(in: .whitespaces)) }
        guard (1...2).contains(parts.count), let first = parts.first ?? nil, let last = parts.last ?? nil,
              first >= 1, first <= last, last <= devices else {
            throw node.error("expected a 1-based range like \"1-10\" within 1-\(devices), or \"all\", found '\(text)'", code: .outOfRange)
        }
        return Array((first - 1)...(last - 1))
    }
}

// MARK: Security

extension Topology {
    /// The keys a client of the queue uses when the topology is secured with CURVE: the
    /// server's public key and this host's pair from `curve.clientKeyFile`.
    public func curveClientKeys() throws -> CurveClientKeys? {
        guard let curve else { return nil }
        return CurveClientKeys(serverPublicKey: try CurveKey(z85: curve.serverPublicKey),
                               clientKeyPair: try CurveKeyFile.load(path: keyFilePath(curve.clientKeyFile), topologyFile: file, keyPath: "curve.clientKeyFile"))
    }

    /// Checks that this host's client key (`curve.clientKeyFile`) is among `allowedClientKeys`: the
    /// queue refuses a key it does not list during the handshake, and its clients then only time out.
    public func checkClientKeyAllowed() throws {
        guard let curve, let keys = try curveClientKeys() else { return }
        let publicKey = keys.clientKeyPair.publicKey.z85
        guard curve.allowedClientKeys.contains(publicKey) else {
            throw TopologyError(file: file, keyPath: "curve.allowedClientKeys",
                                problem: "this host's client key \(publicKey) (from curve.clientKeyFile \(keyFilePath(curve.clientKeyFile))) is not listed; "
                                    + "the queue would refuse every process of this host during its handshake. Add that publicKey line to allowedClientKeys", code: .clientKeyNotAllowed)
        }
    }

    /// Whether this host is to hold the queue's key file (`curve.serverKeyFile`): a queue runs on this
    /// machine (its host is loopback, as by default), or the file is here. Other hosts never see that file.
    public var holdsServerKeyFile: Bool {
        guard let curve else { return false }
        let local = queues.contains { ["localhost", "::1", "[::1]"].contains($0.host) || $0.host.hasPrefix("127.") }
        return local || FileManager.default.fileExists(atPath: keyFilePath(curve.serverKeyFile))
    }

    /// What the queue needs to be a CURVE server that lets in only the allowed clients.
    public func curveServerSecurity() throws -> (secretKey: CurveKey, allowedClientKeys: Set<CurveKey>, permissions: [CurveKey: ClientPermissions])? {
        guard let curve else { return nil }
        let pair = try CurveKeyFile.load(path: keyFilePath(curve.serverKeyFile), topologyFile: file, keyPath: "curve.serverKeyFile")
        guard pair.publicKey.z85 == curve.serverPublicKey else {
            throw TopologyError(file: file, keyPath: "curve.serverKeyFile",
                                problem: "the key file's public key is not curve.serverPublicKey; put the file's publicKey line in serverPublicKey", code: .curveKey)
        }
        var allowed = Set<CurveKey>()
        var permissions: [CurveKey: ClientPermissions] = [:]
        for (index, key) in curve.allowedClientKeys.enumerated() {
            let keyPath = curve.bindings[key]?.keyPath ?? "curve.allowedClientKeys[\(index)]"
            let parsed: CurveKey
            do {
                parsed = try CurveKey(z85: key)
            } catch {
                throw TopologyError(file: file, keyPath: keyPath, problem: "'\(key)' is not a CURVE public key (\(error)); copy the publicKey line `sksim keys` printed on that host", code: .curveKey)
            }
            allowed.insert(parsed)
            if let binding = curve.bindings[key] { permissions[parsed] = clientPermissions(binding) }
        }
        return (pair.secretKey, allowed, permissions)
    }

    /// What every device a load driver invents is named: the driver's name and `-` (the driver's topic
    /// group). A key bound to the driver plays those devices.
    public static func loadDriverDevicePrefix(_ driver: String) -> String { "\(driver)-" }

    /// The roles (and an observer's devices, a load driver's device prefix) a bound key may send commands for.
    func clientPermissions(_ binding: ClientKeyBinding) -> ClientPermissions {
        var roles = Set(binding.roles)
        var devices: Set<String>? = binding.roles.contains(.app) ? nil : []
        if !binding.drivers.isEmpty { roles.insert(.app) }
        let names = scenario.deviceNames
        for name in binding.processes {
            guard let process = processes.first(where: { $0.name == name }) else { continue }
            switch process.role {
            case .queue, .appStoreServer: break
            case .store: roles.insert(.store)
            case .downloader: roles.insert(.downloader)
            case .observer:
                roles.insert(.app)
                devices?.formUnion(process.deviceIndices.filter(names.indices.contains).map { names[$0] })
            }
        }
        return ClientPermissions(roles: roles, devices: devices, devicePrefixes: Set(binding.drivers.map(Self.loadDriverDevicePrefix)))
    }

    /// The devices observer process `name` follows one by one (`EventSubscriberConfiguration.followedDevices`):
    /// its own, when `clientKey` (this host's) is bound to devices, so that the queue lets it hear only theirs
    /// (docs/reliability.md, "Roles"). Nil: it follows the whole partition.
    public func followedDevices(process name: String, clientKey: CurveKey?) -> [String]? {
        guard let curve, let clientKey, let binding = curve.bindings[clientKey.z85], !clientPermissions(binding).hearsEveryDevice,
              let process = processes.first(where: { $0.name == name }), process.role == .observer else { return nil }
        let names = scenario.deviceNames
        return process.deviceIndices.filter(names.indices.contains).map { names[$0] }
    }

    /// Warnings for observer processes whose keys bind them to their devices (all of them, or only those
    /// naming `process`) when they cannot all be followed: such a process follows one topic group per
    /// device, and a queue keeps at most `maximumTopicGroups` groups (docs/reliability.md, "Roles").
    public func observerKeyWarnings(process: String? = nil) -> [String] {
        guard let curve else { return [] }
        var followed = 0
        var named: [String] = []
        for key in curve.allowedClientKeys {
            guard let binding = curve.bindings[key], !clientPermissions(binding).hearsEveryDevice else { continue }
            for observer in processes where observer.role == .observer && binding.processes.contains(observer.name) {
                followed += observer.deviceIndices.count
                if process == nil || observer.name == process { named.append("\(observer.name) (\(binding.keyPath))") }
            }
        }
        guard followed > Self.maximumTopicGroups, !named.isEmpty else { return [] }
        return ["observer process \(named.joined(separator: ", ")) is bound to its devices, and so follows one topic group per device; "
            + "the keys bound to devices follow \(followed) devices, beyond the \(Self.maximumTopicGroups) groups a queue keeps: "
            + "the queue would close some of their subscriptions; give those keys `roles: [app]` (any device), or bind fewer devices "
            + "(docs/reliability.md, \"Roles\")"]
    }

    /// Topic groups one queue keeps (docs/wire-format.md, "Subscriptions").
    public static let maximumTopicGroups = 256

    /// A line to log at start when the topology runs tcp:// across the network without CURVE.
    public var securityNotice: String? {
        guard insecure, curve == nil, let exposed = Self.exposedEndpoint(processes) else { return nil }
        return "insecure: true: \(exposed) carries events and commands unauthenticated and unencrypted"
    }

    /// A warning for a topology with a queue endpoint on tcp:// (loopback included) and no CURVE:
    /// every client that can connect is trusted with every role (docs/reliability.md, "Roles").
    public var unauthenticatedTransportWarning: String? {
        guard curve == nil else { return nil }
        for (index, process) in processes.enumerated() {
            for (name, endpoint) in [("events", process.eventsEndpoint), ("requests", process.requestsEndpoint)] {
                guard let endpoint, endpoint.hasPrefix("tcp://") else { continue }
                return "processes[\(index)].\(name) is \(endpoint) without CURVE: the queue trusts every client that can connect "
                    + "with every role (any of them can send the store's or the downloader's commands); add a 'curve' section "
                    + "to bind each client key to its roles (docs/reliability.md, \"Roles\")"
            }
        }
        return nil
    }

    /// Key files are relative to the topology file's directory.
    private func keyFilePath(_ path: String) -> String {
        path.hasPrefix("/") ? path : URL(fileURLWithPath: file).deletingLastPathComponent().appendingPathComponent(path).path
    }

    fileprivate static func parseCurve(_ node: ConfigurationNode) throws(TopologyError) -> CurveConfiguration {
        let keys = try node.mapping(allowedKeys: ["serverPublicKey", "serverKeyFile", "clientKeyFile", "allowedClientKeys"])
        func required(_ name: String, _ what: String) throws(TopologyError) -> ConfigurationNode {
            guard let value = keys[name] else { throw node.error("missing key '\(name)' (\(what))", code: .missingKey) }
            return value
        }
        func key(_ value: ConfigurationNode) throws(TopologyError) -> String {
            let text = try value.string()
            guard text.count == CurveKey.z85Length else { throw value.error("expected a 40-character Z85 CURVE public key, found \(text.count) characters", code: .curveKey) }
            // Checked here, not only by the queue: every host's `topology check` names a bad key and its path.
            do {
                _ = try CurveKey(z85: text)
            } catch {
                throw value.error("'\(text)' is not a CURVE public key (\(error)); copy the publicKey line `sksim keys` printed on that host", code: .curveKey)
            }
            return text
        }
        let allowedNode = try required("allowedClientKeys", "the publicKey of every client host's `sksim keys` pair")
        var allowed: [String] = []
        var bindings: [String: ClientKeyBinding] = [:]
        for item in try allowedNode.sequence() {
            guard (try? item.string()) == nil else {
                allowed.append(try key(item))
                continue
            }
            // {key: "…", processes: [store, downloader], roles: [app]}: the key sends only those roles' commands.
            let entry = try item.mapping(allowedKeys: ["key", "processes", "roles", "drivers"])
            guard let keyNode = entry["key"] else { throw item.error("missing key 'key' (the host's publicKey)", code: .missingKey) }
            let text = try key(keyNode)
            let processes = try entry["processes"].map { node throws(TopologyError) in try node.sequence().map { item throws(TopologyError) in try item.string() } } ?? []
            var roles: [CommandRole] = []
            for roleNode in try entry["roles"]?.sequence() ?? [] {
                let name = try roleNode.string()
                guard let role = CommandRole(rawValue: name) else {
                    throw roleNode.error("unknown role '\(name)'; expected one of \(CommandRole.allCases.map(\.rawValue).joined(separator: ", "))", code: .unknownName)
                }
                roles.append(role)
            }
            var drivers: [String] = []
            for driverNode in try entry["drivers"]?.sequence() ?? [] {
                let name = try driverNode.string()
                guard !name.isEmpty, !name.utf8.contains(0), !name.contains("/") else {
                    throw driverNode.error("expected a load driver's name (`sksim driver --name`, e.g. driver-1), without `/`", code: .outOfRange)
                }
                drivers.append(name)
            }
            guard !processes.isEmpty || !roles.isEmpty || !drivers.isEmpty else {
                throw item.error("a bound key needs 'processes', 'roles' or 'drivers' (or write the key alone to allow every role)", code: .missingKey)
            }
            allowed.append(text)
            bindings[text] = ClientKeyBinding(processes: processes, roles: roles, drivers: drivers, keyPath: keyNode.keyPath)
        }
        guard !allowed.isEmpty else { throw allowedNode.error("expected at least one client public key; the queue would refuse every client", code: .missingKey) }
        return CurveConfiguration(
            serverPublicKey: try key(try required("serverPublicKey", "the publicKey line of the queue's `sksim keys` pair")),
            serverKeyFile: try required("serverKeyFile", "path of the queue's key file, `sksim keys > server.key` on the queue's host").string(),
            clientKeyFile: try required("clientKeyFile", "path of each client host's own key file, `sksim keys > client.key` on that host").string(),
            allowedClientKeys: allowed, bindings: bindings)
    }

    /// tcp:// on a non-loopback address without CURVE must be asked for explicitly.
    fileprivate static func checkTransportSecurity(
        _ processes: [ProcessSpecification], curve: CurveConfiguration?, insecure: Bool, file: String
    ) throws(TopologyError) {
        guard curve == nil, !insecure, let exposed = exposedEndpoint(processes) else { return }
        throw TopologyError(file: file, keyPath: exposed,
                            problem: "tcp:// on a non-loopback address without CURVE lets anyone who can reach it read events and send commands; "
                                + "add a 'curve' section (keys from `sksim keys`), bind 127.0.0.1, or set 'insecure: true' at the top level", code: .insecureEndpoint)
    }

    /// The key path of the first queue endpoint on tcp:// beyond loopback, if any.
    private static func exposedEndpoint(_ processes: [ProcessSpecification]) -> String? {
        for (index, process) in processes.enumerated() {
            for (name, endpoint) in [("events", process.eventsEndpoint), ("requests", process.requestsEndpoint)] {
                guard let endpoint, endpoint.hasPrefix("tcp://") else { continue }
                var host = endpoint.dropFirst("tcp://".count)
                if let colon = host.lastIndex(of: ":") { host = host[..<colon] }
                let loopback = host == "localhost" || host.hasPrefix("127.") || host == "[::1]" || host == "::1"
                if !loopback { return "processes[\(index)].\(name)" }
            }
        }
        return nil
    }
}

extension Topology {
    /// The same topology with the App Store's server side: `section`, and a process of role
    /// `appStoreServer` unless it has one (`sksim run --app-store-server`, `--notification-url`, `--certificates`).
    public func withAppStoreServer(_ section: AppStoreServerSection) -> Topology {
        var result = self
        result.appStoreServer = section
        if !processes.contains(where: { $0.role == .appStoreServer }) {
            result.processes.append(ProcessSpecification(name: AppStoreServerSection.defaultProcessName, role: .appStoreServer, host: "localhost",
                                                         eventsEndpoint: nil, requestsEndpoint: nil, deviceIndices: []))
        }
        return result
    }

    fileprivate static func parseAppStoreServer(_ node: ConfigurationNode) throws(TopologyError) -> AppStoreServerSection {
        let keys = try node.mapping(allowedKeys: ["listen", "certificates", "environment", "bundleIdentifier", "notificationURL", "apiKeys",
                                                  "notificationDrainSeconds"])
        var section = AppStoreServerSection()
        if let item = keys["listen"] {
            section.listen = try item.string()
            guard let colon = section.listen.lastIndex(of: ":"), colon != section.listen.startIndex,
                  let port = Int(section.listen[section.listen.index(after: colon)...]), (0...65_535).contains(port) else {
                throw item.error("expected HOST:PORT, e.g. 127.0.0.1:8080, found '\(section.listen)'")
            }
        }
        section.certificates = try keys["certificates"]?.string()
        if let item = keys["environment"] { section.environment = try item.oneOf(["Sandbox", "Production"]) }
        if let item = keys["bundleIdentifier"] { section.bundleIdentifier = try item.string() }
        if let item = keys["notificationURL"] {
            let url = try item.string()
            guard url.hasPrefix("http://") || url.hasPrefix("https://") else { throw item.error("expected an http:// or https:// URL, found '\(url)'") }
            section.notificationURL = url
        }
        if let item = keys["apiKeys"], item.isPresent {
            for (kid, path) in try item.stringMapping() { section.apiKeys[kid] = path }
        }
        if let item = keys["notificationDrainSeconds"] { section.notificationDrainSeconds = try item.double(in: 0...3_600) }
        return section
    }
}
