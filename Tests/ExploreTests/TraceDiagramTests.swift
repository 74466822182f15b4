@testable import StoreKitExplore
import StoreKitModel
@testable import StoreKitRoles
import Testing

/// What a trace draws must be what happened (issue 28, item 6).
@Suite struct TraceDiagramTests {
    /// A device whose observer is named `app`: it finishes t1 while its download runs (the queue
    /// cancels it), grants t2, is killed before finishing t2, and has a finish of t3 refused.
    static func diagram() -> TraceDiagram {
        let device = "device-0001"
        let t1 = TransactionKey(device: device, number: 1), t2 = TransactionKey(device: device, number: 2)
        let t3 = TransactionKey(device: device, number: 3)
        let trace = AppTrace()
        trace.sent(device: device, sender: "device", body: .launchApp(device: device))
        trace.callback(device: device, observer: "app", callback: "updatedTransactions", detail: "t1 purchased", cause: 1)
        trace.sent(device: device, sender: "app", body: .finishTransaction(t1))
        trace.sent(device: device, sender: "app", body: .recordAppAction(.contentGranted(t2, observer: "app", productIdentifier: "coins")))
        trace.killed(device: device, dropped: [.finishTransaction(t2)], afterCause: 3)
        trace.sent(device: device, sender: "device", body: .terminateApp(device: device))
        trace.sent(device: device, sender: "app", body: .finishTransaction(t3))
        func event(_ sequence: UInt64, _ number: UInt64, _ event: Event) -> RecordedEvent {
            RecordedEvent(sequence: sequence, timestamp: Int64(sequence), commandID: CommandID(origin: "apps", number: number), event: event)
        }
        let events = [
            event(1, 1, .appLaunched(device: device)),
            event(2, 2, .downloadCancelled(DownloadKey(transaction: t1, index: 0))),
            event(3, 2, .transactionFinished(t1)),
            event(4, 3, .appActionRecorded(.contentGranted(t2, observer: "app", productIdentifier: "coins"))),
            event(5, 4, .appTerminated(device: device)),
            event(6, 5, .commandRejected(.finishTransaction(t3), Rejection(.transactionStillPurchasing, "still purchasing"))),
        ]
        let violation = AppViolation(invariant: .noPurchaseLost, sequence: 6, message: "a long message")
        return TraceDiagram(events: events, trace: trace, violation: violation)
    }

    @Test("an observer named app is its own lifeline, not the device")
    func observerNamedApp() {
        let messages = Self.diagram().messages
        #expect(messages.contains { $0.kind == .arrow && $0.from == "app" && $0.text == "3 t1 finished" })
        #expect(messages.contains { $0.kind == .arrow && $0.from == "app" && $0.text == "4 granted t2 (coins)" })
    }

    @Test("the queue's cancel of a running download at a finish is drawn as the queue's, not the observer's")
    func cancelIsTheQueues() {
        let messages = Self.diagram().messages
        let cancel = messages.first { $0.text.hasPrefix("2 download t1/0 cancelled") }
        #expect(cancel?.kind == .note && cancel?.from == "queue")
    }

    @Test("a kill is drawn after the commands the app sent before it, and names those it dropped")
    func killAfterSentCommands() throws {
        let texts = Self.diagram().messages.map(\.text)
        let granted = try #require(texts.firstIndex(of: "4 granted t2 (coins)"))
        let kill = try #require(texts.firstIndex { $0.hasPrefix("app killed") })
        let terminated = try #require(texts.firstIndex(of: "5 app terminated"))
        #expect(granted < kill && kill < terminated)
        #expect(texts[kill] == "app killed after #3: never sent finish t2")
    }

    @Test("a refused finish names its transaction")
    func refusedFinishNamesTransaction() {
        #expect(Self.diagram().messages.contains { $0.text == "6 finish of t3 rejected (transactionStillPurchasing)" })
    }

    @Test("notes stay on the page and their boxes hold their text")
    func notesFit() throws {
        let html = Self.diagram().html()
        let pattern = /<rect x="(-?\d+)" y="-?\d+" width="(\d+)" height="20"[^>]*\/>\s*<text x="\d+" y="\d+" text-anchor="middle">([^<]*)<\/text>/
        var notes = 0
        for match in html.matches(of: pattern) {
            notes += 1
            let left = Int(match.1)!, width = Int(match.2)!
            #expect(left >= 0)
            #expect(width >= match.3.count * 6, "a box of \(width) px for \(match.3.count) characters")
        }
        #expect(notes >= 3)
    }
}
