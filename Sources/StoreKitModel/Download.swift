/// SKDownloadState (R-D2). Printed by case name; raw values are part of the log format.
public enum DownloadState: UInt8, Sendable, Hashable, CaseIterable {
    case waiting = 0
    case active = 1
    case paused = 2
    case finished = 3
    case failed = 4
    case cancelled = 5

    /// A download in one of these states never changes again.
    public var isFinal: Bool { self == .finished || self == .failed || self == .cancelled }

}

/// SKDownload: hosted content of a purchased or restored transaction (R-D1).
public struct Download: Sendable, Hashable, Identifiable {
    /// `SKDownloadTimeRemainingUnknown`.
    public static let timeRemainingUnknown: Double = -1

    public var key: DownloadKey
    public var contentIdentifier: String
    public var contentLength: Int64
    public var contentVersion: String
    public var downloadState: DownloadState
    /// 0.0 … 1.0; apps must not infer completion from it (R-D2).
    public var progress: Double
    /// Seconds, or `timeRemainingUnknown`.
    public var timeRemaining: Double
    /// Defined only when failed.
    public var error: StoreError?
    /// A file path, defined only when finished and invalid once the transaction is finished (R-D1, R-T4).
    public var contentURL: String?
    /// True once the app asked for it (startDownloads); false while it merely waits in the transaction.
    public var started: Bool

    public var id: DownloadKey { key }

    public init(key: DownloadKey, content: HostedContent) {
        self.key = key
        self.contentIdentifier = content.contentIdentifier
        self.contentLength = content.contentLength
        self.contentVersion = content.contentVersion
        self.downloadState = .waiting
        self.progress = 0
        self.timeRemaining = Download.timeRemainingUnknown
        self.error = nil
        self.contentURL = nil
        self.started = false
    }

    public var hostedContent: HostedContent {
        HostedContent(contentIdentifier: contentIdentifier, contentLength: contentLength, contentVersion: contentVersion)
    }
}
