import Crypto
import Foundation
import SwiftASN1
import X509

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The simulator's stand-in for Apple's signing certificates: a P-256 root, an intermediate with Apple's
/// WWDR extension (OID 1.2.840.113635.100.6.2.1) and a leaf with Apple's App Store receipt-signing
/// extension (OID 1.2.840.113635.100.6.11.1), made with swift-certificates so that OpenSSL's strict
/// X.509 checks, which Apple's App Store Server Library runs, accept the chain (docs/app-store-server.md).
///
/// A team's server trusts `root.cer`; every signed object carries the three certificates in its `x5c`
/// header. Nothing of the chain ever enters the run's log.
public struct SigningChain: Sendable {
    public let root: Certificate
    public let intermediate: Certificate
    public let leaf: Certificate
    /// The leaf's key: it signs every JWS and receipt.
    public let leafKey: P256.Signing.PrivateKey
    /// The intermediate's key is kept beside it (0600) so that a leaf can be issued again; the
    /// root's key too, for a new intermediate. Neither is needed to sign.
    public let rootDER: [UInt8]
    public let intermediateDER: [UInt8]
    public let leafDER: [UInt8]

    /// The `x5c` header: leaf, intermediate, root, each DER in standard base64 (RFC 7515 4.1.6).
    public var x5c: [String] { [leafDER, intermediateDER, rootDER].map { Data($0).base64EncodedString() } }

    /// Apple's extension on its WWDR intermediate, which the verifier looks for.
    public static let intermediateMarker: ASN1ObjectIdentifier = [1, 2, 840, 113_635, 100, 6, 2, 1]
    /// Apple's extension on its App Store signing leaf, which the verifier looks for.
    public static let leafMarker: ASN1ObjectIdentifier = [1, 2, 840, 113_635, 100, 6, 11, 1]

    /// Files of a certificates folder. `root.cer` is the one a team's server trusts.
    public enum FileName {
        public static let root = "root.cer"
        public static let intermediate = "intermediate.cer"
        public static let leaf = "leaf.cer"
        public static let rootKey = "root-key.pem"
        public static let intermediateKey = "intermediate-key.pem"
        public static let leafKey = "leaf-key.pem"
        static let all = [root, intermediate, leaf, rootKey, intermediateKey, leafKey]
    }

    /// Valid from 2000 to 2099: Apple's verifier checks the chain at each signed object's `signedDate`
    /// (with online checks off), and a run's dates may lie anywhere a scenario puts them.
    static let notValidBefore = Date(timeIntervalSince1970: 946_684_800)  // 2000-01-01T00:00:00Z
    static let notValidAfter = Date(timeIntervalSince1970: 4_102_444_799)  // 2099-12-31T23:59:59Z

    public init(root: Certificate, intermediate: Certificate, leaf: Certificate, leafKey: P256.Signing.PrivateKey) throws {
        self.root = root
        self.intermediate = intermediate
        self.leaf = leaf
        self.leafKey = leafKey
        rootDER = try Self.der(root)
        intermediateDER = try Self.der(intermediate)
        leafDER = try Self.der(leaf)
    }

