/// The topology the replay tests record with `sksim run` and replay with `sksim replay --live`:
/// one queue (or `queues` of them, `queue-1`…, each its own log partition), the store, the
/// downloader and two observer processes, each with half of the devices; fast think times,
/// store latencies and downloads so a run takes a second or two.
public struct ReplayTopology: Sendable {
    public var name = "replay-live"
    public var seed: UInt64
    public var devices = 4
    public var devicesPerAccount: Int?
    public var purchasesPerDevice: Int
    public var restoreProbability: Double?
    /// The apps' chance to refresh the receipt after a purchase (R-R2); nil: never.
    public var receiptRefreshProbability: Double?
    public var relaunchProbability: Double
    public var thinkTimeMeanMilliseconds = 10
    /// The store's chance to interrupt a purchase (F-I1); nil: none.
    public var interruptedPurchaseProbability: Double?
    /// The scenario's `storeActions` (F-T2), as YAML flow text, e.g. `[{atMilliseconds: 400, action: clearTransactions, device: device-0002}]`.
    public var storeActions: String?
    public var queues = 1
    /// The catalog file (an absolute path, or relative to the topology file); nil: the built-in sample.
    public var catalog: String?
    /// The apps' chance to buy a subscription at a promotional offer (F-O5); nil: never.
    public var promotionalOfferProbability: Double?

    public init(seed: UInt64, purchasesPerDevice: Int, relaunchProbability: Double) {
        self.seed = seed
        self.purchasesPerDevice = purchasesPerDevice
        self.relaunchProbability = relaunchProbability
    }

    /// The topology file's text.
    public var text: String {
        let queueLines = queues == 1
            ? [#"  - {name: queue, role: queue, events: "ipc://{run}/e.ipc", requests: "ipc://{run}/r.ipc"}"#]
            : (1...queues).map { #"  - {name: queue-\#($0), role: queue, events: "ipc://{run}/q\#($0)-e.ipc", requests: "ipc://{run}/q\#($0)-r.ipc"}"# }
        let half = devices / 2
        let scenario = [
            "  devices: \(devices)",
            catalog.map { "  catalog: \"\($0)\"" },
            devicesPerAccount.map { "  devicesPerAccount: \($0)" },
            "  purchasesPerDevice: \(purchasesPerDevice)",
            "  observers: [downloadThenFinish, audit]",
            restoreProbability.map { "  restoreProbability: \($0)" },
            receiptRefreshProbability.map { "  receiptRefreshProbability: \($0)" },
            promotionalOfferProbability.map { "  promotionalOfferProbability: \($0)" },
            "  relaunchProbability: \(relaunchProbability)",
            storeActions.map { "  storeActions: \($0)" },
            "  thinkTimeMilliseconds: {minimum: 1, mean: \(thinkTimeMeanMilliseconds)}",
            "  store: {latencyMilliseconds: {minimum: 1, mean: 5}\(interruptedPurchaseProbability.map { ", interruptedPurchaseProbability: \($0)" } ?? "")}",
            "  downloader: {minimumBytesPerSecond: 5000000, maximumBytesPerSecond: 20000000, tickMilliseconds: 5}",
        ].compactMap { $0 }
        return (["name: \(name)", "seed: \(seed)", "heartbeatMilliseconds: 100", "scenario:"] + scenario + ["processes:"] + queueLines + [
            "  - {name: store, role: store}",
            "  - {name: downloader, role: downloader}",
            "  - {name: observer-1, role: observer, devices: \"1-\(half)\"}",
            "  - {name: observer-2, role: observer, devices: \"\(half + 1)-\(devices)\"}",
        ]).joined(separator: "\n") + "\n"
    }
}
