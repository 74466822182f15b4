import Foundation
import StoreKitModel
import StoreKitRuntime

/// How a what-if replay tells a command sent anew from a recorded one: the same request, an
/// observer's name aside (`ReplaySession.pair`).
extension ReplaySession {
    /// A user's step (a purchase, a restore): what late observers count.
    static func isUserStep(_ body: CommandBody) -> Bool {
        switch body {
        case .addPayment, .restoreCompletedTransactions: true
        default: false
        }
    }

    /// The download a downloader's report is about.
    static func download(of body: CommandBody) -> DownloadKey? {
        switch body {
        case .reportDownloadProgress(let key, _, _), .completeDownload(let key, _), .failDownload(let key, _): key
        default: nil
        }
    }

    /// Equal requests, an observer's name aside: an observer's new name is not a new behaviour.
    static func sameRequest(_ sent: CommandBody, _ recorded: CommandBody) -> Bool {
        switch (sent, recorded) {
        case (.attachObserver(let device, _), .attachObserver(let recordedDevice, _)),
             (.detachObserver(let device, _), .detachObserver(let recordedDevice, _)):
            device == recordedDevice
        case (.recordAppAction(let action), .recordAppAction(let recordedAction)):
            withoutObserverName(action) == withoutObserverName(recordedAction)
        default:
            matches(sent, recorded)
        }
    }

    static func withoutObserverName(_ event: Event) -> Event {
        switch event {
        case .observerAttached(let device, _): .observerAttached(device: device, observer: "")
        case .observerDetached(let device, _): .observerDetached(device: device, observer: "")
        case .appActionRecorded(let action): .appActionRecorded(withoutObserverName(action))
        default: event
        }
    }

    static func withoutObserverName(_ action: AppAction) -> AppAction {
        switch action {
        case .contentGranted(let key, _, let product): .contentGranted(key, observer: "", productIdentifier: product)
        case .contentKept(let key, _): .contentKept(key, observer: "")
        case .restoreShownDone(let device, let restore, _): .restoreShownDone(device: device, restore: restore, observer: "")
        case .failureShown(let key, _): .failureShown(key, observer: "")
        case .transactionReported(let key, _, let report): .transactionReported(key, observer: "", report: report)
        }
    }

    /// The command sent stands for the recorded one: equal, or a download request whose
    /// recorded events name only some of its downloads (the others needed nothing).
    static func matches(_ sent: CommandBody, _ recorded: CommandBody) -> Bool {
        if sent == recorded { return true }
        switch (sent, recorded) {
        case (.startDownloads(let all), .startDownloads(let some)), (.pauseDownloads(let all), .pauseDownloads(let some)),
             (.resumeDownloads(let all), .resumeDownloads(let some)), (.cancelDownloads(let all), .cancelDownloads(let some)):
            var remaining = some[...]
            for key in all where key == remaining.first { remaining.removeFirst() }
            return remaining.isEmpty && !some.isEmpty
        default:
            return false
        }
    }
}

/// A log that keeps nothing but its length: a replay at full speed is bounded by the
/// projection, not by the log it writes.
public final class DiscardingLogStorage: LogStorage {
    public private(set) var lastSequence: UInt64 = 0
    public init() {}
    public func appendUnit(_ payloads: [[UInt8]], timestamp: Int64) throws -> UInt64 {
        defer { lastSequence += UInt64(payloads.count) }
        return lastSequence + 1
    }
    /// Counted straight from the engine's buffer: no array per event.
    public func appendUnit(bytes: UnsafeRawBufferPointer, ends: [Int], timestamp: Int64) throws -> UInt64 {
        defer { lastSequence += UInt64(ends.count) }
        return lastSequence + 1
    }
    public func forEachRecord(from: UInt64, _ body: (UInt64, Int64, UnsafeRawBufferPointer) throws -> Void) throws {}
    public func close() throws {}
}
