import Foundation
import StoreKitModel
import StoreKitRoles
import StoreKitRuntime

/// Replays a recording through the one queue engine and compares the new log with it,
/// command by command.
///
/// The recording's inputs are its units' commands, each taken whole from the unit's input record
/// (rebuilt from its events in a log of format 2). An unchanged replay hands every one of them to
/// the engine at its recorded place, time and id, so the engine re-decides the whole run and an
/// unchanged recording replays byte for byte. A what-if replay (other observers) replaces only the
/// observers: the users', store and downloader commands are the recording's while the queue still
/// accepts them; the observers under test hear every event of their device as it is appended and
/// what they send is handled at once, where it is sent; the recorded observers' commands are not
/// replayed. Pairing a command sent anew with a recorded one only names the divergences (see
/// `SentAnew`); it never moves a command. The recording is read once, unit by unit, and nothing is
/// read ahead: the session holds the projection, the apps and what is pending.
public final class ReplaySession {
    /// Events of the device kept for the context of the first divergence.
    public static let contextEvents = 10

    public let recording: Recording
    public let options: ReplayOptions
    /// The scenario replayed: the recorded one, with `--observers` applied.
    public let scenario: Scenario
    /// The first record of the replayed log.
    public let replayHeader: RunHeader
    private let storage: LogStorage
    private let clock: ReplayClock?
    private let engine: QueueEngine
    /// What-if replays only: the apps with the observers under test, and what they sent and set.
    private let apps: ReplayApps?
    private var appTransport = ReplayTransport()
    /// The origin of commands the observers under test send.
    private let extraOrigin: String
    /// A what-if replay: the observers under test are not the recorded ones (docs/replay.md, "What-if replays").
    private let whatIf: Bool
    /// What-if replays: the downloader that transfers what the observers under test start and the
    /// recording did not (its reports decided anew, as `simulate`'s downloader decides them), and its
    /// timers (due time, order set, token).
    private let downloader: RoleHost?
    private var downloaderTransport = ReplayTransport()
    /// Downloads under way that the downloader answers for (ended ones leave the set).
    private var downloadsAnew: Set<DownloadKey> = []
    /// Downloads the observers under test started with a command not paired yet, and the downloader's
    /// reports on them held until it is: paired, the recording's reports apply; unpaired, they are handled.
    private var heldReports: [DownloadKey: [CommandBody]] = [:]
    private var downloaderTimers: [(due: Int64, order: Int, token: TimerToken)] = []
    private var downloaderTimersSet = 0
    /// Most downloader timers fired after the recording's end (each download ends after a bounded number of ticks).
    private static let maximumTrailingTimers = 1_000_000

    /// A command the observers under test sent, handled where it was sent, and waiting to be paired with
    /// a recorded observer command of its device before the device's next recorded input (user, store,
    /// downloader): the first recorded one that makes the same request stands for it (an attachment under
    /// another observer's name is the same). Unpaired at the device's next input, it is `extra` (if it
    /// changed the log); a recorded observer command that finds none is `missing`.
    private struct SentAnew {
        var body: CommandBody
        var records: [RecordedEvent]
        var handledBefore: Int
        var startedDownloads: [DownloadKey]
    }

    /// Per device, commands sent anew since its last recorded input and not paired yet.
    private var sentAnew: [String: [SentAnew]] = [:]
    /// The recording's inputs are spent: a command sent anew now has no recorded command to stand for.
    private var inputsSpent = false
    /// The slice, read once (`options` is a struct of arrays and sets: reading a field of it
    /// for every command costs a copy).
    private let sliceFrom: UInt64
    private let sliceTo: UInt64
    private let deviceFilter: Set<String>?
    private let speed: Double?
    private let maximumReactionCommands: Int
    private var lastIngestedTimestamp: Int64 = 0
    private var now: Int64 = 0
    private var handled = 0
    private var extraNumber: UInt64 = 0
    private var reactions: [CommandBody] = []
    private var result = ReplayResult()
    private var verbatim = true
    private var recordedInRange = 0
    private var firstNeedsReplayed = false
    private var latenessSamples: [Int64] = []
    private var timedStart: (monotonic: Int64, recorded: Int64)?
    private var renamings: [LoopRenaming] = []
    private var timeOffset: Int64 = 0
    // A context pass stops before this many handled commands and keeps the device's events.
    private var stopAfterHandled: Int?
    private var contextDevice: String?
    private var contextRing: [RecordedEvent] = []

