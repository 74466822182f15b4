import Foundation
import Testing
@testable import StoreKitModel

/// `EncodedEventFold` (the rebuild's fast path) against the plain way: `EventCodec.decodeEvent`
/// then `QueueProjection.apply`, event by event, with the same errors for the same bad payloads.
/// Real logs written by simulations are compared in StoreKitRolesTests (`LogRebuildEquivalenceTests`).
@Suite struct EncodedEventFoldTests {
    /// Folds the same payloads both ways and checks, after every one, that the projections agree
    /// and that a payload one way refuses the other refuses with the same failure.
    static func foldBothWays(_ payloads: [[UInt8]]) throws -> (plain: QueueProjection, fast: QueueProjection, failures: Int) {
        var plain = QueueProjection()
        var fast = EncodedEventFold()
        var ids: [CommandID] = []
        var failures = 0
        for (index, payload) in payloads.enumerated() {
            let sequence = UInt64(index + 1)
            let timestamp = Int64(index) * 1_000 + 7
            var plainFailure: DecodingFailure?
            do {
                let decoded = try EventCodec.decodeEvent(payload)
                if let id = decoded.commandID { ids.append(id) }
                plain.apply(RecordedEvent(sequence: sequence, timestamp: timestamp, commandID: decoded.commandID, event: decoded.event))
            } catch {
                plainFailure = error
            }
            let fastFailure = apply(payload, to: &fast, sequence: sequence, timestamp: timestamp)
            #expect(plainFailure == fastFailure, "payload \(index): \(CodecGoldenTests.hex(payload))")
            if plainFailure != nil { failures += 1 }
            // Every command id is looked up at the end only: checking them all after each payload is quadratic.
            expectSame(plain, fast.projection, ids: index == payloads.count - 1 ? ids : [], context: "after payload \(index)")
        }
        return (plain, fast.projection, failures)
    }

    /// The fast path's failure for one payload, nil when it was applied.
    static func apply(_ payload: [UInt8], to fold: inout EncodedEventFold, sequence: UInt64, timestamp: Int64) -> DecodingFailure? {
        do {
            try payload.withUnsafeBytes { buffer in try fold.apply(sequence: sequence, timestamp: timestamp, payload: buffer) }
            return nil
        } catch let failure as DecodingFailure {
            return failure
        } catch {
            preconditionFailure("EncodedEventFold.apply throws only DecodingFailure")
        }
    }

    static func expectSame(_ plain: QueueProjection, _ fast: QueueProjection, ids: [CommandID], context: String) {
        #expect(plain.devices == fast.devices, "\(context)")
        #expect(plain.deviceNames == fast.deviceNames, "\(context)")
        #expect(plain.totals == fast.totals, "\(context)")
        #expect(plain.lastSequence == fast.lastSequence, "\(context)")
        #expect(plain.header == fast.header, "\(context)")
        #expect(plain.pendingCount == fast.pendingCount, "\(context)")
        #expect(plain.recentCommands.count == fast.recentCommands.count, "\(context)")
        #expect(plain.recentCommands.originCount == fast.recentCommands.originCount, "\(context)")
        for id in ids {
            #expect(plain.recentCommands.contains(id) == fast.recentCommands.contains(id), "\(context): \(id)")
            #expect(plain.recentCommands.lastSequence(of: id) == fast.recentCommands.lastSequence(of: id), "\(context): \(id)")
            #expect(plain.recentCommands.highest(of: id.origin) == fast.recentCommands.highest(of: id.origin), "\(context): \(id)")
        }
    }

