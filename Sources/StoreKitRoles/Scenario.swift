import Foundation
import StoreKitModel

/// What a run simulates: devices and accounts, the catalog, and how users, the store
/// and the content servers behave. Topology files name one; `simulate` builds one
/// from its options.
public struct Scenario: Sendable {
    public var seed: UInt64
    public var devices: Int
    public var catalog: Catalog
    /// Where the catalog came from, for the log's run record ("built-in sample" or a file name).
    public var catalogSource: String
    public var apps = AppBehavior()
    public var store = StoreBehavior()
    public var downloader = DownloaderBehavior()
    /// How the deterministic runtime's network and log behave (live runs have the real ones).
    public var network = NetworkBehavior()
    /// Upper bound on simulated time, so that a run always ends.
    public var maximumSimulatedSeconds: Double = 24 * 3600
    /// The date a deterministic run's time 0 stands for: dates shown to apps and to a team's server
    /// (transaction dates, receipts, signed transactions) are this plus the log's time. A live run
    /// records its wall-clock start instead. Recorded in the log's header, so the log stays the same.
    public var startDate = Scenario.defaultStartDate
    /// Users' own observers and traces (exploration); not part of the log's record of the scenario.
    public var hooks: AppHooks?

    public init(seed: UInt64, devices: Int, catalog: Catalog = .sample, catalogSource: String = "built-in sample") {
        self.seed = seed
        self.devices = devices
        self.catalog = catalog
        self.catalogSource = catalogSource
    }

    public static let maximumDevices = 100_000

    /// 2026-01-01T00:00:00Z: a realistic date, not 1970.
    public static let defaultStartDate = Date(timeIntervalSince1970: 1_767_225_600)
    /// The dates a scenario may start at: inside the simulator's certificates' validity (2000–2099),
    /// with room for a long run.
    public static let startDateRange = Date(timeIntervalSince1970: 946_684_800)...Date(timeIntervalSince1970: 4_070_908_800)

    /// Milliseconds since 1970 of the date a log time stands for: `startedAtUnixNanoseconds` (the run's
    /// wall-clock start; 0 in a deterministic run, whose start is `startDate`) plus the time.
    public func dateMilliseconds(logTime nanoseconds: Int64, startedAtUnixNanoseconds: Int64) -> Int64 {
        guard startedAtUnixNanoseconds == 0 else { return startedAtUnixNanoseconds / 1_000_000 &+ nanoseconds / 1_000_000 }
        return Self.dateMilliseconds(logTime: nanoseconds, start: startDate)
    }

    /// Milliseconds since 1970 of a log time in a run whose time 0 is `start`.
    public static func dateMilliseconds(logTime nanoseconds: Int64, start: Date) -> Int64 {
        Int64((start.timeIntervalSince1970 * 1000).rounded()) &+ nanoseconds / 1_000_000
    }

