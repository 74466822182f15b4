/// Fixed-size log-linear histogram of nanosecond durations (16 sub-buckets per power of two, ~6% precision),
/// so latency percentiles over millions of samples need constant memory.
package struct LatencyHistogram {
    private var counts = [UInt64](repeating: 0, count: 64 * 16)
    private(set) var sampleCount: UInt64 = 0
    private(set) var maximumNanoseconds: UInt64 = 0

    package init() {}

    package mutating func record(_ nanoseconds: UInt64) {
        counts[Self.bucket(nanoseconds)] += 1
        sampleCount += 1
        maximumNanoseconds = max(maximumNanoseconds, nanoseconds)
    }

    private static func bucket(_ value: UInt64) -> Int {
        if value < 16 { return Int(value) }
        let exponent = 63 - value.leadingZeroBitCount  // >= 4
        let mantissa = Int((value >> UInt64(exponent - 4)) & 15)
        return (exponent - 3) * 16 + mantissa
    }

    /// Upper bound of a bucket's values.
    private static func upperBound(_ bucket: Int) -> UInt64 {
        if bucket < 16 { return UInt64(bucket) }
        let exponent = bucket / 16 + 3
        let mantissa = UInt64(bucket % 16)
        return ((16 + mantissa + 1) << UInt64(exponent - 4)) - 1
    }

    /// Value at or below which `fraction` of the samples fall (bucket upper bound, capped at the maximum seen).
    func percentileNanoseconds(_ fraction: Double) -> UInt64 {
        guard sampleCount > 0 else { return 0 }
        let target = UInt64((Double(sampleCount) * fraction).rounded(.up))
        var seen: UInt64 = 0
        for (bucket, count) in counts.enumerated() {
            seen += count
            if seen >= max(target, 1) { return min(Self.upperBound(bucket), maximumNanoseconds) }
        }
        return maximumNanoseconds
    }

    package var summary: LatencySummary {
        LatencySummary(
            samples: sampleCount, p50Microseconds: Double(percentileNanoseconds(0.50)) / 1000,
            p99Microseconds: Double(percentileNanoseconds(0.99)) / 1000, maximumMicroseconds: Double(maximumNanoseconds) / 1000)
    }
}

public struct LatencySummary: Sendable, Equatable {
    public var samples: UInt64
    public var p50Microseconds: Double
    public var p99Microseconds: Double
    public var maximumMicroseconds: Double
}
