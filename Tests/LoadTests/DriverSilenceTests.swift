import Foundation
import Logging
@testable import StoreKitLoad
import StoreKitLive
import Testing
import ZeroMQ

/// The coordinator's bound on a driver's silence counts from the load's start: a driver that
/// takes long to set up its devices (many of them, or a slow queue) sends nothing until then.
@Suite struct DriverSilenceTests {
    /// The coordinator, run on a thread of its own, and what its run gave.
    final class Run: @unchecked Sendable {
        let coordinator: LoadCoordinator
        var result: Result<LoadCoordinator.Result, any Error>?
        init(_ coordinator: LoadCoordinator) { self.coordinator = coordinator }
    }

    @Test("a driver whose set-up outlasts the silence bound is not taken for silent once the load starts")
    func slowSetUpIsNotSilence() throws {
        let scratch = LoadRunTests.Scratch()
        let topologyPath = scratch.path("load.yaml")
        try BuiltInTopology.load.write(toFile: topologyPath, atomically: true, encoding: .utf8)
        let endpoint = "ipc://\(scratch.path("c.ipc"))"
        var options = LoadCoordinator.Options()
        options.localDrivers = 0
        options.remoteDrivers = 1
        options.listenEndpoint = endpoint
        options.showLiveView = false
        // Silent for more than 0.2 s + one 0.1 s interval fails the run.
        options.driverSilenceSeconds = 0.2
        options.plan.intervalNanoseconds = 100_000_000
        options.plan.schedule = .constant(perSecond: 1, durationNanoseconds: 100_000_000)
        let coordinator = LoadCoordinator(topology: try Topology.load(path: topologyPath), topologyPath: topologyPath,
                                          runDirectory: URL(fileURLWithPath: scratch.path("run")), executable: try LoadRunTests.executable(),
                                          options: options, logger: Logger(label: "test"))
        let outcome = Run(coordinator)
        let finished = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            outcome.result = Result { try outcome.coordinator.run() }
            finished.signal()
        }

        // The driver, played here over the load protocol (DEALER to the coordinator's ROUTER).
        let context = try ZeroMQContext()
        defer { context.terminate() }
        let dealer = try context.socket(.dealer)
        defer { dealer.close() }
        try dealer.connect(endpoint)
        func heard(_ verb: LoadWire.Verb, within seconds: Int64) throws -> Bool {
            let deadline = ContinuousClock.now + .seconds(seconds)
            while ContinuousClock.now < deadline {
                if let frames = try dealer.receive(timeout: .milliseconds(50)), LoadWire.verb(frames[0]) == verb { return true }
            }
            return false
        }
        _ = try dealer.send(LoadWire.frames(.hello, DriverHello(name: "slow", host: "test", pid: getpid())), mode: .blocking)
        #expect(try heard(.plan, within: 60), "no plan from the coordinator")
        // Setting up takes 0.6 s: twice the silence bound, with nothing sent meanwhile (what a driver does).
        let setUpEnd = ContinuousClock.now + .milliseconds(600)
        while ContinuousClock.now < setUpEnd { _ = try dealer.receive(timeout: .milliseconds(20)) }
        _ = try dealer.send(LoadWire.frames(.ready, DriverReady(name: "slow", devices: 0)), mode: .blocking)
        #expect(try heard(.start, within: 30), "no start from the coordinator")
        let report = DriverReport(driver: "slow", interval: 0, isFinal: true, counters: LoadCounters(), inFlight: 0,
                                  cpuNanoseconds: 0, histograms: StageHistograms().encoded())
        _ = try dealer.send(LoadWire.frames(.report, report), mode: .blocking)

        #expect(finished.wait(timeout: .now() + 60) == .success, "the coordinator did not finish")
        switch outcome.result {
        case .success(let result): #expect(result.aborted == nil)
        case .failure(let error): Issue.record("the load failed: \(error)")
        case nil: Issue.record("the coordinator did not finish")
        }
    }
}
