import EventLog
import Foundation
import StoreKitRoles
import StoreKitRuntime
import Testing

/// Errors carry codes that code tells apart; their messages are for people.
@Suite struct ErrorCodeTests {
    @Test("Content storage tells a write that does not continue the content from content that does not exist")
    func contentStorageCodes() throws {
        let storage = VirtualContentStorage()
        try storage.append("a", contentIdentifier: "c", offset: 0, count: 10)
        let gap = #expect(throws: ContentStorageError.self) { try storage.append("a", contentIdentifier: "c", offset: 20, count: 1) }
        #expect(gap?.code == .writeNotAtEnd)
        let missing = #expect(throws: ContentStorageError.self) { try storage.copy("b", to: "c") }
        #expect(missing?.code == .notFound)
    }

    @Test("Choosing a partition tells a folder without a log from a partition the log does not have")
    func logSelectionCodes() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("error-codes-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let empty = #expect(throws: LogSelectionError.self) { _ = try PartitionedLogProjection.partitionNames(in: directory) }
        #expect(empty?.code == .noPartition)
        let storage = try DiskLogStorage(directory: directory, partition: "queue", durability: .operatingSystem)
        _ = try storage.appendUnit([[1]], timestamp: 0)
        try storage.close()
        #expect(try PartitionedLogProjection.selectPartitions(in: directory, only: "queue") == ["queue"])
        let unknown = #expect(throws: LogSelectionError.self) { _ = try PartitionedLogProjection.selectPartitions(in: directory, only: "other") }
        #expect(unknown?.code == .unknownPartition)
    }

    @Test("Scenario validation says which kind of value cannot work")
    func configurationCodes() {
        var apps = Scenario(seed: 1, devices: 1)
        apps.apps.purchasesPerDevice = -1
        #expect((#expect(throws: ConfigurationError.self) { try apps.validate() })?.code == .outOfRange)
        var observers = Scenario(seed: 1, devices: 1)
        observers.apps.observers = []
        #expect((#expect(throws: ConfigurationError.self) { try observers.validate() })?.code == .missingValue)
        var actions = Scenario(seed: 1, devices: 1)
        actions.store.actions = [StoreAction(atMilliseconds: 5, action: .refund, device: "device-0001", product: "no.such.product")]
        #expect((#expect(throws: ConfigurationError.self) { try actions.validate() })?.code == .unknownProduct)
    }
}
