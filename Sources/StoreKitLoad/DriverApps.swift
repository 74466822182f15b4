import StoreKitModel
import StoreKitRoles
import StoreKitRuntime

/// The user's own app code (StoreKitSim's `SimulatedApp.launch`), as a load driver runs it on its devices.
public struct DriverApp: Sendable {
    /// The name the executable registered it under (the topology's `app`).
    public var name: String
    public var launch: @Sendable (_ queue: PaymentQueue) -> Void
    /// The topology's catalog, which the app's product requests read.
    public var catalog: Catalog
    /// How long a piece of the app's asynchronous work takes (nil: the simulator's default).
    public var workLatency: LatencyDistribution?

    public init(name: String, launch: @escaping @Sendable (_ queue: PaymentQueue) -> Void, catalog: Catalog, workLatency: LatencyDistribution? = nil) {
        self.name = name
        self.launch = launch
        self.catalog = catalog
        self.workLatency = workLatency
    }
}

/// The user's own app code on a driver's devices (a topology whose scenario names an `app`, which
/// the executable registered, docs/load-testing.md): each device's app is the one every runtime runs
/// (`InstalledApp`: its `PaymentQueue` with the app launched on it), hosted in the one role loop
/// (`RoleHost`). It hears its device's events, and its observers' commands (finishes, starts of
/// downloads, attachments, what the app credited) go to the queue in place of the driver's own. The
/// driver still makes the users' purchases and restores and times every stage. The app's asynchronous
/// work completes on the monotonic clock, as timers, after a delay drawn as the simulator draws it.
final class DriverApps {
    private var hosts: [String: (app: InstalledApp, host: RoleHost)] = [:]
    private var transport = Transport()
    /// Most pieces of work under way at once, over all devices; more are completed as failed at once.
    static let maximumWork = 1_000_000

    /// The apps' environment: the monotonic clock (as the driver last read it), the commands they made
    /// (the driver sends them, and holds back a finish its backend has not yet accepted) and their
    /// work's timers.
    struct Transport: RoleTransport {
        typealias Failure = Never
        var now: Int64 = 0
        var made: [CommandBody] = []
        var timers = Scheduler<TimerToken>()
        /// Work started past `maximumWork`: the reply never comes in time, so the app hears a failure.
        var refusedWork: [TimerToken] = []
        /// The driver bounds what waits to be sent (its sender's window), not the apps.
        var hasCapacity: Bool { true }
        mutating func submit(_ body: CommandBody) { made.append(body) }
        mutating func setTimer(afterNanoseconds delay: Int64, _ token: TimerToken) {
            guard timers.count < DriverApps.maximumWork else { return refusedWork.append(token) }
            timers.schedule(at: now + delay, token)
        }
    }

    init(app: DriverApp, devices: [String], choices: ChoiceSource) {
        // The simulator's apps' default (`DeviceApp.asynchronousWorkDelay`).
        let latency = app.workLatency ?? .exponential(minimumMilliseconds: 20, meanMilliseconds: 300)
        for device in devices {
            let observerChoices = choices.stream(ChoiceStream.observers(device))
            let userChoices = choices.stream(ChoiceStream.user(device))
            let installed = InstalledApp(queue: PaymentQueue(device: device, catalog: app.catalog, choices: observerChoices),
                                         code: .app(app.launch), observerChoices: observerChoices,
                                         workDelay: { latency.sampleNanoseconds(userChoices, .appWorkDelay) })
            hosts[device] = (installed, RoleHost(role: installed))
        }
    }

    /// Launches the app on `device` (after its registration): the launch, then the app's own attachments.
    func launch(_ device: String, now: Int64) {
        guard let hosted = hosts[device] else { return }
        transport.now = now
        hosted.app.launch()
        // What the launch made (the `launchApp` command, the attachments, work) is collected as a resume's.
        hosted.host.resume(over: &transport)
        failRefusedWork()
    }

    /// One event of a device of this driver: the app hears it as StoreKit would tell it.
    func deliver(_ recorded: RecordedEvent, now: Int64) {
        guard let device = recorded.event.device, let host = hosts[device]?.host else { return }
        transport.now = now
        host.deliver(recorded, over: &transport)
        failRefusedWork()
    }

    /// Completes the work due by `now`; its completions run as the app's code.
    func completeDueWork(now: Int64) {
        transport.now = now
        while let due = transport.timers.nextTime, due <= now, let next = transport.timers.next() {
            guard case .appWork(let device, _) = next.action, let host = hosts[device]?.host else { continue }
            host.fire(next.action, over: &transport)
        }
        failRefusedWork()
    }

    /// When the next piece of work is due, if any.
    var nextWorkDue: Int64? { transport.timers.nextTime }

    /// The commands the apps made since the last call, in order.
    func takeCommands() -> [CommandBody] {
        defer { transport.made.removeAll(keepingCapacity: true) }
        return transport.made
    }

    private func failRefusedWork() {
        while !transport.refusedWork.isEmpty {
            let refused = transport.refusedWork
            transport.refusedWork.removeAll()
            for token in refused {
                guard case .appWork(let device, let number) = token, let hosted = hosts[device] else { continue }
                hosted.app.queue.completeWork(number, succeeded: false)
                hosted.host.resume(over: &transport)
            }
        }
    }
}
