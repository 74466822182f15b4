import CZeroMQ
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Bytes of sent messages that libzmq still holds: queued in a peer's pipe or being written
/// to its connection. A message sent with `Socket.send(_:mode:countingIn:)` adds its size
/// here and libzmq subtracts it (from its I/O thread) once it lets go of the message, so a
/// sender can see how much a peer that does not read is costing it, and stop.
public final class QueuedByteCounter: Sendable {
    private let bytes = Atomic<Int>(0)
    /// Also counts everything counted here, for a total over several counters.
    public let parent: QueuedByteCounter?

    public init(parent: QueuedByteCounter? = nil) {
        self.parent = parent
    }

    /// Bytes currently held by libzmq.
    public var value: Int { bytes.load(ordering: .acquiring) }

    fileprivate func add(_ count: Int) {
        bytes.add(count, ordering: .relaxed)
        parent?.add(count)
    }

    fileprivate func subtract(_ count: Int) {
        bytes.subtract(count, ordering: .releasing)
        parent?.subtract(count)
    }
}

/// Each counted frame is one allocation: an 8-byte prefix holding the bytes it accounts for, then
/// the frame bytes.
private let sizePrefixBytes = MemoryLayout<Int>.size

/// Called by libzmq when it releases a counted frame (any thread).
private func releaseCountedFrame(_ data: UnsafeMutableRawPointer?, _ hint: UnsafeMutableRawPointer?) {
    guard let data, let hint else { return }
    let base = data - sizePrefixBytes
    let size = base.load(as: Int.self)
    let counter = Unmanaged<QueuedByteCounter>.fromOpaque(hint).takeRetainedValue()
    counter.subtract(size)
    free(base)
}

extension QueuedByteCounter {
    /// What a message of `frameCount` frames and `byteCount` bytes costs while libzmq holds it
    /// (an estimate): its bytes, one 64-byte `zmq_msg_t` per frame in the pipe, and 64 bytes for
    /// the counted frame's own allocations. A small reply (an ACK of 7 frames) is mostly overhead.
    public static func footprint(frameCount: Int, byteCount: Int) -> Int {
        byteCount + 64 * frameCount + 64
    }
}

extension Socket {
    /// Sends a multipart message like `send(_:mode:)`, counting its footprint in `counter` until
    /// libzmq releases it. Costs the same single copy of each frame as a plain send.
    @discardableResult
    public func send(_ frames: [[UInt8]], mode: SendMode = .blocking, countingIn counter: QueuedByteCounter) throws(ZeroMQError) -> Bool {
        guard !frames.isEmpty else {
            throw ZeroMQError.invalidArgument("send", "a message needs at least one frame")
        }
        let handle = try openHandle("send")
        var message = zmq_msg_t()
        let lastIndex = frames.count - 1
        for index in 0...lastIndex {
            var flags: Int32 = index == lastIndex ? 0 : ZMQ_SNDMORE
            if index == 0, mode == .nonBlocking { flags |= ZMQ_DONTWAIT }
            let size = frames[index].count
            let made = frames[index].withUnsafeBytes {
                countedMessage($0, accounting: QueuedByteCounter.footprint(frameCount: 1, byteCount: size), in: counter)
            }
            guard let made else {
                throw ZeroMQError.invalidArgument("send", "out of memory for a \(size)-byte frame")
            }
            message = made
            let result = retryingOnInterrupt { zmq_msg_send(&message, handle, flags) }
            if result == -1 {
                let code = zmq_errno()
                zmq_msg_close(&message)  // Releases the frame through the callback.
                if index == 0, code == EAGAIN { return false }
                throw ZeroMQError(code: code, operation: "send frame \(index + 1) of \(frames.count)")
            }
        }
        return true
    }
}

/// A message holding a copy of `bytes` that counts `accounted` bytes in `counter` until libzmq
/// releases it; nil when memory runs out.
func countedMessage(_ bytes: UnsafeRawBufferPointer, accounting accounted: Int, in counter: QueuedByteCounter) -> zmq_msg_t? {
    guard let base = malloc(sizePrefixBytes + max(bytes.count, 1)) else { return nil }
    base.storeBytes(of: accounted, as: Int.self)
    let data = base + sizePrefixBytes
    if let source = bytes.baseAddress { data.copyMemory(from: source, byteCount: bytes.count) }
    counter.add(accounted)
    let hint = Unmanaged.passRetained(counter).toOpaque()
    var message = zmq_msg_t()
    // zmq_msg_init_data only fails for a null buffer, which malloc ruled out.
    _ = zmq_msg_init_data(&message, data, bytes.count, { data, hint in releaseCountedFrame(data, hint) }, hint)
    return message
}