    /// The most the session held at once of what could grow with the recording's length (`ReplayRetentionTests`).
    public struct Retention: Sendable, Equatable {
        /// Commands sent anew waiting to be paired, over all devices (what-if replays).
        public var pendingCommands = 0
        /// Downloader reports held for downloads whose start is not paired yet (what-if replays).
        public var heldReports = 0
        /// Downloader and app-work timers set and not fired (what-if replays).
        public var timers = 0
    }

    /// What this session held at most (see `Retention`).
    public private(set) var retention = Retention()
    private var replayedUnits = 0

    private struct StopReading: Error {}
    private struct StopForContext: Error {}

    /// `storage` receives the replayed log (by default it is only counted, never kept).
    public init(recording: Recording, options: ReplayOptions = ReplayOptions(), storage: LogStorage = DiscardingLogStorage(),
                clock: ReplayClock? = nil) throws {
        try options.validate()
        self.recording = recording
        self.options = options
        self.storage = storage
        self.clock = clock
        sliceFrom = options.from
        sliceTo = options.to
        deviceFilter = options.devices
        speed = options.speed
        maximumReactionCommands = options.maximumReactionCommands
        let recorded: Scenario
        do {
            recorded = try Scenario(header: recording.header)
        } catch {
            throw ReplayInputError("\(recording.location): \(error)")
        }
        var scenario = recorded
        var header = recording.header
        if let recordedApp = recorded.apps.app, options.app == nil, options.observers == nil {
            throw ReplayInputError("\(recording.location) ran the app '\(recordedApp)': replay it with the executable that registers that app (SKSim.main(apps:)), or give built-in --observers", code: .appNotRegistered)
        }
        if let app = options.app {
            scenario.apps.app = app.name
            scenario.apps.observers = []
        } else if let observers = options.observers, observers != recorded.apps.observers || recorded.apps.app != nil {
            scenario.apps.observers = observers
            scenario.apps.app = nil
        }
        if scenario.apps.app != recorded.apps.app || scenario.apps.observers != recorded.apps.observers {
            header.scenario = scenario.header(runtime: header.runtime, startedAtUnixNanoseconds: header.startedAtUnixNanoseconds).scenario
        }
        self.scenario = scenario
        self.replayHeader = header
        extraOrigin = "replay." + String(fnv1a64(EventCodec.encode(.runStarted(recording.header), commandID: nil)) % 0xFFFF_FFFF, radix: 16)
        engine = try QueueEngine(catalog: scenario.catalog, storage: storage)
        // A log that keeps nothing needs no input records encoded (replay at full speed).
        engine.recordsInputs = !(storage is DiscardingLogStorage)
        guard engine.projection.lastSequence == 0 else {
            throw ReplayInputError("the replay's output log already holds records; give a new --out directory", code: .outputNotEmpty)
        }
        // An app's commands are always decided anew: the timing of its asynchronous work is not in the log.
        whatIf = options.app != nil || scenario.apps.observers != recorded.apps.observers || scenario.apps.app != recorded.apps.app
        downloader = whatIf ? RoleHost(role: DownloaderRole(name: "downloader", content: VirtualContentStorage(), behavior: scenario.downloader,
                                                            choices: SeededChoices(seed: scenario.seed).stream(ChoiceStream.downloader))) : nil
        // A what-if replay's observers draw from each device's observer stream, as `simulate`'s do. An unchanged
        // replay runs no app: every command, the recorded observers' too, is a recorded input.
        apps = whatIf ? ReplayApps(scenario: scenario, choices: SeededChoices(seed: scenario.seed), appLaunch: options.app?.launch) : nil
        if let devices = options.devices {
            let known = Set(recorded.deviceNames)
            if let unknown = devices.sorted().first(where: { !known.contains($0) }) {
                throw ReplayInputError("--devices names '\(unknown)', which the recording does not have; it has \(recorded.deviceNames.first!)…\(recorded.deviceNames.last!)", code: .invalidOption)
            }
        }
    }

