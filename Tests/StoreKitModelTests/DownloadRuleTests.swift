import StoreKitTestKit
import Testing
@testable import StoreKitModel

@Suite struct DownloadRuleTests {
    private func startedDownload() -> (QueueHarness, DownloadKey) {
        var queue = QueueHarness()
        queue.ready()
        let key = DownloadKey(transaction: queue.purchase(SampleProducts.forest), index: 0)
        return (queue, key)
    }

    @Test("R-D1: a download carries its content's id, length and version; contentURL only once finished")
    func fields() {
        var (queue, key) = startedDownload()
        let content = Catalog.sample.product(SampleProducts.forest)!.hostedContent[0]
        var download = queue.transaction(key.transaction)!.downloads[0]
        #expect(download.contentIdentifier == content.contentIdentifier)
        #expect(download.contentLength == content.contentLength)
        #expect(download.contentVersion == content.contentVersion)
        #expect(download.timeRemaining == Download.timeRemainingUnknown)
        #expect(download.contentURL == nil)
        queue.send(.startDownloads([key]))
        queue.send(.reportDownloadProgress(key, progress: 0.5, timeRemaining: 2))
        download = queue.transaction(key.transaction)!.downloads[0]
        #expect(download.progress == 0.5 && download.timeRemaining == 2 && download.contentURL == nil)
        queue.send(.completeDownload(key, contentURL: "/tmp/content"))
        download = queue.transaction(key.transaction)!.downloads[0]
        #expect(download.downloadState == .finished && download.contentURL == "/tmp/content")
    }

    @Test("R-D1: progress must stay within 0…1 and never go back; timeRemaining is seconds or -1",
          arguments: [(1.5, 1.0), (-0.1, 1.0), (0.2, -5.0), (Double.nan, 1.0)])
    func progressBounds(progress: Double, timeRemaining: Double) {
        var (queue, key) = startedDownload()
        queue.send(.startDownloads([key]))
        queue.send(.reportDownloadProgress(key, progress: 0.3, timeRemaining: 1))
        let decision = queue.send(.reportDownloadProgress(key, progress: progress, timeRemaining: timeRemaining))
        #expect(queue.rejection(decision) == .invalidProgress)
    }

    @Test("A contentURL that climbs out of the content root ('..') is refused: apps copy what it names",
          arguments: ["../../etc", "content/../../x", "content/d/1/x\u{0}"])
    func contentURLInsideTheContentRoot(url: String) {
        var (queue, key) = startedDownload()
        queue.send(.startDownloads([key]))
        #expect(queue.rejection(queue.send(.completeDownload(key, contentURL: url))) == .invalidArgument)
        #expect(queue.transaction(key.transaction)!.downloads[0].downloadState == .active)
        queue.send(.completeDownload(key, contentURL: "content/d1/1/a..b-1.0"))
        #expect(queue.transaction(key.transaction)!.downloads[0].downloadState == .finished)
    }

    @Test("R-D2: waiting → active → paused → active → finished; invalid moves are refused")
    func stateMachine() {
        var (queue, key) = startedDownload()
        #expect(queue.rejection(queue.send(.pauseDownloads([key]))) == .invalidDownloadTransition)
        queue.send(.startDownloads([key]))
        queue.send(.pauseDownloads([key]))
        #expect(queue.transaction(key.transaction)!.downloads[0].downloadState == .paused)
        #expect(queue.rejection(queue.send(.completeDownload(key, contentURL: "/x"))) == .invalidDownloadTransition)
        queue.send(.resumeDownloads([key]))
        queue.send(.completeDownload(key, contentURL: "/x"))
        #expect(queue.transaction(key.transaction)!.downloads[0].downloadState == .finished)
        #expect(queue.rejection(queue.send(.cancelDownloads([key]))) == .invalidDownloadTransition)
    }

    @Test("R-D2: a download can fail or be cancelled, and then it is final")
    func failAndCancel() {
        var (queue, key) = startedDownload()
        queue.send(.startDownloads([key]))
        queue.send(.failDownload(key, error: StoreError(.unknown, "dropped")))
        let failed = queue.transaction(key.transaction)!.downloads[0]
        #expect(failed.downloadState == .failed && failed.error?.code == .unknown)
        #expect(queue.rejection(queue.send(.resumeDownloads([key]))) == .invalidDownloadTransition)
        let other = DownloadKey(transaction: queue.purchase(SampleProducts.forest), index: 0)
        queue.send(.cancelDownloads([other]))
        #expect(queue.transaction(other.transaction)!.downloads[0].downloadState == .cancelled)
    }

    @Test("R-D3: downloads come with the purchased transaction; apps never create them")
    func downloadsComeFromTransactions() {
        var queue = QueueHarness()
        queue.ready()
        let plain = queue.purchase(SampleProducts.coins)
        let hosted = queue.purchase(SampleProducts.desert)
        #expect(queue.transaction(plain)?.downloads.isEmpty == true)
        #expect(queue.transaction(hosted)?.downloads.map(\.contentIdentifier)
                == Catalog.sample.product(SampleProducts.desert)!.hostedContent.map(\.contentIdentifier))
    }
}
