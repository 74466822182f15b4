import Foundation
import StoreKitModel

/// One stage of an open-model load: over `durationNanoseconds` the start rate moves in a
/// straight line from where the previous stage ended to `targetPerSecond` (as k6's
/// ramping-arrival-rate does); `30s:0` ramps down to nothing.
public struct RateStage: Sendable, Codable, Equatable {
    public var durationNanoseconds: Int64
    public var targetPerSecond: Double

    public init(durationNanoseconds: Int64, targetPerSecond: Double) {
        self.durationNanoseconds = durationNanoseconds
        self.targetPerSecond = targetPerSecond
    }
}

/// When each lifecycle of an open-model load is meant to start. Arrival `k` (0, 1, 2, …) is
/// due when the integral of the rate reaches `k`, so the schedule is a pure function of the
/// stages and every driver computes its own share without talking to the others. Starts are
/// timed from these intended instants, never from when the driver got round to them, which
/// is what keeps the latency free of coordinated omission.
public struct ArrivalSchedule: Sendable, Codable, Equatable {
    /// The rate at time 0; each stage ramps from the previous stage's target.
    public var initialPerSecond: Double
    public var stages: [RateStage]

    /// The most starts per second one schedule may ask for: far above what any machine can do,
    /// low enough that arrival counts stay exact in a Double.
    public static let maximumPerSecond = 10_000_000.0

    public init(initialPerSecond: Double, stages: [RateStage]) {
        self.initialPerSecond = initialPerSecond
        self.stages = stages
    }

    /// A constant rate for a duration.
    public static func constant(perSecond rate: Double, durationNanoseconds: Int64) -> ArrivalSchedule {
        ArrivalSchedule(initialPerSecond: rate, stages: [RateStage(durationNanoseconds: durationNanoseconds, targetPerSecond: rate)])
    }

    /// Parses `30s:100/s,2m:2000/s,30s:0`: comma-separated `DURATION:RATE` pairs, the rate in
    /// starts per second (`/s` optional, `/m` per minute). The first stage ramps up from 0.
    public static func parse(stages text: String) throws(LoadSpecificationError) -> ArrivalSchedule {
        var stages: [RateStage] = []
        for part in text.split(separator: ",", omittingEmptySubsequences: false) {
            let pieces = part.split(separator: ":", omittingEmptySubsequences: false)
            guard pieces.count == 2 else {
                throw LoadSpecificationError("stage '\(part)' in --stages is not DURATION:RATE; write for example 30s:100/s,2m:2000/s,30s:0", code: .malformedStages)
            }
            let duration: Int64
            do {
                duration = try DurationText.nanoseconds(String(pieces[0]))
            } catch {
                throw LoadSpecificationError("stage '\(part)' in --stages: \(error)", code: .malformedStages)
            }
            guard duration > 0 else { throw LoadSpecificationError("stage '\(part)' in --stages lasts no time; give it a duration above 0", code: .malformedStages) }
            stages.append(RateStage(durationNanoseconds: duration, targetPerSecond: try parseRate(String(pieces[1]), context: "stage '\(part)' in --stages")))
        }
        return ArrivalSchedule(initialPerSecond: 0, stages: stages)
    }

    /// A start rate: `2000`, `2000/s`, `120/m`.
    public static func parseRate(_ text: String, context: String) throws(LoadSpecificationError) -> Double {
        var number = Substring(text.trimmingCharacters(in: .whitespaces))
        var scale = 1.0
        if number.hasSuffix("/s") { number = number.dropLast(2) } else if number.hasSuffix("/m") {
            number = number.dropLast(2)
            scale = 1.0 / 60
        }
        guard let value = Double(number), value.isFinite, value >= 0, value * scale <= maximumPerSecond else {
            throw LoadSpecificationError("\(context): '\(text)' is not a rate; write starts per second such as 100/s (at most \(Int(maximumPerSecond))/s), or 0", code: .malformedRate)
        }
        return value * scale
    }

    public var durationNanoseconds: Int64 { stages.reduce(0) { $0 + $1.durationNanoseconds } }

    /// Arrivals due in the whole schedule (the integral of the rate).
    public var totalArrivals: Double { expectedArrivals(through: durationNanoseconds) }

    /// The rate (starts per second) at `time` nanoseconds after the start.
    public func rate(at time: Int64) -> Double {
        var start: Int64 = 0
        var from = initialPerSecond
        for stage in stages {
            if time < start + stage.durationNanoseconds {
                let fraction = Double(time - start) / Double(stage.durationNanoseconds)
                return from + (stage.targetPerSecond - from) * fraction
            }
            start += stage.durationNanoseconds
            from = stage.targetPerSecond
        }
        return 0
    }

    /// Arrivals due from the start through `time` nanoseconds (a real number).
    public func expectedArrivals(through time: Int64) -> Double {
        var start: Int64 = 0
        var from = initialPerSecond
        var total = 0.0
        for stage in stages {
            let length = Double(stage.durationNanoseconds) / 1e9
            let slope = (stage.targetPerSecond - from) / length
            let within = Double(min(time, start + stage.durationNanoseconds) - start) / 1e9
            if within <= 0 { break }
            total += from * within + slope * within * within / 2
            start += stage.durationNanoseconds
            from = stage.targetPerSecond
        }
        return total
    }

    /// When arrival `index` is due, in nanoseconds after the start, or nil when the schedule
    /// ends first. Inverts the integral stage by stage, in closed form.
    public func intendedStart(ofArrival index: Int) -> Int64? {
        var remaining = Double(index)
        var start: Int64 = 0
        var from = initialPerSecond
        for stage in stages {
            let length = Double(stage.durationNanoseconds) / 1e9
            let to = stage.targetPerSecond
            let inStage = (from + to) / 2 * length
            if remaining < inStage {
                // Solve from·t + (to − from)·t²/(2·length) = remaining for t, in the form that
                // keeps its precision when the ramp is flat: t = 2r / (from + √(from² + 2(to − from)r/length)).
                let root = (from * from + 2 * (to - from) * remaining / length).squareRoot()
                let seconds = remaining == 0 ? 0 : 2 * remaining / (from + root)
                return start + min(stage.durationNanoseconds - 1, Int64(seconds * 1e9))
            }
            remaining -= inStage
            start += stage.durationNanoseconds
            from = to
        }
        return nil
    }
}
