import Bus
import StoreKitLive
import ZeroMQ

/// CURVE on the coordinator's driver endpoint, when the topology has a `curve` section: the
/// coordinator's ROUTER is a CURVE server with the queues' server key, and lets in only the
/// topology's `allowedClientKeys` (a ZAP allow-list), as every queue endpoint does. Drivers
/// connect as CURVE clients with `CurveClientKeys.apply`, so a driver on another host talks to
/// the coordinator over tcp:// as securely as to the queues.
struct DriverEndpointSecurity {
    private let handler: AuthenticationHandler
    private let allowedClientKeys: Set<CurveKey>
    /// ZAP domain of the driver endpoint (tells its requests apart in libzmq's handshakes).
    static let domain = "sksim.load.drivers"

    /// Makes `router` a CURVE server before it binds; nil when the topology is not secured.
    /// `context` must have no other authentication handler (libzmq allows one per context).
    init?(topology: Topology, context: ZeroMQContext, router: Socket) throws {
        guard let security = try topology.curveServerSecurity() else { return nil }
        handler = try AuthenticationHandler(context: context)
        allowedClientKeys = security.allowedClientKeys
        try router.set(.curveServer, true)
        try router.set(.curveSecretKey, security.secretKey)
        try router.set(.zapDomain, Self.domain)
    }

    /// Answers the handshakes waiting: the caller's loop calls it at least every 50 ms, so a
    /// connecting driver waits at most that long. Only the allowed keys get in, as at the queues.
    func admit() throws {
        try handler.answerPending { request in
            guard request.mechanism == "CURVE" else { return .deny(reason: "the driver endpoint takes CURVE clients only") }
            guard let key = request.curvePublicKey, allowedClientKeys.contains(key) else {
                return .deny(reason: "client key not allowed")
            }
            return .allow
        }
    }

    func close() { handler.close() }
}