    /// `startDate` as the log's header and topology files write it (ISO 8601, UTC, seconds).
    public static func startDateText(_ date: Date) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.string(from: date)
    }

    /// A `startDate` read from text: ISO 8601 in whole seconds with a time zone (`2026-01-01T00:00:00Z`), or nil.
    public static func startDate(text: String) -> Date? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.date(from: text)
    }

    /// A copy whose catalog shares no memory with this one's. Threads that each run schedules of
    /// their own copy do not write the same reference counts: every event carries the catalog's
    /// product identifiers, and a string longer than 15 bytes is one object, retained and released
    /// at every copy; two threads doing that to one object take turns at its cache line. Sharing is
    /// only slower, so a catalog that does not come back equal keeps being shared.
    public func unsharedCopy() -> Scenario {
        var copy = self
        // A JSON round trip makes every string and array of a product anew.
        let products = catalog.products.compactMap { product -> Product? in
            guard let data = try? JSONEncoder().encode(product), let copy = try? JSONDecoder().decode(Product.self, from: data),
                  copy == product else { return nil }
            return copy
        }
        if products.count == catalog.products.count, var unshared = try? Catalog(products: products) {
            unshared.testSettings = catalog.testSettings
            if unshared == catalog { copy.catalog = unshared }
        }
        copy.catalogSource = String(decoding: Array(catalogSource.utf8), as: UTF8.self)
        return copy
    }

    public func validate() throws(ConfigurationError) {
        guard (1...Self.maximumDevices).contains(devices) else {
            throw ConfigurationError("devices is \(devices); use 1 to \(Self.maximumDevices)", code: .outOfRange)
        }
        guard maximumSimulatedSeconds > 0 else { throw ConfigurationError("maximumSimulatedSeconds must be greater than 0", code: .outOfRange) }
        guard Self.startDateRange.contains(startDate) else {
            throw ConfigurationError("startDate is \(Self.startDateText(startDate)); use a date from 2000-01-01 to 2098-12-31 (the simulator's certificates are valid 2000–2099)", code: .outOfRange)
        }
        try apps.validate()
        try store.validate()
        if let actions = store.actions, !actions.isEmpty {
            let names = Set(deviceNames)
            for (index, action) in actions.enumerated() { try action.validate(index: index, devices: names, catalog: catalog) }
        }
        try downloader.validate()
        try network.validate()
    }

    /// Device names, stable and sortable: device-0001, device-0002, …
    public var deviceNames: [String] {
        let width = max(4, String(devices).count)
        return (1...devices).map { "device-" + String(repeating: "0", count: width - String($0).count) + String($0) }
    }

    /// The account a device is signed in to: consecutive devices share one.
    public func account(ofDeviceAt index: Int) -> String {
        let number = index / apps.devicesPerAccount + 1
        return "account-" + String(repeating: "0", count: max(0, 4 - String(number).count)) + String(number)
    }

    /// The apps of the devices at `indices` (all by default), ready to run their scripts.
    public func makeApps(indices: [Int]? = nil, choices: ChoiceSource, storage: ContentStorage?) -> [DeviceApp] {
        let names = deviceNames
        return (indices ?? Array(names.indices)).map { index in
            let app = DeviceApp(device: names[index], account: account(ofDeviceAt: index),
                                isAdditionalDevice: index % apps.devicesPerAccount != 0,
                                behavior: apps, catalog: catalog, choices: choices, storage: storage, hooks: hooks,
                                promotionalOfferKey: store.promotionalOfferKey ?? .simulator)
            app.queue.startDate = startDate
            return app
        }
    }

    /// Everything but the catalog, as it is recorded in the log (keys sorted, so the same
    /// scenario gives the same bytes).
    private struct Settings: Codable {
        var devices: Int
        var apps: AppBehavior
        var store: StoreBehavior
        var downloader: DownloaderBehavior
        var network: NetworkBehavior
        var maximumSimulatedSeconds: Double
        /// Left out when the default, so that a scenario without one records what it always did.
        var startDate: String?
    }

    /// The run's first record: this scenario, its catalog and the versions.
    public func header(runtime: String, startedAtUnixNanoseconds: Int64) -> RunHeader {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let settings = Settings(devices: devices, apps: apps, store: store, downloader: downloader, network: network,
                                maximumSimulatedSeconds: maximumSimulatedSeconds,
                                startDate: startDate == Self.defaultStartDate ? nil : Self.startDateText(startDate))
        let scenarioJSON = (try? encoder.encode(settings)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
        let catalogJSON = String(decoding: catalog.nativeCatalogData(), as: UTF8.self)
        return RunHeader(seed: seed, sksimVersion: sksimVersion, runtime: runtime, startedAtUnixNanoseconds: startedAtUnixNanoseconds,
                         scenario: scenarioJSON, catalogSource: catalogSource, catalogDigest: RunHeader.digest(catalogJSON.utf8),
                         catalog: catalogJSON)
    }

    /// The scenario a recorded run was started with, from its first record.
    public init(header: RunHeader) throws {
        let settings: Settings
        do {
            settings = try JSONDecoder().decode(Settings.self, from: Data(header.scenario.utf8))
        } catch {
            throw ConfigurationError("the run's recorded scenario cannot be read by this sksim (\(error)); replay it with sksim \(header.sksimVersion)", code: .unsupportedVersion)
        }
        let catalog: Catalog
        do {
            catalog = try Catalog.parseNativeCatalog(Data(header.catalog.utf8), source: "the recorded catalog")
        } catch {
            throw ConfigurationError("the run's recorded catalog cannot be read: \(error)", code: .unreadable)
        }
        self.init(seed: header.seed, devices: settings.devices, catalog: catalog, catalogSource: header.catalogSource)
        apps = settings.apps
        store = settings.store
        downloader = settings.downloader
        network = settings.network
        maximumSimulatedSeconds = settings.maximumSimulatedSeconds
        if let text = settings.startDate {
            guard let date = Self.startDate(text: text) else { throw ConfigurationError("the run's recorded startDate '\(text)' is not an ISO 8601 date") }
            startDate = date
        }
    }

    /// A one-line description for people.
    public var summary: String {
        "devices=\(devices) purchasesPerDevice=\(apps.purchasesPerDevice) devicesPerAccount=\(apps.devicesPerAccount) "
            + (apps.app.map { "app=\($0)" } ?? "observers=\(apps.observers.map(\.rawValue).joined(separator: ","))") + " catalog=\(catalogSource) products=\(catalog.products.count)"
    }
}

