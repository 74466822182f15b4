import Testing
import StoreKitModel
import StoreKitRoles
import StoreKitRuntime
@testable import StoreKitReplay

/// A live replay answers the app's receipt refreshes (R-R2) as the recorded store did: the same
/// pieces (entries, `firstIndex`, `isLast`) after their recorded delay from the refresh's start,
/// held like the other replies for the device's launches and quits, the entries naming the live
/// run's purchases of the same identity. And the comparison holds the receipts. Time is injected.
@Suite struct LiveReplayReceiptTests {
    /// Two devices of one account, many purchases: receipts of more than one piece (100 entries
    /// each; finished consumables leave the receipt, so it grows by about one entry in five purchases).
    static func recording() throws -> Recording {
        try recordInMemory(seed: 24, devices: 2, purchases: 400) {
            $0.apps.receiptRefreshProbability = 0.01
            $0.apps.devicesPerAccount = 2
            $0.apps.relaunchProbability = 0.2
        }
    }

    /// The recorded store's receipt pieces, per refresh, as commands, with their delay from the refresh's start.
    static func recordedPieces(_ events: [RecordedEvent]) -> [LiveReplayPlan.ReceiptName: [(delay: Int64, body: CommandBody, lifecycles: Int)]] {
        var started: [LiveReplayPlan.ReceiptName: Int64] = [:]
        var lifecycles = LifecycleTally()
        var pieces: [LiveReplayPlan.ReceiptName: [(delay: Int64, body: CommandBody, lifecycles: Int)]] = [:]
        for recorded in events {
            lifecycles.add(recorded.event)
            switch recorded.event {
            case .receiptRefreshStarted(let device, let request):
                started[LiveReplayPlan.ReceiptName(device: device, request: request)] = recorded.timestamp
            case .receiptDelivered(let device, let request, let firstIndex, let entries, let isLast):
                let name = LiveReplayPlan.ReceiptName(device: device, request: request)
                pieces[name, default: []].append((recorded.timestamp - started[name]!,
                                                  .deliverReceipt(device: device, request: request, firstIndex: firstIndex, entries: entries, isLast: isLast),
                                                  lifecycles[device]))
            default:
                break
            }
        }
        return pieces
    }

    @Test("The plan holds every recorded receipt piece, in order, timed from its refresh's start, with the device's launches, first attachments and quits before it")
    func planHoldsEveryPiece() throws {
        let recording = try Self.recording()
        let events = try recordedEvents(recording)
        let recorded = Self.recordedPieces(events)
        try #require(recorded.count >= 2, "the recording has fewer than 2 receipt refreshes; pick another seed")
        try #require(recorded.values.contains { $0.count > 1 }, "no receipt of several pieces; pick another seed")
        let plan = try LiveReplayPlan(recording: recording)
        #expect(Set(plan.receiptAnswers.keys) == Set(recorded.keys))
        for (name, pieces) in recorded {
            let planned = plan.receiptAnswers[name] ?? []
            #expect(planned.map(\.body) == pieces.map(\.body), "\(name)")
            #expect(planned.map(\.delayNanoseconds) == pieces.map(\.delay), "\(name)")
            #expect(planned.map(\.lifecyclesBefore) == pieces.map(\.lifecycles), "\(name)")
        }
        // Every listed purchase is known by identity, so the live run's purchase can stand in for it.
        let listed = Set(recorded.values.joined().flatMap { piece -> [String] in
            guard case .deliverReceipt(_, _, _, let entries, _) = piece.body else { return [] }
            return entries.map(\.transactionIdentifier)
        })
        #expect(!listed.isEmpty)
        #expect(listed.isSubset(of: Set(plan.namedPurchases.keys)))
    }

