import CZeroMQ
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A CURVE key (public or secret) in Z85 text form: 40 characters encoding 32 bytes.
///
/// The initializer validates the text, so a malformed key is reported with a clear
/// error instead of an opaque `EINVAL` from libzmq. `description` shows only the
/// first characters so secret keys do not end up in logs.
public struct CurveKey: Sendable, Hashable, CustomStringConvertible {
    /// Length of a Z85-encoded 32-byte key.
    public static let z85Length = 40
    private static let z85Alphabet = Set(
        "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#".utf8)

    /// The key as 40 Z85 characters.
    public let z85: String

    /// Validates a Z85 key string.
    public init(z85: String) throws(ZeroMQError) {
        let characters = Array(z85.utf8)
        guard characters.count == Self.z85Length else {
            throw ZeroMQError(
                kind: .invalidCurveKey, code: EINVAL, operation: "read CURVE key",
                message: "a Z85 CURVE key has \(Self.z85Length) characters, this one has \(characters.count)",
                hint: "use keys from CurveKeyPair.generate() or zmq_curve_keypair")
        }
        if let offset = characters.firstIndex(where: { !Self.z85Alphabet.contains($0) }) {
            throw ZeroMQError(
                kind: .invalidCurveKey, code: EINVAL, operation: "read CURVE key",
                message: "character \(offset + 1) of the CURVE key is not in the Z85 alphabet",
                hint: "use keys from CurveKeyPair.generate() or zmq_curve_keypair")
        }
        self.z85 = z85
    }

    /// For keys read back from libzmq, which are valid by construction.
    init(validatedZ85: String) {
        z85 = validatedZ85
    }

    /// Derives the public key belonging to this secret key (`zmq_curve_public`).
    public func derivedPublicKey() throws(ZeroMQError) -> CurveKey {
        var publicText = [CChar](repeating: 0, count: Self.z85Length + 1)
        if zmq_curve_public(&publicText, z85) == -1 { throw ZeroMQError.last("derive CURVE public key") }
        return CurveKey(validatedZ85: String(decoding: publicText.prefix(Self.z85Length).map { UInt8(bitPattern: $0) }, as: UTF8.self))
    }

    public var description: String { "CurveKey(\(z85.prefix(5))…)" }
}

/// A CURVE long-term key pair.
public struct CurveKeyPair: Sendable, Hashable, CustomStringConvertible {
    /// Shared with peers: a server's public key is what clients set as `curveServerKey`.
    public let publicKey: CurveKey
    /// Kept private by the owner.
    public let secretKey: CurveKey

    /// A pair from known keys; checks that the public key belongs to the secret key.
    public init(publicKey: CurveKey, secretKey: CurveKey) throws(ZeroMQError) {
        guard try secretKey.derivedPublicKey() == publicKey else {
            throw ZeroMQError(
                kind: .invalidCurveKey, code: EINVAL, operation: "pair CURVE keys",
                message: "the public key does not belong to the secret key", hint: nil)
        }
        self.publicKey = publicKey
        self.secretKey = secretKey
    }

    private init(validatedPublicKey: CurveKey, secretKey: CurveKey) {
        publicKey = validatedPublicKey
        self.secretKey = secretKey
    }

    /// Generates a fresh key pair (`zmq_curve_keypair`); fails with `ENOTSUP` when
    /// libzmq was built without CURVE (see `ZeroMQ.hasCapability("curve")`).
    public static func generate() throws(ZeroMQError) -> CurveKeyPair {
        var publicText = [CChar](repeating: 0, count: CurveKey.z85Length + 1)
        var secretText = [CChar](repeating: 0, count: CurveKey.z85Length + 1)
        if zmq_curve_keypair(&publicText, &secretText) == -1 { throw ZeroMQError.last("generate CURVE key pair") }
        func key(_ text: [CChar]) -> CurveKey {
            CurveKey(validatedZ85: String(decoding: text.prefix(CurveKey.z85Length).map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        return CurveKeyPair(validatedPublicKey: key(publicText), secretKey: key(secretText))
    }

    public var description: String { "CurveKeyPair(public: \(publicKey.z85), secret: hidden)" }
}

extension CurveKey {
    /// The key for 32 raw bytes, as a ZAP request carries a CURVE client's public key.
    public init(bytes: [UInt8]) throws(ZeroMQError) {
        guard bytes.count == 32 else {
            throw ZeroMQError.invalidArgument("encode CURVE key", "a CURVE key has 32 bytes, not \(bytes.count)")
        }
        var text = [CChar](repeating: 0, count: Self.z85Length + 1)
        guard zmq_z85_encode(&text, bytes, bytes.count) != nil else { throw ZeroMQError.last("encode CURVE key as Z85") }
        self.init(validatedZ85: String(decoding: text.prefix(Self.z85Length).map { UInt8(bitPattern: $0) }, as: UTF8.self))
    }
}
