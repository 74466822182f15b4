#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import CChecksum

/// Thin checked wrappers over POSIX file calls, turning errno into `LogError` naming the file.
package enum FileIO {
    static func failure(_ operation: String, _ path: String, errorNumber: Int32 = errno) -> LogError {
        let reason = String(cString: strerror(errorNumber))
        return LogError(
            .inputOutput, "\(operation) failed: \(reason) (errno \(errorNumber))", path: path,
            remedy: "Check that the path exists, is writable and the disk is not full")
    }

    package static func open(_ path: String, flags: Int32, mode: mode_t = 0o644) throws(LogError) -> Int32 {
        while true {
            let descriptor = Glibc.open(path, flags | O_CLOEXEC, mode)
            if descriptor >= 0 { return descriptor }
            if errno == EINTR { continue }
            if errno == ENOENT { throw LogError(.notFound, "no such file or directory", path: path) }
            throw failure("open", path)
        }
    }

    package static func close(_ descriptor: Int32) {
        _ = Glibc.close(descriptor)
    }

    /// Writes all bytes at `offset`, retrying short writes and EINTR.
    package static func writeAll(_ descriptor: Int32, _ bytes: UnsafeRawBufferPointer, at offset: UInt64, path: String) throws(LogError) {
        guard var pointer = bytes.baseAddress else { return }
        var remaining = bytes.count
        var position = off_t(offset)
        while remaining > 0 {
            let written = pwrite(descriptor, pointer, remaining, position)
            if written < 0 {
                if errno == EINTR { continue }
                throw failure("write", path)
            }
            pointer += written
            remaining -= written
            position += off_t(written)
        }
    }

    package static func writeAll(_ descriptor: Int32, _ bytes: [UInt8], at offset: UInt64, path: String) throws(LogError) {
        let result = bytes.withUnsafeBytes { buffer in
            Result { () throws(LogError) in try writeAll(descriptor, buffer, at: offset, path: path) }
        }
        try result.get()
    }

    /// Reads up to `buffer.count` bytes at `offset`; returns fewer only at end of file.
    package static func read(_ descriptor: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: UInt64, path: String) throws(LogError) -> Int {
        guard let base = buffer.baseAddress else { return 0 }
        var total = 0
        while total < buffer.count {
            let count = pread(descriptor, base + total, buffer.count - total, off_t(offset) + off_t(total))
            if count < 0 {
                if errno == EINTR { continue }
                throw failure("read", path)
            }
            if count == 0 { break }
            total += count
        }
        return total
    }

    static func synchronize(_ descriptor: Int32, path: String) throws(LogError) {
        while fsync(descriptor) != 0 {
            if errno == EINTR { continue }
            throw failure("fsync", path)
        }
    }

    /// fdatasync where available: the data and the metadata needed to read it back (the size), not times.
    package static func synchronizeData(_ descriptor: Int32, path: String) throws(LogError) {
        #if os(Linux)
        while fdatasync(descriptor) != 0 {
            if errno == EINTR { continue }
            throw failure("fdatasync", path)
        }
        #else
        try synchronize(descriptor, path: path)
        #endif
    }

    /// fsync of a directory, so that a created, renamed or removed entry survives a crash.
    static func synchronizeDirectory(_ path: String) throws(LogError) {
        let descriptor = try open(path, flags: O_RDONLY | O_DIRECTORY)
        defer { close(descriptor) }
        try synchronize(descriptor, path: path)
    }

    package static func size(_ descriptor: Int32, path: String) throws(LogError) -> UInt64 {
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { throw failure("fstat", path) }
        return UInt64(status.st_size)
    }

    static func truncate(_ descriptor: Int32, to length: UInt64, path: String) throws(LogError) {
        while ftruncate(descriptor, off_t(length)) != 0 {
            if errno == EINTR { continue }
            throw failure("ftruncate", path)
        }
    }

    /// Reserves `length` bytes of disk space from `offset` without changing the file's size
    /// (fallocate with FALLOC_FL_KEEP_SIZE); false where that is not possible.
    package static func reserve(_ descriptor: Int32, from offset: UInt64, length: UInt64) -> Bool {
        sksim_reserve_space(descriptor, offset, length) == 0
    }

    static func exists(_ path: String) -> Bool {
        var status = stat()
        return stat(path, &status) == 0
    }

    static func remove(_ path: String) throws(LogError) {
        if unlink(path) != 0 && errno != ENOENT { throw failure("unlink", path) }
    }

    static func rename(_ source: String, to destination: String) throws(LogError) {
        if Glibc.rename(source, destination) != 0 { throw failure("rename to \(destination)", source) }
    }

    /// Creates the directory if missing (parent must exist); returns true when it was created.
    @discardableResult
    static func createDirectory(_ path: String) throws(LogError) -> Bool {
        if mkdir(path, 0o755) == 0 { return true }
        if errno == EEXIST { return false }
        throw failure("mkdir", path)
    }

    /// Names in a directory, excluding "." and "..", sorted bytewise for determinism.
    static func directoryEntries(_ path: String) throws(LogError) -> [String] {
        guard let directory = opendir(path) else {
            if errno == ENOENT { throw LogError(.notFound, "no such directory", path: path) }
            throw failure("opendir", path)
        }
        defer { closedir(directory) }
        var names: [String] = []
        let nameOffset = MemoryLayout<dirent>.offset(of: \dirent.d_name)!
        while let entry = readdir(directory) {
            // Read the name in place: copying the whole d_name field can run past a short last entry of the
            // kernel's buffer (entries are only d_reclen bytes long) and fault.
            let name = String(cString: (UnsafeRawPointer(entry) + nameOffset).assumingMemoryBound(to: CChar.self))
            if name != "." && name != ".." { names.append(name) }
        }
        return names.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
    }

    /// Writes `bytes` to `path` atomically: temporary file, fsync, rename, directory fsync (when `durable`).
    static func replaceFile(_ path: String, with bytes: [UInt8], directory: String, durable: Bool) throws(LogError) {
        let temporary = path + ".tmp"
        let descriptor = try open(temporary, flags: O_WRONLY | O_CREAT | O_TRUNC)
        do {
            try writeAll(descriptor, bytes, at: 0, path: temporary)
            if durable { try synchronize(descriptor, path: temporary) }
        } catch {
            close(descriptor)
            try? remove(temporary)
            throw error
        }
        close(descriptor)
        try rename(temporary, to: path)
        if durable { try synchronizeDirectory(directory) }
    }
}
