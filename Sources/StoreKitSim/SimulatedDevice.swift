import Foundation
import StoreKitModel
import StoreKitRoles

/// One simulated device as its app's code sees it: the queue of the launch now running, the
/// app's receipt file, and the asynchronous work it started. Every callback into the app's code
/// runs with its device bound (`run`), so `SKPaymentQueue.default()` and
/// `Bundle.main.appStoreReceiptURL` are that device's, whichever thread the runtime uses.
public final class SimulatedDevice: @unchecked Sendable {
    /// The device whose app code is running on this task or thread, if any.
    @TaskLocal static var current: SimulatedDevice?

    public let name: String
    let queue: PaymentQueue
    let storage: DeviceStorage
    /// This launch's `SKPaymentQueue` (a launch's objects go with it, as an app process's do).
    private(set) lazy var paymentQueue = SKPaymentQueue(device: self)

    init(queue: PaymentQueue, storage: DeviceStorage) {
        self.name = queue.device
        self.queue = queue
        self.storage = storage
    }

    /// Receipt refreshes this launch started, oldest first: the store answers them in order.
    var receiptRefreshes: [SKReceiptRefreshRequest] = []

    /// A receipt refresh's answer arrived (the receipt file is already updated).
    func finishReceiptRefresh() {
        guard !receiptRefreshes.isEmpty else { return }
        receiptRefreshes.removeFirst().finished()
    }

    /// Runs `body` as this device's app code.
    func run<Result>(_ body: () throws -> Result) rethrows -> Result {
        try Self.$current.withValue(self, operation: body)
    }

    /// Starts asynchronous work of the app: `completion` runs later, as the app's code on this
    /// device (in exploration its timing, and when `canFail` its failure, are choices).
    func startWork(canFail: Bool, completion: @escaping (_ succeeded: Bool) -> Void) {
        queue.startWork(canFail: canFail) { [self] succeeded in run { completion(succeeded) } }
    }
}

/// What a device keeps across its app's launches: its receipt file.
final class DeviceStorage: @unchecked Sendable {
    let device: String
    /// The folder of the app's bundle on this device; the receipt is `StoreKit/receipt` in it, as on iOS.
    let bundleFolder: URL
    /// The receipt's entries as the device last knew them, by transaction identifier, in order.
    private(set) var receiptEntries: [OriginalTransaction] = []
    private var receiptIdentifiers: Set<String> = []
    private var receiptWritten = false
    private var madeFolder = false

    /// The folder made for this device alone, removed with it.
    private let root: URL

    init(device: String, root: URL) {
        self.device = device
        self.root = root
        self.bundleFolder = root.appendingPathComponent(device.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "device", isDirectory: true)
    }

    deinit {
        if madeFolder { try? FileManager.default.removeItem(at: root) }
    }

    var receiptURL: URL { bundleFolder.appendingPathComponent("StoreKit/receipt") }

    /// A purchase or a restore lands in the device's receipt, as StoreKit updates it.
    func note(_ entry: OriginalTransaction) {
        guard receiptIdentifiers.insert(entry.transactionIdentifier).inserted else { return }
        receiptEntries.append(entry)
        receiptWritten = false
    }

    /// A refreshed receipt replaces what the device had.
    func replaceReceipt(with entries: [OriginalTransaction]) {
        receiptEntries = entries
        receiptIdentifiers = Set(entries.map(\.transactionIdentifier))
        receiptWritten = false
    }

    /// Writes the receipt file if it changed since last written; nil when it cannot be written.
    func writtenReceiptURL() -> URL? {
        if receiptWritten { return receiptURL }
        do {
            madeFolder = true
            try FileManager.default.createDirectory(at: receiptURL.deletingLastPathComponent(), withIntermediateDirectories: true)
            try AppReceipt.encode(receiptEntries).write(to: receiptURL, options: .atomic)
            receiptWritten = true
            return receiptURL
        } catch {
            return nil
        }
    }
}
