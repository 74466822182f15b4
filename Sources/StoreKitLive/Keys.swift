import ZeroMQ

/// New CURVE key pairs for topology files.
public enum CurveKeyPairMaker {
    public static func generate() throws -> (publicKey: String, secretKey: String) {
        let pair = try CurveKeyPair.generate()
        return (pair.publicKey.z85, pair.secretKey.z85)
    }
}
