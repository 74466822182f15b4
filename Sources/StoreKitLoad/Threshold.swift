import Foundation
import StoreKitModel

/// A pass/fail criterion on a figure of the run, as k6 writes them: `finished.p99<50ms`,
/// `violations==0`, `rate>=1000`. Any failed threshold makes `sksim load` exit 99 (after the
/// report is written).
///
/// Grammar: `METRIC OPERATOR VALUE`, operators `<` `<=` `>` `>=` `==` `!=`.
/// - `STAGE.AGGREGATE` with a stage of `LifecycleStage` (or a team's driver's own stage) and `p50`,
///   `p90`, `p95`, `p99`, `p999`, `max` (latencies: the value takes `us`, `ms` or `s`, and plain
///   numbers are milliseconds) or `count` (a number);
/// - `counters.NAME`, a team's driver's own counter;
/// - `rate` (lifecycles completed per second over the load), `lifecycles`, `started`,
///   `missedStarts`, `errors`, `rejections`, `incomplete`, `violations`, `pending`, `duplicates`, `checksFailed`.
public struct Threshold: Sendable, Equatable, Codable {
    public enum Metric: Sendable, Equatable, Codable {
        case stageLatency(LifecycleStage, percentile: Double?)
        case stageCount(LifecycleStage)
        /// A stage of a team's driver (`LoadUserBehavior`'s HTTP calls), by name.
        case customStageLatency(String, percentile: Double?)
        case customStageCount(String)
        case figure(String)
    }

    public enum Comparison: String, Sendable, Codable, CaseIterable {
        case lessOrEqual = "<=", greaterOrEqual = ">=", equal = "==", notEqual = "!=", less = "<", greater = ">"

        func holds(_ left: Double, _ right: Double) -> Bool {
            switch self {
            case .less: left < right
            case .lessOrEqual: left <= right
            case .greater: left > right
            case .greaterOrEqual: left >= right
            case .equal: left == right
            case .notEqual: left != right
            }
        }
    }

    public var expression: String
    public var metric: Metric
    public var comparison: Comparison
    /// Microseconds for latencies, a plain number otherwise.
    public var value: Double

    /// Figures known only once the run is over (from the log, or over the whole load): not
    /// judged by `--abort-on-fail` while the load runs.
    public static let endOfRunFigures: Set<String> = ["rate", "violations", "pending", "duplicates", "incomplete", "lifecycles"]
    public static let figures = ["rate", "lifecycles", "started", "missedStarts", "errors", "errorRate", "backendErrors", "rejections", "incomplete",
                                 "violations", "pending", "duplicates", "checksFailed"]
    static let aggregates: [String: Double?] = ["p50": 50, "p90": 90, "p95": 95, "p99": 99, "p999": 99.9, "max": nil]

