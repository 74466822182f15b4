import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Appends records to one partition of a log directory.
///
/// Each append is an atomic unit of one or more records (`appendUnit`): readers and recovery see all of a
/// unit or none of it, and `durableSequence` only stops at unit ends.
///
/// One thread appends while a background flusher (group commit and operating-system policies) writes and
/// fsyncs on another; all state sits behind one pthread mutex, and fsync runs outside it so appends continue
/// during a group commit. Records are encoded into one reusable buffer: no allocation per append.
public final class PartitionWriter: @unchecked Sendable {
    public let directory: URL
    public let partition: String
    public let configuration: PartitionWriterConfiguration
    /// What opening removed from a torn tail (empty when the partition was clean). Log it.
    /// Set once during `init`, read-only afterwards.
    public private(set) var recoveries: [TailRecovery] = []

    private let partitionPath: String
    private let lock = MonitorLock()
    /// Signalled when durability advances, a sync finishes or the writer closes.
    private let stateChanged: MonitorLock.Condition
    /// Wakes the flusher: first pending record, group full, close.
    private let flusherWake: MonitorLock.Condition
    private let notificationLock = MonitorLock()
    private var lastNotifiedSequence: UInt64 = 0  // guarded by notificationLock

    // Everything below is guarded by `lock`.
    private var segmentDescriptor: Int32 = -1
    private var segmentPath = ""
    private var segmentFileBytes: UInt64 = 0
    /// End of the current segment's space reserved ahead of its records (see `reserveSpaceLocked`).
    private var segmentReservedBytes: UInt64 = 0
    private var segmentRecordCount: UInt64 = 0
    private var segmentBaseSequence: UInt64 = 0
    private var segmentPayloadLimit = 0
    private var indexDescriptor: Int32 = -1
    private var indexPath = ""
    private var indexFileBytes: UInt64 = 0
    private var pendingIndexBytes: [UInt8] = []
    private let buffer: UnsafeMutableRawPointer
    private let bufferCapacity: Int
    private var bufferUsed = 0
    private var nextSequence: UInt64 = 1
    /// Last sequence of the last complete unit appended: the furthest `writtenSequence` may go.
    private var unitEndSequence: UInt64 = 0
    /// Last sequence whose whole unit has been handed to write(2).
    private var writtenSequence: UInt64 = 0
    private var durable: UInt64 = 0
    private var pendingRecords = 0
    private var oldestPendingNanoseconds: UInt64 = 0
    private var syncInProgress = false
    private var isClosed = false
    private var failure: LogError?
    private var flusherRunning = false
    private var flusherThread: pthread_t?
    /// Tests only: runs on the syncing thread while a sync holds `syncInProgress` (set before the first append).
    var whileSyncing: (() -> Void)?

    /// How long the operating-system policy keeps records in the user-space buffer at most.
    private static let operatingSystemWriteDelayNanoseconds: UInt64 = 1_000_000
    /// Idle flusher wake-up period; bounds every wait of the flusher.
    private static let idleWaitNanoseconds: UInt64 = 100_000_000

    /// Opens (creating if needed) `partition` inside the log `directory`.
    ///
    /// The last segment is scanned: a torn tail is truncated back to the last whole unit, and the seal of a
    /// segment whose roll a crash interrupted is completed, both reported in `recoveries`; any other damage
    /// throws `.corruption` naming the file and byte offset, and nothing is dropped. Segments of another log
    /// format throw `.unsupportedFormatVersion`.
    public init(
        directory: URL, partition: String, configuration: PartitionWriterConfiguration = PartitionWriterConfiguration()
    ) throws(LogError) {
        try SegmentFormat.validatePartitionName(partition)
        try configuration.validate()
        self.directory = directory
        self.partition = partition
        self.configuration = configuration
        partitionPath = LogDirectory.partitionPath(directory, partition)
        stateChanged = MonitorLock.Condition(lock)
        flusherWake = MonitorLock.Condition(lock)
        bufferCapacity = max(configuration.writeBufferBytes, SegmentFormat.recordHeaderBytes + configuration.maximumPayloadBytes)
        buffer = UnsafeMutableRawPointer.allocate(byteCount: bufferCapacity, alignment: 16)
        pendingIndexBytes.reserveCapacity(4096)
        do {
            try Self.prepareDirectories(directory: directory, partitionPath: partitionPath)
            var found: [TailRecovery] = []
            try openLastSegment(recoveries: &found)
            recoveries = found
        } catch {
            // All stored properties are set, so deinit runs and frees the buffer.
            closeDescriptors()
            isClosed = true
            throw error
        }
        lastNotifiedSequence = durable
        if configuration.durability != .always { startFlusher() }
    }

