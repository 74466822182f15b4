import Foundation
import Testing

@testable import EventLog

/// Collects durability notifications from the writer's hook.
final class DurabilityRecorder: @unchecked Sendable {
    private let lock = NSLock()
    private var values: [UInt64] = []
    func record(_ value: UInt64) { lock.withLock { values.append(value) } }
    var recorded: [UInt64] { lock.withLock { values } }
}

/// Whether the flusher's next sync is held by the test (set from the test's thread, read on the flusher's).
final class FlusherHold: @unchecked Sendable {
    private let lock = NSLock()
    private var on = false
    func turnOn() { lock.withLock { on = true } }
    var isOn: Bool { lock.withLock { on } }
}

@Suite struct DurabilityTests {
    @Test("always makes every append durable before it returns")
    func always() throws {
        try withTemporaryDirectory { directory in
            let recorder = DurabilityRecorder()
            var configuration = smallSegments(durability: .always)
            configuration.onDurable = { recorder.record($0) }
            let writer = try PartitionWriter(directory: directory, partition: "main", configuration: configuration)
            for number in 1...10 {
                let sequence = try writer.append(payload: samplePayload(number), timestampNanoseconds: sampleTimestamp(number))
                #expect(writer.durableSequence == sequence)
                #expect(writer.lastSequence == sequence)
            }
            #expect(recorder.recorded == Array(1...10))
            try writer.close()
        }
    }

    @Test("group commit syncs a record at once when the flusher is idle, without waiting for the delay or the count")
    func groupCommitIdle() throws {
        try withTemporaryDirectory { directory in
            let recorder = DurabilityRecorder()
            var configuration = smallSegments(
                maximumSegmentBytes: 1 << 20, durability: .groupCommit(maximumRecords: 1_000, maximumDelayMilliseconds: 600_000))
            configuration.onDurable = { recorder.record($0) }
            let writer = try PartitionWriter(directory: directory, partition: "main", configuration: configuration)
            try writer.append(payload: [1], timestampNanoseconds: 1)
            // Far below the 600 s delay: only an immediate sync can pass.
            #expect(try writer.waitUntilDurable(1, timeoutMilliseconds: 30_000))
            try writer.close()
            #expect(recorder.recorded == [1])
        }
    }

    @Test("with ownerRequestsSyncs, the owner syncs on its own thread with flush, or hands the sync to the flusher with requestSync")
    func ownerRequestsSyncs() throws {
        try withTemporaryDirectory { directory in
            let recorder = DurabilityRecorder()
            var configuration = smallSegments(
                maximumSegmentBytes: 1 << 20, durability: .groupCommit(maximumRecords: 1_000, maximumDelayMilliseconds: 600_000))
            configuration.ownerRequestsSyncs = true
            configuration.onDurable = { recorder.record($0) }
            let writer = try PartitionWriter(directory: directory, partition: "main", configuration: configuration)
            try writer.append(payload: samplePayload(1), timestampNanoseconds: sampleTimestamp(1))
            try writer.flush()
            #expect(writer.durableSequence == 1)
            for number in 2...4 { try writer.append(payload: samplePayload(number), timestampNanoseconds: sampleTimestamp(number)) }
            writer.requestSync()
            #expect(try writer.waitUntilDurable(4, timeoutMilliseconds: 30_000))
            try writer.close()
            #expect(recorder.recorded.first == 1)
            #expect(recorder.recorded.last == 4)
            #expect(try readAll(directory) == expectedRecords(1...4))
        }
    }

