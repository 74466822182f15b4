import CZeroMQ
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A multipart message composed frame by frame in one reusable buffer, so a hot send path
/// allocates nothing per message (`send(_ frames: [[UInt8]])` needs an array per frame and one
/// for the list). Clear it with `removeAll()` and compose the next message in the same storage.
///
/// Not Sendable by intent: one per sending thread. Its appends are inlinable, so callers in other
/// modules get them specialized for their sequence types (not generic calls with metadata lookups).
public struct OutgoingMessage {
    /// Every frame's bytes, back to back.
    public var bytes: [UInt8] { storage }
    @usableFromInline var storage: [UInt8] = []
    /// Where each frame ends in `bytes`.
    @usableFromInline var ends: [Int] = []

    public init() {
        storage.reserveCapacity(1_024)
        ends.reserveCapacity(16)
    }

    /// Number of bytes over all frames.
    @inlinable
    public var byteCount: Int { storage.count }

    /// Number of frames.
    @inlinable
    public var frameCount: Int { ends.count }

    /// Empties the message, keeping its storage.
    @inlinable
    public mutating func removeAll() {
        storage.removeAll(keepingCapacity: true)
        ends.removeAll(keepingCapacity: true)
    }

    /// Appends a frame holding `frame`'s bytes.
    @inlinable
    public mutating func appendFrame(_ frame: some Sequence<UInt8>) {
        storage.append(contentsOf: frame)
        ends.append(storage.count)
    }

    /// Appends a frame holding these bytes.
    @inlinable
    public mutating func appendFrame(_ frame: UnsafeRawBufferPointer) {
        storage.append(contentsOf: frame)
        ends.append(storage.count)
    }

    /// Appends a frame that `write` fills by appending to the buffer it is handed (the bytes of
    /// earlier frames come before; `write` must only append).
    @inlinable
    public mutating func appendFrame(_ write: (inout [UInt8]) -> Void) {
        write(&storage)
        ends.append(storage.count)
    }

    /// Appends a frame of the little-endian bytes of `value`.
    @inlinable
    public mutating func appendFrame<Value: FixedWidthInteger>(littleEndian value: Value) {
        withUnsafeBytes(of: value.littleEndian) { storage.append(contentsOf: $0) }
        ends.append(storage.count)
    }
}

extension Socket {
    /// Sends `message` like `send(_:mode:)` (one copy of each frame into libzmq, atomic: a false
    /// result means nothing was sent), without allocating.
    @discardableResult
    public func send(_ message: borrowing OutgoingMessage, mode: SendMode = .blocking) throws(ZeroMQError) -> Bool {
        try send(message, mode: mode, counting: nil)
    }

    /// Sends `message` like `send(_:mode:)`, counting `footprint` bytes in `counter` until libzmq
    /// lets go of the message's last frame, which it takes after the others (`QueuedByteCounter`):
    /// that frame is handed over in an allocation of its own, with the count.
    @discardableResult
    public func send(_ message: borrowing OutgoingMessage, mode: SendMode = .blocking, countingIn counter: QueuedByteCounter,
                     footprint: Int) throws(ZeroMQError) -> Bool {
        try send(message, mode: mode, counting: (counter, footprint))
    }

    private func send(_ message: borrowing OutgoingMessage, mode: SendMode,
                      counting: (counter: QueuedByteCounter, footprint: Int)?) throws(ZeroMQError) -> Bool {
        guard message.frameCount > 0 else {
            throw ZeroMQError.invalidArgument("send", "a message needs at least one frame")
        }
        let handle = try openHandle("send")
        let lastIndex = message.frameCount - 1
        // The frame that failed and why, or nil when every frame was queued.
        let failure: (frame: Int, code: Int32)? = message.storage.withUnsafeBytes { buffer in
            var start = 0
            for (index, end) in message.ends.enumerated() {
                var flags: Int32 = index == lastIndex ? 0 : ZMQ_SNDMORE
                if index == 0, mode == .nonBlocking { flags |= ZMQ_DONTWAIT }
                let frame = UnsafeRawBufferPointer(rebasing: buffer[start..<end])
                start = end
                guard index == lastIndex, let counting else {
                    if retryingOnInterrupt({ zmq_send(handle, frame.baseAddress, frame.count, flags) }) == -1 { return (index, zmq_errno()) }
                    continue
                }
                guard var counted = countedMessage(frame, accounting: counting.footprint, in: counting.counter) else { return (index, ENOMEM) }
                if retryingOnInterrupt({ zmq_msg_send(&counted, handle, flags) }) == -1 {
                    let code = zmq_errno()
                    zmq_msg_close(&counted)  // Releases the frame through the callback.
                    return (index, code)
                }
            }
            return nil
        }
        guard let failure else { return true }
        if failure.frame == 0, failure.code == EAGAIN { return false }
        throw ZeroMQError(code: failure.code, operation: "send frame \(failure.frame + 1) of \(message.frameCount)")
    }
}