    /// Whole lifecycles on devices with short, long, ASCII and non-ASCII names (a long name or
    /// product is a heap string, a short one is stored inline), then every event kind there is.
    static func lifecycles() -> [Event] {
        let devices = ["d", "appareil-é", "устройство-номер-0001", "device-0002"]
        let products = ["p", "com.example.sksim.coins.small", "com.example.产品.金币", "com.example.sksim.levelpack.forest"]
        let content = HostedContent(contentIdentifier: "com.example.sksim.levelpack.forest.levels", contentLength: 24_576, contentVersion: "1.0")
        let music = HostedContent(contentIdentifier: "音楽", contentLength: 1, contentVersion: "1.0.3")
        var events: [Event] = []
        for (index, device) in devices.enumerated() {
            events += [.deviceRegistered(device: device, account: "account-\(index / 2)"), .appLaunched(device: device),
                       .observerAttached(device: device, observer: "downloadThenFinish-1"),
                       .observerAttached(device: device, observer: "ôbserver")]
        }
        for round in 0..<3 {
            for (index, device) in devices.enumerated() {
                let key = TransactionKey(device: device, number: UInt64(round + 1))
                let download = DownloadKey(transaction: key, index: 1)
                events += [
                    .transactionAdded(key, Payment(productIdentifier: products[(index + round) % products.count], quantity: round + 1,
                                                   applicationUsername: round == 1 ? nil : "account-é-\(index)",
                                                   requestData: round == 2 ? [0, 255] : nil)),
                    index == 3 ? .transactionDeferred(key) : .appActionRecorded(.failureShown(key, observer: "ö")),
                    index == 2 && round == 1
                        ? .transactionFailed(key, StoreError(.paymentCancelled, "annulé"))
                        : .transactionPurchased(key, identifier: "\(device).\(round)", downloads: [content, music], charged: round != 1),
                    .downloadStarted(download), .downloadProgressed(download, progress: 0.5, timeRemaining: 1.25),
                    .downloadPaused(download), .downloadResumed(download),
                    // Index 7 names a download the transaction does not have: nothing changes.
                    .downloadProgressed(DownloadKey(transaction: key, index: 7), progress: 0.1, timeRemaining: 2),
                    round == 0 ? .downloadFinished(download, contentURL: "/tmp/contenu/\(device)/\(round)")
                        : round == 1 ? .downloadFailed(download, error: StoreError(.unknown, "perdu")) : .downloadCancelled(download),
                    .appActionRecorded(.contentGranted(key, observer: "o", productIdentifier: products[index])),
                    .appActionRecorded(.contentKept(download, observer: "o")),
                ]
                if round != 2 { events.append(.transactionFinished(key)) }
            }
        }
        // Events of a device never registered change nothing but the totals.
        let stranger = TransactionKey(device: "étranger", number: 1)
        events += [.appLaunched(device: "étranger"), .transactionAdded(stranger, Payment(productIdentifier: "p")),
                   .transactionPurchased(stranger, identifier: "x", downloads: [], charged: true),
                   .downloadStarted(DownloadKey(transaction: stranger, index: 0)), .transactionFinished(stranger)]
        return events + EventCodecTests.everyEvent
    }

    static func encoded(_ events: [Event]) -> [[UInt8]] {
        events.enumerated().map { index, event in
            // Some events with no command id, others from two senders (one with a non-ASCII name).
            let id: CommandID? = index % 5 == 4 ? nil : CommandID(origin: index % 3 == 0 ? "apps" : "störe", number: UInt64(index / 3 + 1))
            return EventCodec.encode(event, commandID: id)
        }
    }

    @Test("Every event kind, on short, long and non-ASCII names, folds from its bytes as decoding then applying does")
    func everyEventKind() throws {
        let events = Self.lifecycles()
        #expect(Set(events.map(\.name)).count == 34, "every event kind is folded")
        let (plain, fast, failures) = try Self.foldBothWays(Self.encoded(events))
        #expect(failures == 0)
        #expect(plain.totals.events == events.count && fast.totals.events == events.count)
        // Four devices: `everyEvent` registers "d" again, which replaces its state in the same slot.
        #expect(fast.deviceCount == 4 && fast.pendingCount > 0)
    }

    @Test("A projection that does not track commands folds the same way too")
    func withoutCommandTracking() throws {
        var plain = QueueProjection(tracksCommands: false)
        var fast = EncodedEventFold(projection: QueueProjection(tracksCommands: false))
        for (index, payload) in Self.encoded(Self.lifecycles()).enumerated() {
            let decoded = try EventCodec.decodeEvent(payload)
            plain.apply(RecordedEvent(sequence: UInt64(index + 1), timestamp: 5, commandID: decoded.commandID, event: decoded.event))
            #expect(Self.apply(payload, to: &fast, sequence: UInt64(index + 1), timestamp: 5) == nil)
        }
        Self.expectSame(plain, fast.projection, ids: [], context: "end")
        #expect(fast.projection.recentCommands.originCount == 0)
    }

    @Test("Damaged payloads (recorded seed 20261123) are refused with the plain decoder's failure, and change nothing")
    func damagedPayloads() throws {
        var generator = FuzzGenerator(state: 20_261_123)
        let valid = Self.encoded(Self.lifecycles())
        var payloads: [[UInt8]] = []
        for round in 0..<3_000 {
            var bytes = valid[round % valid.count]
            // Every other payload is left whole, so the fold goes on with real state between damaged ones.
            if round % 2 == 1 {
                switch generator.next() % 4 {
                case 0: bytes[Int(generator.next() % UInt64(bytes.count))] ^= UInt8(truncatingIfNeeded: generator.next() | 1)
                case 1: bytes.removeLast(Int(generator.next() % UInt64(bytes.count)))
                case 2: bytes += (0..<Int(generator.next() % 4 + 1)).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
                default:
                    // A byte of a string made invalid UTF-8 (0xFF is never valid).
                    bytes[Int(generator.next() % UInt64(bytes.count))] = 0xFF
                }
            }
            payloads.append(bytes)
        }
        let (_, _, failures) = try Self.foldBothWays(payloads)
        #expect(failures > 500)
    }
}