    deinit {
        lock.lock()
        if !isClosed { _ = try? closeLocked() }
        lock.unlock()
        buffer.deallocate()
    }

    // MARK: Public API

    /// Appends one record (a unit of one) and returns its sequence number. Durable on return only under `.always`.
    @discardableResult
    public func append(payload: UnsafeRawBufferPointer, timestampNanoseconds: Int64) throws(LogError) -> UInt64 {
        try appendUnit(recordCount: 1, timestampNanoseconds: timestampNanoseconds) { _ in payload.count } copyPayload: { _, destination in
            if let source = payload.baseAddress, payload.count > 0 { destination.copyMemory(from: source, byteCount: payload.count) }
        }
    }

    /// Appends the payloads as one atomic unit: after a crash at any byte, recovery yields all of them or none.
    /// Returns the sequence of the first record (the unit takes consecutive sequences).
    ///
    /// A unit never spans two segments: the writer rolls before one that does not fit, and a unit of several
    /// records larger than `maximumSegmentBytes` throws `.invalidUnit`. `durableSequence` only ever stops at the
    /// end of a unit.
    @discardableResult
    public func appendUnit(_ payloads: [[UInt8]], timestampNanoseconds: Int64) throws(LogError) -> UInt64 {
        try appendUnit(recordCount: payloads.count, timestampNanoseconds: timestampNanoseconds) { payloads[$0].count } copyPayload: {
            index, destination in
            payloads[index].withUnsafeBytes { bytes in
                if let source = bytes.baseAddress, bytes.count > 0 { destination.copyMemory(from: source, byteCount: bytes.count) }
            }
        }
    }

    /// The same, with the payloads one after another in `bytes`, payload `k` ending at offset `ends[k]` (a
    /// caller that encodes a unit into one buffer hands it over without an array per payload).
    @discardableResult
    public func appendUnit(bytes: UnsafeRawBufferPointer, ends: [Int], timestampNanoseconds: Int64) throws(LogError) -> UInt64 {
        guard ends.last ?? 0 <= bytes.count, zip(ends, ends.dropFirst()).allSatisfy({ $0 <= $1 }), ends.first ?? 0 >= 0 else {
            throw LogError(.invalidUnit, "payload ends \(ends) do not lie within the unit's \(bytes.count) bytes in order",
                           remedy: "Give each payload's end offset, ascending, within the bytes")
        }
        return try appendUnit(recordCount: ends.count, timestampNanoseconds: timestampNanoseconds) { index in
            ends[index] - (index == 0 ? 0 : ends[index - 1])
        } copyPayload: { index, destination in
            let start = index == 0 ? 0 : ends[index - 1]
            if ends[index] > start, let source = bytes.baseAddress {
                destination.copyMemory(from: source + start, byteCount: ends[index] - start)
            }
        }
    }

    /// Appends a unit that begins with its input record (`input`, what the unit's events answer: the
    /// command as accepted), followed by the payloads in `bytes` as `appendUnit(bytes:ends:timestampNanoseconds:)`
    /// takes them, possibly none (a command that changed nothing leaves its input alone). The input takes no
    /// sequence. Returns the sequence of the unit's first event (for an input alone, the next event's).
    /// An input alone becomes durable with the next sync that has events to make durable, or at `flush()`/`close()`.
    @discardableResult
    public func appendUnit(
        input: UnsafeRawBufferPointer, bytes: UnsafeRawBufferPointer, ends: [Int], timestampNanoseconds: Int64
    ) throws(LogError) -> UInt64 {
        guard ends.last ?? 0 <= bytes.count, zip(ends, ends.dropFirst()).allSatisfy({ $0 <= $1 }), ends.first ?? 0 >= 0 else {
            throw LogError(.invalidUnit, "payload ends \(ends) do not lie within the unit's \(bytes.count) bytes in order",
                           remedy: "Give each payload's end offset, ascending, within the bytes")
        }
        return try appendUnit(recordCount: ends.count + 1, timestampNanoseconds: timestampNanoseconds, firstIsInput: true) { index in
            index == 0 ? input.count : ends[index - 1] - (index == 1 ? 0 : ends[index - 2])
        } copyPayload: { index, destination in
            if index == 0 {
                if let source = input.baseAddress, input.count > 0 { destination.copyMemory(from: source, byteCount: input.count) }
                return
            }
            let start = index == 1 ? 0 : ends[index - 2]
            if ends[index - 1] > start, let source = bytes.baseAddress {
                destination.copyMemory(from: source + start, byteCount: ends[index - 1] - start)
            }
        }
    }

