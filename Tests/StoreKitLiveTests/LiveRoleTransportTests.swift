import Bus
import StoreKitLive
import StoreKitModel
import StoreKitRoles
import StoreKitRuntime
import Testing

/// A sender that numbers what it is given, as `CommandSender` does, with a window of a chosen size.
private final class NumberingSender: LiveCommandSender {
    var window: Int
    var sent: [CommandBody] = []
    init(window: Int) { self.window = window }
    var hasCapacity: Bool { sent.count < window }
    func submit(_ body: CommandBody) throws(CommandSenderError) -> CommandID {
        sent.append(body)
        return CommandID(origin: "numbering", number: UInt64(sent.count))
    }
}

/// A role that answers every event with the commands it is given.
private final class EchoRole: Role {
    let name = "echo"
    var reaction: [Effect] = []
    func receive(_ event: RecordedEvent, now: Int64) -> [Effect] { reaction }
    func timerFired(_ token: TimerToken, now: Int64) -> [Effect] { [] }
    func catchUp(_ event: RecordedEvent) {}
    func resume(now: Int64) -> [Effect] { [] }
}

struct LiveRoleTransportTests {
    @Test("With reportsCommandIDs, the transport hands over each id in the order sent, also for commands that waited for the window")
    func reportsEachIDInOrder() throws {
        let sender = NumberingSender(window: 2)
        var transport = LiveRoleTransport(sender: sender, processName: "test")
        transport.reportsCommandIDs = true
        let role = EchoRole()
        role.reaction = [.send(.launchApp(device: "a")), .send(.launchApp(device: "b")), .send(.launchApp(device: "c"))]
        let host = RoleHost(role: role)
        try host.deliver(RecordedEvent(sequence: 1, timestamp: 0, commandID: nil, event: .appLaunched(device: "a")), over: &transport)
        var ids: [UInt64] = []
        transport.takeSentCommandIDs { ids.append($0.number) }
        #expect(ids == [1, 2])
        #expect(host.waitingCount == 1)
        sender.window = 3
        try host.sendWaiting(over: &transport)
        transport.takeSentCommandIDs { ids.append($0.number) }
        #expect(ids == [1, 2, 3])
        #expect(sender.sent == [.launchApp(device: "a"), .launchApp(device: "b"), .launchApp(device: "c")])
        // Taken once: nothing is handed over twice.
        transport.takeSentCommandIDs { ids.append($0.number) }
        #expect(ids.count == 3)
    }

    @Test("Without reportsCommandIDs, nothing is kept")
    func keepsNothingUnasked() throws {
        var transport = LiveRoleTransport(sender: NumberingSender(window: 4), processName: "test")
        try transport.submit(.launchApp(device: "a"))
        var count = 0
        transport.takeSentCommandIDs { _ in count += 1 }
        #expect(count == 0)
    }
}
