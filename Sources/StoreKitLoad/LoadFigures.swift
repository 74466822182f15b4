import Foundation
import Histogram

/// The figures of a load run (or of its part so far): what thresholds judge and every output shows.
public struct LoadFigures: Sendable {
    /// The drivers' histograms, merged.
    public var stages = StageHistograms()
    /// A team's driver's own stages, counters and checks, merged.
    public var custom = CustomFigures()
    public var counters = LoadCounters()
    /// Seconds the load ran (from the start to the last start, or to the abort).
    public var loadSeconds = 0.0
    /// From the log, once the run is over (nil while it runs).
    public var violations: Int?
    public var violationMessages: [String] = []
    public var pending: Int?
    public var duplicates: Int?
    public var logRejections: Int?
    /// With `--notification-url`, once the run is over: the notifications the log produced, by outcome.
    public var notifications: NotificationCounts?

    public init() {}

    /// Lifecycles completed per second while starts were offered; completions in the drain do not
    /// count (they would credit the load with a rate it never sustained).
    public var lifecyclesPerSecond: Double { loadSeconds > 0 ? Double(counters.completedDuringLoad) / loadSeconds : 0 }

    /// Lifecycles that ended in an error, of those that ended or were given up (errors + completed + incomplete).
    public var errorRate: Double {
        let ended = counters.errors &+ counters.completed &+ counters.incomplete
        return ended > 0 ? Double(counters.errors) / Double(ended) : 0
    }

    public func value(of figure: String) -> Double? {
        switch figure {
        case "rate": lifecyclesPerSecond
        case "lifecycles": Double(counters.completed)
        case "started": Double(counters.started)
        case "missedStarts": Double(counters.missedStarts)
        case "errors": Double(counters.errors)
        case "errorRate": errorRate
        case "backendErrors": Double(counters.backendErrors)
        case "rejections": Double(logRejections ?? counters.rejections)
        case "incomplete": Double(counters.incomplete)
        case "violations": violations.map(Double.init)
        case "pending": pending.map(Double.init)
        case "duplicates": duplicates.map(Double.init)
        case "checksFailed": Double(custom.checksFailed)
        default: figure.hasPrefix("counters.") ? Double(custom.counters[String(figure.dropFirst("counters.".count))] ?? 0) : nil
        }
    }

    public func summary(_ stage: LifecycleStage) -> StageSummary? {
        guard let histogram = stages.histograms[stage], histogram.totalCount > 0 else { return nil }
        return StageSummary(histogram)
    }
}

/// One stage's latency, in microseconds, read off its merged histogram.
public struct StageSummary: Sendable, Codable, Equatable {
    public var count: UInt64
    public var p50Microseconds: UInt64
    public var p90Microseconds: UInt64
    public var p95Microseconds: UInt64
    public var p99Microseconds: UInt64
    public var p999Microseconds: UInt64
    public var maxMicroseconds: UInt64
    public var meanMicroseconds: Double

    public init(_ histogram: Histogram<UInt64>) {
        count = histogram.totalCount
        p50Microseconds = histogram.valueAtPercentile(50)
        p90Microseconds = histogram.valueAtPercentile(90)
        p95Microseconds = histogram.valueAtPercentile(95)
        p99Microseconds = histogram.valueAtPercentile(99)
        p999Microseconds = histogram.valueAtPercentile(99.9)
        maxMicroseconds = histogram.max
        meanMicroseconds = (histogram.mean * 10).rounded() / 10
    }

    public func percentileMicroseconds(_ percentile: Double) -> Double {
        switch percentile {
        case 50: Double(p50Microseconds)
        case 90: Double(p90Microseconds)
        case 95: Double(p95Microseconds)
        case 99: Double(p99Microseconds)
        default: Double(p999Microseconds)
        }
    }
}

/// The App Store Server Notifications of a load (`--notification-url`), from the log and the sender's journal.
public struct NotificationCounts: Sendable, Codable, Equatable {
    /// Answered 2xx.
    public var delivered = 0
    /// Needed more than one POST (delivered or given up).
    public var retried = 0
    /// Given up after the last retry, or not settled when the run ended.
    public var undelivered = 0

    public init() {}
}