    private func appendUnit(
        recordCount: Int, timestampNanoseconds: Int64, firstIsInput: Bool = false, payloadCount: (Int) -> Int,
        copyPayload: (Int, UnsafeMutableRawPointer) -> Void
    ) throws(LogError) -> UInt64 {
        var unitBytes = 0
        for index in 0..<recordCount {
            let count = payloadCount(index)
            guard count <= configuration.maximumPayloadBytes else {
                throw LogError(
                    .payloadTooLarge,
                    "payload of \(count) bytes exceeds the limit of \(configuration.maximumPayloadBytes) bytes",
                    remedy: "Split the event or raise maximumPayloadBytes")
            }
            unitBytes += SegmentFormat.recordHeaderBytes + count
        }
        try checkUnitFits(recordCount: recordCount, unitBytes: unitBytes)
        lock.lock()
        let sequence: UInt64
        let advanced: UInt64?
        do {
            (sequence, advanced) = try appendLocked(
                recordCount: recordCount, unitBytes: unitBytes, timestamp: timestampNanoseconds, firstIsInput: firstIsInput,
                payloadCount: payloadCount, copyPayload: copyPayload)
        } catch {
            lock.unlock()
            throw error
        }
        lock.unlock()
        if let advanced { notifyDurable(advanced) }
        return sequence
    }

    private func checkUnitFits(recordCount: Int, unitBytes: Int) throws(LogError) {
        guard recordCount > 0 else {
            throw LogError(.invalidUnit, "a unit needs at least one record", remedy: "Append at least one payload")
        }
        // A single record may exceed the segment size (it gets a segment of its own); a unit of several may not.
        let segmentBytes = SegmentFormat.headerBytes(partitionNameLength: partition.utf8.count) + unitBytes + SegmentFormat.sealBytes
        guard recordCount == 1 || UInt64(segmentBytes) <= configuration.maximumSegmentBytes else {
            throw LogError(
                .invalidUnit,
                "a unit of \(recordCount) records needs \(segmentBytes) bytes of segment (with header and seal) but "
                    + "maximumSegmentBytes is \(configuration.maximumSegmentBytes); a unit never spans two segments",
                remedy: "Split the unit or raise maximumSegmentBytes")
        }
    }

    /// Appends one record from any byte collection (contiguous collections are not copied).
    @discardableResult
    public func append(payload: some Collection<UInt8>, timestampNanoseconds: Int64) throws(LogError) -> UInt64 {
        let result = payload.withContiguousStorageIfAvailable { bytes in
            Result { () throws(LogError) in
                try append(payload: UnsafeRawBufferPointer(bytes), timestampNanoseconds: timestampNanoseconds)
            }
        }
        if let result { return try result.get() }
        return try append(payload: Array(payload), timestampNanoseconds: timestampNanoseconds)
    }

    /// Sequence of the last appended record (0 when the partition is empty).
    public var lastSequence: UInt64 { lock.withLock { nextSequence - 1 } }

    /// Highest sequence known to be fsynced.
    public var durableSequence: UInt64 { lock.withLock { durable } }

    /// Waits until `sequence` is durable; returns false on timeout or when the writer closed first.
    /// Under `.operatingSystem` nothing becomes durable without `flush()` or `close()`.
    public func waitUntilDurable(_ sequence: UInt64, timeoutMilliseconds: Int) throws(LogError) -> Bool {
        let deadline = monotonicNanoseconds() + UInt64(max(0, timeoutMilliseconds)) * 1_000_000
        lock.lock()
        defer { lock.unlock() }
        while durable < sequence {
            if let failure { throw failure }
            if isClosed || monotonicNanoseconds() >= deadline { return false }
            stateChanged.wait(untilMonotonicNanoseconds: deadline)
        }
        return true
    }

    /// Wakes the flusher to sync what is pending (for `ownerRequestsSyncs`); returns at once.
    public func requestSync() {
        lock.withLock { if pendingRecords > 0 { flusherWake.signal() } }
    }

    /// Writes buffered records and fsyncs now.
    public func flush() throws(LogError) {
        _ = try syncNow(unlessSyncing: false)
    }

    /// Writes buffered records and fsyncs now, unless a sync is already running: then the records join the
    /// flusher's next round (it syncs again as soon as the running sync ends) and this returns at once, so
    /// the caller goes on working instead of waiting for two syncs. Returns whether it synced.
    @discardableResult
    public func flushUnlessSyncing() throws(LogError) -> Bool {
        try syncNow(unlessSyncing: true)
    }

