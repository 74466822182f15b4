import Foundation
import StoreKitModel

/// How the simulated content servers behave.
public struct DownloaderBehavior: Sendable, Hashable, Codable {
    /// Transfer rate per download, drawn once per download.
    public var minimumBytesPerSecond: Double = 200_000
    public var maximumBytesPerSecond: Double = 2_000_000
    /// How often an active download reports progress.
    public var tickMilliseconds: Double = 100
    /// Chance that one tick fails the download.
    public var failureProbabilityPerTick: Double = 0.002
    /// Report progress 1.0 one tick before the download finishes, as StoreKit may: apps must not
    /// infer completion from progress (R-D2). Optional so logs recorded without it still read.
    public var reportsFullProgressBeforeFinishing: Bool?

    public init() {}

    public func validate() throws(ConfigurationError) {
        guard minimumBytesPerSecond > 0, maximumBytesPerSecond >= minimumBytesPerSecond else {
            throw ConfigurationError("downloader rates must satisfy 0 < minimumBytesPerSecond <= maximumBytesPerSecond", code: .outOfRange)
        }
        guard tickMilliseconds > 0 else { throw ConfigurationError("downloader.tickMilliseconds must be greater than 0", code: .outOfRange) }
        guard (0...1).contains(failureProbabilityPerTick) else {
            throw ConfigurationError("downloader.failureProbabilityPerTick must be between 0 and 1", code: .outOfRange)
        }
    }
}

/// Hosted-content downloads: moves each started download through active (progress,
/// timeRemaining) to finished or failed, honours pause, resume and cancel, writes the
/// content behind `contentURL` (a path relative to the content root), and deletes it
/// when the transaction is finished (R-T4: its URL is invalid from then on).
public final class DownloaderRole: Role {
    public let name: String
    public let content: ContentStorage
    public let behavior: DownloaderBehavior
    private let choices: ChoiceSource

    private struct Transfer {
        var content: HostedContent
        var bytesWritten: Int64 = 0
        var bytesPerSecond: Double
        var generation = 0
        var isActive = false
        var path: String
        /// Progress the queue already holds: a restarted transfer reports only beyond it.
        var reportedProgress: Double = 0
    }

    /// What the downloader knows of one transaction, found with one hash of its key (five
    /// dictionaries keyed by transaction or download cost up to five per event).
    private struct TransactionDownloads {
        /// The product, while the transaction may download: for its packages' `ContentInfo.plist` (F-H1).
        var product: String?
        /// Its hosted content, once purchased or restored with some.
        var contents: [HostedContent]?
        /// Transfers under way or paused, by download index.
        var transfers: [Transfer?] = []
        /// Content written, deleted when the transaction is finished.
        var files: [String] = []

        var isEmpty: Bool { product == nil && contents == nil && files.isEmpty && transfers.allSatisfy { $0 == nil } }
    }

    // Unchecked exclusivity: changed only by this role's own methods, one access at a time (the
    // content storage never calls back), and touched for most events: the dynamic checks only cost time.
    @exclusivity(unchecked) private var transactions: [TransactionKey: TransactionDownloads] = [:]
    /// Downloads the log shows active or paused, for a restarted downloader to take up.
    private var underWay: [DownloadKey: (progress: Double, isActive: Bool)] = [:]
    public private(set) var bytesWritten: Int64 = 0
    /// The first content write that failed (see `Role.environmentFailure`).
    // Unchecked exclusivity: read after every step of a deterministic run, written once, by this role only.
    @exclusivity(unchecked) public private(set) var environmentFailure: EnvironmentFailure?
    /// The tick's delay, computed once.
    private let tickNanoseconds: Int64

    public init(name: String = "downloader", content: ContentStorage, behavior: DownloaderBehavior, choices: ChoiceSource) {
        self.name = name
        self.content = content
        self.behavior = behavior
        self.choices = choices
        self.tickNanoseconds = Int64(behavior.tickMilliseconds * 1_000_000)
    }

    /// Where a download's content goes, relative to the content root (what `contentURL` holds).
    public static func contentPath(_ key: DownloadKey, _ content: HostedContent) -> String {
        "content/\(key.transaction.device)/\(key.transaction.number)/\(content.contentIdentifier)-\(content.contentVersion)"
    }

    /// The product of a transaction that will not download is forgotten (and the record, when nothing else is in it).
    private func forgetProduct(_ key: TransactionKey) {
        guard let index = transactions.index(forKey: key) else { return }
        transactions.values[index].product = nil
        if transactions.values[index].isEmpty { transactions.remove(at: index) }
    }