    /// Makes a new chain with new keys (not written anywhere).
    public static func generate() throws -> (chain: SigningChain, rootKey: P256.Signing.PrivateKey, intermediateKey: P256.Signing.PrivateKey) {
        let rootKey = P256.Signing.PrivateKey()
        let intermediateKey = P256.Signing.PrivateKey()
        let leafKey = P256.Signing.PrivateKey()
        let rootName = try DistinguishedName {
            CommonName("StoreKitSim Root CA - G3")
            OrganizationalUnitName("StoreKitSim Certification Authority")
            OrganizationName("StoreKitSim")
            CountryName("US")
        }
        let intermediateName = try DistinguishedName {
            CommonName("StoreKitSim Worldwide Developer Relations Certification Authority")
            OrganizationalUnitName("G6")
            OrganizationName("StoreKitSim")
            CountryName("US")
        }
        let leafName = try DistinguishedName {
            CommonName("StoreKitSim Prod ECC Mac App Store and iTunes Store Receipt Signing")
            OrganizationalUnitName("StoreKitSim Worldwide Developer Relations")
            OrganizationName("StoreKitSim")
            CountryName("US")
        }
        let rootPublic = Certificate.PublicKey(rootKey.publicKey)
        let intermediatePublic = Certificate.PublicKey(intermediateKey.publicKey)
        let leafPublic = Certificate.PublicKey(leafKey.publicKey)
        let rootIdentifier = SubjectKeyIdentifier(hash: rootPublic)
        let intermediateIdentifier = SubjectKeyIdentifier(hash: intermediatePublic)
        let root = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: rootPublic,
            notValidBefore: notValidBefore, notValidAfter: notValidAfter, issuer: rootName, subject: rootName,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                rootIdentifier
            },
            issuerPrivateKey: Certificate.PrivateKey(rootKey))
        let intermediate = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: intermediatePublic,
            notValidBefore: notValidBefore, notValidAfter: notValidAfter, issuer: rootName, subject: intermediateName,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                intermediateIdentifier
                AuthorityKeyIdentifier(keyIdentifier: rootIdentifier.keyIdentifier)
                // Apple's marker extensions hold an ASN.1 NULL and are not critical.
                Certificate.Extension(oid: intermediateMarker, critical: false, value: [0x05, 0x00])
            },
            issuerPrivateKey: Certificate.PrivateKey(rootKey))
        let leaf = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: leafPublic,
            notValidBefore: notValidBefore, notValidAfter: notValidAfter, issuer: intermediateName, subject: leafName,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                SubjectKeyIdentifier(hash: leafPublic)
                AuthorityKeyIdentifier(keyIdentifier: intermediateIdentifier.keyIdentifier)
                Certificate.Extension(oid: leafMarker, critical: false, value: [0x05, 0x00])
            },
            issuerPrivateKey: Certificate.PrivateKey(intermediateKey))
        return (try SigningChain(root: root, intermediate: intermediate, leaf: leaf, leafKey: leafKey), rootKey, intermediateKey)
    }

    /// The chain in `directory`: read when it is there, made and written (created with the folder)
    /// when the folder holds none of it. A folder holding only part of a chain is an error naming the
    /// missing files, never silently replaced (a team's server may already trust its `root.cer`).
    /// Processes starting together (the roles of `sksim run`) make one chain: creation holds a lock.
    public static func loadOrCreate(directory: URL) throws -> SigningChain {
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        } catch {
            throw SigningChainError("cannot create the certificates folder \(directory.path): \(error.localizedDescription)", code: .unwritable)
        }
        return try withLock(in: directory) {
            let present = FileName.all.filter { FileManager.default.fileExists(atPath: directory.appendingPathComponent($0).path) }
            if present.isEmpty {
                let made = try generate()
                let chain = made.chain
                try write(chain.intermediateDER, to: directory, FileName.intermediate, private: false)
                try write(chain.leafDER, to: directory, FileName.leaf, private: false)
                try write(Array(made.rootKey.pemRepresentation.utf8), to: directory, FileName.rootKey, private: true)
                try write(Array(made.intermediateKey.pemRepresentation.utf8), to: directory, FileName.intermediateKey, private: true)
                try write(Array(chain.leafKey.pemRepresentation.utf8), to: directory, FileName.leafKey, private: true)
                // The root last: a folder with root.cer holds a whole chain.
                try write(chain.rootDER, to: directory, FileName.root, private: false)
                return chain
            }
            let missing = FileName.all.filter { !present.contains($0) }
            guard missing.isEmpty else {
                throw SigningChainError("the certificates folder \(directory.path) holds part of a chain only (missing \(missing.joined(separator: ", "))); restore those files, or give an empty folder to make a new chain", code: .partialChain)
            }
            return try load(directory: directory)
        }
    }

    /// Reads a chain written by `loadOrCreate`, checking that the leaf key is the leaf's.
    public static func load(directory: URL) throws -> SigningChain {
        func read(_ name: String) throws -> [UInt8] {
            do {
                return Array(try Data(contentsOf: directory.appendingPathComponent(name)))
            } catch {
                throw SigningChainError("cannot read \(directory.appendingPathComponent(name).path): \(error.localizedDescription)", code: .unreadable)
            }
        }
        do {
            let root = try Certificate(derEncoded: try read(FileName.root))
            let intermediate = try Certificate(derEncoded: try read(FileName.intermediate))
            let leaf = try Certificate(derEncoded: try read(FileName.leaf))
            let leafKey = try P256.Signing.PrivateKey(pemRepresentation: String(decoding: try read(FileName.leafKey), as: UTF8.self))
            guard leaf.publicKey == Certificate.PublicKey(leafKey.publicKey) else {
                throw SigningChainError("\(FileName.leafKey) in \(directory.path) is not the key of \(FileName.leaf)", code: .keyMismatch)
            }
            return try SigningChain(root: root, intermediate: intermediate, leaf: leaf, leafKey: leafKey)
        } catch let error as SigningChainError {
            throw error
        } catch {
            throw SigningChainError("the certificates in \(directory.path) cannot be read (\(error)); give an empty folder to make a new chain", code: .unreadable)
        }
    }

    static func der(_ certificate: Certificate) throws -> [UInt8] {
        var serializer = DER.Serializer()
        try serializer.serialize(certificate)
        return serializer.serializedBytes
    }

    /// Writes a file whole (a temporary file renamed), private keys readable by their owner only.
    private static func write(_ bytes: [UInt8], to directory: URL, _ name: String, private isPrivate: Bool) throws {
        let target = directory.appendingPathComponent(name)
        let temporary = directory.appendingPathComponent(".\(name).\(getpid()).tmp")
        let attributes: [FileAttributeKey: Any] = [.posixPermissions: isPrivate ? 0o600 : 0o644]
        guard FileManager.default.createFile(atPath: temporary.path, contents: Data(bytes), attributes: attributes) else {
            throw SigningChainError("cannot write \(temporary.path)", code: .unwritable)
        }
        guard rename(temporary.path, target.path) == 0 else {
            let reason = String(cString: strerror(errno))
            try? FileManager.default.removeItem(at: temporary)
            throw SigningChainError("cannot write \(target.path): \(reason)", code: .unwritable)
        }
    }

    /// Runs `body` holding an exclusive lock on the folder's `.lock` file (flock, released on close).
    private static func withLock<Result>(in directory: URL, _ body: () throws -> Result) throws -> Result {
        let path = directory.appendingPathComponent(".lock").path
        let descriptor = open(path, O_CREAT | O_RDWR | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw SigningChainError("cannot open \(path): \(String(cString: strerror(errno)))", code: .unwritable)
        }
        defer { close(descriptor) }
        while flock(descriptor, LOCK_EX) != 0 {
            guard errno == EINTR else { throw SigningChainError("cannot lock \(path): \(String(cString: strerror(errno)))", code: .unwritable) }
        }
        return try body()
    }
}

/// A certificates folder that cannot be used; the message says what to do.
public struct SigningChainError: Error, CustomStringConvertible {
    /// What kind of problem, for code (and tests) that tell problems apart; the description is for people.
    public enum Code: String, Sendable, Hashable, CaseIterable {
        /// The folder or a file in it cannot be created, written or locked.
        case unwritable
        /// A file of the chain cannot be read, or is not a certificate or key.
        case unreadable
        /// Some files of the chain are there and others are missing.
        case partialChain
        /// The leaf's private key does not belong to the leaf certificate.
        case keyMismatch
    }

    public var code: Code
    public var description: String
    public init(_ description: String, code: Code) {
        self.description = description
        self.code = code
    }
}
