import StoreKitModel

/// xoshiro256** seeded through SplitMix64: fast, small, and the same sequence on every
/// platform, so a recorded seed reproduces every random choice of a run.
public struct SeededRandom: RandomNumberGenerator, Sendable {
    private var state: (UInt64, UInt64, UInt64, UInt64)

    public init(seed: UInt64) {
        var splitMix = seed
        func next() -> UInt64 {
            splitMix &+= 0x9E37_79B9_7F4A_7C15
            var mixed = splitMix
            mixed = (mixed ^ (mixed >> 30)) &* 0xBF58_476D_1CE4_E5B9
            mixed = (mixed ^ (mixed >> 27)) &* 0x94D0_49BB_1331_11EB
            return mixed ^ (mixed >> 31)
        }
        state = (next(), next(), next(), next())
    }

    /// An independent stream for one named part of the run (a role, a device), derived
    /// from the run's seed with a stable hash: Swift's `Hasher` is seeded per process.
    public init(seed: UInt64, stream: String) {
        self.init(seed: seed ^ fnv1a64(stream.utf8))
    }

    public mutating func next() -> UInt64 {
        let result = rotate(state.1 &* 5, 7) &* 9
        let shifted = state.1 << 17
        state.2 ^= state.0
        state.3 ^= state.1
        state.1 ^= state.2
        state.0 ^= state.3
        state.2 ^= shifted
        state.3 = rotate(state.3, 45)
        return result
    }

    private func rotate(_ value: UInt64, _ count: UInt64) -> UInt64 { (value << count) | (value >> (64 - count)) }

    /// A uniform double in [0, 1).
    public mutating func nextUnit() -> Double { Double(next() >> 11) * 0x1.0p-53 }

    /// True with the given probability.
    public mutating func chance(_ probability: Double) -> Bool { nextUnit() < probability }
}

/// How long something takes, in nanoseconds, drawn from the run's choice source. The
/// simplest choice (0) gives the shortest time.
public enum LatencyDistribution: Sendable, Hashable, Codable, CustomStringConvertible {
    case fixed(milliseconds: Double)
    case uniform(minimumMilliseconds: Double, maximumMilliseconds: Double)
    /// A long tail: `minimum` plus an exponential with the given mean.
    case exponential(minimumMilliseconds: Double, meanMilliseconds: Double)

    // Inlinable: the runtime samples a network delay for every delivery and command.
    @inlinable
    public func sampleNanoseconds(_ choices: ChoiceSource, _ kind: ChoiceKind = .latency) -> Int64 {
        let milliseconds: Double
        switch self {
        case .fixed(let value):
            milliseconds = value
        case .uniform(let minimum, let maximum):
            milliseconds = maximum > minimum ? minimum + (maximum - minimum) * choices.unit(kind) : minimum
        case .exponential(let minimum, let mean):
            // Clamp the draw so one sample can never be absurdly long (bounded waits).
            milliseconds = mean > 0 ? minimum + min(-mean * log(1 - choices.unit(kind)), mean * 20) : minimum
        }
        return Int64(max(0, milliseconds) * 1_000_000)
    }

    public var description: String {
        switch self {
        case .fixed(let value): "fixed \(value) ms"
        case .uniform(let minimum, let maximum): "uniform \(minimum)–\(maximum) ms"
        case .exponential(let minimum, let mean): "\(minimum) ms + exponential mean \(mean) ms"
        }
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
