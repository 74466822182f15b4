import EventLog
import Foundation
import StoreKitModel
import StoreKitRoles
import StoreKitRuntime
import StoreKitSimulation
import Testing

/// The rebuild's fast path (`LogProjection.build` without the invariant check, which folds with
/// `EncodedEventFold`) against the plain way on real logs on disk: every record read, decoded with
/// `EventCodec.decodeEvent` and applied with `QueueProjection.apply`. Event-by-event and
/// damaged-payload comparisons are in StoreKitModelTests (`EncodedEventFoldTests`).
@Suite struct LogRebuildEquivalenceTests {
    /// A busy scenario: restores, failures, deferrals, Ask to Buy, relaunches, downloads, subscriptions.
    static func scenario(seed: UInt64, catalog: Catalog = .sample) -> Scenario {
        var scenario = Scenario(seed: seed, devices: 8, catalog: catalog)
        scenario.apps.purchasesPerDevice = 12
        scenario.apps.restoreProbability = 0.2
        scenario.apps.relaunchProbability = 0.2
        scenario.store.failureProbability = 0.1
        scenario.store.deferralProbability = 0.1
        scenario.store.cancellationProbability = 0.05
        return scenario
    }

    /// The sample catalog with non-ASCII product and content identifiers.
    static func nonASCIICatalog() throws -> Catalog {
        try Catalog(products: Catalog.sample.products.map { product in
            var renamed = product
            renamed.identifier = product.identifier + ".日本語"
            renamed.hostedContent = product.hostedContent.map { content in
                HostedContent(contentIdentifier: content.contentIdentifier + ".é", contentLength: content.contentLength,
                              contentVersion: content.contentVersion)
            }
            return renamed
        })
    }

    static func simulate(_ scenario: Scenario, logDirectory: URL) throws {
        try FileManager.default.createDirectory(at: logDirectory, withIntermediateDirectories: true)
        let environment = DeterministicEnvironment(
            storage: try DiskLogStorage(directory: logDirectory, partition: LogProjection.partition, durability: .operatingSystem),
            content: VirtualContentStorage(), choices: SeededChoices(seed: scenario.seed), logDescription: logDirectory.path)
        _ = try DeterministicRuntime(scenario: scenario, environment: environment).run()
    }

    /// The plain fold of a log on disk, with every command id it holds and the event kinds seen.
    static func plainFold(_ directory: URL) throws -> (projection: QueueProjection, ids: [CommandID], kinds: Set<String>, products: Set<String>) {
        var projection = QueueProjection()
        var ids: [CommandID] = []
        var kinds: Set<String> = []
        var products: Set<String> = []
        try PartitionReader(directory: directory, partition: LogProjection.partition).forEachRecord { view in
            let decoded = try EventCodec.decodeEvent(view.payload)
            if let id = decoded.commandID { ids.append(id) }
            kinds.insert(decoded.event.name)
            if case .transactionAdded(_, let payment) = decoded.event { products.insert(payment.productIdentifier) }
            projection.apply(RecordedEvent(sequence: view.sequence, timestamp: view.timestampNanoseconds,
                                           commandID: decoded.commandID, event: decoded.event))
        }
        return (projection, ids, kinds, products)
    }

    static func expectSame(_ plain: QueueProjection, _ rebuilt: QueueProjection, ids: [CommandID]) {
        #expect(rebuilt.devices == plain.devices)
        #expect(rebuilt.deviceNames == plain.deviceNames)
        #expect(rebuilt.totals == plain.totals)
        #expect(rebuilt.lastSequence == plain.lastSequence)
        #expect(rebuilt.header == plain.header)
        #expect(rebuilt.recentCommands.count == plain.recentCommands.count)
        #expect(rebuilt.recentCommands.originCount == plain.recentCommands.originCount)
        #expect(ids.allSatisfy { rebuilt.recentCommands.lastSequence(of: $0) == plain.recentCommands.lastSequence(of: $0) })
        #expect(ids.allSatisfy { rebuilt.recentCommands.highest(of: $0.origin) == plain.recentCommands.highest(of: $0.origin) })
    }

    @Test("A rebuilt projection equals the plain fold of the same log, for several seeds", arguments: [1, 7, 42, 99, 1234] as [UInt64])
    func seeds(seed: UInt64) throws {
        let scratch = TemporaryDirectory()
        let log = scratch.path("log")
        try Self.simulate(Self.scenario(seed: seed), logDirectory: log)
        let plain = try Self.plainFold(log)
        #expect(plain.kinds.isSuperset(of: ["transactionAdded", "transactionPurchased", "transactionFinished", "transactionFailed",
                                            "downloadStarted", "downloadFinished", "transactionRestored", "appActionRecorded"]))
        let rebuilt = try LogProjection.build(directory: log, checkInvariants: false)
        Self.expectSame(plain.projection, rebuilt.projection, ids: plain.ids)
        #expect(rebuilt.recordCount == UInt64(plain.projection.totals.events))
        // The checked rebuild decodes whole events (for the checker): the same projection again.
        Self.expectSame(plain.projection, try LogProjection.build(directory: log).projection, ids: plain.ids)
        // As of a sequence in the middle too.
        let middle = plain.projection.lastSequence / 2
        let early = try LogProjection.build(directory: log, through: middle, checkInvariants: false)
        #expect(early.projection.lastSequence == middle)
        Self.expectSame(try LogProjection.build(directory: log, through: middle).projection, early.projection, ids: [])
    }

    @Test("Non-ASCII product and content identifiers rebuild to the plain fold's projection")
    func nonASCIIIdentifiers() throws {
        let scratch = TemporaryDirectory()
        let log = scratch.path("log")
        try Self.simulate(Self.scenario(seed: 5, catalog: try Self.nonASCIICatalog()), logDirectory: log)
        let plain = try Self.plainFold(log)
        #expect(!plain.products.isEmpty && plain.products.allSatisfy { $0.hasSuffix(".日本語") })
        #expect(plain.projection.totals.downloadsFinished > 0)
        Self.expectSame(plain.projection, try LogProjection.build(directory: log, checkInvariants: false).projection, ids: plain.ids)
    }

    @Test("A record that is not a valid event stops the fast rebuild with the plain rebuild's error")
    func invalidEventRecord() throws {
        let scratch = TemporaryDirectory()
        let log = scratch.path("log")
        let writer = try PartitionWriter(directory: log, partition: LogProjection.partition,
                                         configuration: PartitionWriterConfiguration(durability: .operatingSystem))
        let registered = EventCodec.encode(.deviceRegistered(device: "device-0001", account: "account-0001"), commandID: nil)
        var added = EventCodec.encode(.transactionAdded(TransactionKey(device: "device-0001", number: 1),
                                                         Payment(productIdentifier: "com.example.sksim.coins.small")), commandID: nil)
        added.append(0)  // a trailing byte: the CRC is right, the event is not
        for payload in [registered, added] { _ = try payload.withUnsafeBytes { try writer.append(payload: $0, timestampNanoseconds: 1) } }
        try writer.close()
        let message = { (check: Bool) -> String in
            do {
                _ = try LogProjection.build(directory: log, checkInvariants: check)
                return "no error"
            } catch {
                return "\(error)"
            }
        }
        #expect(message(false) == message(true))
        #expect(message(false).hasPrefix("record 2 holds no valid event (malformed payload at byte"))
    }
}