    private func syncNow(unlessSyncing: Bool) throws(LogError) -> Bool {
        lock.lock()
        if unlessSyncing && syncInProgress {
            lock.unlock()
            return false
        }
        let advanced: UInt64?
        do {
            try checkUsable()
            advanced = try syncLocked()
        } catch {
            lock.unlock()
            throw error
        }
        lock.unlock()
        if let advanced { notifyDurable(advanced) }
        return true
    }

    /// Flushes, fsyncs and closes the files and stops the flusher. Idempotent; later appends throw `.closed`.
    public func close() throws(LogError) {
        lock.lock()
        if isClosed {
            lock.unlock()
            return
        }
        let result = Result { () throws(LogError) in try closeLocked() }
        // Bounded wait for the flusher to notice (never from the flusher thread itself, e.g. inside onDurable).
        let onFlusherThread = isOnFlusherThread
        let deadline = monotonicNanoseconds() + 2_000_000_000
        while flusherRunning && !onFlusherThread && monotonicNanoseconds() < deadline {
            stateChanged.wait(untilMonotonicNanoseconds: deadline)
        }
        lock.unlock()
        if case .success(let advanced?) = result { notifyDurable(advanced) }
        _ = try result.get()
    }

    // MARK: Appending

    /// True on the flusher thread (e.g. inside `onDurable`). Lock held.
    private var isOnFlusherThread: Bool { flusherThread.map { pthread_equal($0, pthread_self()) != 0 } ?? false }

    private func checkUsable() throws(LogError) {
        if let failure { throw failure }
        if isClosed {
            throw LogError(.closed, "the writer of partition \"\(partition)\" is closed", remedy: "Open a new PartitionWriter")
        }
    }

    private func appendLocked(
        recordCount: Int, unitBytes: Int, timestamp: Int64, firstIsInput: Bool, payloadCount: (Int) -> Int,
        copyPayload: (Int, UnsafeMutableRawPointer) -> Void
    ) throws(LogError) -> (UInt64, UInt64?) {
        try checkUsable()
        var advanced: UInt64?
        var largestPayload = 0
        for index in 0..<recordCount { largestPayload = max(largestPayload, payloadCount(index)) }
        if segmentDescriptor < 0 || largestPayload > segmentPayloadLimit
            || (segmentRecordCount > 0
                && segmentFileBytes + UInt64(bufferUsed) + UInt64(unitBytes + SegmentFormat.sealBytes) > configuration.maximumSegmentBytes)
        {
            advanced = try recordFailure { () throws(LogError) in try rollLocked() }
        }
        let first = nextSequence
        for index in 0..<recordCount {
            let count = payloadCount(index)
            let recordBytes = SegmentFormat.recordHeaderBytes + count
            // May write out part of this unit; `writtenSequence` still stops at the previous unit's end.
            if bufferUsed + recordBytes > bufferCapacity {
                try recordFailure { () throws(LogError) in try writeOutLocked() }
            }
            let sequence = nextSequence
            // The input takes no sequence (its field names the next event's) and no index entry: the index
            // points at events, as readers that skip inputs look them up.
            let isInput = firstIsInput && index == 0
            SegmentFormat.encodeRecord(
                at: buffer + bufferUsed, payloadCount: count,
                lengthFlags: (index < recordCount - 1 ? SegmentFormat.moreInUnitFlag : 0) | (isInput ? SegmentFormat.inputFlag : 0),
                sequence: sequence, timestamp: timestamp
            ) { copyPayload(index, $0) }
            if !isInput
                && SparseIndex.isIndexed(sequence, baseSequence: segmentBaseSequence, intervalRecords: UInt32(configuration.indexIntervalRecords))
            {
                SparseIndex.appendEntry(
                    SparseIndex.Entry(sequence: sequence, byteOffset: segmentFileBytes + UInt64(bufferUsed)), to: &pendingIndexBytes)
            }
            bufferUsed += recordBytes
            if !isInput { nextSequence += 1 }
        }
        segmentRecordCount += UInt64(recordCount - (firstIsInput ? 1 : 0))
        unitEndSequence = nextSequence - 1

        switch configuration.durability {
        case .always:
            if let synced = try syncLocked() { advanced = synced }
        case .groupCommit(let maximumRecords, _):
            notePending(recordCount)
            // Backpressure: at most 4 × maximumRecords records not yet durable. Wait for the flusher's sync (as a
            // writer waits for a disk) rather than sync here, so appends go on while the next sync runs.
            // (An append from `onDurable` runs on the flusher thread, which cannot wait for itself: it syncs.)
            while nextSequence - 1 - durable >= UInt64(4 * maximumRecords) && failure == nil && !isClosed {
                if isOnFlusherThread {
                    if let synced = try syncLocked() { advanced = synced }
                    break
                }
                if !syncInProgress { flusherWake.signal() }
                stateChanged.wait(untilMonotonicNanoseconds: monotonicNanoseconds() + Self.idleWaitNanoseconds)
            }
            try checkFailure()
            if bufferUsed >= configuration.writeBufferBytes { try recordFailure { () throws(LogError) in try writeOutLocked() } }
        case .operatingSystem:
            notePending(recordCount)
            if bufferUsed >= configuration.writeBufferBytes { try recordFailure { () throws(LogError) in try writeOutLocked() } }
        }
        return (first, advanced)
    }

