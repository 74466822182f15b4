import EventLog
import Foundation
import Testing
import StoreKitModel
import StoreKitRoles
import StoreKitRuntime
import StoreKitSimulation
@testable import StoreKitReplay

/// A recorded run in memory: the deterministic runtime over an in-memory log.
func recordInMemory(seed: UInt64, devices: Int = 4, purchases: Int = 6, observers: [ObserverBehavior] = [.downloadThenFinish, .audit],
                    configure: (inout Scenario) -> Void = { _ in }) throws -> Recording {
    var scenario = Scenario(seed: seed, devices: devices)
    scenario.apps.purchasesPerDevice = purchases
    scenario.apps.observers = observers
    configure(&scenario)
    let environment = DeterministicEnvironment.inMemory(seed: seed)
    _ = try DeterministicRuntime(scenario: scenario, environment: environment).run()
    return try Recording.storage(environment.storage)
}

/// The launches, quits and first observer attachments after a launch of each device so far, as a
/// reply's `lifecyclesBefore` counts them: written here from the definition, apart from the
/// plan's `AppLifecycleCounter`, so the tests check it.
struct LifecycleTally {
    private(set) var counts: [String: Int] = [:]
    private var launchedWithoutObservers: Set<String> = []

    mutating func add(_ event: Event) {
        switch event {
        case .appLaunched(let device):
            counts[device, default: 0] += 1
            launchedWithoutObservers.insert(device)
        case .appTerminated(let device):
            counts[device, default: 0] += 1
            launchedWithoutObservers.remove(device)
        case .observerAttached(let device, _) where launchedWithoutObservers.remove(device) != nil:
            // A launch's first attachment: from then on its observers hear the replies.
            counts[device, default: 0] += 1
        default:
            break
        }
    }

    subscript(device: String) -> Int { counts[device] ?? 0 }
}

/// Every record of a storage: (sequence, timestamp, payload).
func records(_ storage: LogStorage) throws -> [(UInt64, Int64, [UInt8])] {
    var all: [(UInt64, Int64, [UInt8])] = []
    try storage.forEachRecord(from: 1) { all.append(($0, $1, Array($2))) }
    return all
}

func recordedEvents(_ recording: Recording) throws -> [RecordedEvent] {
    var events: [RecordedEvent] = []
    try recording.forEachRecord { events.append(try LogProjection.decode(sequence: $0, timestamp: $1, payload: $2)) }
    return events
}

/// A clock that moves only when waited on: it lands `lag` after every deadline.
final class SteppingClock: ReplayClock {
    var time: Int64 = 5_000_000_000
    var deadlines: [Int64] = []
    let lag: Int64
    init(lag: Int64) { self.lag = lag }
    func nanoseconds() -> Int64 { time }
    func wait(until deadline: Int64) {
        deadlines.append(deadline)
        time = max(time, deadline + lag)
    }
}