    // A flushUnlessSyncing that waited for the flusher's held sync would never return: the time limit fails it.
    @Test("flushUnlessSyncing syncs at once when no sync runs, and hands its records to the flusher's next round while one does",
          .timeLimit(.minutes(10)))
    func flushUnlessSyncing() throws {
        try withTemporaryDirectory { directory in
            var configuration = smallSegments(
                maximumSegmentBytes: 1 << 20, durability: .groupCommit(maximumRecords: 1_000, maximumDelayMilliseconds: 600_000))
            configuration.ownerRequestsSyncs = true
            let writer = try PartitionWriter(directory: directory, partition: "main", configuration: configuration)
            // Once held, the flusher's sync waits until the test lets it go; the owner's own syncs pass.
            let flusherSyncing = DispatchSemaphore(value: 0), releaseFlusher = DispatchSemaphore(value: 0)
            let holdsFlusher = FlusherHold()
            let owner = pthread_self()
            writer.whileSyncing = {
                guard pthread_equal(pthread_self(), owner) == 0, holdsFlusher.isOn else { return }
                flusherSyncing.signal()
                releaseFlusher.wait()
            }
            try writer.append(payload: samplePayload(1), timestampNanoseconds: sampleTimestamp(1))
            // The flusher also wakes on its own every 100 ms; when it has begun syncing record 1, the call
            // rightly returns at once, and the record is durable when that sync ends.
            if try writer.flushUnlessSyncing() {
                #expect(writer.durableSequence == 1)
            } else {
                #expect(try writer.waitUntilDurable(1, timeoutMilliseconds: 30_000))
            }
            holdsFlusher.turnOn()
            try writer.append(payload: samplePayload(2), timestampNanoseconds: sampleTimestamp(2))
            writer.requestSync()
            flusherSyncing.wait()
            // The flusher is inside its sync of record 2: the owner does not wait for it.
            try writer.append(payload: samplePayload(3), timestampNanoseconds: sampleTimestamp(3))
            #expect(try writer.flushUnlessSyncing() == false)
            #expect(writer.durableSequence == 1)
            releaseFlusher.signal()
            // Record 3 is the flusher's next round, with no further request.
            flusherSyncing.wait()
            releaseFlusher.signal()
            #expect(try writer.waitUntilDurable(3, timeoutMilliseconds: 30_000))
            try writer.close()
            #expect(try readAll(directory) == expectedRecords(1...3))
        }
    }

    @Test("the operating-system policy fsyncs only on flush and close")
    func operatingSystem() throws {
        try withTemporaryDirectory { directory in
            let configuration = smallSegments(maximumSegmentBytes: 1 << 20, durability: .operatingSystem)
            let writer = try PartitionWriter(directory: directory, partition: "main", configuration: configuration)
            for number in 1...5 { try writer.append(payload: samplePayload(number), timestampNanoseconds: sampleTimestamp(number)) }
            #expect(try !writer.waitUntilDurable(5, timeoutMilliseconds: 30))
            #expect(writer.durableSequence == 0)
            try writer.close()
            #expect(writer.durableSequence == 5)
            #expect(try readAll(directory) == expectedRecords(1...5))
        }
    }

    @Test("an abandoned writer still flushes when it is released")
    func abandonedWriter() throws {
        try withTemporaryDirectory { directory in
            do {
                let writer = try PartitionWriter(directory: directory, partition: "main", configuration: smallSegments())
                for number in 1...3 { try writer.append(payload: samplePayload(number), timestampNanoseconds: sampleTimestamp(number)) }
            }
            // The flusher may hold the last reference briefly; wait (bounded) for the data to appear.
            let deadline = Date().addingTimeInterval(5)
            while (try? readAll(directory).count) != 3 && Date() < deadline { usleep(10_000) }
            #expect(try readAll(directory) == expectedRecords(1...3))
        }
    }

    @Test("appends from several threads get distinct, contiguous sequences")
    func concurrentAppends() throws {
        try withTemporaryDirectory { directory in
            let writer = try PartitionWriter(directory: directory, partition: "main")
            DispatchQueue.concurrentPerform(iterations: 4) { worker in
                for number in 0..<250 { _ = try? writer.append(payload: [UInt8(worker), UInt8(number % 256)], timestampNanoseconds: 0) }
            }
            try writer.close()
            let records = try readAll(directory)
            #expect(records.map(\.sequence) == Array(1...1_000))
        }
    }
}