    private func notePending(_ records: Int) {
        pendingRecords += records
        if oldestPendingNanoseconds == 0 {
            oldestPendingNanoseconds = monotonicNanoseconds()
            if !configuration.ownerRequestsSyncs { flusherWake.signal() }
        }
    }

    /// Runs `body`; a failed write or fsync leaves the file state unknown, so the writer refuses further work.
    @discardableResult
    private func recordFailure<Value>(_ body: () throws(LogError) -> Value) throws(LogError) -> Value {
        do {
            return try body()
        } catch {
            if failure == nil { failure = error }
            throw error
        }
    }

    /// write(2) of the buffered records and index entries (no fsync). Lock held.
    private func writeOutLocked() throws(LogError) {
        guard segmentDescriptor >= 0 else { return }
        if bufferUsed > 0 {
            reserveSpaceLocked(through: segmentFileBytes + UInt64(bufferUsed))
            try FileIO.writeAll(
                segmentDescriptor, UnsafeRawBufferPointer(start: buffer, count: bufferUsed), at: segmentFileBytes,
                path: segmentPath)
            segmentFileBytes += UInt64(bufferUsed)
            bufferUsed = 0
        }
        writtenSequence = unitEndSequence
        if !pendingIndexBytes.isEmpty && indexDescriptor >= 0 {
            try FileIO.writeAll(indexDescriptor, pendingIndexBytes, at: indexFileBytes, path: indexPath)
            indexFileBytes += UInt64(pendingIndexBytes.count)
            pendingIndexBytes.removeAll(keepingCapacity: true)
        }
    }

    /// Writes out and fsyncs everything appended so far. Lock held on entry and exit, released during fsync
    /// so appends continue. Returns the new durable sequence if it advanced.
    private func syncLocked() throws(LogError) -> UInt64? {
        while syncInProgress { stateChanged.wait(untilMonotonicNanoseconds: monotonicNanoseconds() + Self.idleWaitNanoseconds) }
        try checkFailure()
        try recordFailure { () throws(LogError) in try writeOutLocked() }
        pendingRecords = 0
        oldestPendingNanoseconds = 0
        let target = writtenSequence
        guard target > durable, segmentDescriptor >= 0 else { return nil }
        let descriptor = segmentDescriptor
        let path = segmentPath
        syncInProgress = true
        lock.unlock()
        whileSyncing?()
        let result = Result { () throws(LogError) in try FileIO.synchronizeData(descriptor, path: path) }
        lock.lock()
        syncInProgress = false
        stateChanged.broadcast()
        // Records appended during the sync are the next batch; with none, waking the flusher only costs
        // a thread switch (the owner's own syncs, one per step on a lightly loaded queue).
        if pendingRecords > 0 { flusherWake.signal() }
        try recordFailure { () throws(LogError) in try result.get() }
        guard target > durable else { return nil }
        durable = target
        return target
    }

    private func checkFailure() throws(LogError) {
        if let failure { throw failure }
    }

    private func notifyDurable(_ sequence: UInt64) {
        guard let hook = configuration.onDurable else { return }
        notificationLock.withLock {
            guard sequence > lastNotifiedSequence else { return }
            lastNotifiedSequence = sequence
            hook(sequence)
        }
    }

    private func closeLocked() throws(LogError) -> UInt64? {
        defer {
            closeDescriptors()
            isClosed = true
            stateChanged.broadcast()
            flusherWake.broadcast()
        }
        guard failure == nil else { return nil }
        return try syncLocked()
    }

