import Foundation
import StoreKitModel
import StoreKitLive
import StoreKitRoles
import Yams

/// A load's settings as written: the topology file's `load:` section, then the command line
/// over it. Everything optional here; `resolve` fills in defaults and checks that the parts fit.
public struct LoadSettings: Sendable, Equatable {
    public var model: LoadModel?
    public var rate: String?
    public var stages: String?
    public var devices: Int?
    public var duration: String?
    public var thinkTime: String?
    public var drivers: Int?
    public var remoteDrivers: Int?
    public var listen: String?
    public var thresholds: [String] = []
    public var abortOnFail: Bool?
    public var restoreFraction: Double?
    public var downloadFraction: Double?
    public var interval: String?
    public var drain: String?
    public var maximumInFlight: Int?
    /// The team's catalog (`--catalog`, `load.catalog`): an Xcode .storekit file or a native catalog.
    /// From the topology, a relative path is resolved against the topology file's folder.
    public var catalog: String?
    /// `ID=WEIGHT,…` of the catalog's products (default: every product equally).
    public var products: String?
    /// `KIND=WEIGHT,…` of lifecycle kinds (`LifecycleMix`).
    public var mix: String?
    /// How far behind its schedule a start may be made; later, it is missed (default 1s).
    public var lateStartBound: String?
    /// `--abort-on-fail` judges no threshold before this much of the load ran (default 5s).
    public var abortDelay: String?
    /// The team's server, to which each purchased or restored transaction is POSTed before it is finished.
    public var backend: String?
    public var backendTimeout: String?
    /// `--driver PATH` (`load.driver`): a team's executable run as the local drivers (docs/load-testing.md,
    /// "Your own driver"). From the topology, a relative path is resolved against the topology file's folder.
    public var driver: String?

    public init() {}

    static let keys: Set<String> = ["model", "rate", "stages", "devices", "duration", "thinkTime", "drivers", "remoteDrivers", "listen",
                                    "thresholds", "abortOnFail", "restoreFraction", "downloadFraction", "interval", "drain", "maximumInFlight",
                                    "catalog", "products", "mix", "lateStartBound", "abortDelay", "backend", "backendTimeout", "driver"]

