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
            throw ConfigurationError("downloader rates must satisfy 0 < minimumBytesPerSecond <= maximumBytesPerSecond")
        }
        guard tickMilliseconds > 0 else { throw ConfigurationError("downloader.tickMilliseconds must be greater than 0") }
        guard (0...1).contains(failureProbabilityPerTick) else {
            throw ConfigurationError("downloader.failureProbabilityPerTick must be between 0 and 1")
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

    // Unchecked exclusivity: changed only by this role's own methods, one access at a time (the
    // content storage never calls back), and touched for most events: the dynamic checks only cost time.
    @exclusivity(unchecked) private var contents: [TransactionKey: [HostedContent]] = [:]
    @exclusivity(unchecked) private var transfers: [DownloadKey: Transfer] = [:]
    /// Downloads the log shows active or paused, for a restarted downloader to take up.
    private var underWay: [DownloadKey: (progress: Double, isActive: Bool)] = [:]
    /// Content written per transaction, deleted when it is finished.
    @exclusivity(unchecked) private var files: [TransactionKey: [String]] = [:]
    /// The product of each transaction that may have content, for its packages' `ContentInfo.plist` (F-H1).
    @exclusivity(unchecked) private var products: [TransactionKey: String] = [:]
    public private(set) var bytesWritten: Int64 = 0
    /// The first content write that failed (see `Role.environmentFailure`).
    // Unchecked exclusivity: read after every step of a deterministic run, written once, by this role only.
    @exclusivity(unchecked) public private(set) var environmentFailure: EnvironmentFailure?

    public init(name: String = "downloader", content: ContentStorage, behavior: DownloaderBehavior, choices: ChoiceSource) {
        self.name = name
        self.content = content
        self.behavior = behavior
        self.choices = choices
    }

    /// Where a download's content goes, relative to the content root (what `contentURL` holds).
    public static func contentPath(_ key: DownloadKey, _ content: HostedContent) -> String {
        "content/\(key.transaction.device)/\(key.transaction.number)/\(content.contentIdentifier)-\(content.contentVersion)"
    }

    /// Remembers which product a transaction is for while it may download (F-H1).
    private func trackProduct(_ event: Event) {
        switch event {
        case .transactionAdded(let key, let payment): products[key] = payment.productIdentifier
        case .transactionRestored(let key, _, _, let original, let downloads) where !downloads.isEmpty:
            products[key] = original.payment.productIdentifier
        case .transactionPurchased(let key, _, let downloads, _) where downloads.isEmpty: products[key] = nil
        case .transactionFailed(let key, _), .transactionFinished(let key): products[key] = nil
        default: break
        }
    }

    public func catchUp(_ recorded: RecordedEvent) {
        trackProduct(recorded.event)
        switch recorded.event {
        case .transactionPurchased(let key, _, let downloads, _), .transactionRestored(let key, _, _, _, let downloads):
            if !downloads.isEmpty { contents[key] = downloads }
        case .downloadStarted(let key), .downloadResumed(let key):
            underWay[key] = (underWay[key]?.progress ?? 0, true)
        case .downloadProgressed(let key, let progress, _):
            underWay[key]?.progress = progress
        case .downloadPaused(let key):
            underWay[key]?.isActive = false
        case .downloadFinished(let key, _), .downloadFailed(let key, _), .downloadCancelled(let key):
            underWay[key] = nil
        case .transactionFinished(let key):
            contents[key] = nil
            underWay = underWay.filter { $0.key.transaction != key }
        default:
            break
        }
    }

    /// Starts again every download the log shows under way (the content is written afresh).
    public func resume(now: Int64) -> [Effect] {
        var effects: [Effect] = []
        for (key, state) in underWay.sorted(by: { $0.key < $1.key }) {
            guard let hosted = contents[key.transaction]?[safe: key.index] else { continue }
            begin(key, hosted)
            transfers[key]?.reportedProgress = state.progress
            if state.isActive { effects += activate(key) }
        }
        underWay.removeAll()
        return effects
    }

    private func begin(_ key: DownloadKey, _ hosted: HostedContent) {
        let rate = behavior.minimumBytesPerSecond + (behavior.maximumBytesPerSecond - behavior.minimumBytesPerSecond) * choices.unit(.transferRate)
        let path = Self.contentPath(key, hosted)
        transfers[key] = Transfer(content: hosted, bytesPerSecond: rate, path: path)
        files[key.transaction, default: []].append(path)
        content.remove(path)  // A fresh start never appends to stale content.
    }

    public func receive(_ recorded: RecordedEvent, now: Int64) -> [Effect] {
        // The apps' actions (a quarter of all events) mean nothing to the downloader.
        if case .appActionRecorded = recorded.event { return [] }
        trackProduct(recorded.event)
        switch recorded.event {
        case .transactionPurchased(let key, _, let downloads, _), .transactionRestored(let key, _, _, _, let downloads):
            if !downloads.isEmpty { contents[key] = downloads }
            return []
        case .downloadStarted(let key):
            guard let hosted = contents[key.transaction]?[safe: key.index] else { return [] }
            begin(key, hosted)
            return activate(key)
        case .downloadResumed(let key):
            return activate(key)
        case .downloadPaused(let key):
            transfers[key]?.isActive = false
            transfers[key]?.generation += 1
            return []
        case .downloadCancelled(let key), .downloadFailed(let key, _):
            if let transfer = transfers.removeValue(forKey: key) { content.remove(transfer.path) }
            return []
        case .downloadFinished(let key, _):
            transfers[key] = nil
            return []
        case .transactionFinished(let key):
            let count = contents.removeValue(forKey: key)?.count ?? 0
            for index in 0..<count { transfers[DownloadKey(transaction: key, index: index)] = nil }
            for path in files.removeValue(forKey: key) ?? [] { content.remove(path) }
            return []
        default:
            return []
        }
    }

    private func activate(_ key: DownloadKey) -> [Effect] {
        guard transfers[key] != nil else { return [] }
        transfers[key]!.isActive = true
        transfers[key]!.generation += 1
        return [tick(key)]
    }

    private func tick(_ key: DownloadKey) -> Effect {
        .timer(afterNanoseconds: Int64(behavior.tickMilliseconds * 1_000_000),
               .downloadTick(key, generation: transfers[key]!.generation))
    }

    public func timerFired(_ token: TimerToken, now: Int64) -> [Effect] {
        guard case .downloadTick(let key, let generation) = token,
              let transfer = transfers[key], transfer.isActive, transfer.generation == generation else { return [] }
        if choices.chance(.downloadFailure, behavior.failureProbabilityPerTick) {
            transfers[key]!.isActive = false
            return [.send(.failDownload(key, error: StoreError(.unknown, "the simulated content server dropped the connection")))]
        }
        if transfer.bytesWritten >= transfer.content.contentLength {
            // Everything was written and progress 1.0 reported on the previous tick: finish now.
            return complete(key, transfer)
        }
        let chunk = min(transfer.content.contentLength - transfer.bytesWritten,
                        max(1, Int64(transfer.bytesPerSecond * behavior.tickMilliseconds / 1_000)))
        do {
            try content.append(transfer.path, contentIdentifier: transfer.content.contentIdentifier,
                               offset: transfer.bytesWritten, count: chunk)
        } catch {
            transfers[key]!.isActive = false
            if environmentFailure == nil { environmentFailure = EnvironmentFailure(role: name, path: transfer.path, underlying: error) }
            return [.send(.failDownload(key, error: StoreError(.unknown, "could not write \(transfer.path): \(error)")))]
        }
        let written = transfer.bytesWritten + chunk
        transfers[key]!.bytesWritten = written
        bytesWritten += chunk
        if written >= transfer.content.contentLength {
            if behavior.reportsFullProgressBeforeFinishing == true, transfer.reportedProgress < 1 {
                transfers[key]!.reportedProgress = 1
                return [.send(.reportDownloadProgress(key, progress: 1, timeRemaining: 0)), tick(key)]
            }
            return complete(key, transfer)
        }
        let progress = Double(written) / Double(transfer.content.contentLength)
        guard progress > transfer.reportedProgress else { return [tick(key)] }
        transfers[key]!.reportedProgress = progress
        let remaining = Double(transfer.content.contentLength - written) / transfer.bytesPerSecond
        return [.send(.reportDownloadProgress(key, progress: progress, timeRemaining: remaining)), tick(key)]
    }
}

extension DownloaderRole {
    /// A transfer that wrote everything: its package is completed (F-H1), then the queue is told.
    private func complete(_ key: DownloadKey, _ transfer: Transfer) -> [Effect] {
        transfers[key]!.isActive = false
        do {
            try content.completePackage(transfer.path, contentIdentifier: transfer.content.contentIdentifier,
                                        contentVersion: transfer.content.contentVersion, productIdentifier: products[key.transaction] ?? "")
        } catch {
            if environmentFailure == nil { environmentFailure = EnvironmentFailure(role: name, path: transfer.path, underlying: error) }
            return [.send(.failDownload(key, error: StoreError(.unknown, "could not complete the package \(transfer.path): \(error)")))]
        }
        return [.send(.completeDownload(key, contentURL: transfer.path))]
    }
}

extension Array {
    subscript(safe index: Int) -> Element? { indices.contains(index) ? self[index] : nil }
}