    /// Reserves the segment's disk space ahead of its records, a megabyte at a time, without changing its size
    /// (`FALLOC_FL_KEEP_SIZE`: readers and recovery see only what was written). On ext4 an fdatasync of records
    /// written into space already reserved skips the block allocation, which roughly halves its latency on the
    /// machines measured (docs/performance.md). Best effort: a file system that cannot reserve (or a full disk,
    /// where the write itself then reports the error) simply writes without it.
    private func reserveSpaceLocked(through end: UInt64) {
        guard configuration.reservesSpace, end > segmentReservedBytes else { return }
        let start = max(segmentReservedBytes, segmentFileBytes)
        let target = min(max(end, start + Self.reservationBytes), max(end, configuration.maximumSegmentBytes))
        guard target > start else { return }
        if FileIO.reserve(segmentDescriptor, from: start, length: target - start) {
            segmentReservedBytes = target
        } else {
            // Not supported here or no space: do not ask again for this segment.
            segmentReservedBytes = UInt64.max
        }
    }

    static let reservationBytes: UInt64 = 1 << 20

    /// Frees the space reserved beyond the segment's end (a sealed segment will not grow). Best effort.
    private func releaseReservedSpaceLocked() {
        guard segmentDescriptor >= 0, segmentReservedBytes > 0, segmentReservedBytes != UInt64.max,
              let size = try? FileIO.size(segmentDescriptor, path: segmentPath) else { return }
        try? FileIO.truncate(segmentDescriptor, to: size, path: segmentPath)
    }

    private func closeDescriptors() {
        releaseReservedSpaceLocked()
        segmentReservedBytes = 0
        if segmentDescriptor >= 0 { FileIO.close(segmentDescriptor) }
        if indexDescriptor >= 0 { FileIO.close(indexDescriptor) }
        segmentDescriptor = -1
        indexDescriptor = -1
    }

    // MARK: Segments

    /// Seals the current segment and starts one whose base is the next sequence. The order makes every crash
    /// recognisable: the records are made durable, then the successor is created (durably), then the seal is
    /// written and synced. So a sealed segment always has its successor, and a segment lacking its seal before an
    /// empty last segment can only be an interrupted roll (completed when the writer next opens).
    private func rollLocked() throws(LogError) -> UInt64? {
        var advanced: UInt64?
        let base = nextSequence
        let path = partitionPath + "/" + SegmentFormat.segmentFileName(baseSequence: base)
        let header = SegmentFormat.encodeHeader(
            partition: partition, baseSequence: base, maximumPayloadBytes: UInt32(configuration.maximumPayloadBytes))
        if segmentDescriptor >= 0 {
            while syncInProgress { stateChanged.wait(untilMonotonicNanoseconds: monotonicNanoseconds() + Self.idleWaitNanoseconds) }
            try writeOutLocked()
            try FileIO.synchronizeData(segmentDescriptor, path: segmentPath)
            try FileIO.replaceFile(path, with: header, directory: partitionPath, durable: true)
            try FileIO.writeAll(segmentDescriptor, SegmentFormat.encodeSeal(nextBaseSequence: base), at: segmentFileBytes, path: segmentPath)
            try FileIO.synchronizeData(segmentDescriptor, path: segmentPath)
            if writtenSequence > durable {
                durable = writtenSequence
                advanced = durable
                stateChanged.broadcast()
            }
            pendingRecords = 0
            oldestPendingNanoseconds = 0
            closeDescriptors()
        } else {
            // Header via temporary file + rename + directory fsync: a crash never leaves a half-made segment name.
            try FileIO.replaceFile(path, with: header, directory: partitionPath, durable: true)
        }
        try attachSegment(
            path: path, header: SegmentHeader(
                partition: partition, baseSequence: base, maximumPayloadBytes: UInt32(configuration.maximumPayloadBytes),
                byteCount: header.count),
            endOffset: UInt64(header.count), recordCount: 0, index: nil)
        return advanced
    }

    /// Makes `path` the current segment, positioned at `endOffset`, and (re)writes its index when it differs
    /// from `index` (the entries its records imply).
    private func attachSegment(
        path: String, header: SegmentHeader, endOffset: UInt64, recordCount: UInt64, index: SparseIndex?
    ) throws(LogError) {
        segmentDescriptor = try FileIO.open(path, flags: O_WRONLY)
        segmentPath = path
        segmentFileBytes = endOffset
        segmentReservedBytes = 0
        segmentRecordCount = recordCount
        segmentBaseSequence = header.baseSequence
        segmentPayloadLimit = Int(min(UInt64(header.maximumPayloadBytes), UInt64(configuration.maximumPayloadBytes)))
        indexPath = partitionPath + "/" + SegmentFormat.indexFileName(baseSequence: header.baseSequence)
        let expected = index ?? SparseIndex(
            intervalRecords: UInt32(configuration.indexIntervalRecords), baseSequence: header.baseSequence)
        let expectedBytes = expected.encoded()
        if SparseIndex.fileBytes(path: indexPath) != expectedBytes {
            try expected.write(path: indexPath, directory: partitionPath)
        }
        indexDescriptor = try FileIO.open(indexPath, flags: O_WRONLY)
        indexFileBytes = UInt64(expectedBytes.count)
    }

