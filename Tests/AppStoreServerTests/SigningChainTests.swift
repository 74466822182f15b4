import AppStoreServer
import Foundation
import StoreKitTestKit
import StoreKitTestSupport
import Testing
import X509

/// The signing chain a team's server trusts (docs/app-store-server.md): made once per folder, reused,
/// private keys private, and accepted by OpenSSL's strict checks as Apple's verifier runs them.
@Suite struct SigningChainTests {
    final class Scratch {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("sksim-chain-\(UUID().uuidString.prefix(8))")
        init() { try? FileManager.default.createDirectory(at: url, withIntermediateDirectories: true) }
        deinit { try? FileManager.default.removeItem(at: url) }
        func path(_ name: String) -> URL { url.appendingPathComponent(name) }
    }

    @Test func aFolderIsCreatedWithAChainThatIsReusedAfterwards() throws {
        let scratch = Scratch()
        let folder = scratch.path("nested/app-store")
        let made = try SigningChain.loadOrCreate(directory: folder)
        let again = try SigningChain.loadOrCreate(directory: folder)
        #expect(made.rootDER == again.rootDER)
        #expect(made.leafDER == again.leafDER)
        #expect(try Data(contentsOf: folder.appendingPathComponent("root.cer")) == Data(made.rootDER))
        for key in ["root-key.pem", "intermediate-key.pem", "leaf-key.pem"] {
            let permissions = try FileManager.default.attributesOfItem(atPath: folder.appendingPathComponent(key).path)[.posixPermissions] as? Int
            #expect(permissions == 0o600, "\(key)")
        }
        #expect(made.x5c.count == 3)
        #expect(made.x5c[2] == Data(made.rootDER).base64EncodedString())
    }

    @Test func aFolderHoldingPartOfAChainIsRefusedNotReplaced() throws {
        let scratch = Scratch()
        let folder = scratch.path("app-store")
        let made = try SigningChain.loadOrCreate(directory: folder)
        try FileManager.default.removeItem(at: folder.appendingPathComponent("leaf-key.pem"))
        #expect(#expect(throws: SigningChainError.self) { try SigningChain.loadOrCreate(directory: folder) }?.code == .partialChain)
        #expect(try Data(contentsOf: folder.appendingPathComponent("root.cer")) == Data(made.rootDER))
    }

    @Test func openSSLStrictModeVerifiesTheChainAndItsMarkers() throws {
        let scratch = Scratch()
        let chain = try SigningChain.loadOrCreate(directory: scratch.path("app-store"))
        for (name, certificate) in [("root", chain.root), ("intermediate", chain.intermediate), ("leaf", chain.leaf)] {
            try certificate.serializeAsPEM().pemString.write(to: scratch.path("\(name).pem"), atomically: true, encoding: .utf8)
        }
        let verify = try SKSimProgram.run(URL(fileURLWithPath: "/usr/bin/openssl"), [
            "verify", "-x509_strict", "-CAfile", scratch.path("root.pem").path, "-untrusted", scratch.path("intermediate.pem").path,
            scratch.path("leaf.pem").path,
        ])
        #expect(verify.status == 0, "\(verify.output) \(verify.error)")
        // Apple's two marker extensions, not critical.
        #expect(chain.intermediate.extensions[oid: SigningChain.intermediateMarker]?.critical == false)
        #expect(chain.leaf.extensions[oid: SigningChain.leafMarker]?.critical == false)
        #expect(chain.leaf.extensions[oid: SigningChain.intermediateMarker] == nil)
    }
}