    /// Replays the whole recording (or the slice), then compares and reports.
    public func run() throws -> ReplayResult {
        let wall = SystemReplayClock()
        let started = wall.nanoseconds()
        do {
            defer { clock?.finish() }
            try replay()
        }
        result.seconds = Double(wall.nanoseconds() - started) / 1e9
        result.header = recording.header
        result.observers = scenario.apps.observers
        result.app = scenario.apps.app
        result.violations = engine.checker.violations
        result.violationCount = engine.checker.violationCount
        result.lateness = Lateness(latenessSamples)
        result.identical = verbatim && result.divergences == 0 && result.events == recordedInRange && !result.stoppedRunawayObserver
        try storage.close()
        if var first = result.firstDivergence {
            var contextOptions = options
            contextOptions.speed = nil
            let pass = try ReplaySession(recording: recording, options: contextOptions)
            first.context = try pass.context(before: first.handledBefore, device: first.device)
            result.firstDivergence = first
        }
        return result
    }

    /// Replays again, silently, up to `handledBefore` commands, and returns the device's
    /// last events and state there.
    private func context(before handledBefore: Int, device: String) throws -> DivergenceContext {
        stopAfterHandled = handledBefore
        contextDevice = device
        do {
            try replay()
        } catch is StopForContext {}
        return DivergenceContext(device: device, precedingEvents: contextRing, state: engine.projection.device(device))
    }

    private func replay() throws {
        let passes = options.loopLayout == .oneAfterAnother ? options.loop : 1
        for pass in 1...passes {
            renamings = options.loopLayout == .oneAfterAnother ? [LoopRenaming(copy: pass)] : (1...options.loop).map { LoopRenaming(copy: $0) }
            if pass > 1 { timeOffset = lastIngestedTimestamp + 1_000_000 }
            do {
                // An unchanged replay of the recording as it is compares bytes: its events need no decoding.
                let decoding = apps != nil || options.loop > 1
                let warning = try recording.forEachUnit(decodingEvents: decoding) { unit in try ingest(unit, firstPass: pass == 1) }
                if let warning { result.warning = warning }
            } catch is StopReading {}
        }
        guard let apps, stopAfterHandled == nil else { return }
        // The recording's inputs are spent: what the observers under test sent since each device's last
        // input has nothing more to pair with, and what they send from now on has nothing either.
        inputsSpent = true
        for device in sentAnew.keys.sorted() { closeSegment(of: device, before: nil) }
        try handleHeldReports()
        // The simulator's user steps on until late observers attach: steps that send nothing, so the
        // recording does not show them. They attach once its inputs are spent.
        for device in apps.devicesWithLateObservers() {
            apps.act(on: device, over: &appTransport) { $0.attachLateObservers() }
            takeAppEffects(compared: true)
        }
        try handleReactions(compared: true)
        try fireDownloaderTimers(through: .max)
        noteRetention()
    }

    private func ingest(_ unit: RecordedUnit, firstPass: Bool) throws {
        if unit.source == .header {
            guard firstPass else { return }
            var header = unit
            if replayHeader != recording.header {
                header.isVerbatim = false
                header.events = [RecordedEvent(sequence: 1, timestamp: unit.timestamp, commandID: nil, event: .runStarted(replayHeader))]
                header.payloads = [EventCodec.encode(.runStarted(replayHeader), commandID: nil)]
            }
            try replayUnit(header)
            return
        }
        if let deviceFilter, !deviceFilter.contains(unit.device) { return }
        // Nothing is read ahead: past the slice, nothing is left to replay.
        if unit.sequence > sliceTo { throw StopReading() }
        if renamings.count == 1 && renamings[0].copy == 1 && timeOffset == 0 {
            try replayUnit(unit) // the recording as it is: nothing to rename
        } else {
            for index in renamings.indices {
                for recorded in unit.events { renamings[index].learn(recorded.event) }
                try replayUnit(renamings[index].rename(unit, timeOffset: timeOffset))
            }
        }
    }

    private func noteRetention() {
        retention.pendingCommands = max(retention.pendingCommands, sentAnew.values.reduce(0) { $0 + $1.count })
        retention.heldReports = max(retention.heldReports, heldReports.values.reduce(0) { $0 + $1.count })
        retention.timers = max(retention.timers, downloaderTimers.count)
    }

