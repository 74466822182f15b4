import EventLog
import Foundation
import Testing
import StoreKitModel
import StoreKitRoles
import StoreKitRuntime
import StoreKitSimulation

/// The engine over a real log cut at every byte, as a crash would leave it.
@Suite struct EngineCrashTests {
    @Test("A log cut at any byte reopens with every command's events whole or absent, and the engine carries on")
    func crashAtEveryByte() throws {
        let scratch = TemporaryDirectory()
        let logDirectory = scratch.path("log")
        try FileManager.default.createDirectory(at: logDirectory, withIntermediateDirectories: true)
        var scenario = Scenario(seed: 3, devices: 1)
        scenario.apps.purchasesPerDevice = 3
        scenario.apps.relaunchProbability = 0
        scenario.apps.observers = [.finishBeforeDownloads]  // finishing with downloads running: several events per command
        let storage = try DiskLogStorage(directory: logDirectory, partition: LogProjection.partition, durability: .always)
        _ = try DeterministicRuntime(scenario: scenario, environment: DeterministicEnvironment(
            storage: storage, content: VirtualContentStorage(), choices: SeededChoices(seed: 3), logDescription: "")).run()

        // How many events each command produced in the whole log.
        let whole = try events(in: logDirectory)
        var perCommand: [CommandID: Int] = [:]
        for event in whole { if let id = event.commandID { perCommand[id, default: 0] += 1 } }
        #expect(perCommand.values.contains { $0 > 1 }, "the scenario must have commands with several events")

        let partition = logDirectory.appendingPathComponent(LogProjection.partition)
        let segment = try #require(try FileManager.default.contentsOfDirectory(atPath: partition.path).first { $0.hasSuffix(".segment") })
        let bytes = try Data(contentsOf: partition.appendingPathComponent(segment))
        var cuts = 0
        for length in stride(from: 0, through: bytes.count, by: 1) {
            let copy = scratch.path("cut")
            try? FileManager.default.removeItem(at: copy)
            try FileManager.default.createDirectory(at: copy.appendingPathComponent(LogProjection.partition), withIntermediateDirectories: true)
            try bytes.prefix(length).write(to: copy.appendingPathComponent(LogProjection.partition).appendingPathComponent(segment))
            // Reopening as the queue does recovers the torn tail; the engine rebuilds from what is left.
            let reopened = try DiskLogStorage(directory: copy, partition: LogProjection.partition, durability: .operatingSystem)
            let engine = try QueueEngine(catalog: scenario.catalog, storage: reopened)
            var seen: [CommandID: Int] = [:]
            try reopened.forEachRecord(from: 1) { sequence, timestamp, payload in
                let recorded = try LogProjection.decode(sequence: sequence, timestamp: timestamp, payload: payload)
                if let id = recorded.commandID { seen[id, default: 0] += 1 }
            }
            for (id, count) in seen { #expect(count == perCommand[id], "cut at byte \(length): command \(id) has \(count) of \(perCommand[id] ?? 0) events") }
            #expect(engine.projection.lastSequence == reopened.lastSequence)
            try reopened.close()
            cuts += 1
        }
        #expect(cuts == bytes.count + 1)
    }

    private func events(in directory: URL) throws -> [RecordedEvent] {
        var result: [RecordedEvent] = []
        try PartitionReader(directory: directory, partition: LogProjection.partition).forEachRecord(from: 1, through: .max) { view in
            result.append(try LogProjection.decode(sequence: view.sequence, timestamp: view.timestampNanoseconds, payload: view.payload))
        }
        return result
    }
}
