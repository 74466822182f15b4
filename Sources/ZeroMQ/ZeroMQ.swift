import CZeroMQ

/// Library-wide information and helpers: version, capabilities and polling.
public enum ZeroMQ {
    /// The version of the linked libzmq (not of the headers it was compiled with).
    public static var version: ZeroMQVersion {
        var major: Int32 = 0
        var minor: Int32 = 0
        var patch: Int32 = 0
        zmq_version(&major, &minor, &patch)
        return ZeroMQVersion(major: Int(major), minor: Int(minor), patch: Int(patch))
    }

    /// Whether libzmq was built with a capability: `"curve"`, `"ipc"`, `"pgm"`, `"tipc"`,
    /// `"norm"`, `"gssapi"` or `"draft"` (`zmq_has`).
    public static func hasCapability(_ capability: String) -> Bool {
        zmq_has(capability) == 1
    }

    /// Polls several sockets and/or file descriptors once and returns the ready
    /// events for each item, in the same order (empty sets for items not ready).
    ///
    /// `timeout` nil waits until something is ready; `.zero` returns immediately.
    /// For a loop that polls repeatedly, keep a `Poller` instead.
    public static func poll(_ items: [PollItem], timeout: Duration?) throws(ZeroMQError) -> [PollEvents] {
        let poller = Poller()
        for item in items { poller.register(item) }
        try poller.poll(timeout: timeout)
        return (0..<items.count).map { poller.readyEvents(at: $0) }
    }
}

/// A libzmq version number.
public struct ZeroMQVersion: Sendable, Hashable, Comparable, CustomStringConvertible {
    public let major: Int
    public let minor: Int
    public let patch: Int

    public init(major: Int, minor: Int, patch: Int) {
        self.major = major
        self.minor = minor
        self.patch = patch
    }

    public static func < (lhs: ZeroMQVersion, rhs: ZeroMQVersion) -> Bool {
        (lhs.major, lhs.minor, lhs.patch) < (rhs.major, rhs.minor, rhs.patch)
    }

    public var description: String { "\(major).\(minor).\(patch)" }
}

extension Duration {
    /// Whole milliseconds for libzmq, rounded up so a tiny positive timeout does not
    /// turn into "do not wait at all", clamped to `0...Int32.max`.
    var roundedUpMilliseconds: Int32 {
        let (seconds, attoseconds) = components
        if seconds < 0 || (seconds == 0 && attoseconds <= 0) { return 0 }
        let attosecondsPerMillisecond: Int64 = 1_000_000_000_000_000
        let partial = (attoseconds + attosecondsPerMillisecond - 1) / attosecondsPerMillisecond
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1000)
        if overflow { return Int32.max }
        return Int32(clamping: scaled + partial)
    }
}
