import ZeroMQ

/// The replies (ACK, PONG, BATCH) the queue has sent that libzmq still holds, per connection and
/// over all of them, and what that allows next (docs/reliability.md, "Unread replies").
///
/// libzmq bounds each connection's queue in messages (`replyHighWaterMark`), which alone lets
/// `maximumPeers` connections that never read hold that many each (about 1.8 GB of ACKs). Over
/// `totalLimit` a reply goes only to a connection holding less than its fair share of the limit
/// (`totalLimit / maximumPeers`): the connections that do not read stop getting replies, and one
/// that reads is still answered, so unread connections cannot lock an honest one out.
final class UnreadReplies {
    /// Bytes held over all connections.
    let total = QueuedByteCounter()
    let totalLimit: Int
    /// What one connection may hold once the total is past its limit.
    let fairShare: Int
    private var byPeer: [[UInt8]: QueuedByteCounter] = [:]
    private let maximumPeers: Int
    /// The last connection looked up: a burst of ACKs goes to one sender.
    private var lastRoutingID: [UInt8] = []
    private var lastCounter: QueuedByteCounter?

    init(totalLimit: Int, maximumPeers: Int) {
        self.totalLimit = totalLimit
        self.maximumPeers = max(1, maximumPeers)
        fairShare = max(1, totalLimit / self.maximumPeers)
    }

    /// Whether the total is past its limit (replies are then rationed to fair shares).
    var isOverLimit: Bool { total.value >= totalLimit }

    /// The counter of one connection, by its routing id. Entries of connections holding nothing
    /// are forgotten once there are many, so departed peers cost nothing for long.
    func counter(for routingID: [UInt8]) -> QueuedByteCounter {
        if let lastCounter, lastRoutingID == routingID { return lastCounter }
        let counter = lookUp(routingID)
        (lastRoutingID, lastCounter) = (routingID, counter)
        return counter
    }

    private func lookUp(_ routingID: [UInt8]) -> QueuedByteCounter {
        if let counter = byPeer[routingID] { return counter }
        if byPeer.count >= 4 * maximumPeers {
            byPeer = byPeer.filter { $0.value.value > 0 }
        }
        let counter = QueuedByteCounter(parent: total)
        byPeer[routingID] = counter
        return counter
    }

    /// Whether a reply to the connection counted by `peer` may be sent.
    func admits(_ peer: QueuedByteCounter) -> Bool {
        !isOverLimit || peer.value < fairShare
    }
}
