import StoreKitExplore
import StoreKitModel
import Testing

/// restore-done-once (docs/invariants.md): a restore the app heard finish is shown done exactly once.
@Suite struct RestoreDoneOnceTests {
    static let device = "d1"

    static func violations(_ events: [Event]) -> [AppViolation] {
        var monitor = AppInvariantMonitor()
        for (index, event) in events.enumerated() {
            monitor.check(RecordedEvent(sequence: UInt64(index + 1), timestamp: 0, commandID: nil, event: event))
        }
        monitor.finish()
        return monitor.violations
    }

    static let heard: [Event] = [
        .appLaunched(device: device), .observerAttached(device: device, observer: "o1"),
        .restoreStarted(device: device, restore: 1, applicationUsername: nil), .restoreFinished(device: device, restore: 1),
    ]
    static let shown = Event.appActionRecorded(.restoreShownDone(device: device, restore: 1, observer: "o1"))

    @Test("shown once, also with nothing restored: no violation")
    func once() { #expect(Self.violations(Self.heard + [Self.shown]).isEmpty) }

    @Test("shown twice: a violation at the second")
    func twice() {
        let found = Self.violations(Self.heard + [Self.shown, Self.shown])
        #expect(found.map(\.invariant) == [.restoreDoneOnce])
        #expect(found.first?.sequence == 6)
    }

    @Test("never shown: a violation at the end")
    func never() {
        #expect(Self.violations(Self.heard).map(\.message) == ["restore 1 of d1 finished and was never shown done"])
    }

    @Test("never shown, but the app ended after hearing it, or the launch that asked for it ended before it finished: no violation")
    func appEnded() {
        #expect(Self.violations(Self.heard + [.appTerminated(device: Self.device)]).isEmpty)
        let askedByEarlierLaunch: [Event] = [
            .appLaunched(device: Self.device), .observerAttached(device: Self.device, observer: "o1"),
            .restoreStarted(device: Self.device, restore: 1, applicationUsername: nil), .appTerminated(device: Self.device),
            .appLaunched(device: Self.device), .observerAttached(device: Self.device, observer: "o1"),
            .restoreFinished(device: Self.device, restore: 1),
        ]
        #expect(Self.violations(askedByEarlierLaunch).isEmpty)
    }
}
