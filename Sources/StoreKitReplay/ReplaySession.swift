import Foundation
import StoreKitModel
import StoreKitRoles
import StoreKitRuntime

/// Replays a recording through the one queue engine and compares the new log with it,
/// command by command.
///
/// The recording's inputs are its commands, each rebuilt from the events it caused. The
/// users' actions and the outside world's decisions (store, downloader) are replayed as
/// recorded, at their recorded place and time, under their recorded ids. The queue
/// re-decides everything. The observers run again (the recorded behaviours, or others):
/// they hear every event of their device as it is appended and send their own commands.
/// A command they send takes the place, time and id of an equal recorded observer command
/// not yet used (looked up at most `matchHorizonNanoseconds` of recorded time ahead); one
/// with no recorded counterpart is handled at once (`extra`), and a recorded observer
/// command nobody sent is left out (`missing`). So an unchanged run replays byte for
/// byte, and a changed observer shows where its run parts from the recorded one.
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
    private let apps: ReplayApps
    /// The origin of commands the replayed observers send that the recording has no place for.
    private let extraOrigin: String
    /// A what-if replay: the observers under test are not the recorded ones. Their commands are
    /// decided anew and handled at once, where they are sent (no recorded place is looked for);
    /// the recorded observers' commands are not replayed; users', store and downloader commands
    /// are replayed while the queue still accepts them (docs/replay.md, "What-if replays").
    private let whatIf: Bool
    /// What-if replays: the downloader that transfers what the observers under test start and the
    /// recording never started (its reports decided anew, as `simulate`'s downloader decides them),
    /// the downloads it answers for, and its timers (due time, order set, token).
    private let downloader: DownloaderRole?
    /// Downloads under way that the downloader answers for (ended ones leave the set).
    private var downloadsAnew: Set<DownloadKey> = []
    private var downloaderTimers: [(due: Int64, order: Int, token: TimerToken)] = []
    private var downloaderTimersSet = 0
    /// Most downloader timers fired after the recording's end (each download ends after a bounded number of ticks).
    private static let maximumTrailingTimers = 1_000_000

    private struct Slot {
        var unit: RecordedUnit
        var claimed: CommandBody?
    }

    /// Recorded units read ahead of the one being replayed, by absolute number.
    private var window = UnitWindow(vacant: Slot(unit: RecordedUnit(sequence: 0, timestamp: 0, commandID: nil, events: [], payloads: [], body: nil,
                                                                     source: .header, device: ""), claimed: nil))
    /// Absolute number of the next unit to replay; units before it are gone from the window.
    private var head = 0
    /// The slice, read once (`options` is a struct of arrays and sets: reading a field of it
    /// for every command costs a copy).
    private let sliceFrom: UInt64
    private let sliceTo: UInt64
    private let deviceFilter: Set<String>?
    private let speed: Double?
    private let lookaheadUnits: Int
    private let matchHorizonNanoseconds: Int64
    private let relaunchHorizonNanoseconds: Int64
    private let maximumReactionCommands: Int
    /// Per device, absolute numbers of recorded observer commands not yet claimed, in order.
    private var unclaimed: [String: IndexQueue] = [:]
    /// Per device, absolute numbers of its user and observer units in the window, in order: the
    /// rules that look ahead at one app's commands read these, not every device's units.
    private var appUnitsByDevice: [String: IndexQueue] = [:]
    /// Per device, absolute numbers of its user, store and downloader units in the window, in order
    /// (what-if replays): a command the observers under test send stands for a recorded one only
    /// between the same two inputs of its device.
    private var inputUnitsByDevice: [String: IndexQueue] = [:]
    /// Recorded times never went back so far (true of every log a queue writes); where they do, the
    /// look-ahead rules scan the whole window as they did before `appUnitsByDevice`.
    private var timestampsIncrease = true
    /// Per device, the origin (app process incarnation) of its last recorded app-side command.
    private var appOrigin: [String: String] = [:]
    /// Launches whose app side already ran (see `launchEarly`).
    private var launchedEarly: Set<Int> = []
    private var lastIngestedTimestamp: Int64 = 0
    private var lastInSliceTimestamp: Int64 = 0
    private var unitsBeyondSlice = 0
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
    private var draining = false
    // A context pass stops before this many handled commands and keeps the device's events.
    private var stopAfterHandled: Int?
    private var contextDevice: String?
    private var contextRing: [RecordedEvent] = []

    /// The most the session held at once of what could grow with the recording's length: each
    /// bounded by the lookahead or by the devices, never by the number of events (`ReplayTests`).
    public struct Retention: Sendable, Equatable {
        /// Recorded units held ahead of the one replayed (at most `lookaheadUnits` + `loop`, and no
        /// more than `relaunchHorizonNanoseconds` of recorded time beyond it).
        public var windowUnits = 0
        /// Numbers of recorded observer commands kept per device for matching (sampled every
        /// 1,024 units read): those in the window, and behind them fewer than 64 or than the
        /// device has ahead (`IndexQueue` drops them in halves).
        public var unclaimedEntries = 0
        /// Numbers of user and observer units kept per device for the look-ahead rules (sampled
        /// likewise, bounded likewise).
        public var appUnitEntries = 0
        /// Launches replayed early and not reached yet (at most the window's).
        public var launchesEarly = 0
    }

    /// What this session held at most (see `Retention`).
    public private(set) var retention = Retention()
    private var appendedUnits = 0

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
        lookaheadUnits = options.lookaheadUnits
        matchHorizonNanoseconds = options.matchHorizonNanoseconds
        relaunchHorizonNanoseconds = options.relaunchHorizonNanoseconds
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
        downloader = whatIf ? DownloaderRole(name: "downloader", content: VirtualContentStorage(), behavior: scenario.downloader,
                                             choices: SeededChoices(seed: scenario.seed).stream(ChoiceStream.downloader)) : nil
        // A what-if replay's observers draw from each device's observer stream, as `simulate`'s do.
        apps = ReplayApps(behaviors: scenario.apps.observers, ordering: scenario.apps.ordering, catalog: scenario.catalog,
                          choices: whatIf ? SeededChoices(seed: scenario.seed) : SeededChoices(seed: scenario.seed, stream: "replay"),
                          streamPerDevice: whatIf, appLaunch: options.app?.launch, workLatency: scenario.apps.asynchronousWorkLatency,
                          workFailureProbability: scenario.apps.choicePoints?.asynchronousWorkFailureProbability ?? 0)
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
                let warning = try recording.forEachUnit { unit in try ingest(unit, firstPass: pass == 1) }
                if let warning { result.warning = warning }
            } catch is StopReading {}
        }
        draining = true
        try processReady()
        if whatIf && stopAfterHandled == nil {
            // The simulator's user steps on until late observers attach: steps that send nothing, so the
            // recording does not show them. They attach once its inputs are spent.
            for device in apps.devicesWithLateObservers() {
                apps.attachLate(device: device)
                collectReactions(of: device, compared: true)
            }
            try handleReactions(compared: true)
            try fireDownloaderTimers(through: .max)
        }
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
            append(header)
        } else {
            if let deviceFilter, !deviceFilter.contains(unit.device) { return }
            if unit.sequence > sliceTo {
                // Read a little past the slice, so that commands sent near its end find their place.
                unitsBeyondSlice += 1
                if unit.timestamp + timeOffset > lastInSliceTimestamp + relaunchHorizonNanoseconds || unitsBeyondSlice > lookaheadUnits {
                    throw StopReading()
                }
            } else {
                lastInSliceTimestamp = unit.timestamp + timeOffset
            }
            if renamings.count == 1 && renamings[0].copy == 1 && timeOffset == 0 {
                append(unit) // the recording as it is: nothing to rename
            } else {
                for index in renamings.indices {
                    for recorded in unit.events { renamings[index].learn(recorded.event) }
                    append(renamings[index].rename(unit, timeOffset: timeOffset))
                }
            }
        }
        try processReady()
    }

    private func append(_ unit: RecordedUnit) {
        let absolute = window.end
        if unit.source == .observer { unclaimed[unit.device, default: IndexQueue()].append(absolute) }
        if unit.source == .observer || unit.source == .user { appUnitsByDevice[unit.device, default: IndexQueue()].append(absolute) }
        if whatIf, unit.source == .user || unit.source == .store || unit.source == .downloader {
            inputUnitsByDevice[unit.device, default: IndexQueue()].append(absolute)
        }
        if unit.timestamp < lastIngestedTimestamp { timestampsIncrease = false }
        lastIngestedTimestamp = unit.timestamp
        window.append(Slot(unit: unit, claimed: nil))
        retention.windowUnits = max(retention.windowUnits, window.count)
        appendedUnits += 1
        if appendedUnits % 1_024 == 0 { noteRetention() }
    }

    private func noteRetention() {
        retention.unclaimedEntries = max(retention.unclaimedEntries, unclaimed.values.reduce(0) { $0 + $1.items.count })
        retention.appUnitEntries = max(retention.appUnitEntries, appUnitsByDevice.values.reduce(0) { $0 + $1.items.count })
        retention.launchesEarly = max(retention.launchesEarly, launchedEarly.count)
    }

    /// Handles recorded commands while enough of the recording is read ahead of them.
    private func processReady() throws {
        while head < window.end {
            let ahead = window.end - head
            guard draining || ahead > lookaheadUnits
                    || lastIngestedTimestamp - window[head].unit.timestamp > relaunchHorizonNanoseconds else { break }
            try processHead()
        }
    }

    private func processHead() throws {
        let absolute = head
        if window[head].unit.source == .observer, window[head].claimed == nil {
            let sequence = window[head].unit.sequence
            if !whatIf, sequence >= sliceFrom, sequence <= sliceTo { launchEarly(for: head) }
            if !whatIf || sequence < sliceFrom, case .attachObserver(let device, let observer) = window[head].unit.body, sequence <= sliceTo,
               apps.attachLate(device: device, observer: observer) {
                // A late observer attaches at its recorded place (the app's own choice of when is not in
                // the log), so its command is matched from there, not from the last command's time.
                now = window[head].unit.timestamp
                collectReactions(of: device, compared: sequence >= sliceFrom)
            }
        }
        // Taken out of the window, not copied: nothing reads a unit behind the head again.
        let slot = window.removeFirst()
        head += 1
        // The unit is lent to `replay`, not copied out of the slot.
        try replayUnit(slot.unit, claimed: slot.claimed, absolute: absolute)
    }

    private func replayUnit(_ unit: RecordedUnit, claimed: CommandBody?, absolute: Int) throws {
        let isUnclaimedObserverCommand = unit.source == .observer && unclaimed[unit.device, default: IndexQueue()].popFront(ifEqual: absolute)
        if unit.source == .observer || unit.source == .user { _ = appUnitsByDevice[unit.device]?.popFront(ifEqual: absolute) }
        if whatIf, unit.source == .user || unit.source == .store || unit.source == .downloader {
            _ = inputUnitsByDevice[unit.device]?.popFront(ifEqual: absolute)
        }
        guard unit.sequence <= sliceTo else { return }
        let compared = unit.sequence >= sliceFrom
        if compared { waitForSchedule(unit.timestamp) }
        if downloader != nil, compared { try fireDownloaderTimers(through: unit.timestamp) }
        now = unit.timestamp
        switch unit.source {
        case .header:
            let records = try engine.start(replayHeader)
            result.events += records.count
            if compared { result.comparedEvents += 1 }
            check(records, against: unit, compared: compared)
        case .observer where whatIf && compared:
            // The recorded observers' command: the observers under test decided anew (`noteWhatIf`).
            if isUnclaimedObserverCommand {
                noteMissing(unit)
            } else {
                recordedInRange += unit.events.count
                result.comparedEvents += unit.events.count
            }
            return
        case .observer:
            if isUnclaimedObserverCommand && compared {
                noteMissing(unit)
                return
            }
            noteAppOrigin(unit)
            // The history before the slice is the recording's own; in the slice, the replayed observers' command.
            try handleRecorded(compared ? claimed ?? unit.body! : unit.body!, unit, compared: compared)
        case .user, .store, .downloader:
            let body = unit.body!
            if whatIf && compared {
                if unit.source == .downloader, let key = Self.download(of: body), downloadsAnew.contains(key) { return noteNoLongerApplies(unit) }
                guard stillApplies(unit) else { return noteNoLongerApplies(unit) }
                if unit.source == .user, apps.attachLateAtStep(body) { collectReactions(of: body.device, compared: compared) }
            }
            if unit.source == .user { noteAppOrigin(unit) }
            apps.beforeUserAction(body)
            try handleRecorded(body, unit, compared: compared)
            if launchedEarly.isEmpty || launchedEarly.remove(absolute) == nil { apps.afterUserAction(body) }
            collectReactions(of: body.device, compared: compared)
        }
        try handleReactions(compared: compared)
    }

    /// The download a downloader's report is about.
    static func download(of body: CommandBody) -> DownloadKey? {
        switch body {
        case .reportDownloadProgress(let key, _, _), .completeDownload(let key, _), .failDownload(let key, _): key
        default: nil
        }
    }

    /// Keeps the downloader's timers; its reports on downloads decided anew are handled where they are made.
    private func takeDownloaderEffects(_ effects: [Effect]) {
        for effect in effects {
            switch effect {
            case .timer(let delay, let token):
                downloaderTimersSet += 1
                downloaderTimers.append((now + max(0, delay), downloaderTimersSet, token))
            case .send(let body):
                guard let key = Self.download(of: body), downloadsAnew.contains(key) else { continue }
                downloaderReports.append(body)
            }
        }
    }

    private var downloaderReports: [CommandBody] = []

    /// Fires the downloader's timers due by `time`, in due order, each at its own time, and handles the
    /// reports they make and what the observers answer.
    private func fireDownloaderTimers(through time: Int64) throws {
        guard let downloader else { return }
        var fired = 0
        while let next = downloaderTimers.indices.min(by: { (downloaderTimers[$0].due, downloaderTimers[$0].order) < (downloaderTimers[$1].due, downloaderTimers[$1].order) }),
              downloaderTimers[next].due <= time {
            fired += 1
            if time == .max && fired > Self.maximumTrailingTimers { break }
            let timer = downloaderTimers.remove(at: next)
            now = max(now, timer.due)
            if case .appWork(let device, let work) = timer.token {
                // The app's own asynchronous work completes (a server's reply): its code runs, and what it sends is handled.
                if apps.completeWork(device: device, work: work) {
                    collectReactions(of: device, compared: true)
                    try handleReactions(compared: true)
                }
                continue
            }
            takeDownloaderEffects(downloader.timerFired(timer.token, now: now))
            while !downloaderReports.isEmpty {
                let body = downloaderReports.removeFirst()
                extraNumber += 1
                let records = try handle(Command(id: CommandID(origin: extraOrigin, number: extraNumber), body: body))
                deliver(records, compared: true)
                try handleReactions(compared: true)
            }
        }
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
        guard result.firstDivergence == nil else { return }
        result.firstDivergence = Divergence(kind: .different, sequence: engine.projection.lastSequence + 1, recorded: unit.events.first,
                                            replayed: nil, device: unit.device, context: nil, handledBefore: handled)
        firstNeedsReplayed = true
    }

    /// Classifies a command the observers under test sent in a what-if replay, already handled where
    /// it was sent: it stands for the first recorded observer command of its device ahead that makes the
    /// same request (an attachment under another observer's name is the same), and differs when its
    /// events do (names of observers aside); with none, it is `extra`. Only the report depends on this.
    private func noteWhatIf(_ body: CommandBody, _ records: [EngineRecord]) {
        guard let absolute = correspondingRecorded(body) else {
            // A transfer the recording did not start here has no recorded reports to follow: decided anew.
            if case .startDownloads = body {
                for record in records { if case .downloadStarted(let key) = record.recorded.event { downloadsAnew.insert(key) } }
            }
            guard !records.isEmpty else { return }
            result.extra += 1
            verbatim = false
            if result.firstDivergence == nil {
                let next = (head..<window.end).lazy.map { self.window[$0] }.first { $0.unit.sequence <= self.sliceTo && !$0.unit.events.isEmpty }
                result.firstDivergence = Divergence(kind: .extra, sequence: records[0].recorded.sequence, recorded: next?.unit.events.first,
                                                    replayed: records[0].recorded, device: body.device, context: nil, handledBefore: handled - 1)
            }
            return
        }
        window[absolute].claimed = body
        let recorded = window[absolute].unit.events
        var firstDifference: Int?
        for index in 0..<max(records.count, recorded.count) {
            guard index < records.count, index < recorded.count,
                  Self.withoutObserverName(records[index].recorded.event) == Self.withoutObserverName(recorded[index].event) else {
                firstDifference = index
                break
            }
        }
        guard let index = firstDifference else { return }
        result.different += 1
        verbatim = false
        guard result.firstDivergence == nil else { return }
        result.firstDivergence = Divergence(
            kind: .different, sequence: index < records.count ? records[index].recorded.sequence : engine.projection.lastSequence + 1,
            recorded: index < recorded.count ? recorded[index] : nil, replayed: index < records.count ? records[index].recorded : nil,
            device: body.device, context: nil, handledBefore: handled - 1)
    }

    /// The first recorded observer command of the device that makes the same request before the
    /// device's next recorded input (user, store, downloader), struck out: the same request elsewhere
    /// among the inputs is another behaviour.
    private func correspondingRecorded(_ body: CommandBody) -> Int? {
        guard let index = unclaimed.index(forKey: body.device) else { return nil }
        var nextInput = window.end
        if let inputs = inputUnitsByDevice[body.device] {
            for position in inputs.start..<inputs.items.count where inputs.items[position] >= head {
                nextInput = inputs.items[position]
                break
            }
        }
        var position = unclaimed.values[index].start
        while position < unclaimed.values[index].items.count {
            let absolute = unclaimed.values[index].items[position]
            if absolute >= nextInput { return nil }
            if absolute >= head, Self.sameRequest(body, window[absolute].unit.body!) {
                unclaimed.values[index].items[position] = -1
                return absolute
            }
            position += 1
        }
        return nil
    }

    /// Equal requests, an observer's name aside: an observer's new name is not a new behaviour.
    static func sameRequest(_ sent: CommandBody, _ recorded: CommandBody) -> Bool {
        switch (sent, recorded) {
        case (.attachObserver(let device, _), .attachObserver(let recordedDevice, _)),
             (.detachObserver(let device, _), .detachObserver(let recordedDevice, _)):
            device == recordedDevice
        case (.recordAppAction(let action), .recordAppAction(let recordedAction)):
            withoutObserverName(action) == withoutObserverName(recordedAction)
        default:
            matches(sent, recorded)
        }
    }

    static func withoutObserverName(_ event: Event) -> Event {
        switch event {
        case .observerAttached(let device, _): .observerAttached(device: device, observer: "")
        case .observerDetached(let device, _): .observerDetached(device: device, observer: "")
        case .appActionRecorded(let action): .appActionRecorded(withoutObserverName(action))
        default: event
        }
    }

    static func withoutObserverName(_ action: AppAction) -> AppAction {
        switch action {
        case .contentGranted(let key, _, let product): .contentGranted(key, observer: "", productIdentifier: product)
        case .contentKept(let key, _): .contentKept(key, observer: "")
        case .restoreShownDone(let device, let restore, _): .restoreShownDone(device: device, restore: restore, observer: "")
        case .failureShown(let key, _): .failureShown(key, observer: "")
        case .transactionReported(let key, _, let report): .transactionReported(key, observer: "", report: report)
        }
    }

    /// The app process incarnation of the device's last app-side command (written only when it
    /// changes: a device's commands mostly come from one incarnation).
    private func noteAppOrigin(_ unit: RecordedUnit) {
        guard let origin = unit.commandID?.origin else {
            appOrigin[unit.device] = nil
            return
        }
        if let index = appOrigin.index(forKey: unit.device) {
            if appOrigin.values[index] != origin { appOrigin.values[index] = origin }
        } else {
            appOrigin[unit.device] = origin
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
        if firstNeedsReplayed, let first = records.first {
            result.firstDivergence?.replayed = first.recorded
            firstNeedsReplayed = false
        }
        if let contextDevice {
            for record in records where record.recorded.event.device == contextDevice {
                contextRing.append(record.recorded)
                if contextRing.count > Self.contextEvents { contextRing.removeFirst() }
            }
        }
        return records
    }

    private func handleRecorded(_ body: CommandBody, _ unit: RecordedUnit, compared: Bool) throws {
        let records = try handle(Command(id: unit.commandID!, body: body), heard: unit.heard)
        if compared { result.comparedEvents += unit.events.count }
        check(records, against: unit, compared: compared)
        deliver(records, compared: compared)
    }

    /// Compares what the engine appended for a recorded command with what was recorded.
    private func check(_ records: [EngineRecord], against unit: RecordedUnit, compared: Bool) {
        recordedInRange += unit.events.count
        var same = records.count == unit.events.count
        var verbatimHere = same && unit.isVerbatim
        var firstDifference = same ? records.count : min(records.count, unit.events.count)
        for index in 0..<min(records.count, unit.events.count) {
            let record = records[index]
            let equal = Self.sameBytes(record.payload, unit.payloads[index]) && record.recorded.timestamp == unit.events[index].timestamp
            if !equal && same {
                same = false
                firstDifference = index
            }
            verbatimHere = verbatimHere && equal && record.recorded.sequence == unit.events[index].sequence
        }
        if !verbatimHere { verbatim = false }
        guard compared, !same else { return }
        result.different += 1
        guard result.firstDivergence == nil else { return }
        let replayed = records.indices.contains(firstDifference) ? records[firstDifference].recorded : nil
        result.firstDivergence = Divergence(
            kind: .different, sequence: replayed?.sequence ?? engine.projection.lastSequence + 1,
            recorded: unit.events.indices.contains(firstDifference) ? unit.events[firstDifference] : nil,
            replayed: replayed, device: unit.device, context: nil, handledBefore: handled - 1)
        firstNeedsReplayed = replayed == nil
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

    private func noteMissing(_ unit: RecordedUnit) {
        result.missing += 1
        verbatim = false
        recordedInRange += unit.events.count
        result.comparedEvents += unit.events.count
        guard result.firstDivergence == nil else { return }
        result.firstDivergence = Divergence(kind: .missing, sequence: engine.projection.lastSequence + 1, recorded: unit.events.first,
                                            replayed: nil, device: unit.device, context: nil, handledBefore: handled)
        firstNeedsReplayed = true
    }

    /// Lets the apps hear appended events, then takes what their observers sent.
    private func deliver(_ records: [EngineRecord], compared: Bool) {
        if let downloader, compared {
            for record in records {
                takeDownloaderEffects(downloader.receive(record.recorded, now: now))
                // A download that ended is forgotten (the set holds what is under way, not the history): a
                // recorded report on it later no longer applies anyway.
                switch record.recorded.event {
                case .downloadFinished(let key, _), .downloadFailed(let key, _), .downloadCancelled(let key): downloadsAnew.remove(key)
                default: break
                }
            }
        }
        // A command's events almost always concern one device: others are listed only when seen.
        var first: String?
        var others: [String] = []
        for record in records {
            guard let device = apps.deliver(record.recorded) else { continue }
            if first == nil {
                first = device
            } else if device != first, !others.contains(device) {
                others.append(device)
            }
        }
        if let first { collectReactions(of: first, compared: compared) }
        for device in others { collectReactions(of: device, compared: compared) }
    }

    private func collectReactions(of device: String, compared: Bool) {
        if whatIf {
            // Decided anew: every command the observers under test send is handled where it is sent. Before
            // the slice the recording is the truth, and what they send is not sent.
            let drained = apps.drainObserverCommands(device)
            // The app's asynchronous work completes later, on the timers the downloader's share (before the
            // slice, the recording is the truth, and what the work would make is not sent either).
            for started in apps.takeStartedWork(device) where compared {
                downloaderTimersSet += 1
                downloaderTimers.append((now + max(0, started.delay), downloaderTimersSet, .appWork(device: device, work: started.number)))
            }
            if compared {
                reactions.append(contentsOf: drained)
            } else {
                for body in drained { apps.withdraw(body, device: device) }
            }
            return
        }
        for body in apps.drainObserverCommands(device) where !claim(body) && !isAlreadyClaimed(body) {
            // Before the slice the recording is the truth: what it has no place for is not sent;
            // nor is what the recorded app lost as it quit, and the app does not remember it either.
            if compared && !appGoneAhead(body.device) && !madeAgainAfterRelaunch(body) {
                reactions.append(body)
            } else {
                apps.withdraw(body, device: device)
            }
        }
    }

    /// Gives a command the replayed observers sent the place of an equal recorded one ahead.
    private func claim(_ body: CommandBody) -> Bool {
        // Changed in place: a copy of the device's queue would copy its array on the first write.
        guard let index = unclaimed.index(forKey: body.device) else { return false }
        let horizon = now + matchHorizonNanoseconds
        var position = unclaimed.values[index].start
        while position < unclaimed.values[index].items.count {
            let absolute = unclaimed.values[index].items[position]
            if absolute >= head {
                if window[absolute].unit.timestamp > horizon { return false }
                if Self.matches(body, window[absolute].unit.body!) {
                    window[absolute].claimed = body
                    unclaimed.values[index].items[position] = -1
                    return true
                }
            }
            position += 1
        }
        return false
    }

    /// An app that quits drops its observers at once, while events already on their way are
    /// lost to it; the replay's app hears those events before the quit reaches the queue,
    /// so its observers may ask early for what the relaunched ones ask again. A command
    /// that already holds a recorded place ahead is that same request, sent twice.
    private func isAlreadyClaimed(_ body: CommandBody) -> Bool {
        // Only a unit of the command's device can hold it (`claim` looks among the device's own).
        for absolute in appUnits(of: body.device, through: now + matchHorizonNanoseconds) where window[absolute].claimed == body { return true }
        return false
    }

    /// The window's user and observer units of `device` from the head, in order, up to the first
    /// unit (of any device) recorded after `horizon`.
    private func appUnits(of device: String, through horizon: Int64) -> [Int] {
        var numbers: [Int] = []
        guard timestampsIncrease else {
            for absolute in head..<window.end {
                if window[absolute].unit.timestamp > horizon { break }
                let source = window[absolute].unit.source
                if window[absolute].unit.device == device, source == .user || source == .observer { numbers.append(absolute) }
            }
            return numbers
        }
        guard let index = appUnitsByDevice.index(forKey: device) else { return [] }
        let limit = firstUnit(after: horizon)
        let units = appUnitsByDevice.values[index]
        for position in units.start..<units.items.count {
            let absolute = units.items[position]
            if absolute >= limit { break }
            if absolute >= head { numbers.append(absolute) }
        }
        return numbers
    }

    /// The first unit from the head recorded after `horizon` (`window.end` if none), found by
    /// halving: recorded times do not decrease (`timestampsIncrease`).
    private func firstUnit(after horizon: Int64) -> Int {
        var low = head
        var high = window.end
        while low < high {
            let middle = (low + high) / 2
            if window[middle].unit.timestamp > horizon { high = middle } else { low = middle + 1 }
        }
        return low
    }

    /// An app attaches its observers as it launches; the network may deliver those attachments
    /// to the queue before the launch (they are then refused). When a recorded observer command
    /// nobody sent yet comes before a launch of the same app process, the launch's app side
    /// happens now, so its attachments can take their recorded places.
    private func launchEarly(for absoluteUnit: Int) {
        let device = window[absoluteUnit].unit.device
        let origin = window[absoluteUnit].unit.commandID?.origin
        for absolute in appUnits(of: device, through: window[absoluteUnit].unit.timestamp + matchHorizonNanoseconds) {
            guard window[absolute].unit.source == .user, window[absolute].unit.commandID?.origin == origin else { continue }
            guard case .launchApp = window[absolute].unit.body, !launchedEarly.contains(absolute) else { return }
            launchedEarly.insert(absolute)
            apps.afterUserAction(window[absolute].unit.body!)
            collectReactions(of: device, compared: true)
            return
        }
    }

    /// True when the recorded app of `device` quits, or its process is replaced (a new command
    /// origin), before its observers send anything else: the recorded app may have heard the
    /// event only after its observers were gone (events take time to arrive, longer after a
    /// loss), and what they would have sent went with them.
    private func appGoneAhead(_ device: String) -> Bool {
        guard let current = appOrigin[device] else { return false }
        for absolute in appUnits(of: device, through: now + matchHorizonNanoseconds) {
            let slot = window[absolute]
            if case .terminateApp = slot.unit.body { return true }
            if slot.unit.commandID?.origin != current { return true }
            // Attaching is the app's launch, not its observers reacting to what they heard.
            if case .attachObserver = slot.unit.body { continue }
            // A recorded command the replay already made is a reaction to an earlier event: it does
            // not show that the recorded app heard this one.
            if slot.unit.source == .observer && slot.claimed == nil { return false }
        }
        return false
    }

    /// True when the recorded app quits (or its process is replaced) and only afterwards makes this
    /// very command: it heard the cause late (a lost event caught up after the quit), so it acted
    /// after relaunching. The replayed app forgets it now and makes it again after its relaunch.
    private func madeAgainAfterRelaunch(_ body: CommandBody) -> Bool {
        guard let current = appOrigin[body.device] else { return false }
        var quit = false
        for absolute in appUnits(of: body.device, through: now + relaunchHorizonNanoseconds) {
            let slot = window[absolute]
            if case .terminateApp = slot.unit.body { quit = true }
            if slot.unit.commandID?.origin != current { quit = true }
            if quit, slot.unit.source == .observer, slot.claimed == nil, Self.matches(body, slot.unit.body!) { return true }
        }
        return false
    }

    /// The command sent stands for the recorded one: equal, or a download request whose
    /// recorded events name only some of its downloads (the others needed nothing).
    static func matches(_ sent: CommandBody, _ recorded: CommandBody) -> Bool {
        if sent == recorded { return true }
        switch (sent, recorded) {
        case (.startDownloads(let all), .startDownloads(let some)), (.pauseDownloads(let all), .pauseDownloads(let some)),
             (.resumeDownloads(let all), .resumeDownloads(let some)), (.cancelDownloads(let all), .cancelDownloads(let some)):
            var remaining = some[...]
            for key in all where key == remaining.first { remaining.removeFirst() }
            return remaining.isEmpty && !some.isEmpty
        default:
            return false
        }
    }

    /// Commands the replayed observers sent that the recording has no place for: handled at once.
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
            if whatIf {
                noteWhatIf(body, records)
            } else if !records.isEmpty {
                result.extra += 1
                verbatim = false
                if result.firstDivergence == nil {
                    let next = (head..<window.end).lazy.map { self.window[$0] }.first { $0.unit.sequence <= self.sliceTo && !$0.unit.events.isEmpty }
                    result.firstDivergence = Divergence(kind: .extra, sequence: records[0].recorded.sequence, recorded: next?.unit.events.first,
                                                        replayed: records[0].recorded, device: body.device, context: nil,
                                                        handledBefore: handled - 1)
                }
            }
            deliver(records, compared: compared)
        }
    }
}

