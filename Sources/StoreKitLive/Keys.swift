import Foundation
import StoreKitModel
import ZeroMQ

/// New CURVE key pairs for topology files. `sksim keys` prints one in the key file format
/// below, so `sksim keys > server.key` on the queue's host and `sksim keys > client.key` on
/// each client host make every host's key file where it is used; only public keys are copied.
public enum CurveKeyPairMaker {
    public static func generate() throws -> (publicKey: String, secretKey: String) {
        let pair = try CurveKeyPair.generate()
        return (pair.publicKey.z85, pair.secretKey.z85)
    }
}

/// A key file holds one host's own pair, as `sksim keys` prints it:
///
///     publicKey: "<40 Z85 characters>"
///     secretKey: "<40 Z85 characters>"
public enum CurveKeyFile {
    /// Reads and checks the pair; errors name the topology key that points at the file.
    public static func load(path: String, topologyFile: String, keyPath: String) throws(TopologyError) -> CurveKeyPair {
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw TopologyError(file: topologyFile, keyPath: keyPath,
                                problem: "cannot read the key file \(path) (\(describeError(error, withPath: false))); make it on this host with `sksim keys > \(path)`", code: .curveKey)
        }
        let root = try ConfigurationNode.parse(text, file: path)
        let keys = try root.mapping(allowedKeys: ["publicKey", "secretKey"])
        do {
            guard let publicKey = keys["publicKey"], let secretKey = keys["secretKey"] else { throw root.error("expected publicKey and secretKey (`sksim keys` output)") }
            return try CurveKeyPair(publicKey: CurveKey(z85: try publicKey.string()), secretKey: CurveKey(z85: try secretKey.string()))
        } catch let error as TopologyError {
            throw error
        } catch {
            throw TopologyError(file: path, keyPath: "", problem: "not a valid CURVE key pair (\(error)); make a new one with `sksim keys`", code: .curveKey)
        }
    }
}
