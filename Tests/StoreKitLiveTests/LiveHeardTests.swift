import EventLog
import Foundation
import Testing
import StoreKitModel
import StoreKitRuntime
import StoreKitTestSupport

/// Live senders report what they had heard (issue 32 item 1): real `sksim` processes over real
/// sockets, and the queue records it in each unit's input record (docs/log-format.md).
@Suite(.serialized) struct LiveHeardTests {
    struct Input {
        var sequence: UInt64
        var recorded: RecordedInput
    }

    static func inputs(_ log: URL, partition: String) throws -> [Input] {
        var inputs: [Input] = []
        try PartitionReader(directory: log, partition: partition).forEachRecord(includingInputs: true) { view in
            guard view.isInput else { return }
            inputs.append(Input(sequence: view.sequence, recorded: try RecordedInput.decode(view.payload)))
        }
        return inputs
    }

    @Test("a live run's input records carry what each sender had heard, never past what the queue had appended when it took the command")
    func liveInputsCarryHeard() throws {
        let run = try LiveRunTests.BackgroundRun(topologyText: LiveRunTests.topology(devices: 4, purchases: 5, transport: "ipc"))
        let result = try #require(try run.wait(seconds: 90), "the run did not end within 90 s")
        #expect(result.failure == nil && result.finished)
        let inputs = try Self.inputs(run.runDirectory.appendingPathComponent("log"), partition: "queue")
        #expect(inputs.count > 50, "\(inputs.count) inputs")
        let known = inputs.filter { !$0.recorded.heard.lastDelivered.isEmpty }
        #expect(known.count * 4 >= inputs.count * 3, "\(known.count) of \(inputs.count) inputs say what their sender had heard")
        // Only a sender's first commands, sent as version 1 before the queue's HELLO reply offered version 2, go without a report.
        var lastUnknown: [String: UInt64] = [:]
        for input in inputs where input.recorded.heard.lastDelivered.isEmpty {
            let id = input.recorded.commandID
            lastUnknown[id.origin] = max(lastUnknown[id.origin] ?? 0, id.number)
        }
        for input in known {
            let id = input.recorded.commandID
            #expect(id.number > lastUnknown[id.origin] ?? 0, "\(id) reported what it heard before an earlier command that did not")
        }
        for input in known {
            let heard = input.recorded.heard.lastDelivered
            #expect(heard.count == 1, "one partition, one heard sequence: \(heard)")
            // The input's sequence is the next one the queue appends: whatever a sender heard was appended before it.
            #expect(heard[0] < input.sequence, "\(input.recorded.commandID) heard \(heard[0]) before event \(input.sequence) was appended")
        }
        #expect(known.contains { $0.recorded.heard.lastDelivered[0] > 0 }, "the senders heard events")
        // The store decides a payment only after hearing it added: each decision's heard reaches that event.
        var added: [TransactionKey: UInt64] = [:]
        try PartitionReader(directory: run.runDirectory.appendingPathComponent("log"), partition: "queue").forEachRecord { view in
            let recorded = try LogProjection.decode(sequence: view.sequence, timestamp: view.timestampNanoseconds, payload: view.payload)
            if case .transactionAdded(let key, _) = recorded.event { added[key] = view.sequence }
        }
        var decisions = 0
        for input in known {
            guard case .command(let command) = input.recorded.handled, case .decidePurchase(let key, _) = command.body else { continue }
            decisions += 1
            let addedAt = try #require(added[key])
            #expect(input.recorded.heard.lastDelivered[0] >= addedAt, "the store decided \(key) having heard \(input.recorded.heard.lastDelivered[0]), before its payment (\(addedAt))")
        }
        #expect(decisions > 0)
    }

    @Test("with two partitions each input's heard names both, in the topology's order: its own partition's never past what was appended, the other's never past its log's end")
    func twoPartitionsHeard() throws {
        let run = try LiveRunTests.BackgroundRun(topologyText: PartitionTopologyTests.topology(queues: PartitionTopologyTests.twoQueues))
        let result = try #require(try run.wait(seconds: 90), "the run did not end within 90 s")
        #expect(result.failure == nil && result.finished)
        let log = run.runDirectory.appendingPathComponent("log")
        let partitions = ["queue-1", "queue-2"]
        var lastSequence: [UInt64] = []
        for partition in partitions {
            var last: UInt64 = 0
            try PartitionReader(directory: log, partition: partition).forEachRecord { last = $0.sequence }
            lastSequence.append(last)
        }
        var reported = 0
        for (index, partition) in partitions.enumerated() {
            for input in try Self.inputs(log, partition: partition) where !input.recorded.heard.lastDelivered.isEmpty {
                reported += 1
                let heard = input.recorded.heard.lastDelivered
                #expect(heard.count == 2, "\(heard)")
                guard heard.count == 2 else { continue }
                #expect(heard[index] < input.sequence, "\(input.recorded.commandID) in \(partition) heard \(heard[index]) before event \(input.sequence)")
                #expect(heard[1 - index] <= lastSequence[1 - index])
            }
        }
        #expect(reported > 50, "\(reported) inputs report what their sender heard")
    }
}
