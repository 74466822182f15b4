import Foundation
import StoreKitRoles
import ZeroMQ

/// How load is offered: `open` starts lifecycles at a rate whatever the system does (arrivals);
/// `closed` has a fixed number of devices, each starting its next lifecycle a think time after
/// its last one ended.
public enum LoadModel: String, Sendable, Codable, CaseIterable {
    case open, closed
}

/// What the coordinator tells one driver to do. Every driver gets the same plan but its own
/// index: in the open model it takes the arrivals whose number modulo `driverCount` is its
/// index, so together the drivers follow the schedule exactly.
public struct LoadPlan: Sendable, Codable, Equatable {
    public var driverIndex = 0
    public var driverCount = 1
    public var model: LoadModel = .open
    public var schedule = ArrivalSchedule.constant(perSecond: 100, durationNanoseconds: 10_000_000_000)
    /// How long the closed model runs (the open model runs for its schedule).
    public var closedDurationNanoseconds: Int64 = 10_000_000_000
    /// Devices this driver plays: the closed model's users, or the open model's pool that
    /// lifecycles are spread over in turn.
    public var devicesPerDriver = 100
    /// The closed model's think time between a device's lifecycles.
    public var thinkTime = LatencyDistribution.exponential(minimumMilliseconds: 0, meanMilliseconds: 100)
    /// Fractions of lifecycles that are restores, and of purchases that buy hosted content.
    public var restoreFraction = 0.0
    public var downloadFraction = 0.0
    /// Lifecycles one driver keeps in flight at most; a start due beyond it is a missed start
    /// (counted, never queued without bound).
    public var maximumInFlight = 50_000
    /// The products to buy, weighted, from the store's catalog (`--catalog`, `--products`); nil:
    /// the built-in sample's plain consumable, or its hosted-content pack for `downloadFraction`.
    public var products: [LoadProduct]?
    /// The lifecycles' kinds, weighted (`--mix`); nil: purchases, and restores for `restoreFraction`.
    public var mix: LifecycleMix?
    /// A start that could be made only more than this behind its intended instant is not made: it
    /// counts as a missed start (docs/load-testing.md, "Late and missed starts").
    public var lateStartBoundNanoseconds: Int64 = 1_000_000_000
    /// The team's server (`--backend URL`): each purchased or restored transaction is POSTed there
    /// before the app finishes it; nil: none.
    public var backendURL: String?
    /// A POST unanswered this long counts as a backend error.
    public var backendTimeoutNanoseconds: Int64 = 5_000_000_000
    public var intervalNanoseconds: Int64 = 1_000_000_000
    /// After the last start, how long a driver waits for lifecycles in flight to end.
    public var drainNanoseconds: Int64 = 10_000_000_000
    public var seed: UInt64 = 1

    public init() {}

    /// When this driver stops starting lifecycles, in nanoseconds after the start.
    public var loadNanoseconds: Int64 { model == .open ? schedule.durationNanoseconds : closedDurationNanoseconds }

    /// The highest interval number a driver's report can carry: a driver numbers one report per
    /// interval and makes its final one at the latest in its first pass after the drain ends
    /// (`LoadDriver.drive`), so one more than the intervals up to then, and one for rounding.
    public var lastReportInterval: Int {
        let end = loadNanoseconds.addingReportingOverflow(drainNanoseconds)
        return end.overflow ? Int.max : Int(end.partialValue / max(1, intervalNanoseconds)) + 2
    }

    /// Refuses a report this plan cannot produce, before the coordinator adds it up: an interval out
    /// of range would make it emit a row for every interval up to it (a hostile or broken driver's
    /// `Int.max` hung it), and counts that are negative, or more lifecycles in flight than a driver
    /// keeps (`maximumInFlight`, or one per device in the closed model), are no driver's (sums of
    /// `Int.max` trapped).
    public func checkReport(_ report: DriverReport) throws(LoadProtocolError) {
        func refuse(_ what: String) -> LoadProtocolError {
            LoadProtocolError("driver '\(report.driver)' sent a report with \(what), which no driver of this load makes; "
                + "run every driver with the same sksim as the coordinator (`sksim driver`), and keep other programs off --listen", code: .impossibleReport)
        }
        guard (0...lastReportInterval).contains(report.interval) else {
            throw refuse("interval \(report.interval); this load's reports are numbered 0 to \(lastReportInterval) "
                + "(one per \(Double(intervalNanoseconds) / 1e9) s of load and drain)")
        }
        // The open model keeps at most `maximumInFlight`; the closed model one lifecycle per device.
        let mostInFlight = max(maximumInFlight, devicesPerDriver)
        guard (0...mostInFlight).contains(report.inFlight) else {
            throw refuse("\(report.inFlight) lifecycles in flight; a driver of this load keeps 0 to \(mostInFlight)")
        }
        let counts = [report.counters.started, report.counters.missedStarts, report.counters.completed, report.counters.completedDuringLoad,
                      report.counters.rejections, report.counters.errors, report.counters.incomplete, report.counters.backendErrors]
        guard counts.allSatisfy({ $0 >= 0 }), report.cpuNanoseconds >= 0, report.peakMemoryBytes >= 0 else {
            throw refuse("a negative count, CPU time or memory size")
        }
    }
}