    private func replayUnit(_ unit: RecordedUnit) throws {
        lastIngestedTimestamp = unit.timestamp
        replayedUnits += 1
        if whatIf, replayedUnits % 256 == 0 { noteRetention() }
        let compared = unit.sequence >= sliceFrom
        if compared { waitForSchedule(unit.timestamp) }
        if downloader != nil, compared { try fireDownloaderTimers(through: unit.timestamp) }
        now = unit.timestamp
        guard let apps else {
            // An unchanged replay: every recorded command is an input.
            if unit.source == .header {
                try replayHeaderUnit(unit, compared: compared)
            } else {
                try handleRecorded(unit.body!, unit, compared: compared)
            }
            return
        }
        switch unit.source {
        case .header:
            try replayHeaderUnit(unit, compared: compared)
        case .observer where compared:
            // The recorded observers' command: the observers under test decided anew.
            pair(unit)
            return
        case .observer:
            // Before the slice the recording is the truth, its observers' commands too.
            if case .attachObserver(let device, let observer) = unit.body! {
                apps.act(on: device, over: &appTransport) { _ = $0.attachLate(named: observer) }
                takeAppEffects(compared: false)
            }
            try handleRecorded(unit.body!, unit, compared: false)
        case .user, .store, .downloader:
            let body = unit.body!
            if compared {
                closeSegment(of: unit.device, before: unit)
                try handleHeldReports()
                if unit.source == .downloader, let key = Self.download(of: body), downloadsAnew.contains(key) || heldReports[key] != nil {
                    return noteNoLongerApplies(unit)
                }
                guard stillApplies(unit) else { return noteNoLongerApplies(unit) }
                // Late observers attach at the user's step their launch drew, before the step's action, as
                // the simulator's app attaches them (the recorded attachments are the recorded observers').
                if Self.isUserStep(body) {
                    apps.act(on: body.device, over: &appTransport) { $0.userStepped() }
                    takeAppEffects(compared: compared)
                }
            }
            // A quit ends the launch before the queue hears it; a launch runs the app's code after.
            if case .terminateApp = body { apps.act(on: body.device, over: &appTransport) { $0.terminate() } }
            try handleRecorded(body, unit, compared: compared)
            if case .launchApp = body { apps.act(on: body.device, over: &appTransport) { $0.runLaunchCode() } }
            takeAppEffects(compared: compared)
        }
        try handleReactions(compared: compared)
    }

    private func replayHeaderUnit(_ unit: RecordedUnit, compared: Bool) throws {
        let records = try engine.start(replayHeader)
        // The header is compared as a record; the rest of an unchanged replay where the engine encoded it (`handleUnchanged`).
        engine.keepsPayloads = whatIf
        result.events += records.count
        if compared { result.comparedEvents += 1 }
        check(records, against: unit, compared: compared)
    }

    /// Keeps the downloader's timers; its reports on downloads decided anew are handled where they are
    /// made, and those on downloads whose start is not paired yet are held.
    private func takeDownloaderEffects() {
        let (sent, timers) = downloaderTransport.take()
        for timer in timers { setTimer(timer.delay, timer.token) }
        for body in sent {
            guard let key = Self.download(of: body) else { continue }
            if downloadsAnew.contains(key) {
                downloaderReports.append(body)
            } else if heldReports[key] != nil {
                heldReports[key]!.append(body)
            }
        }
    }

    /// A timer of the downloader or an app's work, due `delay` from now (the order set breaks ties).
    private func setTimer(_ delay: Int64, _ token: TimerToken) {
        downloaderTimersSet += 1
        downloaderTimers.append((now + max(0, delay), downloaderTimersSet, token))
    }

    private var downloaderReports: [CommandBody] = []

    /// Fires the downloader's timers due by `time`, in due order, each at its own time, and handles the
    /// reports they make and what the observers answer.
    private func fireDownloaderTimers(through time: Int64) throws {
        guard let downloader, let apps else { return }
        var fired = 0
        while let next = downloaderTimers.indices.min(by: { (downloaderTimers[$0].due, downloaderTimers[$0].order) < (downloaderTimers[$1].due, downloaderTimers[$1].order) }),
              downloaderTimers[next].due <= time {
            fired += 1
            if time == .max && fired > Self.maximumTrailingTimers { break }
            let timer = downloaderTimers.remove(at: next)
            now = max(now, timer.due)
            if case .appWork(let device, _) = timer.token {
                // The app's own asynchronous work completes (a server's reply): its code runs, and what it sends is handled.
                appTransport.now = now
                apps.fire(timer.token, device: device, over: &appTransport)
                takeAppEffects(compared: true)
                try handleReactions(compared: true)
                continue
            }
            downloaderTransport.now = now
            downloader.fire(timer.token, over: &downloaderTransport)
            takeDownloaderEffects()
            try handleDownloaderReports()
        }
    }