    /// What the transaction events mean to the downloader, in `catchUp` and `receive` alike: the
    /// product of a transaction that may download (F-H1), and its content.
    private func track(_ event: Event) {
        switch event {
        case .transactionAdded(let key, let payment):
            transactions[key, default: TransactionDownloads()].product = payment.productIdentifier
        case .transactionRestored(let key, _, _, let original, let downloads):
            guard !downloads.isEmpty else { return }
            transactions[key, default: TransactionDownloads()].product = original.payment.productIdentifier
            transactions[key, default: TransactionDownloads()].contents = downloads
        case .transactionPurchased(let key, _, let downloads, _):
            if downloads.isEmpty {
                forgetProduct(key)
            } else {
                transactions[key, default: TransactionDownloads()].contents = downloads
            }
        case .transactionFailed(let key, _):
            forgetProduct(key)
        default:
            break
        }
    }

    public func catchUp(_ recorded: RecordedEvent) {
        track(recorded.event)
        switch recorded.event {
        case .downloadStarted(let key), .downloadResumed(let key):
            underWay[key] = (underWay[key]?.progress ?? 0, true)
        case .downloadProgressed(let key, let progress, _):
            underWay[key]?.progress = progress
        case .downloadPaused(let key):
            underWay[key]?.isActive = false
        case .downloadFinished(let key, _), .downloadFailed(let key, _), .downloadCancelled(let key):
            underWay[key] = nil
        case .transactionFinished(let key):
            transactions[key] = nil
            underWay = underWay.filter { $0.key.transaction != key }
        default:
            break
        }
    }

    /// Starts again every download the log shows under way (the content is written afresh).
    public func resume(now: Int64) -> [Effect] {
        var effects: [Effect] = []
        for (key, state) in underWay.sorted(by: { $0.key < $1.key }) {
            guard let index = transactions.index(forKey: key.transaction),
                  let hosted = transactions.values[index].contents?[safe: key.index] else { continue }
            begin(key, hosted, at: index)
            transactions.values[index].transfers[key.index]?.reportedProgress = state.progress
            if state.isActive { activate(key, at: index, into: &effects) }
        }
        underWay.removeAll()
        return effects
    }

    private func begin(_ key: DownloadKey, _ hosted: HostedContent, at index: Dictionary<TransactionKey, TransactionDownloads>.Index) {
        let rate = behavior.minimumBytesPerSecond + (behavior.maximumBytesPerSecond - behavior.minimumBytesPerSecond) * choices.unit(.transferRate)
        let path = Self.contentPath(key, hosted)
        Self.place(Transfer(content: hosted, bytesPerSecond: rate, path: path), at: key.index, in: &transactions.values[index])
        content.remove(path)  // A fresh start never appends to stale content.
    }

    private static func place(_ transfer: Transfer, at slot: Int, in record: inout TransactionDownloads) {
        while record.transfers.count <= slot { record.transfers.append(nil) }
        record.files.append(transfer.path)
        record.transfers[slot] = transfer
    }

    public func receive(_ recorded: RecordedEvent, now: Int64) -> [Effect] {
        var effects: [Effect] = []
        receive(recorded, now: now, into: &effects)
        return effects
    }

    public func receive(_ recorded: RecordedEvent, now: Int64, into effects: inout [Effect]) {
        switch recorded.event {
        case .appActionRecorded:
            // The apps' actions (a quarter of all events) mean nothing to the downloader.
            return
        case .transactionAdded, .transactionRestored, .transactionPurchased, .transactionFailed:
            track(recorded.event)
        case .downloadStarted(let key):
            guard let index = transactions.index(forKey: key.transaction),
                  let hosted = transactions.values[index].contents?[safe: key.index] else { return }
            begin(key, hosted, at: index)
            activate(key, at: index, into: &effects)
        case .downloadResumed(let key):
            guard let index = transactions.index(forKey: key.transaction) else { return }
            activate(key, at: index, into: &effects)
        case .downloadPaused(let key):
            guard let index = transactions.index(forKey: key.transaction), key.index < transactions.values[index].transfers.count,
                  transactions.values[index].transfers[key.index] != nil else { return }
            transactions.values[index].transfers[key.index]!.isActive = false
            transactions.values[index].transfers[key.index]!.generation += 1
        case .downloadCancelled(let key), .downloadFailed(let key, _):
            guard let index = transactions.index(forKey: key.transaction), key.index < transactions.values[index].transfers.count,
                  let path = transactions.values[index].transfers[key.index]?.path else { return }
            transactions.values[index].transfers[key.index] = nil
            content.remove(path)
        case .downloadFinished(let key, _):
            guard let index = transactions.index(forKey: key.transaction), key.index < transactions.values[index].transfers.count else { return }
            transactions.values[index].transfers[key.index] = nil
        case .transactionFinished(let key):
            guard let record = transactions.removeValue(forKey: key) else { return }
            for path in record.files { content.remove(path) }
        default:
            return
        }
    }

    private func activate(_ key: DownloadKey, at index: Dictionary<TransactionKey, TransactionDownloads>.Index,
                          into effects: inout [Effect]) {
        guard let generation = Self.activate(key.index, in: &transactions.values[index]) else { return }
        effects.append(tick(key, generation: generation))
    }

