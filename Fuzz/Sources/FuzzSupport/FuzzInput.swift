import CFuzzerDriver
import Foundation

/// How one fuzz input becomes what a decoder reads: several frames of a message, or a file.
public enum FuzzInput {
    /// Separates the frames of a multipart message in an input. Three 0xF5 bytes: never in UTF-8 text
    /// and rare in the project's binary encodings, so seeds stay readable and splitting does not cut them.
    public static let frameSeparator: [UInt8] = [0xF5, 0xF5, 0xF5]

    /// The frames of a multipart message: the input cut at each separator (one frame when there is none).
    public static func frames(_ bytes: UnsafeRawBufferPointer) -> [[UInt8]] {
        var frames: [[UInt8]] = []
        var current: [UInt8] = []
        var index = 0
        while index < bytes.count {
            if index + 3 <= bytes.count, bytes[index] == 0xF5, bytes[index + 1] == 0xF5, bytes[index + 2] == 0xF5 {
                frames.append(current)
                current = []
                index += 3
            } else {
                current.append(bytes[index])
                index += 1
            }
        }
        frames.append(current)
        return frames
    }

    /// The input joined from frames, the inverse of `frames` (for writing seeds).
    public static func joined(_ frames: [[UInt8]]) -> [UInt8] {
        Array(frames.joined(separator: frameSeparator))
    }

    /// A scratch directory of this process, removed and made again for each input.
    public static func freshDirectory(_ name: String) -> URL {
        let url = FileManager.default.temporaryDirectory
            .appendingPathComponent("sksim-fuzz-\(getpid())", isDirectory: true)
            .appendingPathComponent(name, isDirectory: true)
        try? FileManager.default.removeItem(at: url)
        try! FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    /// Writes the input to `name` in a fresh scratch directory and returns its URL.
    public static func file(_ bytes: UnsafeRawBufferPointer, named name: String, in directory: String = "file") -> URL {
        let url = freshDirectory(directory).appendingPathComponent(name)
        try! Data(bytes).write(to: url)
        return url
    }
}

/// Runs libFuzzer from a fuzz target's entry point. SwiftPM links an executable's `main` to
/// `<Module>_main` (`--defsym`), which `-parse-as-library` does not emit, so each target defines
/// that symbol itself and hands its arguments to libFuzzer's driver here.
public func runFuzzer(
    _ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>,
    _ testOneInput: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
) -> CInt {
    var count = argc
    var arguments: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = argv
    return LLVMFuzzerRunDriver(&count, &arguments, testOneInput)
}
