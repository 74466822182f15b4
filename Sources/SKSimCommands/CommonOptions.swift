import ArgumentParser
import Foundation
import StoreKitLive
import StoreKitModel

/// Loads `--catalog FILE` (a `.storekit` file or the native catalog format), or the
/// built-in sample catalog: without a file, or named `sample` as in a topology's `catalog: sample`
/// (unless a file of that name exists).
func loadCatalog(_ path: String?) throws -> (Catalog, String) {
    guard let path, path != "sample" || FileManager.default.fileExists(atPath: path) else { return (.sample, "built-in sample") }
    do {
        return (try Catalog.load(contentsOf: URL(fileURLWithPath: path)), URL(fileURLWithPath: path).lastPathComponent)
    } catch {
        // A catalog error names the file itself (its full path), so the path is not repeated.
        throw UserFacingError("cannot use catalog \(error)", code: .invalidInput)
    }
}

/// A new output directory: the one asked for, or `out/<prefix>-<seed>[-n]` that does not exist yet.
func outputDirectory(_ requested: String?, prefix: String, seed: UInt64) -> URL {
    if let requested { return URL(fileURLWithPath: requested, isDirectory: true) }
    var candidate = URL(fileURLWithPath: "out/\(prefix)-\(seed)", isDirectory: true)
    var attempt = 1
    while FileManager.default.fileExists(atPath: candidate.path) {
        attempt += 1
        candidate = URL(fileURLWithPath: "out/\(prefix)-\(seed)-\(attempt)", isDirectory: true)
    }
    if attempt > 1 { printError("note: out/\(prefix)-\(seed) exists; writing this run to \(candidate.relativePath) (give --out to choose)") }
    return candidate
}

/// A seed from the system's generator when none was given; it is printed and logged,
/// so the run can be repeated exactly.
func chooseSeed(_ requested: UInt64?) -> UInt64 {
    requested ?? UInt64.random(in: 1...UInt64(Int64.max))
}

/// Most worker threads `--jobs` accepts (`explore`, `bench explore`).
package let maximumWorkerThreads = 1_024

package func printLine(_ text: String) {
    writeStandardOutput(text + "\n")
}

/// Writes to standard output. Foundation's `FileHandle.write(_:)` traps when a write fails (stdout
/// on a full disk, `> /dev/full`): the command ends instead with one line on stderr and status 2.
func writeStandardOutput(_ text: String) {
    do {
        try FileHandle.standardOutput.write(contentsOf: Data(text.utf8))
    } catch {
        printError("error: cannot write to standard output: \(describeError(error)); free some space or send the output elsewhere")
        exit(2)
    }
}

/// Writes to standard error; a failed write is dropped, since there is nowhere left to report it (a role
/// whose log file is on a full disk still exits with its own status, not Foundation's trap).
package func printError(_ text: String) {
    writeStandardError(text + "\n")
}

/// `printError` without the line end (a progress line rewritten in place).
func writeStandardError(_ text: String) {
    try? FileHandle.standardError.write(contentsOf: Data(text.utf8))
}