    private func handleDownloaderReports() throws {
        while !downloaderReports.isEmpty {
            let body = downloaderReports.removeFirst()
            extraNumber += 1
            let records = try handle(Command(id: CommandID(origin: extraOrigin, number: extraNumber), body: body))
            deliver(records, compared: true)
            try handleReactions(compared: true)
        }
    }

    /// Reports held for downloads now decided anew are handled, in the order they were made.
    private func handleHeldReports() throws {
        for key in heldReports.keys.sorted(by: { ($0.transaction.device, $0.transaction.number, $0.index) < ($1.transaction.device, $1.transaction.number, $1.index) })
        where downloadsAnew.contains(key) {
            downloaderReports.append(contentsOf: heldReports.removeValue(forKey: key)!)
        }
        try handleDownloaderReports()
    }

    /// Whether the queue still accepts a recorded user's, store or downloader command in a what-if
    /// replay (a report on a download the observers under test cancelled does not), or refused it in
    /// the recording too.
    private func stillApplies(_ unit: RecordedUnit) -> Bool {
        if case .commandRejected = unit.events.first?.event { return true }
        guard case .reject = engine.projection.decide(Command(id: unit.commandID!, body: unit.body!), catalog: scenario.catalog) else { return true }
        return false
    }

    /// A recorded command that no longer applies is left out: its recorded events differ from the replay's (none).
    private func noteNoLongerApplies(_ unit: RecordedUnit) {
        recordedInRange += unit.events.count
        result.comparedEvents += unit.events.count
        result.different += 1
        verbatim = false
        noteDivergence(Divergence(kind: .different, sequence: engine.projection.lastSequence + 1, recorded: unit.events.first,
                                  replayed: nil, device: unit.device, context: nil, handledBefore: handled))
    }

    /// Keeps the divergence that comes first in the replayed log: a command sent anew is named `extra`
    /// only at its device's next input, after divergences found later in the log.
    private func noteDivergence(_ divergence: Divergence) {
        if let first = result.firstDivergence, first.sequence <= divergence.sequence { return }
        result.firstDivergence = divergence
        firstNeedsReplayed = divergence.replayed == nil
    }

    /// A recorded observer command in a what-if replay: the first command the observers under test sent
    /// since the device's last input that makes the same request stands for it, and differs when its
    /// events do (names of observers aside); with none, it is `missing`.
    private func pair(_ unit: RecordedUnit) {
        recordedInRange += unit.events.count
        result.comparedEvents += unit.events.count
        guard let index = sentAnew[unit.device]?.firstIndex(where: { Self.sameRequest($0.body, unit.body!) }) else {
            result.missing += 1
            verbatim = false
            noteDivergence(Divergence(kind: .missing, sequence: engine.projection.lastSequence + 1, recorded: unit.events.first,
                                      replayed: nil, device: unit.device, context: nil, handledBefore: handled))
            return
        }
        let sent = sentAnew[unit.device]!.remove(at: index)
        // The recording started these downloads too: its reports on them apply.
        for key in sent.startedDownloads { heldReports[key] = nil }
        let recorded = unit.events
        var firstDifference: Int?
        for index in 0..<max(sent.records.count, recorded.count) {
            guard index < sent.records.count, index < recorded.count,
                  Self.withoutObserverName(sent.records[index].event) == Self.withoutObserverName(recorded[index].event) else {
                firstDifference = index
                break
            }
        }
        guard let index = firstDifference else { return }
        result.different += 1
        verbatim = false
        noteDivergence(Divergence(
            kind: .different, sequence: index < sent.records.count ? sent.records[index].sequence : engine.projection.lastSequence + 1,
            recorded: index < recorded.count ? recorded[index] : nil, replayed: index < sent.records.count ? sent.records[index] : nil,
            device: unit.device, context: nil, handledBefore: sent.handledBefore))
    }

