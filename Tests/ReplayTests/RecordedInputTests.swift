import EventLog
import Foundation
import StoreKitModel
import StoreKitRoles
import StoreKitRuntime
import StoreKitSimulation
import StoreKitTestSupport
import Testing
@testable import StoreKitReplay

/// The log's inputs (log format 3): each unit begins with the command the queue handled, as accepted,
/// and what its sender had heard; a command that changed nothing leaves its input alone. A log of the
/// older format 2 is still replayed, and `sksim log upgrade` rewrites it as format 3.
@Suite(.serialized) struct RecordedInputTests {
    /// A deterministic run's log in memory, and its scenario.
    static func record(seed: UInt64, devices: Int, purchases: Int,
                       configure: (inout Scenario) -> Void = { _ in }) throws -> (storage: LogStorage, scenario: Scenario) {
        var scenario = Scenario(seed: seed, devices: devices)
        scenario.apps.purchasesPerDevice = purchases
        configure(&scenario)
        let environment = DeterministicEnvironment.inMemory(seed: seed)
        _ = try DeterministicRuntime(scenario: scenario, environment: environment).run()
        return (environment.storage, scenario)
    }

    /// A recording of format 2 made by sksim before input records (`simulate --devices 2
    /// --purchases-per-device 2 --seed 5`), kept in the repository.
    static let formatTwoLog = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("Fixtures/format2-log", isDirectory: true)

    @Test("Every unit of a recording begins with its command as accepted and the last sequence its sender had heard before sending it")
    func unitsBeginWithTheirCommand() throws {
        let (storage, _) = try Self.record(seed: 11, devices: 3, purchases: 6) { scenario in
            scenario.network.duplicateProbability = 0.1
        }
        var input: RecordedInput?
        var inputsAlone: [RecordedInput] = []
        var unitsWithInput = 0
        var eventsChecked = 0
        try storage.forEachRecordIncludingInputs { record in
            if record.isInput {
                #expect(input == nil, "an input before \(record.sequence) while the previous unit was open")
                let decoded = try RecordedInput.decode(record.payload)
                #expect(decoded.heard.lastDelivered.count == 1)
                // A sender hears only what was appended before its command was handled.
                #expect(decoded.heard.lastDelivered[0] < record.sequence)
                if record.endsUnit { inputsAlone.append(decoded) } else { input = decoded; unitsWithInput += 1 }
                return
            }
            let event = try LogProjection.decode(sequence: record.sequence, timestamp: record.timestamp, payload: record.payload)
            if event.commandID == nil {
                #expect(input == nil)
                #expect(record.sequence == 1, "only the header answers no command")
            } else {
                let command = try #require(input.flatMap { if case .command(let command) = $0.handled { command } else { nil } })
                #expect(command.id == event.commandID)
                if case .commandRejected(let rejected, _) = event.event { #expect(rejected == command.body) }
                eventsChecked += 1
            }
            if record.endsUnit { input = nil }
        }
        #expect(unitsWithInput > 50 && eventsChecked > unitsWithInput)
        // Duplicated deliveries of commands are recorded as duplicates: their id, not their body again.
        #expect(inputsAlone.contains { if case .duplicate = $0.handled { true } else { false } })
    }

    @Test("A command that changed nothing leaves its input alone, and a queue engine started again on the log knows its number")
    func restartedEngineKnowsNoOperations() throws {
        let (storage, scenario) = try Self.record(seed: 2, devices: 2, purchases: 3)
        var finishes: [Command] = []
        try storage.forEachRecordIncludingInputs { record in
            guard record.isInput, case .command(let command) = try RecordedInput.decode(record.payload).handled,
                  case .finishTransaction = command.body else { return }
            finishes.append(command)
        }
        let finish = try #require(finishes.first)
        // Finishing a finished transaction again, under a new number: a no-op, recorded as its input alone.
        let again = Command(id: CommandID(origin: "test.1", number: 1), body: finish.body)
        let before = storage.lastSequence
        let first = try QueueEngine(catalog: scenario.catalog, storage: storage)
        #expect(try first.handle(again, timestamp: 0, heard: HeardSequences([before])).decision == .accepted)
        #expect(storage.lastSequence == before)
        var last: RecordedInput?
        try storage.forEachRecordIncludingInputs { record in
            if record.isInput { last = try RecordedInput.decode(record.payload) }
        }
        #expect(last == RecordedInput(.command(again), heard: HeardSequences([before])))
        // A queue restarted on the log answers it "duplicate": it learnt the number from the input.
        let restarted = try QueueEngine(catalog: scenario.catalog, storage: storage)
        #expect(try restarted.handle(again, timestamp: 0).decision == .duplicate)
        #expect(storage.lastSequence == before)
    }

    @Test("A recording of log format 2, made by sksim before input records, replays byte for byte")
    func formatTwoRecordingReplays() throws {
        let recording = try Recording.open(path: Self.formatTwoLog.path)
        let result = try ReplaySession(recording: recording).run()
        #expect(result.identical && result.divergences == 0, "\(String(describing: result.firstDivergence))")
        #expect(result.events == 40)
    }

    @Test("`sksim log upgrade` rewrites a format 2 log as format 3 and says so; a second time it says there is nothing to do")
    func upgradeCommand() throws {
        let scratch = ReplayCommandLineTests.Scratch()
        let copy = scratch.path("old")
        try FileManager.default.copyItem(atPath: Self.formatTwoLog.path, toPath: copy)
        let before = try ReplayCommandLineTests.sksim(["log", "cat", copy, "--json"])
        #expect(before.status == 0, "\(before.error)")

        let upgraded = try ReplayCommandLineTests.sksim(["log", "upgrade", copy])
        #expect(upgraded.status == 0, "\(upgraded.error)")
        #expect(upgraded.output.hasPrefix("upgraded 1 segment(s) from log format 2 to 3;"), "\(upgraded.output)")
        let after = try ReplayCommandLineTests.sksim(["log", "cat", copy, "--json"])
        #expect(after.output == before.output)
        let replayed = try ReplayCommandLineTests.sksim(["replay", copy])
        #expect(replayed.status == 0, "\(replayed.output) \(replayed.error)")

        let again = try ReplayCommandLineTests.sksim(["log", "upgrade", copy])
        #expect(again.status == 0)
        #expect(again.output.hasPrefix("nothing to upgrade: the log is format 3 already"), "\(again.output)")
    }
}