    @Test("A user's action recorded after a receipt piece waits for it: receipt pieces count among the device's replies")
    func stepsCountReceiptPieces() throws {
        let recording = try Self.recording()
        let plan = try LiveReplayPlan(recording: recording)
        // Per device, the recorded world's commands about it logged before each user action.
        var world: [String: Int] = [:]
        var expected: [String: [Int]] = [:]
        var receiptPieces = 0
        try recording.forEachUnit { unit in
            guard let body = unit.body else { return }
            switch unit.source {
            case .store, .downloader: world[body.device, default: 0] += 1
            case .user: expected[unit.device, default: []].append(world[unit.device] ?? 0)
            default: break
            }
            if case .deliverReceipt = body { receiptPieces += 1 }
        }
        try #require(receiptPieces > 0)
        for device in ["device-0001", "device-0002"] {
            let planned = plan.steps(of: device).compactMap { step -> Int? in if case .user = step.step { step.repliesBefore } else { nil } }
            #expect(planned == expected[device], "\(device)")
        }
    }

    /// The recording's events as a live run would log them: the store gave every purchase and
    /// renewal another identifier.
    static func asLive(_ recorded: RecordedEvent) -> RecordedEvent {
        var live = recorded
        switch recorded.event {
        case .transactionPurchased(let key, let identifier, let downloads, let charged):
            live.event = .transactionPurchased(key, identifier: "live-" + identifier, downloads: downloads, charged: charged)
        case .subscriptionRenewed(let key, let identifier, let original, let downloads):
            var original = original
            original.transactionIdentifier = "live-" + original.transactionIdentifier
            live.event = .subscriptionRenewed(key, identifier: "live-" + identifier, original: original, downloads: downloads)
        default:
            break
        }
        return live
    }

    @Test("The replaying store answers a live refresh with the recorded pieces, listing the live run's purchases")
    func storeAnswersWithLivePurchases() throws {
        let recording = try Self.recording()
        let events = try recordedEvents(recording)
        let recorded = Self.recordedPieces(events)
        let plan = try LiveReplayPlan(recording: recording)
        let store = RecordedWorldRole(name: "store", kind: .store, plan: plan, speed: 1)
        _ = store.resume(now: 0)
        var sent: [LiveReplayPlan.ReceiptName: [CommandBody]] = [:]
        var tokens: [TimerToken] = []
        for recorded in events {
            // Heard at its own time; every timer fires once the whole log was heard (overdue replies go in order).
            for effect in store.receive(Self.asLive(recorded), now: recorded.timestamp) {
                if case .timer(_, let token) = effect, case .answerReceiptRefresh = token { tokens.append(token) }
            }
        }
        try #require(tokens.count == recorded.count)
        let late = events.last!.timestamp + 10_000_000_000
        while let token = tokens.first {
            tokens.removeFirst()
            for effect in store.timerFired(token, now: late) {
                switch effect {
                case .send(let body):
                    guard case .deliverReceipt(let device, let request, _, _, _) = body else { continue }
                    sent[LiveReplayPlan.ReceiptName(device: device, request: request), default: []].append(body)
                case .timer(_, let next):
                    tokens.append(next)
                }
            }
        }
        for (name, pieces) in recorded {
            let answered = sent[name] ?? []
            try #require(answered.count == pieces.count, "\(name): \(answered.count) of \(pieces.count) pieces")
            for (piece, answer) in zip(pieces, answered) {
                guard case .deliverReceipt(_, _, let firstIndex, let entries, let isLast) = piece.body,
                      case .deliverReceipt(_, _, let liveFirst, let liveEntries, let liveLast) = answer else { continue }
                #expect(liveFirst == firstIndex && liveLast == isLast)
                #expect(liveEntries.map(\.payment) == entries.map(\.payment))
                #expect(liveEntries.map(\.transactionIdentifier) == entries.map { "live-" + $0.transactionIdentifier })
            }
        }
    }

    /// A store answer that names purchases: a receipt piece lists them, a restore piece restores them.
    enum NamingAnswer: String, CaseIterable, Sendable { case receipt, restore }

