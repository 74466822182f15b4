import Foundation
import StoreKitLoad
import StoreKitModel
import Testing

/// Durations, stages, arrival times and thresholds as users write them.
struct SpecificationTests {
    @Test("durations read as people write them", arguments: [
        ("500ms", Int64(500_000_000)), ("30s", 30_000_000_000), ("2m", 120_000_000_000), ("1h", 3_600_000_000_000),
        ("1.5s", 1_500_000_000), ("1m30s", 90_000_000_000), ("250us", 250_000), ("30", 30_000_000_000), ("0.5", 500_000_000),
    ])
    func durations(text: String, nanoseconds: Int64) throws {
        #expect(try DurationText.nanoseconds(text) == nanoseconds)
    }

    @Test("a malformed duration is one clear line", arguments: ["", "s", "5 minutes", "1x", "-3s", "-3", "999999h"])
    func badDurations(text: String) {
        do {
            _ = try DurationText.nanoseconds(text)
            Issue.record("'\(text)' was accepted")
        } catch {
            #expect(!error.description.contains("\n") && error.description.contains("'\(text)'"))
        }
    }

    @Test("a constant rate starts arrival k at k / rate")
    func constantRate() {
        let schedule = ArrivalSchedule.constant(perSecond: 1_000, durationNanoseconds: 2_000_000_000)
        #expect(schedule.intendedStart(ofArrival: 0) == 0)
        #expect(schedule.intendedStart(ofArrival: 1) == 1_000_000)
        #expect(schedule.intendedStart(ofArrival: 1_999) == 1_999_000_000)
        #expect(schedule.intendedStart(ofArrival: 2_000) == nil)
    }

    @Test("stages ramp linearly and the arrivals in each stage are its integral")
    func stagesRamp() throws {
        let schedule = try ArrivalSchedule.parse(stages: "10s:100/s,20s:100,10s:0")
        #expect(schedule.durationNanoseconds == 40_000_000_000)
        #expect(abs(schedule.totalArrivals - (500 + 2_000 + 500)) < 1e-6)
        #expect(abs(schedule.rate(at: 5_000_000_000) - 50) < 1e-9)
        // Arrivals due by each instant match the integral of the rate; every intended start is in order.
        var previous: Int64 = -1
        var count = 0
        while let time = schedule.intendedStart(ofArrival: count) {
            #expect(time >= previous)
            #expect(abs(schedule.expectedArrivals(through: time) - Double(count)) < 0.01)
            previous = time
            count += 1
        }
        #expect(count == 3_000)
    }

    @Test("drivers that take every Nth arrival together follow the schedule exactly")
    func splitOverDrivers() {
        let schedule = ArrivalSchedule.constant(perSecond: 997, durationNanoseconds: 1_000_000_000)
        var union: [Int64] = []
        for driver in 0..<3 {
            var arrival = driver
            while let time = schedule.intendedStart(ofArrival: arrival) {
                union.append(time)
                arrival += 3
            }
        }
        var all: [Int64] = []
        while let time = schedule.intendedStart(ofArrival: all.count) { all.append(time) }
        #expect(union.sorted() == all)
    }

    @Test("bad stage lists say what to write", arguments: ["30s", "30s:fast", "0s:10", "30s:10,", "30s:-5"])
    func badStages(text: String) {
        do {
            _ = try ArrivalSchedule.parse(stages: text)
            Issue.record("'\(text)' was accepted")
        } catch {
            #expect(!error.description.contains("\n"))
            #expect([.malformedStages, .malformedRate].contains(error.code), "\(error)")
        }
    }

    @Test("thresholds parse and judge figures", arguments: [
        ("finished.p99<50ms", true), ("finished.p99<5ms", false), ("removed.max<=1s", true), ("violations==0", true),
        ("rate>=1000", false), ("rate>=10/s", true), ("rate<=50", true), ("rate>55", false), ("missedStarts==0", true), ("added.count>100", false), ("restored.p50<1s", false),
    ])
    func thresholds(expression: String, passes: Bool) throws {
        var figures = LoadFigures()
        for index in 0..<100 {
            figures.stages.record(.finished, nanoseconds: Int64(index + 1) * 100_000)  // 0.1 … 10 ms
            figures.stages.record(.removed, nanoseconds: 20_000_000)
            figures.stages.record(.added, nanoseconds: 1_000_000)
        }
        figures.counters.completed = 600
        // `rate` counts only what completed while starts were offered, not the drain's 100.
        figures.counters.completedDuringLoad = 500
        figures.loadSeconds = 10
        figures.violations = 0
        let threshold = try Threshold(parsing: expression)
        #expect(threshold.passes(figures) == passes)
    }

    @Test("a bad threshold is one line naming what is allowed", arguments: ["finished.p99", "finshed.p99<5ms", "finished.p42<5ms", "speed>3", "rate>=lots", "finished.p99<5 parsecs"])
    func badThresholds(expression: String) {
        do {
            _ = try Threshold(parsing: expression)
            Issue.record("'\(expression)' was accepted")
        } catch {
            #expect(!error.description.contains("\n"))
            #expect(error.code == .malformedThreshold, "\(error)")
        }
    }

    @Test("the topology's load section is read, and the command line wins")
    func topologySection() throws {
        let settings = try LoadSettings.fromTopology(path: LoadRunTests.repositoryRoot.appendingPathComponent("topology/load.yaml").path)
        #expect(settings.rate == "500/s")
        #expect(settings.thresholds == ["violations==0"])
        var commandLine = LoadSettings()
        commandLine.stages = "1s:10,1s:0"
        commandLine.thresholds = ["rate>1"]
        let options = try settings.overridden(by: commandLine).resolve(seed: 3)
        #expect(options.plan.schedule.durationNanoseconds == 2_000_000_000)
        // errors==0 and incomplete==0 join them: no threshold names either (no silent pass).
        #expect(options.thresholds.map(\.expression) == ["violations==0", "rate>1", "errors==0", "incomplete==0"])
        var closed = LoadSettings()
        closed.model = .closed
        closed.devices = 7
        #expect(try settings.overridden(by: closed).resolve(seed: 3).plan.model == .closed)
    }
}