    /// `customStages`: a name that is no built-in stage names a stage of a team's driver (`--driver`);
    /// without one, such a name is a misspelt stage and refused.
    public init(parsing text: String, customStages: Bool = false) throws(LoadSpecificationError) {
        expression = text
        let trimmed = text.replacingOccurrences(of: " ", with: "")
        // Two-character operators first, so `<=` is not read as `<`.
        guard let (comparison, range) = Comparison.allCases.lazy.compactMap({ candidate in
            trimmed.range(of: candidate.rawValue).map { (candidate, $0) }
        }).first else {
            throw LoadSpecificationError("threshold '\(text)' has no comparison; write METRIC OPERATOR VALUE, e.g. 'finished.p99<50ms', 'violations==0' or 'rate>=1000'", code: .malformedThreshold)
        }
        self.comparison = comparison
        let name = String(trimmed[..<range.lowerBound])
        let valueText = String(trimmed[range.upperBound...])
        let parts = name.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        if parts.count == 2, parts[0] == "counters" {
            // A team's driver's own counter (`LoadContext.count`); one it never counted is 0.
            if let refusal = CustomFigureName.refusal(parts[1]) { throw LoadSpecificationError("threshold '\(text)': the counter \(refusal)", code: .malformedThreshold) }
            metric = .figure(name)
            value = try Self.number(valueText, text)
        } else if parts.count == 2 {
            // A name that is no built-in stage is a custom stage of a team's driver (`--driver`): known only
            // once its reports come, so a misspelt one has no data and fails.
            let stage = LifecycleStage(rawValue: parts[0])
            if stage == nil, !customStages {
                throw LoadSpecificationError("threshold '\(text)' names stage '\(parts[0])'; the stages are \(LifecycleStage.allCases.map(\.rawValue).joined(separator: ", ")) (and, with --driver, the driver's own)", code: .malformedThreshold)
            }
            if stage == nil, let refusal = CustomFigureName.refusal(parts[0], isStage: true) {
                throw LoadSpecificationError("threshold '\(text)' names stage \(refusal); the built-in stages are \(LifecycleStage.allCases.map(\.rawValue).joined(separator: ", ")), and a driver's own stages take names of that form", code: .malformedThreshold)
            }
            if parts[1] == "count" {
                metric = stage.map { .stageCount($0) } ?? .customStageCount(parts[0])
                value = try Self.number(valueText, text)
            } else if let percentile = Self.aggregates[parts[1]] {
                metric = stage.map { .stageLatency($0, percentile: percentile) } ?? .customStageLatency(parts[0], percentile: percentile)
                value = try Self.latencyMicroseconds(valueText, text)
            } else {
                throw LoadSpecificationError("threshold '\(text)' asks for '\(parts[1])' of a stage; use p50, p90, p95, p99, p999, max or count", code: .malformedThreshold)
            }
        } else if parts.count == 1, Self.figures.contains(name) {
            metric = .figure(name)
            value = try Self.number(name == "rate" && valueText.hasSuffix("/s") ? String(valueText.dropLast(2)) : valueText, text)
        } else {
            throw LoadSpecificationError("threshold '\(text)' names no known metric '\(name)'; use STAGE.p99 (and p50, p90, p95, p999, max, count) or one of \(Self.figures.joined(separator: ", "))", code: .malformedThreshold)
        }
    }

    private static func number(_ text: String, _ expression: String) throws(LoadSpecificationError) -> Double {
        guard let value = Double(text), value.isFinite else {
            throw LoadSpecificationError("threshold '\(expression)' compares with '\(text)', which is not a number", code: .malformedThreshold)
        }
        return value
    }

    private static func latencyMicroseconds(_ text: String, _ expression: String) throws(LoadSpecificationError) -> Double {
        if let milliseconds = Double(text), milliseconds.isFinite { return milliseconds * 1_000 }
        do {
            return Double(try DurationText.nanoseconds(text)) / 1_000
        } catch {
            throw LoadSpecificationError("threshold '\(expression)' compares a latency with '\(text)'; write a duration such as 50ms, 800us or 1.5s", code: .malformedThreshold)
        }
    }

    public var isEndOfRun: Bool {
        switch metric {
        case .figure(let name):
            // A team's counter grows all run long, as a stage's count does.
            if name.hasPrefix("counters.") { return comparison == .greater || comparison == .greaterOrEqual }
            return Self.endOfRunFigures.contains(name)
        // Stage notified is read from the notification sender's journal once the run is over.
        case .stageCount(.notified), .stageLatency(.notified, _): return true
        // A count grows all run long: one that must reach a value is known only at the end.
        case .stageCount, .customStageCount: return comparison == .greater || comparison == .greaterOrEqual
        case .stageLatency, .customStageLatency: return false
        }
    }

    /// The figure this threshold is about, or nil when the run has none (a stage no lifecycle
    /// reached has no latency: such a threshold fails, since nothing shows it holds).
    public func actual(in figures: LoadFigures) -> Double? {
        switch metric {
        case .stageLatency(let stage, let percentile):
            guard let summary = figures.summary(stage) else { return nil }
            return percentile.map { summary.percentileMicroseconds($0) } ?? Double(summary.maxMicroseconds)
        case .stageCount(let stage):
            return Double(figures.stages.count(stage))
        case .customStageLatency(let stage, let percentile):
            guard let summary = figures.custom.summary(stage: stage) else { return nil }
            return percentile.map { summary.percentileMicroseconds($0) } ?? Double(summary.maxMicroseconds)
        case .customStageCount(let stage):
            return Double(figures.custom.stages[stage]?.totalCount ?? 0)
        case .figure(let name):
            return figures.value(of: name)
        }
    }

    public func passes(_ figures: LoadFigures) -> Bool {
        guard let actual = actual(in: figures) else { return false }
        return comparison.holds(actual, value)
    }
}