    /// Creates the log and partition directories when missing (fsyncing the parents so they survive a crash).
    private static func prepareDirectories(directory: URL, partitionPath: String) throws(LogError) {
        let logPath = directory.path
        if !FileIO.exists(logPath) {
            do {
                try FileManager.default.createDirectory(atPath: logPath, withIntermediateDirectories: true)
            } catch {
                throw LogError(.inputOutput, "cannot create the log directory: \(error)", path: logPath)
            }
            try FileIO.synchronizeDirectory(directory.deletingLastPathComponent().path)
        }
        if try FileIO.createDirectory(partitionPath) {
            try FileIO.synchronizeDirectory(logPath)
        }
    }

    /// Finds the last segment, recovers a torn tail, checks continuity with the previous segment and
    /// positions the writer after the last whole record.
    private func openLastSegment(recoveries: inout [TailRecovery]) throws(LogError) {
        let listing = try LogDirectory.listSegments(partitionPath: partitionPath)
        if let badName = listing.badNames.first {
            throw LogError(
                corruption: LogProblem(
                    kind: .badFileName, path: badName, byteOffset: 0,
                    message: "segment file names must be 20 decimal digits followed by .segment"))
        }
        var segments = listing.segments
        try checkSealedHeaders(segments.dropLast())
        while let last = segments.last {
            let file = try SegmentFile(path: last.segmentPath)
            let header: SegmentHeader
            switch try file.validHeader(partition: partition, baseSequence: last.baseSequence) {
            case .success(let valid):
                header = valid
            case .failure(let problem) where problem.kind == .truncatedHeader:
                // Cut inside its header: it holds no records. Re-created empty when the previous segment's seal
                // names it (removing it would leave that seal naming a missing segment), else removed.
                let named = segments.count >= 2
                    ? try SegmentFile(path: segments[segments.count - 2].segmentPath).trailingSeal() == last.baseSequence : false
                try FileIO.remove(last.segmentPath)
                try FileIO.remove(last.indexPath)
                try FileIO.synchronizeDirectory(partitionPath)
                recoveries.append(
                    TailRecovery(
                        path: last.segmentPath, byteOffset: 0, droppedBytes: file.size, partialRecord: false,
                        removedSegment: true, reason: problem.message + (named ? "; re-created it empty" : "")))
                if named {
                    nextSequence = last.baseSequence
                    unitEndSequence = nextSequence - 1
                    writtenSequence = unitEndSequence
                    durable = writtenSequence
                    _ = try rollLocked()
                    return
                }
                segments.removeLast()
                continue
            case .failure(let problem):
                throw LogError(corruption: problem)
            }
            guard header.version == SegmentFormat.version else {
                throw SegmentFile.olderVersionForWriting(header.version, path: last.segmentPath)
            }
            let summary = try SegmentSummary.scan(
                file: file, header: header, intervalRecords: UInt32(configuration.indexIntervalRecords))
            switch summary.end {
            case .endOfData, .stopped:
                break
            case .sealed(let offset, let next):
                throw LogError(corruption: SealedSegmentEnd.missingSegment(path: last.segmentPath, sealOffset: offset, next: next))
            case .tornTail(let offset, let dropped, let reason):
                let descriptor = try FileIO.open(last.segmentPath, flags: O_WRONLY)
                defer { FileIO.close(descriptor) }
                try FileIO.truncate(descriptor, to: offset, path: last.segmentPath)
                try FileIO.synchronizeData(descriptor, path: last.segmentPath)
                recoveries.append(
                    TailRecovery(
                        path: last.segmentPath, byteOffset: offset, droppedBytes: dropped, partialRecord: true,
                        removedSegment: false, reason: reason))
            case .damage(let problem):
                throw LogError(corruption: problem)
            }
            try checkPredecessor(of: last, holdsRecords: file.size > UInt64(header.byteCount), in: segments, recoveries: &recoveries)
            try attachSegment(
                path: last.segmentPath, header: header, endOffset: summary.wholeRecordsEndOffset,
                recordCount: summary.recordCount, index: summary.index)
            nextSequence = header.baseSequence + summary.recordCount
            unitEndSequence = nextSequence - 1
            writtenSequence = unitEndSequence
            durable = writtenSequence
            return
        }
        // Empty partition: the first append creates segment 1.
        nextSequence = 1
    }

