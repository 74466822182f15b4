import Foundation
import StoreKitModel

/// How the simulated content servers behave.
public struct DownloaderBehavior: Sendable, Hashable {
    /// Transfer rate per download, drawn once per download.
    public var minimumBytesPerSecond: Double = 200_000
    public var maximumBytesPerSecond: Double = 2_000_000
    /// How often an active download reports progress.
    public var tickMilliseconds: Double = 100
    /// Chance that one tick fails the download.
    public var failureProbabilityPerTick: Double = 0.002

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
/// real content file behind `contentURL`, and deletes it when the transaction is
/// finished (R-T4: its URL is invalid from then on).
public final class DownloaderRole: Role {
    public let name: String
    public let contentDirectory: URL
    public let behavior: DownloaderBehavior
    private var random: SeededRandom

    private struct Transfer {
        var content: HostedContent
        var bytesWritten: Int64 = 0
        var bytesPerSecond: Double
        var generation = 0
        var isActive = false
        var path: String
    }

    private var contents: [TransactionKey: [HostedContent]] = [:]
    private var transfers: [DownloadKey: Transfer] = [:]
    /// Files written per transaction, deleted when it is finished.
    private var files: [TransactionKey: [String]] = [:]
    public private(set) var bytesWritten: Int64 = 0
    public private(set) var fileErrors: [String] = []

    public init(name: String = "downloader", contentDirectory: URL, behavior: DownloaderBehavior, seed: UInt64) {
        self.name = name
        self.contentDirectory = contentDirectory
        self.behavior = behavior
        self.random = SeededRandom(seed: seed, stream: name)
    }

    /// The file a download's content is written to.
    public func contentPath(_ key: DownloadKey, _ content: HostedContent) -> String {
        contentDirectory
            .appendingPathComponent(key.transaction.device, isDirectory: true)
            .appendingPathComponent("\(key.transaction.number)", isDirectory: true)
            .appendingPathComponent("\(content.contentIdentifier)-\(content.contentVersion)")
            .path
    }

    public func receive(_ recorded: RecordedEvent, now: Int64) -> [Effect] {
        switch recorded.event {
        case .transactionPurchased(let key, _, let downloads, _), .transactionRestored(let key, _, _, _, let downloads):
            if !downloads.isEmpty { contents[key] = downloads }
            return []
        case .downloadStarted(let key):
            guard let content = contents[key.transaction]?[safe: key.index] else { return [] }
            let rate = behavior.minimumBytesPerSecond + (behavior.maximumBytesPerSecond - behavior.minimumBytesPerSecond) * random.nextUnit()
            let path = contentPath(key, content)
            transfers[key] = Transfer(content: content, bytesPerSecond: rate, path: path)
            files[key.transaction, default: []].append(path)
            removeFile(path)  // A fresh start never appends to a stale file.
            return activate(key)
        case .downloadResumed(let key):
            return activate(key)
        case .downloadPaused(let key):
            transfers[key]?.isActive = false
            transfers[key]?.generation += 1
            return []
        case .downloadCancelled(let key), .downloadFailed(let key, _):
            if let transfer = transfers.removeValue(forKey: key) { removeFile(transfer.path) }
            return []
        case .downloadFinished(let key, _):
            transfers[key] = nil
            return []
        case .transactionFinished(let key):
            let count = contents.removeValue(forKey: key)?.count ?? 0
            for index in 0..<count { transfers[DownloadKey(transaction: key, index: index)] = nil }
            for path in files.removeValue(forKey: key) ?? [] { removeFile(path) }
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
        if random.chance(behavior.failureProbabilityPerTick) {
            transfers[key]!.isActive = false
            return [.send(.failDownload(key, error: StoreError(.downloadFailed, "the simulated content server dropped the connection")))]
        }
        let chunk = min(transfer.content.contentLength - transfer.bytesWritten,
                        max(1, Int64(transfer.bytesPerSecond * behavior.tickMilliseconds / 1_000)))
        do {
            try appendContent(to: transfer.path, contentIdentifier: transfer.content.contentIdentifier,
                              offset: transfer.bytesWritten, count: chunk)
        } catch {
            transfers[key]!.isActive = false
            fileErrors.append("\(transfer.path): \(error)")
            return [.send(.failDownload(key, error: StoreError(.downloadFailed, "could not write \(transfer.path): \(error)")))]
        }
        let written = transfer.bytesWritten + chunk
        transfers[key]!.bytesWritten = written
        bytesWritten += chunk
        if written >= transfer.content.contentLength {
            transfers[key]!.isActive = false
            return [.send(.completeDownload(key, contentURL: transfer.path))]
        }
        let progress = Double(written) / Double(transfer.content.contentLength)
        let remaining = Double(transfer.content.contentLength - written) / transfer.bytesPerSecond
        return [.send(.reportDownloadProgress(key, progress: progress, timeRemaining: remaining)), tick(key)]
    }

    /// Content bytes are a pure function of the content identifier and offset, so a
    /// replayed run writes identical files and a test can check them.
    public static func contentByte(contentIdentifier: String, offset: Int64) -> UInt8 {
        contentByte(seed: contentSeed(contentIdentifier), offset: offset)
    }

    /// The per-content part of `contentByte`, hashed once per chunk rather than per byte.
    static func contentSeed(_ contentIdentifier: String) -> UInt64 {
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        for byte in contentIdentifier.utf8 { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01B3 }
        return hash >> 8
    }

    static func contentByte(seed: UInt64, offset: Int64) -> UInt8 {
        UInt8(truncatingIfNeeded: seed &+ UInt64(bitPattern: offset) &* 31)
    }

    private func appendContent(to path: String, contentIdentifier: String, offset: Int64, count: Int64) throws {
        let url = URL(fileURLWithPath: path)
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        let seed = Self.contentSeed(contentIdentifier)
        let bytes = (0..<count).map { Self.contentByte(seed: seed, offset: offset + $0) }
        if offset == 0 {
            try Data(bytes).write(to: url)
        } else {
            let handle = try FileHandle(forWritingTo: url)
            defer { try? handle.close() }
            try handle.seekToEnd()
            try handle.write(contentsOf: bytes)
        }
    }

    private func removeFile(_ path: String) {
        try? FileManager.default.removeItem(atPath: path)
    }
}

extension Array {
    subscript(safe index: Int) -> Element? { indices.contains(index) ? self[index] : nil }
}
