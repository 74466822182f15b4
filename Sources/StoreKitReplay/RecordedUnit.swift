import Foundation
import StoreKitModel
import StoreKitRuntime

/// Who decided a recorded command, which says how a replay treats it.
public enum CommandSource: String, Sendable, Hashable {
    /// The run's first record.
    case header
    /// A user's action: register, launch, quit, buy, restore, allow payments. Taken from the recording.
    case user
    /// The App Store's decisions (outcomes, restore answers). Taken from the recording.
    case store
    /// The content servers' progress, completions and failures. Taken from the recording.
    case downloader
    /// What the app's observer code did (attach, detach, finish, download requests). Taken from
    /// the recording in an unchanged replay; decided anew by the observers under test in a what-if
    /// replay.
    case observer

    public static func of(_ body: CommandBody) -> CommandSource {
        switch body {
        case .registerDevice, .launchApp, .terminateApp, .setPaymentsAllowed, .addPayment, .restoreCompletedTransactions, .refreshReceipt:
            .user
        case .decidePurchase, .completeRestore, .failRestore, .renewSubscription, .expireSubscription, .refundPurchase,
             .resumeInterruptedPurchase, .beginBillingRetry, .clearTransactions, .deliverReceipt:
            .store
        case .reportDownloadProgress, .completeDownload, .failDownload:
            .downloader
        case .attachObserver, .detachObserver, .finishTransaction, .startDownloads, .pauseDownloads, .resumeDownloads, .cancelDownloads,
             .recordAppAction:
            .observer
        }
    }
}

/// One recorded command: the events it caused (one atomic unit of the log), their bytes,
/// and the command itself, rebuilt from those events (or taken whole from its rejection).
public struct RecordedUnit: Sendable {
    /// Sequence of the unit's first record in the recording.
    public var sequence: UInt64
    public var timestamp: Int64
    public var commandID: CommandID?
    public var events: [RecordedEvent]
    /// The logged payload of each event (what the replay's bytes are compared with).
    public var payloads: [[UInt8]]
    /// nil only for the header.
    public var body: CommandBody?
    public var source: CommandSource
    /// The device the command concerns ("" for the header).
    public var device: String
    /// False for a loop copy or a rewritten header: its bytes differ from the recording's on purpose.
    public var isVerbatim = true
    /// Which copy of the recording this is (1 for the original; `--loop`).
    public var copy = 1
    /// What the command's sender had heard when it sent it (from the unit's input record; unknown in
    /// a log of format 2, whose units have none).
    public var heard = HeardSequences.unknown
}

/// Rebuilds each command from the events it caused. A command's events name everything it
/// carried, except where the queue had nothing to do for part of it (a download already
/// started); such a part left no trace, and a command sent anew that carries it still
/// stands for it (see `ReplaySession.matches`).
struct CommandReconstruction {
    /// Transactions restored so far per restore in progress, for `completeRestore.firstIndex`.
    private var restoredSoFar: [RestoreKey: Int] = [:]

    private struct RestoreKey: Hashable {
        var device: String
        var number: UInt64
    }

    struct Failure: Error, CustomStringConvertible {
        var sequence: UInt64
        var message: String
        var description: String { "record \(sequence): \(message)" }
    }