/// How the deterministic runtime's network and log behave. Every draw is a recorded
/// choice; the zero choice is the fastest, most orderly network. Live runs ignore this:
/// they have the real network.
public struct NetworkBehavior: Sendable, Hashable, Codable {
    /// Delay of one message from a sender to the queue, or from the queue to a subscriber.
    /// Each link keeps its order (a ZeroMQ connection does); links are independent.
    public var deliveryLatency: LatencyDistribution = .uniform(minimumMilliseconds: 0.2, maximumMilliseconds: 3)
    /// Time for an appended command to become durable; events are published and commands
    /// acknowledged only then.
    public var durabilityLatency: LatencyDistribution = .uniform(minimumMilliseconds: 0.1, maximumMilliseconds: 1)
    /// Chance that a message is delivered twice (the copy comes later on the same link).
    public var duplicateProbability: Double = 0
    /// Chance that a published event (or a heartbeat) is lost on one link; the subscriber notices the
    /// gap at the next event or heartbeat and fetches what it misses from the queue's log.
    public var lossProbability: Double = 0
    /// The queue's heartbeat interval (at least 1 ms): a subscriber that lost the last events
    /// notices at the next heartbeat, and one that hears nothing for eight is told the publisher is silent.
    public var catchUpMilliseconds: Double = 250
    /// Chance, per step of the run, that one role crashes (chosen among all of them).
    public var crashProbability: Double = 0
    /// How long a crashed role stays down before it is restarted.
    public var restartLatency: LatencyDistribution = .uniform(minimumMilliseconds: 50, maximumMilliseconds: 500)
    /// Chance, per step of the run, that one process (a role or the queue, chosen among all) stops for
    /// `outageLatency` (a SIGSTOP): what is sent to it waits, its timers fire late. nil: never.
    public var stallProbability: Double?
    /// Chance, per step, that one process's links to the queue are cut for `outageLatency`: what either
    /// side sends on them arrives once they heal, in order (TCP holds it). nil: never.
    public var partitionProbability: Double?
    /// How long a stall or a partition lasts.
    public var outageLatency: LatencyDistribution?
    /// Chance that a command or its answer is lost on its link (the sender retries). nil: never.
    public var commandLossProbability: Double?
    /// Time the queue takes per command (it works through arrivals in order). nil: none, every command
    /// is handled on arrival; with a service time a stall leaves a backlog to work off.
    public var queueServiceMicroseconds: Double?
    /// true: the app role hears each of its devices as a topic group (`grp.<device>/`), as an observer
    /// process on a key bound to its devices does live (`FollowedDevices`: one stream per device, each fed
    /// its group's messages and heartbeats, one FETCH at a time for all). nil: it hears the whole partition.
    public var appsFollowDevices: Bool?

    public init() {}

    /// How long a stall or partition lasts when `outageLatency` is not set.
    public static let defaultOutageLatency = LatencyDistribution.uniform(minimumMilliseconds: 500, maximumMilliseconds: 3_000)

    public func validate() throws(ConfigurationError) {
        for (name, value) in [("duplicateProbability", duplicateProbability), ("lossProbability", lossProbability),
                              ("crashProbability", crashProbability), ("stallProbability", stallProbability ?? 0),
                              ("partitionProbability", partitionProbability ?? 0), ("commandLossProbability", commandLossProbability ?? 0)] where !(0...1).contains(value) {
            throw ConfigurationError("network.\(name) is \(value); a probability must be between 0 and 1", code: .outOfRange)
        }
        guard catchUpMilliseconds >= 0 else { throw ConfigurationError("network.catchUpMilliseconds must be 0 or more", code: .outOfRange) }
        guard (queueServiceMicroseconds ?? 0) >= 0 else { throw ConfigurationError("network.queueServiceMicroseconds must be 0 or more", code: .outOfRange) }
    }
}