    /// The `load:` section of a topology file (empty settings when it has none).
    public static func fromTopology(path: String) throws(LoadSpecificationError) -> LoadSettings {
        let contents: String
        do {
            contents = try Topology.builtInText(path) ?? String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw LoadSpecificationError("cannot read \(path): \(describeError(error, withPath: false))")
        }
        let root: Any?
        do {
            root = try Yams.load(yaml: contents)
        } catch {
            throw LoadSpecificationError("\(path) is not YAML: \(error)")
        }
        guard let top = root as? [String: Any], let section = top["load"] else { return LoadSettings() }
        guard let load = section as? [String: Any] else { throw LoadSpecificationError("\(path): 'load' must be a mapping of settings such as rate: 100/s") }
        if let unknown = load.keys.sorted().first(where: { !keys.contains($0) }) {
            throw LoadSpecificationError("\(path): load.\(unknown) is not a load setting; the settings are \(keys.sorted().joined(separator: ", "))")
        }
        func text(_ key: String) throws(LoadSpecificationError) -> String? {
            guard let value = load[key] else { return nil }
            if let string = value as? String { return string }
            if let number = value as? Int { return String(number) }
            if let number = value as? Double { return String(number) }
            throw LoadSpecificationError("\(path): load.\(key) should be text such as 30s or 100/s")
        }
        func integer(_ key: String) throws(LoadSpecificationError) -> Int? {
            guard let value = load[key] else { return nil }
            guard let number = value as? Int else { throw LoadSpecificationError("\(path): load.\(key) should be a whole number") }
            return number
        }
        func fraction(_ key: String) throws(LoadSpecificationError) -> Double? {
            guard let value = load[key] else { return nil }
            guard let number = (value as? Double) ?? (value as? Int).map(Double.init), (0...1).contains(number) else {
                throw LoadSpecificationError("\(path): load.\(key) should be a fraction between 0 and 1")
            }
            return number
        }
        var settings = LoadSettings()
        if let model = try text("model") {
            guard let parsed = LoadModel(rawValue: model) else { throw LoadSpecificationError("\(path): load.model is '\(model)'; use open or closed") }
            settings.model = parsed
        }
        settings.rate = try text("rate")
        settings.stages = try text("stages")
        settings.devices = try integer("devices")
        settings.duration = try text("duration")
        settings.thinkTime = try text("thinkTime")
        settings.drivers = try integer("drivers")
        settings.remoteDrivers = try integer("remoteDrivers")
        settings.listen = try text("listen")
        settings.interval = try text("interval")
        settings.drain = try text("drain")
        settings.maximumInFlight = try integer("maximumInFlight")
        // Files the section names are relative to the topology file's folder.
        let base = Topology.builtInText(path) != nil ? URL(fileURLWithPath: FileManager.default.currentDirectoryPath, isDirectory: true)
            : URL(fileURLWithPath: path).deletingLastPathComponent()
        if let catalog = try text("catalog") {
            settings.catalog = URL(fileURLWithPath: catalog, relativeTo: base).standardizedFileURL.path
        }
        if let driver = try text("driver") {
            settings.driver = URL(fileURLWithPath: driver, relativeTo: base).standardizedFileURL.path
        }
        settings.products = try text("products")
        settings.mix = try text("mix")
        settings.lateStartBound = try text("lateStartBound")
        settings.abortDelay = try text("abortDelay")
        settings.backend = try text("backend")
        settings.backendTimeout = try text("backendTimeout")
        settings.restoreFraction = try fraction("restoreFraction")
        settings.downloadFraction = try fraction("downloadFraction")
        if let value = load["abortOnFail"] {
            guard let flag = value as? Bool else { throw LoadSpecificationError("\(path): load.abortOnFail should be true or false") }
            settings.abortOnFail = flag
        }
        if let value = load["thresholds"] {
            guard let list = value as? [Any], list.allSatisfy({ $0 is String }) else {
                throw LoadSpecificationError("\(path): load.thresholds should be a list of expressions such as 'finished.p99<50ms'")
            }
            settings.thresholds = list.compactMap { $0 as? String }
        }
        return settings
    }

    /// `other`'s settings over these (the command line over the file); thresholds add up.
    public func overridden(by other: LoadSettings) -> LoadSettings {
        var result = self
        if let value = other.model { result.model = value }
        if other.rate != nil || other.stages != nil || other.model == .closed {
            // A rate on the command line replaces the file's stages and the other way round; the
            // closed model asked for on the command line drops the file's rate.
            result.rate = other.rate
            result.stages = other.stages
        }
        if let value = other.devices { result.devices = value }
        if let value = other.duration { result.duration = value } else if other.stages != nil { result.duration = nil }
        if let value = other.thinkTime { result.thinkTime = value }
        if let value = other.drivers { result.drivers = value }
        if let value = other.remoteDrivers { result.remoteDrivers = value }
        if let value = other.listen { result.listen = value }
        if let value = other.abortOnFail { result.abortOnFail = value }
        if let value = other.restoreFraction { result.restoreFraction = value }
        if let value = other.downloadFraction { result.downloadFraction = value }
        if let value = other.interval { result.interval = value }
        if let value = other.drain { result.drain = value }
        if let value = other.maximumInFlight { result.maximumInFlight = value }
        if let value = other.catalog { result.catalog = value }
        if let value = other.products { result.products = value }
        if let value = other.mix { result.mix = value }
        if let value = other.lateStartBound { result.lateStartBound = value }
        if let value = other.abortDelay { result.abortDelay = value }
        if let value = other.backend { result.backend = value }
        if let value = other.backendTimeout { result.backendTimeout = value }
        if let value = other.driver { result.driver = value }
        result.thresholds += other.thresholds.filter { !result.thresholds.contains($0) }
        return result
    }