    /// The command of one unit's events (in order), or nil for the header.
    mutating func command(of events: [RecordedEvent]) throws -> CommandBody? {
        guard let first = events.first else { throw Failure(sequence: 0, message: "an empty unit") }
        // Built only when thrown: describing the events costs more than rebuilding the command.
        var failure: Failure {
            Failure(sequence: first.sequence, message: "events \(events.map(\.event.name)) are not what one command causes; the log was not written by this sksim's queue")
        }
        switch first.event {
        case .runStarted:
            guard events.count == 1 else { throw failure }
            return nil
        case .commandRejected(let body, _):
            guard events.count == 1 else { throw failure }
            return body
        case .deviceRegistered(let device, let account): return .registerDevice(device: device, account: account)
        case .appLaunched(let device): return .launchApp(device: device)
        case .appTerminated(let device): return .terminateApp(device: device)
        case .observerAttached(let device, let observer): return .attachObserver(device: device, observer: observer)
        case .observerDetached(let device, let observer): return .detachObserver(device: device, observer: observer)
        case .paymentsAllowedChanged(let device, let allowed): return .setPaymentsAllowed(device: device, allowed: allowed)
        case .transactionAdded(let key, let payment): return .addPayment(device: key.device, payment: payment)
        case .transactionDeferred(let key): return .decidePurchase(key, .deferred)
        case .transactionPurchased(let key, _, _, let charged): return .decidePurchase(key, .purchased(charged: charged))
        case .transactionFailed(let key, let error): return .decidePurchase(key, .failed(error))
        case .restoreStarted(let device, _, let username): return .restoreCompletedTransactions(device: device, applicationUsername: username)
        case .restoreFailed(let device, let restore, let error):
            restoredSoFar[RestoreKey(device: device, number: restore)] = nil
            return .failRestore(device: device, restore: restore, error: error)
        case .transactionRestored, .restoreFinished:
            return try restorePiece(events, failure)
        case .transactionFinished(let key): return .finishTransaction(key)
        case .downloadCancelled:
            // A finish cancels running downloads first, in the same unit.
            if case .transactionFinished(let key) = events.last!.event { return .finishTransaction(key) }
            return .cancelDownloads(try downloadKeys(events, failure))
        case .downloadStarted: return .startDownloads(try downloadKeys(events, failure))
        case .downloadPaused: return .pauseDownloads(try downloadKeys(events, failure))
        case .downloadResumed: return .resumeDownloads(try downloadKeys(events, failure))
        case .downloadProgressed(let key, let progress, let timeRemaining):
            return .reportDownloadProgress(key, progress: progress, timeRemaining: timeRemaining)
        case .downloadFinished(let key, let contentURL): return .completeDownload(key, contentURL: contentURL)
        case .downloadFailed(let key, let error): return .failDownload(key, error: error)
        case .appActionRecorded(let action): return .recordAppAction(action)
        case .askToBuyDeclined(let key): return .decidePurchase(key, .declined)
        case .subscriptionRenewed(let key, _, let original, _): return .renewSubscription(device: key.device, original: original)
        case .subscriptionExpired(let device, let original): return .expireSubscription(device: device, original: original)
        case .entitlementsRevoked(let device, let original): return .refundPurchase(device: device, original: original)
        case .interruptedPurchaseResumed(let key, let interrupted):
            // Followed in the same unit by the new transaction's transactionAdded and transactionPurchased (F-I1).
            guard events.count == 3, case .transactionAdded(key, let payment) = events[1].event,
                  case .transactionPurchased(key, _, _, let charged) = events[2].event else { throw failure }
            return .resumeInterruptedPurchase(device: key.device, interrupted: interrupted, payment: payment, charged: charged)
        case .subscriptionBillingRetry(let device, let original, let grace):
            return .beginBillingRetry(device: device, original: original, gracePeriodNanoseconds: grace)
        case .transactionsCleared(let device): return .clearTransactions(device: device)
        case .receiptRefreshStarted(let device, _): return .refreshReceipt(device: device)
        case .receiptDelivered(let device, let request, let firstIndex, let entries, let isLast):
            return .deliverReceipt(device: device, request: request, firstIndex: firstIndex, entries: entries, isLast: isLast)
        }
    }

    private func downloadKeys(_ events: [RecordedEvent], _ failure: @autoclosure () -> Failure) throws -> [DownloadKey] {
        try events.map { recorded in
            switch recorded.event {
            case .downloadStarted(let key), .downloadPaused(let key), .downloadResumed(let key), .downloadCancelled(let key): key
            default: throw failure()
            }
        }
    }

    private mutating func restorePiece(_ events: [RecordedEvent], _ failure: @autoclosure () -> Failure) throws -> CommandBody {
        var originals: [OriginalTransaction] = []
        var device: String?
        var restore: UInt64?
        var isLast = false
        for recorded in events {
            switch recorded.event {
            case .transactionRestored(let key, let number, _, let original, _) where !isLast:
                guard device == nil || (device == key.device && restore == number) else { throw failure() }
                device = key.device
                restore = number
                originals.append(original)
            case .restoreFinished(let finishedDevice, let number) where !isLast:
                guard device == nil || (device == finishedDevice && restore == number) else { throw failure() }
                device = finishedDevice
                restore = number
                isLast = true
            default:
                throw failure()
            }
        }
        guard let device, let restore else { throw failure() }
        let key = RestoreKey(device: device, number: restore)
        let firstIndex = restoredSoFar[key] ?? 0
        restoredSoFar[key] = isLast ? nil : firstIndex + originals.count
        return .completeRestore(device: device, restore: restore, firstIndex: firstIndex, originals: originals, isLast: isLast)
    }
}

