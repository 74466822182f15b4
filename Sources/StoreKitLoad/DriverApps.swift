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
/// the executable registered, docs/load-testing.md): each device has its `PaymentQueue` with the
/// app launched on it, hears its device's events, and its observers' commands (finishes, starts of
/// downloads, attachments, what the app credited) go to the queue in place of the driver's own. The
/// driver still makes the users' purchases and restores and times every stage. The app's
/// asynchronous work completes on the monotonic clock after a delay drawn as the simulator draws it.
final class DriverApps {
    private var queues: [String: PaymentQueue] = [:]
    private let app: DriverApp
    private let choices: ChoiceSource
    private let workLatency: LatencyDistribution
    /// Work under way, by due time (monotonic nanoseconds): device and work number.
    private var work = Scheduler<(device: String, number: UInt64)>()
    /// Commands the apps made, in order, for the driver to send.
    private var made: [CommandBody] = []
    /// Most pieces of work under way at once, over all devices; more are completed as failed at once.
    static let maximumWork = 1_000_000

    init(app: DriverApp, devices: [String], choices: ChoiceSource) {
        self.app = app
        self.choices = choices
        // The simulator's apps' default (`DeviceApp.asynchronousWorkDelay`).
        workLatency = app.workLatency ?? .exponential(minimumMilliseconds: 20, meanMilliseconds: 300)
        for device in devices {
            queues[device] = PaymentQueue(device: device, catalog: app.catalog, choices: choices.stream(ChoiceStream.observers(device)))
        }
    }

    /// Launches the app on `device` (after its registration): the launch, then the app's own attachments.
    func launch(_ device: String, now: Int64) {
        guard let queue = queues[device] else { return }
        queue.enqueue(.launchApp(device: device))
        app.launch(queue)
        collect(queue, now: now)
    }

    /// One event of a device of this driver: the app hears it as StoreKit would tell it.
    func deliver(_ recorded: RecordedEvent, now: Int64) {
        guard let device = recorded.event.device, let queue = queues[device] else { return }
        queue.deliver(recorded)
        collect(queue, now: now)
    }

    /// Completes the work due by `now`; its completions run as the app's code.
    func completeDueWork(now: Int64) {
        while let due = work.nextTime, due <= now, let next = work.next() {
            guard let queue = queues[next.action.device] else { continue }
            queue.completeWork(next.action.number, succeeded: true)
            collect(queue, now: now)
        }
    }

    /// When the next piece of work is due, if any.
    var nextWorkDue: Int64? { work.nextTime }

    /// The commands the apps made since the last call, in order.
    func takeCommands() -> [CommandBody] {
        defer { made.removeAll(keepingCapacity: true) }
        return made
    }

    private func collect(_ queue: PaymentQueue, now: Int64) {
        while true {
            queue.drainOutbox(keepingFirst: .max) { body, _ in made.append(body) }
            let started = queue.takeStartedWork()
            guard !started.isEmpty else { return }
            for piece in started {
                guard work.count < Self.maximumWork else {
                    // Past the bound the reply never comes in time: the app hears a failure (and may make more).
                    queue.completeWork(piece.number, succeeded: false)
                    continue
                }
                let delay = workLatency.sampleNanoseconds(choices.stream(ChoiceStream.user(queue.device)), .appWorkDelay)
                work.schedule(at: now + delay, (queue.device, piece.number))
            }
        }
    }
}
