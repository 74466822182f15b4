import Foundation
import StoreKitModel
import StoreKitRoles

/// Everything needed to replay a found violation exactly: the scenario as the log records it,
/// the catalog, the shrunk choices, and what the replay must give (the violated invariant and
/// the digest of the log). JSON; `sksim explore --reproduce FILE` reads it, and so does
/// `Explorer.reproduce` in a user's test (which supplies the user's observers again).
public struct ReproduceFile: Codable, Sendable, Hashable {
    public static let currentFormat = 1

    public var format = ReproduceFile.currentFormat
    public var sksimVersion = StoreKitModel.sksimVersion
    public var invariant: AppInvariant
    public var message: String
    public var seed: UInt64
    public var choices: [UInt64]
    /// The scenario as JSON, exactly as the log's first record holds it.
    public var scenario: String
    public var catalog: String
    public var catalogSource: String
    /// Events in the replayed log, and its digest (16 hex digits, FNV-1a 64 over timestamps and payloads).
    public var steps: Int
    public var logDigest: String
    /// True when the observers were the user's own: replaying needs them again.
    public var customObservers: Bool

    public init(invariant: AppInvariant, message: String, seed: UInt64, choices: [UInt64], scenario: Scenario, steps: Int,
                logDigest: UInt64, customObservers: Bool) {
        let header = scenario.header(runtime: "deterministic", startedAtUnixNanoseconds: 0)
        self.invariant = invariant
        self.message = message
        self.seed = seed
        self.choices = choices
        self.scenario = header.scenario
        self.catalog = header.catalog
        self.catalogSource = header.catalogSource
        self.steps = steps
        self.logDigest = Self.hex(logDigest)
        self.customObservers = customObservers
    }

    public static func hex(_ value: UInt64) -> String {
        let digits = String(value, radix: 16)
        return String(repeating: "0", count: 16 - digits.count) + digits
    }

    /// The scenario to replay, rebuilt as a recorded run's is.
    public func makeScenario() throws -> Scenario {
        let header = RunHeader(seed: seed, sksimVersion: sksimVersion, runtime: "deterministic", startedAtUnixNanoseconds: 0,
                               scenario: scenario, catalogSource: catalogSource, catalogDigest: RunHeader.digest(catalog.utf8),
                               catalog: catalog)
        return try Scenario(header: header)
    }

    public func encoded() throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        return try encoder.encode(self)
    }

    /// Reads a reproduce file, saying what is wrong with it in one line.
    public static func load(_ url: URL) throws -> ReproduceFile {
        let data: Data
        do {
            data = try Data(contentsOf: url)
        } catch {
            throw ConfigurationError("cannot read reproduce file \(url.path): \(describeError(error, withPath: false))")
        }
        let file: ReproduceFile
        do {
            file = try JSONDecoder().decode(ReproduceFile.self, from: data)
        } catch {
            throw ConfigurationError("\(url.path) is not a reproduce file written by sksim explore (\(error)); pass the reproduce.json of a report directory")
        }
        guard file.format == currentFormat else {
            throw ConfigurationError("\(url.path) has reproduce format \(file.format); this sksim reads format \(currentFormat)")
        }
        return file
    }
}
