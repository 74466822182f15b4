import Foundation
import StoreKitModel
import StoreKitRoles
import StoreKitTestSupport
import Testing

/// A downloader whose content cannot be written (a full disk, a folder that is a file) reports it
/// as its environment's failure, with the path; a live process stops with it (RoleProcess).
@Suite struct DownloaderEnvironmentTests {
    @Test("content that cannot be written is the environment's failure, named with its path")
    func unwritableContent() throws {
        // A content root that is a regular file: every write under it fails, for real.
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("sksim-not-a-folder-\(UUID().uuidString)")
        try Data("x".utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let downloader = DownloaderRole(content: FileContentStorage(root: file), behavior: DownloaderBehavior(), choices: SeededChoices(seed: 1))
        let key = TransactionKey(device: "device-0001", number: 1)
        let hosted = HostedContent(contentIdentifier: "com.example.levels", contentLength: 10_000, contentVersion: "1")
        let feeder = RoleFeeder(downloader)
        feeder.feed(.transactionPurchased(key, identifier: "device-0001.1", downloads: [hosted], charged: true))
        var effects = feeder.feed(.downloadStarted(DownloadKey(transaction: key, index: 0)))
        #expect(downloader.environmentFailure == nil)
        var now: Int64 = 0
        for _ in 0..<10 where downloader.environmentFailure == nil {
            guard let token = effects.lazy.compactMap({ effect -> TimerToken? in
                if case .timer(_, let token) = effect { return token } else { return nil }
            }).first else { break }
            now += 100_000_000
            effects = downloader.timerFired(token, now: now)
        }
        let failure = try #require(downloader.environmentFailure)
        #expect(failure.path == DownloaderRole.contentPath(DownloadKey(transaction: key, index: 0), hosted))
        #expect(!"\(failure.underlying)".isEmpty)
    }
}