    /// Marks a transfer active in a new generation (ticks of the earlier ones do nothing); nil when there is none.
    private static func activate(_ slot: Int, in record: inout TransactionDownloads) -> Int? {
        guard slot < record.transfers.count, record.transfers[slot] != nil else { return nil }
        record.transfers[slot]!.isActive = true
        record.transfers[slot]!.generation += 1
        return record.transfers[slot]!.generation
    }

    @inline(__always)
    private func tick(_ key: DownloadKey, generation: Int) -> Effect {
        .timer(afterNanoseconds: tickNanoseconds, .downloadTick(key, generation: generation))
    }

    public func timerFired(_ token: TimerToken, now: Int64) -> [Effect] {
        var effects: [Effect] = []
        timerFired(token, now: now, into: &effects)
        return effects
    }

    public func timerFired(_ token: TimerToken, now: Int64, into effects: inout [Effect]) {
        guard case .downloadTick(let key, let generation) = token,
              let index = transactions.index(forKey: key.transaction) else { return }
        // The transfer is changed in place: copying it out retained its strings on every tick.
        advance(key, generation: generation, &transactions.values[index], into: &effects)
    }

    /// One tick of a transfer: a failure, a chunk written and progress reported, or completion.
    private func advance(_ key: DownloadKey, generation: Int, _ record: inout TransactionDownloads, into effects: inout [Effect]) {
        let slot = key.index
        guard slot < record.transfers.count, record.transfers[slot]?.isActive == true,
              record.transfers[slot]!.generation == generation else { return }
        if choices.chance(.downloadFailure, behavior.failureProbabilityPerTick) {
            record.transfers[slot]!.isActive = false
            effects.append(.send(.failDownload(key, error: StoreError(.unknown, "the simulated content server dropped the connection"))))
            return
        }
        let contentLength = record.transfers[slot]!.content.contentLength
        let alreadyWritten = record.transfers[slot]!.bytesWritten
        if alreadyWritten >= contentLength {
            // Everything was written and progress 1.0 reported on the previous tick: finish now.
            return complete(key, &record, into: &effects)
        }
        let bytesPerSecond = record.transfers[slot]!.bytesPerSecond
        let chunk = min(contentLength - alreadyWritten, max(1, Int64(bytesPerSecond * behavior.tickMilliseconds / 1_000)))
        do {
            try content.append(record.transfers[slot]!.path, contentIdentifier: record.transfers[slot]!.content.contentIdentifier,
                               offset: alreadyWritten, count: chunk)
        } catch {
            record.transfers[slot]!.isActive = false
            let path = record.transfers[slot]!.path
            if environmentFailure == nil { environmentFailure = EnvironmentFailure(role: name, path: path, underlying: error) }
            effects.append(.send(.failDownload(key, error: StoreError(.unknown, "could not write \(path): \(error)"))))
            return
        }
        let written = alreadyWritten + chunk
        record.transfers[slot]!.bytesWritten = written
        bytesWritten += chunk
        let reportedProgress = record.transfers[slot]!.reportedProgress
        if written >= contentLength {
            if behavior.reportsFullProgressBeforeFinishing == true, reportedProgress < 1 {
                record.transfers[slot]!.reportedProgress = 1
                effects.append(.send(.reportDownloadProgress(key, progress: 1, timeRemaining: 0)))
                effects.append(tick(key, generation: generation))
                return
            }
            return complete(key, &record, into: &effects)
        }
        let progress = Double(written) / Double(contentLength)
        guard progress > reportedProgress else { return effects.append(tick(key, generation: generation)) }
        record.transfers[slot]!.reportedProgress = progress
        let remaining = Double(contentLength - written) / bytesPerSecond
        effects.append(.send(.reportDownloadProgress(key, progress: progress, timeRemaining: remaining)))
        effects.append(tick(key, generation: generation))
    }

    /// A transfer that wrote everything: its package is completed (F-H1), then the queue is told.
    private func complete(_ key: DownloadKey, _ record: inout TransactionDownloads, into effects: inout [Effect]) {
        record.transfers[key.index]!.isActive = false
        let path = record.transfers[key.index]!.path
        do {
            try content.completePackage(path, contentIdentifier: record.transfers[key.index]!.content.contentIdentifier,
                                        contentVersion: record.transfers[key.index]!.content.contentVersion,
                                        productIdentifier: record.product ?? "")
        } catch {
            if environmentFailure == nil { environmentFailure = EnvironmentFailure(role: name, path: path, underlying: error) }
            effects.append(.send(.failDownload(key, error: StoreError(.unknown, "could not complete the package \(path): \(error)"))))
            return
        }
        effects.append(.send(.completeDownload(key, contentURL: path)))
    }
}

extension Array {
    subscript(safe index: Int) -> Element? { indices.contains(index) ? self[index] : nil }
}