    /// The first request whose first answer names a purchase: its timer, the answer's first event,
    /// and the purchases the answer names.
    static func firstNamingAnswer(_ kind: NamingAnswer, in events: [RecordedEvent]) -> (token: TimerToken, piece: RecordedEvent, named: [String])? {
        for recorded in events {
            switch (kind, recorded.event) {
            case (.receipt, .receiptRefreshStarted(let device, let request)):
                guard let piece = events.first(where: { if case .receiptDelivered(device, request, _, let entries, _) = $0.event { !entries.isEmpty } else { false } }),
                      case .receiptDelivered(_, _, _, let entries, _) = piece.event else { continue }
                return (.answerReceiptRefresh(device: device, request: request), piece, entries.map(\.transactionIdentifier))
            case (.restore, .restoreStarted(let device, let restore, _)):
                guard let piece = events.first(where: { if case .transactionRestored(let key, restore, _, _, _) = $0.event { key.device == device } else { false } }) else { continue }
                let named = events.compactMap { recorded -> String? in
                    guard recorded.commandID == piece.commandID, case .transactionRestored(_, _, _, let original, _) = recorded.event else { return nil }
                    return original.transactionIdentifier
                }
                return (.answerRestore(device: device, restore: restore), piece, named)
            default:
                continue
            }
        }
        return nil
    }