extension Recording {
    /// Reads the recording as units (one command's events each, with its command), in log
    /// order. Returns the torn-tail warning, if any (see `forEachRecord`).
    ///
    /// A unit of log format 3 begins with its input record, which holds the command as accepted: that is
    /// the unit's command. A command that changed nothing (its input alone: a duplicate, a no-op) is not a
    /// unit here: it left the recorded state as it was. A unit of format 2 has no input; its command is
    /// rebuilt from its events (`CommandReconstruction`). With `decodingEvents` false, a unit that has
    /// its command whole (format 3) comes with its payloads only, its `events` empty (`event(at:)` decodes
    /// one): a replay that compares bytes reads each event once.
    @discardableResult
    public func forEachUnit(decodingEvents: Bool = true, _ body: (RecordedUnit) throws -> Void) throws -> String? {
        var reconstruction = CommandReconstruction()
        var group: [RecordedEvent] = []
        var payloads: [[UInt8]] = []
        var first: (sequence: UInt64, timestamp: Int64)?
        var input: RecordedInput?
        var accepted: Command?
        func flush() throws {
            guard let start = first else { return }
            let command: CommandBody?
            let commandID: CommandID?
            if let accepted, group.isEmpty || accepted.id == group[0].commandID {
                command = accepted.body
                commandID = accepted.id
            } else {
                if group.isEmpty { group = try Self.decode(payloads, from: start.sequence, timestamp: start.timestamp, location: location) }
                do {
                    command = try reconstruction.command(of: group)
                } catch let failure as CommandReconstruction.Failure {
                    throw ReplayInputError("\(location): \(failure)")
                }
                commandID = group[0].commandID
            }
            var unit = RecordedUnit(sequence: start.sequence, timestamp: start.timestamp, commandID: commandID,
                                    events: group, payloads: payloads, body: command,
                                    source: command.map { CommandSource.of($0) } ?? .header, device: command?.device ?? "")
            if let input { unit.heard = input.heard }
            // The unit takes the arrays; new ones start empty. (Emptying them while keeping their
            // capacity would copy into a new buffer as large as the largest unit so far, for every
            // unit held ahead: a restore of hundreds of transactions made each of them that large.)
            group = []
            payloads = []
            first = nil
            input = nil
            accepted = nil
            try body(unit)
        }
        let warning = try forEachRecordIncludingInputs { record in
            if record.isInput {
                try flush()
                do {
                    input = record.endsUnit ? nil : try RecordedInput.decode(record.payload)
                } catch {
                    throw ReplayInputError("\(location): the input record before event \(record.sequence): \(error)")
                }
                if let input, case .command(let command) = input.handled { accepted = command }
                return
            }
            if accepted == nil || decodingEvents {
                let recorded: RecordedEvent
                do {
                    recorded = try LogProjection.decode(sequence: record.sequence, timestamp: record.timestamp, payload: record.payload)
                } catch {
                    throw ReplayInputError("\(location): \(error)")
                }
                if input == nil, let last = group.last, last.commandID != recorded.commandID || last.commandID == nil { try flush() }
                group.append(recorded)
            }
            if first == nil { first = (record.sequence, record.timestamp) }
            payloads.append(Array(record.payload))
            if input != nil && record.endsUnit { try flush() }
        }
        try flush()
        return warning
    }

    /// A unit's events decoded from their payloads (one after another from `sequence`, all at `timestamp`).
    static func decode(_ payloads: [[UInt8]], from sequence: UInt64, timestamp: Int64, location: String) throws -> [RecordedEvent] {
        var events: [RecordedEvent] = []
        events.reserveCapacity(payloads.count)
        for (index, payload) in payloads.enumerated() {
            do {
                events.append(try payload.withUnsafeBytes { bytes in
                    try LogProjection.decode(sequence: sequence + UInt64(index), timestamp: timestamp, payload: bytes)
                })
            } catch {
                throw ReplayInputError("\(location): \(error)")
            }
        }
        return events
    }
}

extension RecordedUnit {
    /// The number of events in the unit (read with or without decoding them).
    public var eventCount: Int { payloads.count }

    /// The index of the first replayed event (`bytes`, event k ending at `ends[k]`, all at `timestamp`) that
    /// differs from this unit's recorded one, in bytes or time; nil when they are the same.
    func firstDifference(from bytes: UnsafeRawBufferPointer, ends: [Int], timestamp: Int64) -> Int? {
        let decoded = !events.isEmpty
        var start = 0
        for index in 0..<min(ends.count, payloads.count) {
            let replayed = UnsafeRawBufferPointer(rebasing: bytes[start..<ends[index]])
            start = ends[index]
            let sameBytes = payloads[index].withUnsafeBytes { recorded in
                recorded.count == replayed.count && (replayed.isEmpty || memcmp(recorded.baseAddress!, replayed.baseAddress!, replayed.count) == 0)
            }
            guard sameBytes, timestamp == (decoded ? events[index].timestamp : self.timestamp) else { return index }
        }
        return ends.count == payloads.count ? nil : min(ends.count, payloads.count)
    }

    /// Event `index` of a unit's encoded events (event k ending at `ends[k]`), decoded.
    static func decode(_ bytes: UnsafeRawBufferPointer, ends: [Int], index: Int, sequence: UInt64, timestamp: Int64) -> RecordedEvent? {
        let start = index == 0 ? 0 : ends[index - 1]
        return try? LogProjection.decode(sequence: sequence, timestamp: timestamp, payload: UnsafeRawBufferPointer(rebasing: bytes[start..<ends[index]]))
    }

    /// The unit's event at `index`: decoded already, or decoded now from its payload (a unit read
    /// without decoding its events); nil past the unit's end or if it does not decode.
    public func event(at index: Int) -> RecordedEvent? {
        if events.indices.contains(index) { return events[index] }
        guard events.isEmpty, payloads.indices.contains(index) else { return nil }
        return payloads[index].withUnsafeBytes { bytes in
            try? LogProjection.decode(sequence: sequence + UInt64(index), timestamp: timestamp, payload: bytes)
        }
    }
}