    private func checkSealedHeaders(_ sealed: ArraySlice<LogDirectory.SegmentEntry>) throws(LogError) {
        for entry in sealed {
            let file = try SegmentFile(path: entry.segmentPath)
            if case .failure(var problem) = try file.validHeader(partition: partition, baseSequence: entry.baseSequence) {
                if problem.kind == .truncatedHeader {
                    problem = LogProblem(
                        kind: .truncatedHeader, path: problem.path, byteOffset: problem.byteOffset,
                        message: problem.message + ", but it is not the last segment")
                }
                throw LogError(corruption: problem)
            }
        }
    }

    /// The last segment must start right after the previous one ends (or at 1 when it is the first), and the
    /// previous one must be sealed; a seal missing because a roll was interrupted is completed here.
    private func checkPredecessor(
        of last: LogDirectory.SegmentEntry, holdsRecords: Bool, in segments: [LogDirectory.SegmentEntry],
        recoveries: inout [TailRecovery]
    ) throws(LogError) {
        guard segments.count >= 2 else {
            guard last.baseSequence == 1 else {
                throw LogError(
                    corruption: LogProblem(
                        kind: .sequenceGap, path: last.segmentPath, byteOffset: 0,
                        message: "the partition's first segment starts at sequence \(last.baseSequence), not 1"))
            }
            return
        }
        let previous = segments[segments.count - 2]
        let file = try SegmentFile(path: previous.segmentPath)
        if try file.trailingSeal() == last.baseSequence { return }
        guard case .success(let header) = try file.validHeader(partition: partition, baseSequence: previous.baseSequence) else {
            return  // checkSealedHeaders has thrown already
        }
        let summary = try SegmentSummary.scan(file: file, header: header, intervalRecords: UInt32(configuration.indexIntervalRecords))
        switch SealedSegmentEnd.judge(
            summary.end, lastSequence: summary.lastSequence ?? header.baseSequence - 1, path: previous.segmentPath,
            successor: last, successorHoldsRecords: holdsRecords)
        {
        case .sealed:
            return
        case .interruptedRoll(let offset):
            try SealedSegmentEnd.completeSeal(path: previous.segmentPath, at: offset, nextBaseSequence: last.baseSequence)
            recoveries.append(
                TailRecovery(
                    path: previous.segmentPath, byteOffset: offset, droppedBytes: file.size - offset, partialRecord: false,
                    removedSegment: false, reason: "a crash interrupted the roll to the next segment; its seal was completed"))
        case .damage(let problem):
            throw LogError(corruption: problem)
        }
    }

    // MARK: Flusher

    private func startFlusher() {
        flusherRunning = true
        let weakWriter = WeakWriter(self)
        let thread = Thread {
            weakWriter.writer?.registerFlusherThread()
            while let writer = weakWriter.writer, writer.flusherStep() {}
        }
        thread.name = "EventLog flusher \(partition)"
        thread.start()
    }

    private func registerFlusherThread() {
        lock.withLock { flusherThread = pthread_self() }
    }

    /// One bounded round of the flusher; returns false when it should exit.
    private func flusherStep() -> Bool {
        lock.lock()
        if isClosed || failure != nil {
            flusherRunning = false
            stateChanged.broadcast()
            lock.unlock()
            return false
        }
        var advanced: UInt64?
        let now = monotonicNanoseconds()
        if pendingRecords > 0 && !syncInProgress {
            if case .operatingSystem = configuration.durability {
                let deadline = oldestPendingNanoseconds + Self.operatingSystemWriteDelayNanoseconds
                if now >= deadline {
                    _ = try? recordFailure { () throws(LogError) in try writeOutLocked() }
                    pendingRecords = 0
                    oldestPendingNanoseconds = 0
                } else {
                    flusherWake.wait(untilMonotonicNanoseconds: deadline)
                }
            } else {
                // Group commit never waits on purpose: an idle flusher syncs a new record at once, and records
                // that arrive during that sync form the next batch, synced as soon as it ends.
                advanced = try? syncLocked()
            }
        } else {
            flusherWake.wait(untilMonotonicNanoseconds: now + Self.idleWaitNanoseconds)
        }
        lock.unlock()
        if let advanced { notifyDurable(advanced) }
        return true
    }
}

/// Lets the flusher thread run without keeping the writer alive (so an abandoned writer still deinitializes).
private final class WeakWriter: @unchecked Sendable {
    weak var writer: PartitionWriter?
    init(_ writer: PartitionWriter) { self.writer = writer }
}
