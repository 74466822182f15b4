import Foundation
@testable import StoreKitLoad
import Testing

/// A team's driver's own stages, counters and checks: their wire form, their merge, and the thresholds that name them.
struct CustomFiguresTests {
    @Test("custom stages, counters and checks survive the report's JSON and add up over drivers; a stage merges exactly")
    func wireAndMerge() throws {
        var merged = CustomFigures()
        var everything = StageHistograms()
        for driver in 0..<3 {
            var figures = CustomFigures()
            for (index, nanoseconds) in MergeTests.samples(count: 2_000, stream: "custom-\(driver)").enumerated() {
                figures.record(stage: "entitlements", nanoseconds: nanoseconds)
                everything.record(.backend, nanoseconds: nanoseconds)
                figures.check("listed", passed: index % 10 != 0)
            }
            figures.count("coins", by: 100 * (driver + 1))
            let report = DriverReport(driver: "d\(driver)", interval: 0, isFinal: true, counters: LoadCounters(), inFlight: 0, cpuNanoseconds: 0,
                                      histograms: StageHistograms().encoded(), custom: figures.wire)
            let frames = LoadWire.frames(.report, report)
            let decoded = try LoadWire.decode(DriverReport.self, frames[1])
            try merged.add(try CustomFigures(wire: try #require(decoded.custom)))
        }
        #expect(merged.counters == ["coins": 600])
        #expect(merged.checks["listed"] == CheckCounts(passed: 5_400, failed: 600))
        #expect(merged.checksFailed == 600)
        let stage = try #require(merged.stages["entitlements"])
        let all = try #require(everything.histograms[.backend])
        for percentile in [50.0, 99, 100] { #expect(stage.valueAtPercentile(percentile) == all.valueAtPercentile(percentile)) }
    }

    @Test("a report naming a built-in stage, a name with a dot, or more than 64 figures is refused; merged figures stay bounded")
    func refusals() throws {
        #expect(#expect(throws: LoadProtocolError.self) { try CustomFigures(wire: CustomFiguresWire(stages: ["removed": Data([0])], counters: nil, checks: nil)) }?.code == .malformedReport)
        #expect(#expect(throws: LoadProtocolError.self) { try CustomFigures(wire: CustomFiguresWire(stages: nil, counters: ["a.b": 1], checks: nil)) }?.code == .malformedReport)
        #expect(#expect(throws: LoadProtocolError.self) { try CustomFigures(wire: CustomFiguresWire(stages: nil, counters: nil, checks: ["x": CheckCounts(passed: -1)])) }?.code == .malformedReport)
        let many = Dictionary(uniqueKeysWithValues: (0..<65).map { ("c\($0)", 1) })
        #expect(#expect(throws: LoadProtocolError.self) { try CustomFigures(wire: CustomFiguresWire(stages: nil, counters: many, checks: nil)) }?.code == .limitExceeded)
        var merged = CustomFigures()
        try merged.add(try CustomFigures(wire: CustomFiguresWire(stages: nil, counters: Dictionary(uniqueKeysWithValues: (0..<64).map { ("a\($0)", 1) }), checks: nil)))
        #expect(#expect(throws: LoadProtocolError.self) { try merged.add(try CustomFigures(wire: CustomFiguresWire(stages: nil, counters: ["b": 1], checks: nil))) }?.code == .limitExceeded)
    }

    @Test("thresholds on a custom stage, a counter and checksFailed are judged on the custom figures; a stage that never came has no data and fails")
    func thresholds() throws {
        var figures = LoadFigures()
        var custom = CustomFigures()
        custom.record(stage: "entitlements", nanoseconds: 3_000_000)
        custom.count("coins", by: 500)
        custom.check("listed", passed: false)
        try figures.custom.add(custom)
        #expect(try Threshold(parsing: "entitlements.p99<5ms", customStages: true).passes(figures))
        #expect(try !Threshold(parsing: "entitlements.p99<2ms", customStages: true).passes(figures))
        #expect(try Threshold(parsing: "entitlements.count==1", customStages: true).passes(figures))
        #expect(try Threshold(parsing: "counters.coins>=500").passes(figures))
        #expect(try Threshold(parsing: "counters.refunds==0").passes(figures))
        #expect(try !Threshold(parsing: "checksFailed==0").passes(figures))
        #expect(try !Threshold(parsing: "entitlementz.p99<5ms", customStages: true).passes(figures))
        #expect(#expect(throws: LoadSpecificationError.self) { try Threshold(parsing: "enti tlements!.p99<5ms", customStages: true) }?.code == .malformedThreshold)
        // Without --driver a name that is no built-in stage is a misspelling.
        #expect(#expect(throws: LoadSpecificationError.self) { try Threshold(parsing: "entitlements.p99<5ms") }?.code == .malformedThreshold)
    }
}
