/// One connection asking to be let in, as libzmq describes it in a ZAP request
/// (ZeroMQ RFC 27), sent while the connection's security handshake waits for the answer.
public struct AuthenticationRequest: Sendable, Hashable {
    /// The `ZAP_DOMAIN` of the socket being connected to, which tells sockets apart.
    public var domain: String
    /// The peer's address, for example the IP address of a tcp peer.
    public var address: String
    /// `NULL`, `PLAIN` or `CURVE`.
    public var mechanism: String
    /// For CURVE: the client's long-term public key.
    public var curvePublicKey: CurveKey?
}

/// The answer to an `AuthenticationRequest`.
public enum AuthenticationDecision: Sendable, Hashable {
    case allow
    /// Let in, with a user id libzmq attaches to every message of the connection as its
    /// `User-Id` property (`ReceivedMessage.userID`), so the receiver knows who sent it.
    case allowAs(userID: String)
    /// Refused (ZAP status 400); libzmq closes the connection and the reason stays local.
    case deny(reason: String)
}

/// Answers ZAP requests for every socket of its context that does authentication (CURVE
/// servers, and NULL sockets with a `zapDomain`). It binds `inproc://zeromq.zap.01`, which
/// exists once per context, so a context has at most one handler.
///
/// The handshakes of new connections wait until the owner calls `answerPending`, so the
/// owner's poll loop registers `socket` and answers whenever it is readable. Same threading
/// rule as `Socket`.
public final class AuthenticationHandler {
    /// The endpoint libzmq sends ZAP requests to (RFC 27).
    public static let endpoint = "inproc://zeromq.zap.01"
    /// The REP socket requests arrive on; register it with a `Poller`.
    public let socket: Socket

    public init(context: ZeroMQContext) throws(ZeroMQError) {
        socket = try context.socket(.reply)
        do {
            try socket.bind(Self.endpoint)
        } catch {
            socket.close()
            throw ZeroMQError(
                kind: error.kind, code: error.code, operation: "bind \(Self.endpoint)",
                message: "another authentication handler already serves this context",
                hint: "give each authenticating endpoint its own ZeroMQContext")
        }
    }

    public func close() {
        socket.close()
    }

    /// Answers up to `limit` waiting requests with `decide`; returns how many it answered.
    /// A request that is not RFC 27 version 1.0 is answered 400 without asking `decide`.
    @discardableResult
    public func answerPending(limit: Int = 256, _ decide: (AuthenticationRequest) -> AuthenticationDecision) throws(ZeroMQError) -> Int {
        var answered = 0
        while answered < limit, let frames = try socket.receive(timeout: .zero) {
            answered += 1
            // Frames: version, request id, domain, address, identity, mechanism, credentials...
            guard frames.count >= 6, frames[0] == Array("1.0".utf8) else {
                let requestID = frames.count > 1 ? frames[1] : []
                try socket.send([Array("1.0".utf8), requestID, Array("400".utf8), Array("malformed ZAP request".utf8), [], []])
                continue
            }
            let mechanism = String(decoding: frames[5], as: UTF8.self)
            let request = AuthenticationRequest(
                domain: String(decoding: frames[2], as: UTF8.self),
                address: String(decoding: frames[3], as: UTF8.self),
                mechanism: mechanism,
                curvePublicKey: mechanism == "CURVE" && frames.count == 7 ? try? CurveKey(bytes: frames[6]) : nil)
            let (status, text, userID): (String, String, String) = switch decide(request) {
            case .allow: ("200", "OK", "")
            case .allowAs(let userID): ("200", "OK", userID)
            case .deny(let reason): ("400", reason, "")
            }
            try socket.send([Array("1.0".utf8), frames[1], Array(status.utf8), Array(text.utf8), Array(userID.utf8), []])
        }
        return answered
    }
}