    /// The device's next recorded input (`before`, nil at the end): what its observers under test sent
    /// since its last one and no recorded command stood for is `extra`, and the downloads those started
    /// are transferred anew by the downloader.
    private func closeSegment(of device: String, before next: RecordedUnit?) {
        guard let pending = sentAnew.removeValue(forKey: device) else { return }
        for sent in pending {
            for key in sent.startedDownloads where heldReports[key] != nil { downloadsAnew.insert(key) }
            guard let first = sent.records.first else { continue }
            result.extra += 1
            verbatim = false
            noteDivergence(Divergence(kind: .extra, sequence: first.sequence, recorded: next?.events.first, replayed: first,
                                      device: device, context: nil, handledBefore: sent.handledBefore))
        }
    }

    private func waitForSchedule(_ timestamp: Int64) {
        guard let speed, let clock else { return }
        let start = timedStart ?? (clock.nanoseconds(), timestamp)
        timedStart = start
        let due = start.monotonic + Int64(Double(timestamp - start.recorded) / speed)
        clock.wait(until: due)
        latenessSamples.append(max(0, clock.nanoseconds() - due))
    }

    private func handle(_ command: Command, heard: HeardSequences = .unknown) throws -> [EngineRecord] {
        if let stop = stopAfterHandled, handled >= stop { throw StopForContext() }
        handled += 1
        result.commands += 1
        let records = try engine.handle(command, timestamp: now, heard: heard).records
        result.events += records.count
        for record in records { noteReplayed(record.recorded) }
        return records
    }

    /// Keeps what a divergence report needs of a replayed event: the first one after a divergence found
    /// before it, and the context device's last events.
    private func noteReplayed(_ recorded: RecordedEvent) {
        if firstNeedsReplayed {
            result.firstDivergence?.replayed = recorded
            firstNeedsReplayed = false
        }
        guard let contextDevice, recorded.event.device == contextDevice else { return }
        contextRing.append(recorded)
        if contextRing.count > Self.contextEvents { contextRing.removeFirst() }
    }

    /// An unchanged replay's recorded command: the engine hands its events over and keeps the unit's bytes,
    /// which are compared with the recorded payloads where they are (no record or payload copied per event).
    private func handleUnchanged(_ body: CommandBody, _ unit: RecordedUnit, compared: Bool) throws {
        if let stop = stopAfterHandled, handled >= stop { throw StopForContext() }
        handled += 1
        result.commands += 1
        var count = 0
        var first: (sequence: UInt64, timestamp: Int64) = (0, 0)
        let tracking = firstNeedsReplayed || contextDevice != nil
        _ = try engine.handle(Command(id: unit.commandID!, body: body), timestamp: now, heard: unit.heard) { recorded in
            if count == 0 { first = (recorded.sequence, recorded.timestamp) }
            count += 1
            if tracking { noteReplayed(recorded) }
        }
        result.events += count
        recordedInRange += unit.eventCount
        if compared { result.comparedEvents += unit.eventCount }
        let difference = count == 0 ? (unit.eventCount == 0 ? nil : 0)
            : engine.withLastUnitBytes { bytes, ends in unit.firstDifference(from: bytes, ends: ends, timestamp: first.timestamp) }
        if difference != nil || !unit.isVerbatim || first.sequence != unit.sequence { verbatim = false }
        guard compared, let difference else { return }
        result.different += 1
        let replayed = difference < count ? engine.withLastUnitBytes { bytes, ends in
            RecordedUnit.decode(bytes, ends: ends, index: difference, sequence: first.sequence + UInt64(difference), timestamp: first.timestamp)
        } : nil
        noteDivergence(Divergence(kind: .different, sequence: replayed?.sequence ?? engine.projection.lastSequence + 1,
                                  recorded: unit.event(at: difference), replayed: replayed, device: unit.device, context: nil,
                                  handledBefore: handled - 1))
    }

    private func handleRecorded(_ body: CommandBody, _ unit: RecordedUnit, compared: Bool) throws {
        if apps == nil { return try handleUnchanged(body, unit, compared: compared) }
        let records = try handle(Command(id: unit.commandID!, body: body), heard: unit.heard)
        if compared { result.comparedEvents += unit.eventCount }
        check(records, against: unit, compared: compared)
        if apps != nil { deliver(records, compared: compared) }
    }

