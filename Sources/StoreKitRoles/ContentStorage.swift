import Foundation
import StoreKitModel

/// Where downloaded content goes. Paths are relative to the run's content root (they are
/// what `contentURL` holds), so a log names the same content wherever it is written.
///
/// Content bytes are a pure function of the content identifier and the offset
/// (`ContentBytes`), so a run need not write them to check them: the virtual storage only
/// tracks lengths; the file storage writes real files.
public protocol ContentStorage: AnyObject {
    /// Appends `count` bytes of the content at `offset`; `offset` must be the current length
    /// (0 starts the file afresh).
    func append(_ path: String, contentIdentifier: String, offset: Int64, count: Int64) throws
    /// Length of the content at `path`, or nil when there is none.
    func length(_ path: String) -> Int64?
    /// Copies the content at `path` to `destination` (an app keeping its download, R-D3).
    func copy(_ path: String, to destination: String) throws
    func remove(_ path: String)
    /// The download at `path` is complete: a storage of real files makes it a hosted-content package
    /// (F-H1). The default does nothing (virtual content has no package).
    func completePackage(_ path: String, contentIdentifier: String, contentVersion: String, productIdentifier: String) throws
}

extension ContentStorage {
    public func completePackage(_ path: String, contentIdentifier: String, contentVersion: String, productIdentifier: String) throws {}
}

/// The bytes of hosted content: derived from its identifier and offset only.
public enum ContentBytes {
    public static func byte(contentIdentifier: String, offset: Int64) -> UInt8 {
        byte(seed: seed(contentIdentifier), offset: offset)
    }

    /// The per-content part of `byte`, hashed once per chunk rather than per byte.
    public static func seed(_ contentIdentifier: String) -> UInt64 {
        fnv1a64(contentIdentifier.utf8) >> 8
    }

    public static func byte(seed: UInt64, offset: Int64) -> UInt8 {
        UInt8(truncatingIfNeeded: seed &+ UInt64(bitPattern: offset) &* 31)
    }
}

/// A failed content operation, naming the path.
public struct ContentStorageError: Error, CustomStringConvertible, Sendable {
    /// What kind of failure, for code (and tests) that tell failures apart.
    public enum Code: String, Sendable, Hashable, CaseIterable {
        /// A write that does not continue the content where it ends.
        case writeNotAtEnd
        /// Content that does not exist.
        case notFound
        /// The file system refused the operation.
        case fileSystem
    }

    public var code: Code
    public var description: String
    public init(_ description: String, code: Code = .fileSystem) {
        self.description = description
        self.code = code
    }
}

/// Content kept as lengths only: what deterministic runs use by default (a run with many
/// downloads writes nothing to disk). Writes are checked: each must continue the file.
public final class VirtualContentStorage: ContentStorage {
    private var lengths: [String: Int64] = [:]

    public init() {}

    public func append(_ path: String, contentIdentifier: String, offset: Int64, count: Int64) throws {
        let current = offset == 0 ? 0 : lengths[path]
        guard current == offset else {
            throw ContentStorageError("\(path): write at offset \(offset) but the content holds \(current.map(String.init) ?? "nothing")", code: .writeNotAtEnd)
        }
        lengths[path] = offset + count
    }

    public func length(_ path: String) -> Int64? { lengths[path] }

    public func copy(_ path: String, to destination: String) throws {
        guard let length = lengths[path] else { throw ContentStorageError("\(path) does not exist (its transaction was finished, or it was never downloaded)", code: .notFound) }
        lengths[destination] = length
    }

    public func remove(_ path: String) { lengths[path] = nil }
}

/// Content as real files under a root directory: live runs, and `simulate --write-content`. Each
/// download is a hosted-content package, as the App Store delivers one (F-H1): the folder at
/// `contentURL` holds `Contents/<contentIdentifier>` (the bytes) and, once complete, `ContentInfo.plist`.
public final class FileContentStorage: ContentStorage {
    public let root: URL

    public init(root: URL) {
        self.root = root
    }

    private func url(_ path: String) -> URL { root.appendingPathComponent(path) }

    /// The file in the package that holds the content's bytes.
    public static func contentsFile(_ package: URL, contentIdentifier: String) -> URL {
        package.appendingPathComponent("Contents", isDirectory: true).appendingPathComponent(contentIdentifier)
    }

    public func append(_ path: String, contentIdentifier: String, offset: Int64, count: Int64) throws {
        let url = Self.contentsFile(url(path), contentIdentifier: contentIdentifier)
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        let seed = ContentBytes.seed(contentIdentifier)
        let bytes = (0..<count).map { ContentBytes.byte(seed: seed, offset: offset + $0) }
        if offset == 0 {
            try Data(bytes).write(to: url)
            return
        }
        let handle = try FileHandle(forWritingTo: url)
        defer { try? handle.close() }
        let end = try handle.seekToEnd()
        guard end == UInt64(offset) else {
            throw ContentStorageError("\(url.path): write at offset \(offset) but the file holds \(end) bytes", code: .writeNotAtEnd)
        }
        try handle.write(contentsOf: bytes)
    }

    /// The bytes in the package's `Contents` folder.
    public func length(_ path: String) -> Int64? {
        let contents = url(path).appendingPathComponent("Contents", isDirectory: true)
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: contents.path) else { return nil }
        return names.reduce(Int64(0)) { total, name in
            let size = (try? FileManager.default.attributesOfItem(atPath: contents.appendingPathComponent(name).path))?[.size] as? NSNumber
            return total + (size?.int64Value ?? 0)
        }
    }

    /// Writes `ContentInfo.plist` with the keys Apple's packages carry, and the identifier.
    public func completePackage(_ path: String, contentIdentifier: String, contentVersion: String, productIdentifier: String) throws {
        let info: [String: String] = ["ContentIdentifier": contentIdentifier, "ContentVersion": contentVersion,
                                      "IAPProductIdentifier": productIdentifier]
        let data = try PropertyListSerialization.data(fromPropertyList: info, format: .xml, options: 0)
        try data.write(to: url(path).appendingPathComponent("ContentInfo.plist"))
    }

    public func copy(_ path: String, to destination: String) throws {
        let target = url(destination)
        try FileManager.default.createDirectory(at: target.deletingLastPathComponent(), withIntermediateDirectories: true)
        try? FileManager.default.removeItem(at: target)
        try FileManager.default.copyItem(at: url(path), to: target)
    }

    public func remove(_ path: String) {
        try? FileManager.default.removeItem(at: url(path))
    }
}
