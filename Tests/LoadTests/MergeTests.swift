import Foundation
import Histogram
import StoreKitLoad
import StoreKitRoles
import Testing

/// The coordinator's merge: histograms from many drivers, sent in their wire form and added
/// up, give the same percentiles as one histogram holding every sample.
struct MergeTests {
    /// Latency-like samples in microseconds: mostly around a millisecond, with a long tail.
    static func samples(count: Int, stream: String) -> [Int64] {
        let choices = SeededChoices(seed: 42, stream: stream)
        return (0..<count).map { _ in
            LatencyDistribution.exponential(minimumMilliseconds: 0.2, meanMilliseconds: 1.5).sampleNanoseconds(choices)
                + (choices.chance(.latency, 0.01) ? 80_000_000 : 0)
        }
    }

    @Test("percentiles merged from 4 drivers over the wire equal those of all samples in one histogram")
    func mergeOfFourDriversIsExact() throws {
        var everything = StageHistograms()
        var merged = StageHistograms()
        for driver in 0..<4 {
            var local = StageHistograms()
            for (index, nanoseconds) in Self.samples(count: 50_000, stream: "driver-\(driver)").enumerated() {
                let stage: LifecycleStage = index % 5 == 0 ? .added : .removed
                local.record(stage, nanoseconds: nanoseconds)
                everything.record(stage, nanoseconds: nanoseconds)
            }
            // Exactly what a driver sends and the coordinator reads.
            merged.add(try StageHistograms(encoded: local.encoded()))
        }
        for stage in [LifecycleStage.added, .removed] {
            let all = try #require(everything.histograms[stage])
            let sum = try #require(merged.histograms[stage])
            #expect(sum.totalCount == all.totalCount)
            for percentile in [50.0, 90, 99, 99.9, 99.99, 100] {
                #expect(sum.valueAtPercentile(percentile) == all.valueAtPercentile(percentile), "\(stage) p\(percentile)")
            }
            #expect(sum.max == all.max)
            // And both sit within the histogram's precision (3 significant digits) of the exact percentile.
            let sorted = Self.exact(stage: stage)
            let exact = Double(sorted[Int(Double(sorted.count) * 0.99) - 1])
            #expect(abs(Double(sum.valueAtPercentile(99)) - exact) <= exact * 0.001 + 1)
        }
    }

    static func exact(stage: LifecycleStage) -> [Int64] {
        var values: [Int64] = []
        for driver in 0..<4 {
            for (index, nanoseconds) in samples(count: 50_000, stream: "driver-\(driver)").enumerated()
            where (index % 5 == 0) == (stage == .added) {
                values.append(max(1, (nanoseconds + 500) / 1_000))
            }
        }
        return values.sorted()
    }

    @Test("a histogram's wire form refuses truncated and out-of-range input with a clear message")
    func wireFormRefusesDamage() throws {
        var histograms = StageHistograms()
        histograms.record(.finished, nanoseconds: 1_234_000)
        let bytes = histograms.encoded()
        #expect(throws: LoadProtocolError.self) { try StageHistograms(encoded: bytes.dropLast()) }
        #expect(throws: LoadProtocolError.self) { try StageHistograms(encoded: Data([0, 200, 1, 1, 1])) }
        let decoded = try StageHistograms(encoded: bytes)
        #expect(decoded.count(.finished) == 1)
    }

    @Test("latencies longer than an hour are recorded at the top and counted as clamped")
    func clamping() {
        var histograms = StageHistograms()
        histograms.record(.removed, nanoseconds: 7_200_000_000_000)
        #expect(histograms.clamped == 1)
        #expect(histograms.histograms[.removed]?.max ?? 0 >= StageHistograms.highestMicroseconds - StageHistograms.highestMicroseconds / 1_000)
    }
}