/// Absolute unit numbers in order; claimed ones are struck out (-1) where they stand.
struct IndexQueue {
    var items: [Int] = []
    var start = 0

    mutating func append(_ value: Int) { items.append(value) }

    /// Removes `value` when it is the first one not struck out; true if it was there.
    mutating func popFront(ifEqual value: Int) -> Bool {
        while start < items.count && items[start] < 0 { start += 1 }
        defer {
            if start >= 64 && start * 2 >= items.count {
                items.removeFirst(start)
                start = 0
            }
        }
        guard start < items.count, items[start] == value else { return false }
        start += 1
        return true
    }
}

/// A log that keeps nothing but its length: a replay at full speed is bounded by the
/// projection, not by the log it writes.
public final class DiscardingLogStorage: LogStorage {
    public private(set) var lastSequence: UInt64 = 0
    public init() {}
    public func appendUnit(_ payloads: [[UInt8]], timestamp: Int64) throws -> UInt64 {
        defer { lastSequence += UInt64(payloads.count) }
        return lastSequence + 1
    }
    public func forEachRecord(from: UInt64, _ body: (UInt64, Int64, UnsafeRawBufferPointer) throws -> Void) throws {}
    public func close() throws {}
}

/// Recorded units held ahead of the replay, numbered from 0 in the order they were read: a
/// ring, so taking the first moves nothing, and its room is that of the most units held at
/// once (the lookahead), whatever the recording's length. Free places hold `vacant` (not
/// optionals: reading through an optional's unwrapping copies the element).
struct UnitWindow<Element> {
    private let vacant: Element
    private var storage: [Element]
    /// Number of the first element held.
    private(set) var start = 0
    /// Number the next element appended gets.
    private(set) var end = 0

    init(vacant: Element) {
        self.vacant = vacant
        storage = Array(repeating: vacant, count: 64)
    }

    var count: Int { end - start }

    /// The element numbered `number` (`start <= number < end`).
    subscript(number: Int) -> Element {
        _read {
            precondition(number >= start && number < end, "unit \(number) is not in the window \(start)..<\(end)")
            yield storage[number & (storage.count - 1)]
        }
        _modify {
            precondition(number >= start && number < end, "unit \(number) is not in the window \(start)..<\(end)")
            yield &storage[number & (storage.count - 1)]
        }
    }

    mutating func append(_ element: Element) {
        if count == storage.count { grow() }
        storage[end & (storage.count - 1)] = element
        end += 1
    }

    /// Takes out the first element (moved, not copied).
    mutating func removeFirst() -> Element {
        precondition(start < end, "the window is empty")
        var element = vacant
        swap(&element, &storage[start & (storage.count - 1)])
        start += 1
        return element
    }

    private mutating func grow() {
        var larger = Array(repeating: vacant, count: storage.count * 2)
        for number in start..<end { swap(&larger[number & (larger.count - 1)], &storage[number & (storage.count - 1)]) }
        storage = larger
    }
}
