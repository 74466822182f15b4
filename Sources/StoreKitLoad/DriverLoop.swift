import Bus
import StoreKitLive
import StoreKitModel
import StoreKitRoles
import StoreKitRuntime
import ZeroMQ

/// The live transport a load driver's role host sends over: the bus's partitioned sender, with the id
/// of every command reported (`DriverEngine.noteSent`).
typealias DriverTransport = LiveRoleTransport<PartitionedSender>

/// A load driver's loop: the one role loop of the live runtime (`RoleHost` over `LiveRoleTransport`),
/// as role processes run theirs, with the driver's own starts, stage timing and reports. The role is
/// the driver's reaction to its devices' events (`DriverEngine.handle`, then the user's app); every
/// command, the role's or made by the loop (starts, finishes after the backend's 2xx, what the apps
/// made), goes through the host, which keeps it in order while the sender's window is full. The
/// transport reports the id each command went under, so a start's events and a finish's
/// acknowledgement find their lifecycle.
final class DriverLoop: Role {
    var engine: DriverEngine
    let sender: PartitionedSender
    private var transport: DriverTransport

    init(engine: DriverEngine, sender: PartitionedSender) {
        self.engine = engine
        self.sender = sender
        transport = LiveRoleTransport(sender: sender, processName: engine.name)
        transport.reportsCommandIDs = true
    }

    // MARK: Role

    var name: String { engine.name }
    var isSettled: Bool { true }
    var environmentFailure: EnvironmentFailure? { nil }
    func catchUp(_ event: RecordedEvent) {}
    func resume(now: Int64) -> [Effect] { [] }
    func timerFired(_ token: TimerToken, now: Int64) -> [Effect] { [] }

    func receive(_ event: RecordedEvent, now: Int64) -> [Effect] {
        var effects: [Effect] = []
        receive(event, now: now, into: &effects)
        return effects
    }

    /// The driver times the event, the user's app (if any) hears it, and the driver's finishes and
    /// downloads it decided are the reaction.
    func receive(_ event: RecordedEvent, now: Int64, into effects: inout [Effect]) {
        engine.handle(event, now: now)
        engine.apps?.deliver(event, now: now)
        guard !engine.outbox.isEmpty else { return }
        for body in engine.outbox { effects.append(.send(body)) }
        engine.outbox.removeAll(keepingCapacity: true)
    }

    // MARK: The loop

    func drive(startMonotonic: Int64, subscriber: PartitionedSubscriber, coordinator: Socket) throws {
        engine.loadEnd = startMonotonic + engine.plan.loadNanoseconds
        let loadEnd = engine.loadEnd
        var progress = DriverEngine.LoopState(drainEnd: loadEnd + engine.plan.drainNanoseconds,
                                              nextReport: startMonotonic + engine.plan.intervalNanoseconds)
        if engine.plan.model == .closed {
            // Each device's first start is spread over the first think time, so they do not all start at once.
            for device in engine.devices.indices {
                engine.closedStarts.schedule(at: startMonotonic + engine.plan.thinkTime.sampleNanoseconds(engine.choices), device)
            }
        }
        let prefix = Array(DriverEngine.devicePrefix(of: name).utf8)
        // Every socket this driver reads, for the waits that end on the first message.
        let poller = Poller()
        for item in sender.senders.flatMap(\.pollItems) + subscriber.subscribers.flatMap(\.pollItems) { poller.register(item) }
        poller.register(coordinator, for: .readable)
        var lastWake = LiveClock.monotonicNanoseconds()
        // Made here, not kept: the host holds its role, this loop.
        let host = RoleHost(role: self)
        while true {
            if Shutdown.isRequested && !progress.stopped {
                progress.stopped = true
                progress.drainEnd = min(progress.drainEnd, LiveClock.monotonicNanoseconds() + 2_000_000_000)
            }
            try readArrivals(subscriber: subscriber, prefix: prefix, host: host)
            // Starts intended before the end are made even when the loop reaches them late (timed from
            // their intended start), so a busy machine shows as latency, not as fewer lifecycles.
            transport.tick()
            let now = transport.now
            let startsLeft = engine.nextDue(startMonotonic: startMonotonic).map { $0 < loadEnd } ?? false
            let starting = !progress.stopped && (now < loadEnd || startsLeft)
            if starting { try engine.startDue(now: now, startMonotonic: startMonotonic, loadEnd: loadEnd, host: host, transport: &transport) }
            try host.sendWaiting(over: &transport)
            engine.noteSent(&transport)
            // One batch of every command made in this wake-up, and the answers that came meanwhile.
            try engine.takeAnswers(sender.poll(timeout: .zero))
            try engine.handOver(to: host, over: &transport)
            if try engine.report(&progress, startMonotonic: startMonotonic, coordinator: coordinator) { return }
            try engine.wait(starting: starting, startMonotonic: startMonotonic, progress: progress, commandsWaiting: host.waitingCount > 0,
                            poller: poller, lastWake: &lastWake)
        }
    }

    /// Everything that arrived since the last wake-up: the driver's devices' events (through the host:
    /// heard by the driver and by the user's app), what the apps made, and the backend's and HTTP
    /// calls' answers.
    private func readArrivals(subscriber: PartitionedSubscriber, prefix: [UInt8], host: RoleHost) throws {
        for record in try subscriber.receiveRecords(timeout: .zero) {
            // A driver follows its own devices' topic group; the check stays for a queue that serves
            // more (an app key's devices). A record caught up by FETCH has no topic: its event says.
            if let device = record.device, !device.utf8.starts(with: prefix) { continue }
            let recorded: RecordedEvent
            do {
                recorded = try record.decoded()
            } catch {
                engine.interval.errors += 1
                continue
            }
            if record.device == nil, !(recorded.event.device.map { $0.utf8.starts(with: prefix) } ?? false) { continue }
            transport.tick()
            try host.deliver(recorded, over: &transport)
            engine.noteSent(&transport)
        }
        transport.tick()
        engine.takeAppCommandsAndAnswers(now: transport.now)
        try engine.handOver(to: host, over: &transport)
    }
}

extension DriverEngine {
    /// What the apps made (their work due by `now` done first), and the backend's and HTTP calls'
    /// answers, into the outbox.
    mutating func takeAppCommandsAndAnswers(now: Int64) {
        if let apps {
            apps.completeDueWork(now: now)
            for command in apps.takeCommands() {
                // With --backend, the app's finish waits for the backend's 2xx, and a refused transaction stays unfinished.
                if case .finishTransaction(let key) = command {
                    if backendPending.contains(key) {
                        heldFinishes.insert(key)
                        continue
                    }
                    if backendRefused.remove(key) != nil { continue }
                }
                enqueue(command)
            }
        }
        if let backend { for answer in backend.take() { handle(answer) } }
        if let http { for answer in http.take() { handle(answer) } }
    }
}