    /// Compares what the engine appended for a recorded command with what was recorded.
    private func check(_ records: [EngineRecord], against unit: RecordedUnit, compared: Bool) {
        let count = unit.eventCount
        recordedInRange += count
        var same = records.count == count
        var verbatimHere = same && unit.isVerbatim
        var firstDifference = same ? records.count : min(records.count, count)
        // A unit read without its events decoded: its events are numbered on from its first, all at its time.
        let decoded = !unit.events.isEmpty
        for index in 0..<min(records.count, count) {
            let record = records[index]
            let equal = Self.sameBytes(record.payload, unit.payloads[index])
                && record.recorded.timestamp == (decoded ? unit.events[index].timestamp : unit.timestamp)
            if !equal && same {
                same = false
                firstDifference = index
            }
            verbatimHere = verbatimHere && equal
                && record.recorded.sequence == (decoded ? unit.events[index].sequence : unit.sequence + UInt64(index))
        }
        if !verbatimHere { verbatim = false }
        guard compared, !same else { return }
        result.different += 1
        let replayed = records.indices.contains(firstDifference) ? records[firstDifference].recorded : nil
        noteDivergence(Divergence(
            kind: .different, sequence: replayed?.sequence ?? engine.projection.lastSequence + 1,
            recorded: unit.event(at: firstDifference),
            replayed: replayed, device: unit.device, context: nil, handledBefore: handled - 1))
    }

    /// Byte arrays compared as memory (`==` on arrays compares element by element).
    static func sameBytes(_ left: [UInt8], _ right: [UInt8]) -> Bool {
        guard left.count == right.count else { return false }
        return left.withUnsafeBytes { leftBytes in
            right.withUnsafeBytes { rightBytes in
                leftBytes.count == 0 || memcmp(leftBytes.baseAddress!, rightBytes.baseAddress!, leftBytes.count) == 0
            }
        }
    }

    /// Lets the apps hear appended events (and the downloader, what it answers for), then takes what
    /// their observers sent. Events are heard as they are appended: a replay has no network.
    private func deliver(_ records: [EngineRecord], compared: Bool) {
        guard let apps else { return }
        if let downloader, compared {
            downloaderTransport.now = now
            for record in records {
                downloader.deliver(record.recorded, over: &downloaderTransport)
                takeDownloaderEffects()
                // A download that ended is forgotten (the set holds what is under way, not the history): a
                // recorded report on it later no longer applies anyway.
                switch record.recorded.event {
                case .downloadFinished(let key, _), .downloadFailed(let key, _), .downloadCancelled(let key): downloadsAnew.remove(key)
                default: break
                }
            }
        }
        appTransport.now = now
        for record in records { apps.deliver(record.recorded, over: &appTransport) }
        takeAppEffects(compared: compared)
    }

    /// What the apps made: the observers' commands are decided anew and handled where they are sent (the
    /// users' actions are the recording's); their asynchronous work completes later, on the timers the
    /// downloader's share. Before the slice the recording is the truth, and none of it is sent.
    private func takeAppEffects(compared: Bool) {
        let (sent, timers) = appTransport.take()
        for body in sent where CommandSource.of(body) == .observer {
            if compared { reactions.append(body) } else { apps?.withdraw(body) }
        }
        guard compared else { return }
        for timer in timers { setTimer(timer.delay, timer.token) }
    }

    /// Commands the observers under test sent: handled at once, where they are sent.
    private func handleReactions(compared: Bool) throws {
        var count = 0
        while !reactions.isEmpty {
            let body = reactions.removeFirst()
            count += 1
            if count > maximumReactionCommands {
                result.stoppedRunawayObserver = true
                reactions.removeAll()
                return
            }
            extraNumber += 1
            let records = try handle(Command(id: CommandID(origin: extraOrigin, number: extraNumber), body: body))
            var started: [DownloadKey] = []
            for record in records {
                guard case .downloadStarted(let key) = record.recorded.event else { continue }
                started.append(key)
                // Its reports wait until the start is paired with the recording's, or found to be new.
                if heldReports[key] == nil { heldReports[key] = [] }
            }
            sentAnew[body.device, default: []].append(SentAnew(body: body, records: records.map(\.recorded), handledBefore: handled - 1,
                                                               startedDownloads: started))
            if inputsSpent { closeSegment(of: body.device, before: nil) }
            deliver(records, compared: compared)
        }
    }
}