@Suite struct ReplayTests {
    @Test("An unchanged deterministic recording replays byte for byte, for every built-in observer behaviour",
          arguments: ObserverBehavior.allCases)
    func unchangedReplayIsIdentical(behavior: ObserverBehavior) throws {
        for seed in UInt64(1)...6 {
            let observers: [ObserverBehavior] = behavior == .audit ? [.audit] : [behavior, .audit]
            let recording = try recordInMemory(seed: seed, observers: observers)
            let storage = MemoryLogStorage()
            let result = try ReplaySession(recording: recording, storage: storage).run()
            #expect(result.divergences == 0, "seed \(seed): \(String(describing: result.firstDivergence))")
            #expect(result.identical, "seed \(seed)")
            let original = try records(try #require(try recordingStorage(recording)))
            let replayed = try records(storage)
            #expect(replayed.count == original.count)
            #expect(zip(replayed, original).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 && $0.2 == $1.2 })
        }
    }

    @Test("Recordings with duplicate deliveries, lost events and crashed roles replay byte for byte")
    func faultyNetworkReplaysIdentically() throws {
        for seed in UInt64(20)...40 {
            let recording = try recordInMemory(seed: seed, devices: 3, purchases: 8) { scenario in
                scenario.apps.relaunchProbability = 0.2
                scenario.network.duplicateProbability = 0.1
                scenario.network.lossProbability = 0.05
                scenario.network.crashProbability = 0.002
            }
            let result = try ReplaySession(recording: recording).run()
            #expect(result.identical && result.divergences == 0, "seed \(seed): \(String(describing: result.firstDivergence))")
        }
    }

    /// Seeds whose recorded apps heard an event late (lost, caught up after a quit) and so acted on it
    /// only after relaunching, or never: the recorded observers' commands are inputs, so when an app
    /// heard what is not the replay's question.
    @Test("Faulty-network recordings whose apps heard events late replay byte for byte",
          arguments: [UInt64(77), 112, 135, 138, 187, 199, 200, 231, 279, 364, 386, 387])
    func lateHearingReplaysIdentically(seed: UInt64) throws {
        let recording = try recordInMemory(seed: seed, devices: 3, purchases: 8) { scenario in
            scenario.apps.relaunchProbability = 0.2
            scenario.network.duplicateProbability = 0.1
            scenario.network.lossProbability = 0.05
            scenario.network.crashProbability = 0.002
        }
        let result = try ReplaySession(recording: recording).run()
        #expect(result.identical && result.divergences == 0, "seed \(seed): \(String(describing: result.firstDivergence))")
    }

    @Test("Another observer diverges where it first behaves otherwise, not at its new name, with the device's context")
    func changedObserverDiverges() throws {
        let recording = try recordInMemory(seed: 3)
        let result = try ReplaySession(recording: recording, options: { var options = ReplayOptions(); options.observers = [.deliverThenFinish, .audit]; return options }()).run()
        #expect(result.divergences > 0)
        #expect(!result.identical)
        let divergence = try #require(result.firstDivergence)
        for event in [divergence.recorded?.event, divergence.replayed?.event] {
            if case .observerAttached = event { Issue.record("an observer's new name diverged: \(divergence)") }
        }
        let context = try #require(divergence.context)
        #expect(context.device == divergence.device)
        #expect(context.state?.isRunning == true)
        #expect(context.state?.observers == ["deliverThenFinish-1", "audit-2"])
        // One observer fewer is a behaviour: the recorded second attachment is missing.
        let fewer = try ReplaySession(recording: recording, options: { var options = ReplayOptions(); options.observers = [.deliverThenFinish]; return options }()).run()
        let missing = try #require(fewer.firstDivergence)
        #expect(missing.kind == .missing)
        guard case .observerAttached(_, "audit-2") = missing.recorded?.event else {
            Issue.record("recorded \(String(describing: missing.recorded))")
            return
        }
    }

    @Test("A missing observer command is reported where the recording has it")
    func missingCommand() throws {
        // Audit never finishes: the recorded finishes are not sent again.
        let recording = try recordInMemory(seed: 4, observers: [.audit, .deliverThenFinish])
        var options = ReplayOptions()
        options.observers = [.audit, .audit]
        let result = try ReplaySession(recording: recording, options: options).run()
        #expect(result.missing > 0)
        #expect(result.firstDivergence != nil)
    }

    @Test("A slice (--from/--to) replays cleanly; its history is rebuilt, not compared")
    func sliceReplaysCleanly() throws {
        let recording = try recordInMemory(seed: 5, devices: 4, purchases: 8)
        let total = try recordedEvents(recording).count
        var options = ReplayOptions()
        options.from = UInt64(total / 3)
        options.to = UInt64(2 * total / 3)
        let storage = MemoryLogStorage()
        let result = try ReplaySession(recording: recording, options: options, storage: storage).run()
        #expect(result.divergences == 0, "\(String(describing: result.firstDivergence))")
        #expect(result.comparedEvents > 0 && result.comparedEvents < total / 2)
        // History and slice together are the recording's first records, byte for byte.
        #expect(result.identical)
        let replayed = try records(storage)
        #expect(replayed.count >= Int(options.to) - 1 && replayed.count < total)
    }

    @Test("A subset of devices (--devices) replays cleanly")
    func devicesReplayCleanly() throws {
        let recording = try recordInMemory(seed: 6, devices: 4, purchases: 6)
        var options = ReplayOptions()
        options.devices = ["device-0002", "device-0003"]
        let storage = MemoryLogStorage()
        let result = try ReplaySession(recording: recording, options: options, storage: storage).run()
        #expect(result.divergences == 0, "\(String(describing: result.firstDivergence))")
        let devices = Set(try records(storage).compactMap { try EventCodec.decodeEvent($0.2).event.device })
        #expect(devices == ["device-0002", "device-0003"])
    }

    @Test("--loop copies replay cleanly side by side and one after another, with names rewritten per copy",
          arguments: ReplayOptions.LoopLayout.allCases)
    func loopReplaysCleanly(layout: ReplayOptions.LoopLayout) throws {
        let recording = try recordInMemory(seed: 7, devices: 2, purchases: 5)
        let total = try recordedEvents(recording).count
        var options = ReplayOptions()
        options.loop = 3
        options.loopLayout = layout
        let storage = MemoryLogStorage()
        let result = try ReplaySession(recording: recording, options: options, storage: storage).run()
        #expect(result.divergences == 0, "\(String(describing: result.firstDivergence))")
        #expect(result.events == 3 * (total - 1) + 1)
        let events = try records(storage).map { try EventCodec.decodeEvent($0.2).event }
        let devices = Set(events.compactMap(\.device))
        #expect(devices == ["device-0001", "device-0002", "device-0001~2", "device-0002~2", "device-0001~3", "device-0002~3"])
        let accounts = Set(events.compactMap { if case .deviceRegistered(_, let account) = $0 { account } else { nil } })
        #expect(accounts == ["account-0001", "account-0001~2", "account-0001~3"])
        var timestamps = try records(storage).map(\.1)
        #expect(timestamps == timestamps.sorted())
        if layout == .oneAfterAnother {
            timestamps.removeFirst()
            let recordedEnd = try records(try #require(try recordingStorage(recording))).last!.1
            #expect(timestamps.last! > 2 * recordedEnd)
        }
    }

    @Test("A timed replay schedules every command against one absolute start; lateness is measured, not accumulated")
    func timedReplayUsesAbsoluteSchedule() throws {
        let recording = try recordInMemory(seed: 8, devices: 2, purchases: 4)
        let events = try recordedEvents(recording)
        var options = ReplayOptions()
        options.speed = 4
        let clock = SteppingClock(lag: 700)
        let result = try ReplaySession(recording: recording, options: options, clock: clock).run()
        #expect(result.divergences == 0)
        let start = try #require(clock.deadlines.first)
        // Each deadline is start + recorded time / speed, whatever the lateness before it.
        let expected = Set(events.map { start + Int64(Double($0.timestamp - events[0].timestamp) / 4) })
        #expect(clock.deadlines.allSatisfy { expected.contains($0) })
        #expect(clock.deadlines == clock.deadlines.sorted())
        let lateness = try #require(result.lateness)
        #expect(lateness.maximumNanoseconds <= 700)
        #expect(lateness.samples == result.commands - (result.commands - clock.deadlines.count))
    }

    @Test("Bad options are refused with one line saying what to do")
    func badOptions() throws {
        let recording = try recordInMemory(seed: 9, devices: 1, purchases: 1)
        var options = ReplayOptions()
        options.loop = 0
        #expect(#expect(throws: ReplayInputError.self) { try ReplaySession(recording: recording, options: options) }?.code == .invalidOption)
        options = ReplayOptions()
        options.from = 10
        options.to = 5
        #expect(#expect(throws: ReplayInputError.self) { try ReplaySession(recording: recording, options: options) }?.code == .invalidOption)
        options = ReplayOptions()
        options.devices = ["device-9999"]
        #expect(#expect(throws: ReplayInputError.self) { try ReplaySession(recording: recording, options: options) }?.code == .invalidOption)
        options = ReplayOptions()
        options.speed = 0
        #expect(#expect(throws: ReplayInputError.self) { try ReplaySession(recording: recording, options: options) }?.code == .invalidOption)
    }

    @Test("A download request that named a download already under way still finds its recorded place")
    func downloadSubsetMatches() {
        let key = TransactionKey(device: "d", number: 1)
        let first = DownloadKey(transaction: key, index: 0)
        let second = DownloadKey(transaction: key, index: 1)
        #expect(ReplaySession.matches(.startDownloads([first, second]), .startDownloads([second])))
        #expect(!ReplaySession.matches(.startDownloads([first]), .startDownloads([second])))
        #expect(!ReplaySession.matches(.startDownloads([first]), .pauseDownloads([first])))
        #expect(ReplaySession.matches(.finishTransaction(key), .finishTransaction(key)))
    }

    @Test("Loop renaming rewrites whole names only")
    func renaming() {
        var renaming = LoopRenaming(copy: 2)
        renaming.learn(.deviceRegistered(device: "device-0001", account: "account-0001"))
        #expect(renaming.rename("device-0001") == "device-0001~2")
        #expect(renaming.rename("device-0001.3") == "device-0001~2.3")
        #expect(renaming.rename("content/device-0001/3/pack-1.0") == "content/device-0001~2/3/pack-1.0")
        #expect(renaming.rename("device 'device-0001' is not registered") == "device 'device-0001~2' is not registered")
        #expect(renaming.rename("device-00012") == "device-00012")
        #expect(renaming.rename("audit-2") == "audit-2")
    }
}

/// The storage behind an in-memory recording, for byte comparisons.
func recordingStorage(_ recording: Recording) throws -> LogStorage? {
    let storage = MemoryLogStorage()
    var unit: [[UInt8]] = []
    var time: Int64 = 0
    try recording.forEachRecord { _, timestamp, payload in
        unit = [Array(payload)]
        time = timestamp
        _ = try storage.appendUnit(unit, timestamp: time)
    }
    return storage
}

/// Memory bounded by the projection and what is pending, not the log: nothing is read ahead, and what
/// the session holds does not grow with the recording's length (asserted on what it holds, not on the
/// process's memory).
@Suite struct ReplayRetentionTests {
    @Test("A four times longer recording is replayed, unchanged and what-if, holding no more: only the commands sent anew and not paired yet, the held reports and the timers")
    func retentionDoesNotGrowWithTheRecording() throws {
        var retained: [ReplaySession.Retention] = []
        var events: [Int] = []
        for purchases in [20, 80] {
            let recording = try recordInMemory(seed: 9, devices: 4, purchases: purchases)
            let unchanged = try ReplaySession(recording: recording)
            let result = try unchanged.run()
            #expect(result.identical && result.divergences == 0)
            #expect(unchanged.retention == ReplaySession.Retention(), "an unchanged replay holds nothing but the projection")
            var options = ReplayOptions()
            options.observers = [.finishBeforeDownloads, .audit]
            let whatIf = try ReplaySession(recording: recording, options: options)
            events.append(try whatIf.run().events)
            retained.append(whatIf.retention)
        }
        #expect(events[1] > 3 * events[0])
        for retention in retained {
            // Per device: what its observers sent since its last recorded input (a handful), and the
            // downloads of one transaction.
            #expect(retention.pendingCommands > 0)
            #expect(retention.pendingCommands <= 4 * 16)
            #expect(retention.heldReports <= 4 * 64)
            #expect(retention.timers <= 4 * 16)
        }
    }
}