    /// The coordinator's options, with every default filled in and every part checked.
    public func resolve(seed: UInt64) throws(LoadSpecificationError) -> LoadCoordinator.Options {
        func nanoseconds(_ text: String?, _ name: String, default fallback: Int64) throws(LoadSpecificationError) -> Int64 {
            guard let text else { return fallback }
            do {
                return try DurationText.nanoseconds(text)
            } catch {
                throw LoadSpecificationError("--\(name): \(error)")
            }
        }
        var options = LoadCoordinator.Options()
        var plan = LoadPlan()
        plan.seed = seed
        let model = model ?? (rate == nil && stages == nil && devices != nil ? .closed : .open)
        plan.model = model
        if rate != nil && stages != nil {
            throw LoadSpecificationError("give either --rate or --stages, not both: a constant rate is the stage list 'DURATION:RATE'")
        }
        let loadDuration = try nanoseconds(duration, "duration", default: 10_000_000_000)
        guard loadDuration > 0 else { throw LoadSpecificationError("--duration must be longer than 0") }
        switch model {
        case .open:
            if let stages {
                if self.duration != nil { throw LoadSpecificationError("--stages sets the load's length; drop --duration, or use --rate with --duration") }
                plan.schedule = try ArrivalSchedule.parse(stages: stages)
            } else {
                let perSecond = try ArrivalSchedule.parseRate(rate ?? "100/s", context: "--rate")
                plan.schedule = .constant(perSecond: perSecond, durationNanoseconds: loadDuration)
            }
        case .closed:
            if rate != nil || stages != nil {
                throw LoadSpecificationError("the closed model has no rate: its devices start again a think time after each lifecycle; drop --rate/--stages or use --model open")
            }
            plan.closedDurationNanoseconds = loadDuration
            let think = try nanoseconds(thinkTime, "think-time", default: 100_000_000)
            plan.thinkTime = .exponential(minimumMilliseconds: 0, meanMilliseconds: Double(think) / 1e6)
        }
        options.localDrivers = drivers ?? 1
        options.remoteDrivers = remoteDrivers ?? 0
        guard options.localDrivers >= 0, options.remoteDrivers >= 0, options.localDrivers + options.remoteDrivers >= 1,
              options.localDrivers + options.remoteDrivers <= 256 else {
            throw LoadSpecificationError("--drivers and --remote-drivers must add up to between 1 and 256 drivers")
        }
        let driverCount = options.localDrivers + options.remoteDrivers
        let totalDevices = devices ?? (model == .closed ? 100 : 1_000)
        guard (1...1_000_000).contains(totalDevices) else { throw LoadSpecificationError("--devices must be between 1 and 1,000,000") }
        plan.devicesPerDriver = max(1, totalDevices / driverCount)
        plan.restoreFraction = restoreFraction ?? 0
        plan.downloadFraction = downloadFraction ?? 0
        guard (0...1).contains(plan.restoreFraction), (0...1).contains(plan.downloadFraction) else {
            throw LoadSpecificationError("--restore-fraction and --download-fraction are fractions between 0 and 1")
        }
        plan.intervalNanoseconds = try nanoseconds(interval, "interval", default: 1_000_000_000)
        guard plan.intervalNanoseconds >= 100_000_000 else { throw LoadSpecificationError("--interval must be at least 100ms") }
        plan.drainNanoseconds = try nanoseconds(drain, "drain", default: 10_000_000_000)
        plan.maximumInFlight = maximumInFlight ?? 50_000
        guard (1...1_000_000).contains(plan.maximumInFlight) else { throw LoadSpecificationError("--maximum-in-flight must be between 1 and 1,000,000") }
        if let mix { plan.mix = try LifecycleMix.parse(mix) }
        plan.lateStartBoundNanoseconds = try nanoseconds(lateStartBound, "late-start-bound", default: 1_000_000_000)
        guard plan.lateStartBoundNanoseconds > 0 else { throw LoadSpecificationError("--late-start-bound must be longer than 0") }
        options.abortDelayNanoseconds = try nanoseconds(abortDelay, "abort-delay", default: 5_000_000_000)
        if let backend {
            try BackendPoster.check(backend)
            plan.backendURL = backend
        }
        plan.backendTimeoutNanoseconds = try nanoseconds(backendTimeout, "backend-timeout", default: 5_000_000_000)
        guard plan.backendTimeoutNanoseconds > 0 else { throw LoadSpecificationError("--backend-timeout must be longer than 0") }
        options.plan = plan
        options.listenEndpoint = listen
        options.abortOnFail = abortOnFail ?? false
        if let driver {
            guard FileManager.default.isExecutableFile(atPath: driver) else {
                throw LoadSpecificationError("--driver \(driver) is not an executable file; build your driver (swift build) and give its path, e.g. .build/debug/my-load-driver")
            }
            options.driverExecutable = URL(fileURLWithPath: driver).standardizedFileURL
        }
        var judged = try thresholds.map { expression throws(LoadSpecificationError) in try Threshold(parsing: expression, customStages: driver != nil) }
        // No silent pass: a run is judged on its errors, its violations and the lifecycles still open when
        // the drain ended (a system that never answers) unless a threshold says otherwise; a team's driver,
        // on its checks too.
        for figure in Self.defaultThresholdFigures + (driver == nil ? [] : ["checksFailed"]) where !judged.contains(where: { $0.metric == .figure(figure) }) {
            judged.append(try Threshold(parsing: "\(figure)==0"))
        }
        options.thresholds = judged
        return options
    }