/// Counts of one driver over one interval (or, summed, of the whole run).
public struct LoadCounters: Sendable, Codable, Equatable {
    /// Lifecycles started, and starts that were due but could not be made (in-flight bound).
    public var started = 0
    public var missedStarts = 0
    /// Lifecycles that reached their end (removed, or restoreFinished).
    public var completed = 0
    /// Of `completed`, those that ended while starts were still offered (before the load's end):
    /// what `rate` counts; the rest ended in the drain.
    public var completedDuringLoad = 0
    /// Commands the queue refused (addPayment refused ends its lifecycle).
    public var rejections = 0
    /// Lifecycles that ended in an error: a failed restore, a command never acknowledged.
    public var errors = 0
    /// Lifecycles still in flight when the drain time ran out (final report only).
    public var incomplete = 0
    /// Transactions the backend refused (non-2xx), or did not answer in time, or could not be reached:
    /// not finished, and each one's lifecycle is an error.
    public var backendErrors = 0

    public init() {}

    /// A count a report leaves out is 0: drivers written elsewhere (`--driver`) send what they count.
    public init(from decoder: Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        func count(_ key: CodingKeys) throws -> Int { try container.decodeIfPresent(Int.self, forKey: key) ?? 0 }
        started = try count(.started)
        missedStarts = try count(.missedStarts)
        completed = try count(.completed)
        completedDuringLoad = try count(.completedDuringLoad)
        rejections = try count(.rejections)
        errors = try count(.errors)
        incomplete = try count(.incomplete)
        backendErrors = try count(.backendErrors)
    }

    /// Saturating: counts come from other processes' reports, and a sum of them must not trap.
    public static func + (left: LoadCounters, right: LoadCounters) -> LoadCounters {
        func add(_ a: Int, _ b: Int) -> Int {
            let (sum, overflow) = a.addingReportingOverflow(b)
            return overflow ? (b > 0 ? .max : .min) : sum
        }
        var sum = left
        sum.started = add(left.started, right.started)
        sum.missedStarts = add(left.missedStarts, right.missedStarts)
        sum.completed = add(left.completed, right.completed)
        sum.completedDuringLoad = add(left.completedDuringLoad, right.completedDuringLoad)
        sum.rejections = add(left.rejections, right.rejections)
        sum.errors = add(left.errors, right.errors)
        sum.incomplete = add(left.incomplete, right.incomplete)
        sum.backendErrors = add(left.backendErrors, right.backendErrors)
        return sum
    }
}

public struct DriverHello: Sendable, Codable {
    public var name: String
    public var host: String
    public var pid: Int32
}

public struct DriverReady: Sendable, Codable {
    public var name: String
    public var devices: Int
}

/// When the load starts, by the wall clock (drivers on other hosts share no monotonic clock).
public struct LoadStart: Sendable, Codable {
    public var startAtUnixNanoseconds: Int64
}

/// One interval of one driver: its counters and stage histograms of that interval only, so
/// the coordinator can both chart them per second and add them up into the run's totals.
public struct DriverReport: Sendable, Codable {
    public var driver: String
    /// Interval number from the start (interval `k` covers [k, k+1) × the plan's interval).
    public var interval: Int
    public var isFinal: Bool
    public var counters: LoadCounters
    public var inFlight: Int
    /// The driver process's CPU time so far (user + system).
    public var cpuNanoseconds: Int64
    /// The driver process's peak resident memory so far, in bytes.
    public var peakMemoryBytes: Int64 = 0
    /// `StageHistograms.encoded()`.
    public var histograms: Data
    /// A team's driver's own stages, counters and checks of this interval (`CustomFigures`); nil: none.
    public var custom: CustomFiguresWire? = nil
}

/// The frames between drivers (DEALER) and the coordinator (ROUTER): a verb, then JSON.
public enum LoadWire {
    public enum Verb: String, Sendable, CaseIterable {
        /// driver → coordinator: I am here.
        case hello = "HELLO"
        /// coordinator → driver: what to do.
        case plan = "PLAN"
        /// driver → coordinator: devices registered, ready to start.
        case ready = "READY"
        /// coordinator → driver: start at this instant.
        case start = "START"
        /// driver → coordinator: one interval's figures.
        case report = "REPORT"
        /// coordinator → driver: stop starting now (abort), send the final report.
        case stop = "STOP"
        /// driver → coordinator: I failed; the text says why.
        case failed = "FAILED"
    }

    /// Reports carry histograms; 16 MiB bounds even a pathological one.
    public static let limits = MessageLimits(maximumFrameCount: 3, maximumByteCount: 16 << 20, uncountedLeadingFrames: 1)

    public static func frames(_ verb: Verb, _ body: some Encodable) -> [[UInt8]] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        // Encoding these plain values cannot fail.
        let json = (try? encoder.encode(body)) ?? Data("{}".utf8)
        return [Array(verb.rawValue.utf8), Array(json)]
    }

    public static func verb(_ frame: [UInt8]) -> Verb? { Verb(rawValue: String(decoding: frame, as: UTF8.self)) }

    public static func decode<Body: Decodable>(_ type: Body.Type, _ frame: [UInt8]) throws(LoadProtocolError) -> Body {
        do {
            return try JSONDecoder().decode(type, from: Data(frame))
        } catch {
            throw LoadProtocolError("a \(type) message could not be read: \(error)", code: .unreadableMessage)
        }
    }
}

