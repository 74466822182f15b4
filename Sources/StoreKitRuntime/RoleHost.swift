import StoreKitModel
import StoreKitRoles

/// The clock and the transport a runtime gives the roles it hosts: live, the monotonic clock, the
/// bus's sockets (`CommandSender`) and a timer heap; deterministic, the virtual clock, the network
/// model (a `CommandPipeline` over simulated links) and the run's scheduler. The rest of a role's
/// environment, its choices and its content storage, is given when the role is made (`RoleFactory`).
public protocol RoleTransport {
    /// What a send can fail with (`Never` for the deterministic runtime's simulated links).
    associatedtype Failure: Error
    /// The environment's clock, in nanoseconds: what a role is told is `now`.
    var now: Int64 { get }
    /// Whether the sender's window has room for another command now.
    var hasCapacity: Bool { get }
    /// Sends one command (its sender numbers it). Called only while `hasCapacity`.
    mutating func submit(_ body: CommandBody) throws(Failure)
    /// Hands `token` back to the role `delay` nanoseconds from `now` (a negative delay is a time
    /// already past: the timer is due at once).
    mutating func setTimer(afterNanoseconds delay: Int64, _ token: TimerToken)
}

/// The one role side of every runtime: a role, the commands it made that wait for room in its
/// sender's window, and the reactions carried out over a `RoleTransport`. The live role processes
/// (`RoleProcess`), the deterministic runtime and the test kit's loopback device host their roles
/// here, so catching up, resuming, reacting, queueing behind a full window and the checks after a
/// reaction are written once.
///
/// A reference, so that a runtime keeps it in a table of its own while the transport it is given
/// changes the rest of that table (the deterministic runtime's senders).
public final class RoleHost {
    // Inlinable (with the state it touches), so that a runtime's own transport is specialised in and
    // a reaction costs no dynamic call beyond the role's. Unchecked exclusivity: one runtime loop
    // drives a host, one access at a time.
    @usableFromInline @exclusivity(unchecked) var hostedRole: Role
    /// Commands waiting for room in the window, in order, from `waitingHead` on.
    @usableFromInline @exclusivity(unchecked) var waiting: [CommandBody] = []
    @usableFromInline @exclusivity(unchecked) var waitingHead = 0
    /// The buffer every reaction is written into, emptied and reused: a reaction costs no array of its own.
    @usableFromInline @exclusivity(unchecked) var reaction: [Effect] = []

    @inlinable public var role: Role { hostedRole }

    public init(role: Role) {
        hostedRole = role
    }

    /// Commands made and not yet sent.
    public var waitingCount: Int { waiting.count - waitingHead }

    /// True when the role has nothing more to do unless someone else acts, and nothing waits to be sent.
    public var isSettled: Bool { waitingHead == waiting.count && role.isSettled }

    /// Applies history silently (a new or restarted role reading the log).
    public func catchUp(_ recorded: RecordedEvent) { role.catchUp(recorded) }

    /// After catching up: what the role must do again (also for a first start).
    @inlinable
    public func resume<Transport: RoleTransport>(over transport: inout Transport) throws(Transport.Failure) {
        var effects = takeReactionBuffer()
        effects.append(contentsOf: hostedRole.resume(now: transport.now))
        try perform(&effects, over: &transport)
        reaction = effects
    }

    /// The role hears one event from the queue and its reaction is carried out.
    @inlinable
    public func deliver<Transport: RoleTransport>(_ recorded: RecordedEvent, over transport: inout Transport) throws(Transport.Failure) {
        var effects = takeReactionBuffer()
        hostedRole.receive(recorded, now: transport.now, into: &effects)
        try perform(&effects, over: &transport)
        reaction = effects
    }

    /// One of the role's timers is due.
    @inlinable
    public func fire<Transport: RoleTransport>(_ token: TimerToken, over transport: inout Transport) throws(Transport.Failure) {
        var effects = takeReactionBuffer()
        hostedRole.timerFired(token, now: transport.now, into: &effects)
        try perform(&effects, over: &transport)
        reaction = effects
    }

    /// Sends waiting commands, in order, while the window has room (answers made some); returns how many.
    @discardableResult
    @inlinable
    public func sendWaiting<Transport: RoleTransport>(over transport: inout Transport) throws(Transport.Failure) -> Int {
        var sent = 0
        while waitingHead < waiting.count, transport.hasCapacity {
            let body = waiting[waitingHead]
            waitingHead += 1
            sent += 1
            try transport.submit(body)
        }
        if waitingHead == waiting.count, waitingHead > 0 {
            waiting.removeAll(keepingCapacity: true)
            waitingHead = 0
        }
        return sent
    }

    /// A command the runtime makes itself, outside a reaction (a load driver's start, or its finish once
    /// its backend accepted the transaction): sent at once while nothing waits and the window has room,
    /// otherwise it waits, in order, behind the role's own.
    @inlinable
    public func send<Transport: RoleTransport>(_ body: CommandBody, over transport: inout Transport) throws(Transport.Failure) {
        if waitingHead < waiting.count || !transport.hasCapacity {
            waiting.append(body)
        } else {
            try transport.submit(body)
        }
    }

    /// The role's process went down: what it had not sent is lost with it.
    public func dropWaiting() {
        waiting.removeAll()
        waitingHead = 0
    }

    /// A new instance of the role takes over (a restart); it catches up before it resumes.
    public func replace(with role: Role) {
        hostedRole = role
        dropWaiting()
    }

    /// What the role's environment failed to do (content it could not write): a runtime stops on it.
    public var environmentFailure: EnvironmentFailure? { role.environmentFailure }

    /// The reused reaction buffer, emptied (its capacity kept); given back once carried out.
    @inlinable @inline(__always)
    func takeReactionBuffer() -> [Effect] {
        var effects: [Effect] = []
        swap(&effects, &reaction)
        // Most reactions are empty: emptying an empty array still goes through `replaceSubrange`.
        if !effects.isEmpty { effects.removeAll(keepingCapacity: true) }
        return effects
    }

    /// Carries out a reaction and empties `effects`: a command is sent at once while nothing waits
    /// before it and the window has room, or waits, in order; a timer goes to the transport. Each
    /// effect is moved out (reversed, then `popLast`, in order) rather than copied.
    @inlinable
    func perform<Transport: RoleTransport>(_ effects: inout [Effect], over transport: inout Transport) throws(Transport.Failure) {
        effects.reverseFew()
        while let effect = effects.popLast() {
            switch effect {
            case .send(let body):
                try send(body, over: &transport)
            case .timer(let delay, let token):
                transport.setTimer(afterNanoseconds: delay, token)
            }
        }
    }
}