    /// Figures judged `==0` when no threshold names them.
    public static let defaultThresholdFigures = ["errors", "violations", "incomplete"]

    /// The products the drivers buy from `storeCatalog` (what the store sells: `--catalog`'s, or the
    /// topology's), weighted by `products`. nil: the built-in sample catalog with no `--products`,
    /// whose plain consumable and hosted-content pack the drivers buy (`downloadFraction`).
    public func loadProducts(storeCatalog: Catalog, isBuiltInSample: Bool, source: String) throws(LoadSpecificationError) -> [LoadProduct]? {
        if isBuiltInSample && products == nil { return nil }
        let weights = try products.map { text throws(LoadSpecificationError) in try LoadProduct.parseWeights(text) } ?? [:]
        return try LoadProduct.choose(from: storeCatalog, weights: weights, source: source)
    }

    /// A copy of the topology `source` whose scenario sells `catalog`, written into the run directory
    /// (`load-topology.yaml`) for the load's processes. Paths in a topology are relative to its file, so
    /// one that names other files (CURVE keys) is refused: name the catalog in its `scenario.catalog` instead.
    public static func writeTopology(_ source: String, catalog: URL, into directory: URL) throws(LoadSpecificationError) -> String {
        let text: String
        do {
            text = try Topology.builtInText(source) ?? String(contentsOfFile: source, encoding: .utf8)
        } catch {
            throw LoadSpecificationError("cannot read \(source): \(describeError(error, withPath: false))")
        }
        guard var root = (try? Yams.load(yaml: text)) as? [String: Any], var scenario = root["scenario"] as? [String: Any] else {
            throw LoadSpecificationError("\(source) has no scenario section to put --catalog into")
        }
        guard root["curve"] == nil else {
            throw LoadSpecificationError("--catalog with a topology that has a curve section: its key paths are relative to \(source); set scenario.catalog in that file instead")
        }
        scenario["catalog"] = catalog.path
        root["scenario"] = scenario
        let file = directory.appendingPathComponent("load-topology.yaml")
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            try Yams.dump(object: root).write(to: file, atomically: true, encoding: .utf8)
        } catch {
            throw LoadSpecificationError("cannot write \(file.path): \(describeError(error))")
        }
        return file.path
    }
}
