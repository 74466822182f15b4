import ZeroMQ

/// The keys a client needs to talk to a queue running as a CURVE server: the server's public
/// key (distributed out of band) and the client's own long-term pair.
public struct CurveClientKeys: Sendable, Hashable {
    public var serverPublicKey: CurveKey
    public var clientKeyPair: CurveKeyPair

    public init(serverPublicKey: CurveKey, clientKeyPair: CurveKeyPair) {
        self.serverPublicKey = serverPublicKey
        self.clientKeyPair = clientKeyPair
    }

    /// Makes `socket` a CURVE client; must run before `connect`.
    public func apply(to socket: Socket) throws(ZeroMQError) {
        try socket.set(.curveServerKey, serverPublicKey)
        try socket.set(.curvePublicKey, clientKeyPair.publicKey)
        try socket.set(.curveSecretKey, clientKeyPair.secretKey)
    }
}

extension Socket {
    /// Makes the socket a CURVE server with `secretKey`; must run before `bind`.
    func becomeCurveServer(secretKey: CurveKey) throws(ZeroMQError) {
        try set(.curveServer, true)
        try set(.curveSecretKey, secretKey)
    }
}
