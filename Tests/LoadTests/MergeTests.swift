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

    @Test("the wire form from the buckets recorded equals the one from walking every bucket, and survives a reset")
    func recordedBucketsEncodeAsTheWalk() throws {
        var random = SeededRandom(seed: 31)
        var recorded = StageHistograms()
        for round in 0..<2 {
            for _ in 0..<5_000 {
                let stage = LifecycleStage.allCases[Int(random.next() % UInt64(LifecycleStage.allCases.count))]
                recorded.record(stage, nanoseconds: Int64(random.next() % 5_000_000_000) + Int64(round))
            }
            var walked = StageHistograms()
            walked.add(recorded)
            #expect(recorded.encoded() == walked.encoded())
            let decoded = try StageHistograms(encoded: recorded.encoded())
            for stage in LifecycleStage.allCases {
                #expect(decoded.histograms[stage]?.totalCount == recorded.histograms[stage]?.totalCount)
                #expect(decoded.histograms[stage]?.valueAtPercentile(99.0) == recorded.histograms[stage]?.valueAtPercentile(99.0))
            }
            recorded.reset()
            #expect(recorded.isEmpty && recorded.encoded() == StageHistograms().encoded())
        }
    }

    @Test("a histogram's wire form refuses truncated and out-of-range input with a clear message")
    func wireFormRefusesDamage() throws {
        var histograms = StageHistograms()
        histograms.record(.finished, nanoseconds: 1_234_000)
        let bytes = histograms.encoded()
        #expect(#expect(throws: LoadProtocolError.self) { try StageHistograms(encoded: bytes.dropLast()) }?.code == .malformedReport)
        #expect(#expect(throws: LoadProtocolError.self) { try StageHistograms(encoded: Data([0, 200, 1, 1, 1])) }?.code == .malformedReport)
        let decoded = try StageHistograms(encoded: bytes)
        #expect(decoded.count(.finished) == 1)
    }

    @Test("a report's clamped count and counters near Int.max neither trap nor wrap when the coordinator adds them up")
    func sumsOfHostileReportsSaturate() throws {
        // Found by Fuzz/FuzzLoadReport, minimised: a varint of 2^63 - 1 clamped values, added to itself, trapped.
        let hostile = Data([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x74])
        let error = #expect(throws: LoadProtocolError.self) { try StageHistograms(encoded: hostile) }
        #expect(error?.code == .limitExceeded, "\(error?.description ?? "")")
        // At the bound it reads, and sums of it stay exact.
        var bounded = try StageHistograms(encoded: Data([0x80, 0x80, 0x80, 0x80, 0x80, 0x20]))
        #expect(bounded.clamped == 1 << 40)
        bounded.add(bounded)
        #expect(bounded.clamped == 1 << 41)
        var counters = LoadCounters()
        counters.started = .max
        counters.errors = 3
        let sum = counters + counters
        #expect(sum.started == .max && sum.errors == 6)
    }

    @Test("a report the plan cannot produce (interval out of range, too many in flight, negative counts) is refused before the coordinator adds it up")
    func reportIntervalsBounded() throws {
        // Found while reading the coordinator for Fuzz/FuzzLoadReport: an interval of Int.max made it emit
        // an empty row for every interval up to it (a hang, and memory without bound).
        var plan = LoadPlan()
        plan.schedule = .constant(perSecond: 100, durationNanoseconds: 5_000_000_000)
        plan.drainNanoseconds = 10_000_000_000
        #expect(plan.lastReportInterval == 17)
        plan.maximumInFlight = 2_000
        func report(_ interval: Int, inFlight: Int = 0, started: Int = 0, cpu: Int64 = 0) throws -> DriverReport {
            let json = #"{"driver":"driver-1","interval":\#(interval),"isFinal":false,"inFlight":\#(inFlight),"cpuNanoseconds":\#(cpu),"#
                + #""peakMemoryBytes":0,"histograms":"","counters":{"started":\#(started),"missedStarts":0,"completed":0,"#
                + #""rejections":0,"errors":0,"incomplete":0}}"#
            return try LoadWire.decode(DriverReport.self, Array(json.utf8))
        }
        for interval in [0, 1, 17] { try plan.checkReport(try report(interval, inFlight: 2_000, started: 5, cpu: 1_000)) }
        for interval in [-1, 18, Int.max, Int.min] {
            let error = #expect(throws: LoadProtocolError.self) { try plan.checkReport(try report(interval)) }
            #expect(error?.code == .impossibleReport, "\(error?.description ?? "")")
        }
        // A closed model keeps one lifecycle per device in flight, even beyond maximumInFlight.
        var closed = plan
        closed.model = .closed
        closed.devicesPerDriver = 5_000
        try closed.checkReport(try report(3, inFlight: 5_000))
        // Two reports of Int.max in flight for one interval trapped the coordinator's sum.
        for hostile in [try report(3, inFlight: Int.max), try report(3, inFlight: 2_001), try report(3, inFlight: -1),
                        try report(3, started: -5), try report(3, cpu: -1)] {
            let error = #expect(throws: LoadProtocolError.self) { try plan.checkReport(hostile) }
            #expect(error?.code == .impossibleReport)
        }
    }

    @Test("latencies longer than an hour are recorded at the top and counted as clamped")
    func clamping() {
        var histograms = StageHistograms()
        histograms.record(.removed, nanoseconds: 7_200_000_000_000)
        #expect(histograms.clamped == 1)
        #expect(histograms.histograms[.removed]?.max ?? 0 >= StageHistograms.highestMicroseconds - StageHistograms.highestMicroseconds / 1_000)
    }
}
