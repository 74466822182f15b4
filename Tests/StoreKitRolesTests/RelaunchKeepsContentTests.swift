import Testing
import StoreKitModel
@testable import StoreKitRoles
import StoreKitTestKit

/// R-D3, R-Q4: a download that finishes while the app is not running is kept at the next launch,
/// before the transaction is granted and finished; one kept before the quit is not kept again.
@Suite struct RelaunchKeepsContentTests {
    /// Two hosted downloads in the sample catalog.
    let desert = "com.example.sksim.levelpack.desert"
    let key = TransactionKey(device: "d1", number: 1)

    /// The app's recorded actions about the transaction, in log order, and whether it was finished.
    func actions(_ device: LoopbackDevice) -> [String] {
        device.events.compactMap { recorded -> String? in
            switch recorded.event {
            case .appActionRecorded(.contentKept(let download, _)): "kept \(download.index)"
            case .appActionRecorded(.contentGranted): "granted"
            case .transactionFinished: "finished"
            default: nil
            }
        }
    }

    func purchaseAndStartDownloads(_ device: LoopbackDevice) throws -> [Download] {
        device.launch()
        device.paymentQueue.add(BuiltInObserver(name: "downloadThenFinish-1", behavior: .downloadThenFinish, storage: nil))
        device.pump()
        try device.buy(desert)
        device.send(.decidePurchase(key, .purchased(charged: true)))
        let downloads = try #require(device.paymentQueue.transactions.first?.downloads)
        #expect(downloads.count == 2 && downloads.allSatisfy(\.started), "the observer starts both downloads")
        return downloads
    }

    func relaunch(_ device: LoopbackDevice) {
        device.paymentQueue.enqueue(.launchApp(device: "d1"))
        device.paymentQueue.add(BuiltInObserver(name: "downloadThenFinish-1", behavior: .downloadThenFinish, storage: nil))
        device.pump()
    }

    @Test("Downloads that finished while the app was quit are kept at the relaunch, then granted and finished")
    func finishedWhileQuit() throws {
        let device = LoopbackDevice()
        let downloads = try purchaseAndStartDownloads(device)
        device.paymentQueue.terminateApp()
        device.pump()
        for download in downloads { device.send(.completeDownload(download.key, contentURL: "content/\(download.key.index)")) }
        #expect(actions(device).isEmpty, "nobody is running to keep or grant")
        relaunch(device)
        #expect(actions(device) == downloads.map { "kept \($0.key.index)" } + ["granted", "finished"])
    }

    @Test("A download kept before the quit is not kept again at the relaunch")
    func keptBeforeQuit() throws {
        let device = LoopbackDevice()
        let downloads = try purchaseAndStartDownloads(device)
        device.send(.completeDownload(downloads[0].key, contentURL: "content/0"))
        device.paymentQueue.terminateApp()
        device.pump()
        for download in downloads.dropFirst() { device.send(.completeDownload(download.key, contentURL: "content/\(download.key.index)")) }
        relaunch(device)
        #expect(actions(device) == downloads.map { "kept \($0.key.index)" } + ["granted", "finished"])
    }
}

extension RelaunchKeepsContentTests {
    @Test("A download that finished while the app was quit is kept at the relaunch even while another still runs; then the other, in index order")
    func oneFinishedWhileQuitOneStillRunning() throws {
        let device = LoopbackDevice()
        let downloads = try purchaseAndStartDownloads(device)
        try #require(downloads.count == 2, "the product has two downloads")
        device.paymentQueue.terminateApp()
        device.pump()
        device.send(.completeDownload(downloads[0].key, contentURL: "content/0"))
        relaunch(device)
        #expect(actions(device) == ["kept 0"])
        for download in downloads.dropFirst() { device.send(.completeDownload(download.key, contentURL: "content/\(download.key.index)")) }
        #expect(actions(device) == downloads.map { "kept \($0.key.index)" } + ["granted", "finished"])
    }
}
