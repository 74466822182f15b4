import Bus
import StoreKitModel
import Testing
@testable import StoreKitLive

/// The live queue's per-sender order, with bounded patience (pure logic: time is passed in).
@Suite struct SenderOrderGateTests {
    let second: Int64 = 1_000_000_000

    @Test("a command ahead of its sender's order waits, for at most the gate's patience, then is applied")
    func gapIsWaitedForThenAccepted() {
        var gate = SenderOrderGate()
        let id = CommandID(origin: "observer-1.77", number: 12)
        let waits1 = gate.mustWait(id, highest: 10, skipsAhead: true, now: 0)
        #expect(waits1)
        let waits2 = gate.mustWait(id, highest: 10, skipsAhead: true, now: 2 * second)
        #expect(waits2)
        // Number 11 left nothing in the log (a no-op before a queue restart): no retry brings it.
        let waits3 = gate.mustWait(id, highest: 10, skipsAhead: true, now: 3 * second + 1)
        #expect(!waits3)
        #expect(gate.waitingSenders == 0)
    }

    @Test("a gap that closes (the earlier command arrives) resets the patience")
    func closedGapResets() {
        var gate = SenderOrderGate()
        let origin = "store.5"
        let waits4 = gate.mustWait(CommandID(origin: origin, number: 5), highest: 3, skipsAhead: true, now: 0)
        #expect(waits4)
        let waits5 = gate.mustWait(CommandID(origin: origin, number: 4), highest: 3, skipsAhead: false, now: second)
        #expect(!waits5)
        // A new gap later is waited for from its own start, not the old one's.
        let waits6 = gate.mustWait(CommandID(origin: origin, number: 7), highest: 5, skipsAhead: true, now: 10 * second)
        #expect(waits6)
        let waits7 = gate.mustWait(CommandID(origin: origin, number: 7), highest: 5, skipsAhead: true, now: 12 * second)
        #expect(waits7)
    }

    @Test("senders waited for are bounded: beyond the bound a gap is not waited for")
    func boundedSenders() {
        var gate = SenderOrderGate()
        for index in 0..<SenderOrderGate.maximumWaitingSenders {
            let waits8 = gate.mustWait(CommandID(origin: "s\(index)", number: 3), highest: 1, skipsAhead: true, now: 0)
            #expect(waits8)
        }
        let waits9 = gate.mustWait(CommandID(origin: "one-too-many", number: 3), highest: 1, skipsAhead: true, now: 0)
        #expect(!waits9)
        #expect(gate.waitingSenders == SenderOrderGate.maximumWaitingSenders)
    }

    @Test("a sender's first command must be number 1: a higher one from an origin the queue never saw waits (its earlier ones were lost with a restarted queue)")
    func unknownOriginStartsAtOne() {
        var gate = SenderOrderGate()
        var window = CommandWindow(capacity: 64)
        let late = CommandID(origin: "observer-1.23938@queue-2", number: 9)
        let waits = gate.mustWait(late, window: window, now: 0)
        #expect(waits)
        let first = gate.mustWait(CommandID(origin: late.origin, number: 1), window: window, now: second)
        #expect(!first)
        window.insert(CommandID(origin: late.origin, number: 1), sequence: 1)
        let stillWaits = gate.mustWait(late, window: window, now: 2 * second)
        #expect(stillWaits, "numbers 2 to 8 are still on their way")
        for number in UInt64(2)...8 { window.insert(CommandID(origin: late.origin, number: number), sequence: number) }
        let applied = gate.mustWait(late, window: window, now: 2 * second)
        #expect(!applied)
        // An id beyond the window's reach is not held here (the engine refuses it as forged).
        let forged = gate.mustWait(CommandID(origin: "stranger", number: 1_000_000), window: window, now: 0)
        #expect(!forged)
    }
}
