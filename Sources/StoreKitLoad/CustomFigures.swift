import Foundation
import Histogram

/// How many times a check passed and failed.
public struct CheckCounts: Sendable, Codable, Equatable {
    public var passed = 0
    public var failed = 0

    public init(passed: Int = 0, failed: Int = 0) {
        self.passed = passed
        self.failed = failed
    }
}

/// What a team's driver measures beside the built-in stages (`LoadUserBehavior`): its own stages (HTTP
/// calls to its server), counters and checks. Stages are HDR histograms of the same configuration as
/// the built-in ones, so they merge exactly over drivers and intervals.
public struct CustomFigures: Sendable {
    public var stages: [String: Histogram<UInt64>] = [:]
    public var counters: [String: Int] = [:]
    public var checks: [String: CheckCounts] = [:]

    public init() {}

    public var isEmpty: Bool { stages.isEmpty && counters.isEmpty && checks.isEmpty }
    public var checksFailed: Int { checks.values.reduce(0) { $0 &+ $1.failed } }

    mutating func record(stage: String, nanoseconds: Int64) {
        let microseconds = min(StageHistograms.highestMicroseconds, UInt64(max(1, (nanoseconds + 500) / 1_000)))
        if stages[stage] == nil { stages[stage] = StageHistograms.emptyHistogram() }
        _ = stages[stage]!.record(microseconds)
    }

    mutating func count(_ name: String, by amount: Int) { counters[name] = Self.add(counters[name] ?? 0, amount) }

    mutating func check(_ name: String, passed: Bool) {
        var counts = checks[name] ?? CheckCounts()
        if passed { counts.passed = Self.add(counts.passed, 1) } else { counts.failed = Self.add(counts.failed, 1) }
        checks[name] = counts
    }

    /// Adds `other` in; refuses a sum that would name more than `CustomFigureName.maximumCount` stages,
    /// counters or checks (reports come from other processes: the merged figures stay bounded).
    public mutating func add(_ other: CustomFigures) throws(LoadProtocolError) {
        let limit = CustomFigureName.maximumCount
        guard Set(stages.keys).union(other.stages.keys).count <= limit, Set(counters.keys).union(other.counters.keys).count <= limit,
              Set(checks.keys).union(other.checks.keys).count <= limit else {
            throw LoadProtocolError("the drivers' reports name more than \(limit) custom stages, counters or checks; a load keeps at most \(limit) of each", code: .limitExceeded)
        }
        for (name, histogram) in other.stages {
            if stages[name] == nil { stages[name] = StageHistograms.emptyHistogram() }
            stages[name]!.add(histogram)
        }
        for (name, amount) in other.counters { counters[name] = Self.add(counters[name] ?? 0, amount) }
        for (name, counts) in other.checks {
            var sum = checks[name] ?? CheckCounts()
            sum.passed = Self.add(sum.passed, counts.passed)
            sum.failed = Self.add(sum.failed, counts.failed)
            checks[name] = sum
        }
    }

    mutating func reset() { self = CustomFigures() }

    /// Saturating, as `LoadCounters` adds: a sum of other processes' counts must not trap.
    static func add(_ left: Int, _ right: Int) -> Int {
        let (sum, overflow) = left.addingReportingOverflow(right)
        return overflow ? (right > 0 ? .max : .min) : sum
    }

    public func summary(stage: String) -> StageSummary? {
        guard let histogram = stages[stage], histogram.totalCount > 0 else { return nil }
        return StageSummary(histogram)
    }

    // MARK: Wire form

    /// The report's `custom` field: nil when nothing was measured, so built-in drivers' reports are unchanged.
    var wire: CustomFiguresWire? {
        guard !isEmpty else { return nil }
        return CustomFiguresWire(stages: stages.filter { $0.value.totalCount > 0 }.mapValues(StageHistograms.encodedHistogram),
                                 counters: counters, checks: checks)
    }

    /// Reads a report's `custom` field; refuses names and counts no driver of this load makes.
    public init(wire: CustomFiguresWire) throws(LoadProtocolError) {
        let limit = CustomFigureName.maximumCount
        guard (wire.stages?.count ?? 0) <= limit, (wire.counters?.count ?? 0) <= limit, (wire.checks?.count ?? 0) <= limit else {
            throw LoadProtocolError("a driver's report names more than \(limit) custom stages, counters or checks", code: .limitExceeded)
        }
        for (name, data) in wire.stages ?? [:] {
            if let refusal = CustomFigureName.refusal(name, isStage: true) { throw LoadProtocolError("a driver's report has a custom stage \(refusal)", code: .malformedReport) }
            stages[name] = try StageHistograms.histogram(encoded: data)
        }
        for (name, amount) in wire.counters ?? [:] {
            if let refusal = CustomFigureName.refusal(name) { throw LoadProtocolError("a driver's report has a counter \(refusal)", code: .malformedReport) }
            counters[name] = amount
        }
        for (name, counts) in wire.checks ?? [:] {
            if let refusal = CustomFigureName.refusal(name, isCheck: true) { throw LoadProtocolError("a driver's report has a check \(refusal)", code: .malformedReport) }
            guard counts.passed >= 0, counts.failed >= 0 else { throw LoadProtocolError("a driver's report counts check '\(name)' below 0", code: .malformedReport) }
            checks[name] = counts
        }
    }
}

/// A report's custom figures as JSON: each stage's histogram in `StageHistograms`' varint form (base64).
public struct CustomFiguresWire: Sendable, Codable, Equatable {
    public var stages: [String: Data]?
    public var counters: [String: Int]?
    public var checks: [String: CheckCounts]?
}