    @Test("A receipt or restore piece waits for the live purchases it names (released by the purchase's event), at most maximumNanoseconds; it then names them", arguments: NamingAnswer.allCases)
    func pieceWaitsForItsPurchases(_ kind: NamingAnswer) throws {
        // Restores of purchases made on the account's other device too, as in the live replay where
        // a restore answered before its device's own purchase gave that purchase's number away (R-T3).
        let recording = kind == .receipt ? try Self.recording() : try recordInMemory(seed: 24, devices: 2, purchases: 60) {
            $0.apps.restoreProbability = 0.3
            $0.apps.devicesPerAccount = 2
        }
        let events = try recordedEvents(recording)
        let (token, piece, named) = try #require(Self.firstNamingAnswer(kind, in: events), "no \(kind) naming a purchase; pick another seed")
        let answered = try #require(events.firstIndex { $0.sequence == piece.sequence })
        // The newest purchase it names (the store may answer after purchases made since the
        // request began), heard live only after the piece is due.
        let withheld = try #require(events[..<answered].lastIndex { recorded in
            if case .transactionPurchased(_, let identifier, _, _) = recorded.event { named.contains(identifier) } else { false }
        })
        let plan = try LiveReplayPlan(recording: recording)
        func storeBeforeTheAnswer() -> RecordedWorldRole {
            let store = RecordedWorldRole(name: "store", kind: .store, plan: plan, speed: 1)
            _ = store.resume(now: 0)
            for index in events[..<answered].indices where index != withheld { _ = store.receive(events[index], now: events[index].timestamp) }
            return store
        }
        func pieces(_ effects: [Effect]) -> [[OriginalTransaction]] {
            effects.compactMap { effect in
                switch effect {
                case .send(.deliverReceipt(_, _, _, let entries, _)): entries
                case .send(.completeRestore(_, _, _, let originals, _)): originals
                default: nil
                }
            }
        }
        let due = piece.timestamp + 1_000_000

        let store = storeBeforeTheAnswer()
        #expect(pieces(store.timerFired(token, now: due)).isEmpty, "held: the live run has not purchased \(events[withheld].event)")
        let released = pieces(store.receive(events[withheld], now: due + 10))
        #expect(released.count == 1, "released by the purchase's event")
        #expect(released.first?.map(\.transactionIdentifier) == named)
        #expect(pieces(store.timerFired(token, now: due + 20)).isEmpty, "sent once")

        let bounded = storeBeforeTheAnswer()
        #expect(pieces(bounded.timerFired(token, now: due)).isEmpty)
        #expect(pieces(bounded.timerFired(token, now: due + RecordedOrderHold.maximumNanoseconds - 1)).isEmpty)
        #expect(pieces(bounded.timerFired(token, now: due + RecordedOrderHold.maximumNanoseconds)).count == 1, "sent after the bound, the purchase as recorded")
    }

    @Test("A restore piece names the live run's purchases of the recorded originals' identities")
    func restoreNamesLivePurchases() throws {
        let recording = try recordInMemory(seed: 24, devices: 2, purchases: 60) {
            $0.apps.restoreProbability = 0.3
            $0.apps.devicesPerAccount = 2
        }
        let events = try recordedEvents(recording)
        let plan = try LiveReplayPlan(recording: recording)
        let store = RecordedWorldRole(name: "store", kind: .store, plan: plan, speed: 1)
        _ = store.resume(now: 0)
        var tokens: [TimerToken] = []
        for recorded in events {
            for effect in store.receive(Self.asLive(recorded), now: recorded.timestamp) {
                if case .timer(_, let token) = effect, case .answerRestore = token { tokens.append(token) }
            }
        }
        try #require(!tokens.isEmpty, "no restore; pick another seed")
        var restored: [String] = []
        let late = events.last!.timestamp + 10_000_000_000
        while let token = tokens.first {
            tokens.removeFirst()
            for effect in store.timerFired(token, now: late) {
                switch effect {
                case .send(.completeRestore(_, _, _, let originals, _)): restored += originals.map(\.transactionIdentifier)
                case .timer(_, let next): tokens.append(next)
                default: break
                }
            }
        }
        let recorded = events.compactMap { if case .transactionRestored(_, _, _, let original, _) = $0.event { original.transactionIdentifier } else { nil } }
        #expect(!recorded.isEmpty)
        #expect(restored == recorded.map { "live-" + $0 })
    }

    @Test("A store process that starts after a refresh began sends the pieces still owed, not those already logged")
    func lateStoreSendsTheRest() throws {
        let recording = try Self.recording()
        let events = try recordedEvents(recording)
        let recorded = Self.recordedPieces(events)
        let (name, pieces) = try #require(recorded.first { $0.value.count > 1 })
        let firstPiece = try #require(events.firstIndex {
            if case .receiptDelivered(name.device, name.request, _, _, _) = $0.event { true } else { false }
        })
        let plan = try LiveReplayPlan(recording: recording)
        let store = RecordedWorldRole(name: "store", kind: .store, plan: plan, speed: 1)
        for recorded in events[...firstPiece] { store.catchUp(recorded) }
        let token = TimerToken.answerReceiptRefresh(device: name.device, request: name.request)
        let effects = store.resume(now: events[firstPiece].timestamp)
        #expect(effects.contains { if case .timer(_, token) = $0 { true } else { false } }, "\(effects)")
        var sent: [CommandBody] = []
        var more = true
        while more {
            more = false
            for effect in store.timerFired(token, now: events.last!.timestamp + 10_000_000_000) {
                if case .send(let body) = effect, case .deliverReceipt = body { sent.append(body) }
                if case .timer(_, token) = effect { more = true }
            }
        }
        #expect(sent.map(\.name) == Array(repeating: "deliverReceipt", count: pieces.count - 1))
        if case .deliverReceipt(_, _, let firstIndex, _, _)? = sent.first, case .deliverReceipt(_, _, let expected, _, _) = pieces[1].body {
            #expect(firstIndex == expected)
        } else {
            Issue.record("no second piece sent: \(sent)")
        }
    }

    @Test("The live comparison holds receipts: a replay whose refreshes were not answered diverges on each receipt's track (missing)")
    func comparisonHoldsReceipts() throws {
        let recording = try Self.recording()
        let events = try recordedEvents(recording)
        let refreshes = Self.recordedPieces(events)
        #expect(try LiveComparison.compare(recording: recording, replayed: recording).result.divergences == 0)
        // The same log without the store's receipt pieces: what a live replay logged before receipts were answered.
        let unanswered = MemoryLogStorage()
        try recording.forEachRecord { sequence, timestamp, payload in
            let decoded = try LogProjection.decode(sequence: sequence, timestamp: timestamp, payload: payload)
            if case .receiptDelivered = decoded.event { return }
            _ = try unanswered.appendUnit([Array(payload)], timestamp: timestamp)
        }
        let outcome = try LiveComparison.compare(recording: recording, replayed: try Recording.storage(unanswered))
        let expected = Set(refreshes.keys.map { LiveComparison.Track.receipt(device: $0.device, request: $0.request) })
        #expect(Set(outcome.differingTracks) == expected)
        #expect(outcome.result.missing == expected.count)
        #expect(outcome.result.firstDivergence?.track?.hasPrefix("the receipt of ") == true, "\(String(describing: outcome.result.firstDivergence))")
    }
}
