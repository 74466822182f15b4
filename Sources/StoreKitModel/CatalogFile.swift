import Foundation
#if canImport(Glibc)
import Glibc
#endif

extension Catalog {
    /// The largest catalog file read. Real `.storekit` files are well under 1 MB (the biggest of
    /// 157 public ones surveyed is 17 KB), so this only keeps a wrong file (a log, a disk image) from
    /// being read into memory whole.
    public static let maximumFileBytes = 16 * 1024 * 1024

    /// How long a named pipe may stay silent before reading it gives up: `open` of a pipe nobody
    /// writes to would otherwise wait forever.
    public static let pipeSilenceMilliseconds: Int32 = 10_000

    /// Reads a catalog file, at most `maximumFileBytes` of it, after checking that it exists and
    /// is not a directory, so a wrong path fails with what is wrong rather than a Foundation
    /// error number.
    static func readFile(_ url: URL, pipeSilenceMilliseconds: Int32 = Catalog.pipeSilenceMilliseconds) throws(CatalogError) -> Data {
        let source = url.path
        func failure(_ problem: String, _ remedy: String) -> CatalogError {
            CatalogError(reason: .unreadableFile, source: source, problem: problem, remedy: remedy)
        }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: source, isDirectory: &isDirectory) else {
            // A topology's catalog path is taken from the topology's folder (the URL's base), a command
            // line's from the current directory.
            let current = FileManager.default.currentDirectoryPath
            let base = url.baseURL?.standardizedFileURL.path ?? current
            let folder = base == URL(fileURLWithPath: current).standardizedFileURL.path ? "the current directory" : "the topology file's folder"
            throw failure("There is no file at this path.", "Check the path; a relative path is taken from \(folder) (\(base)).")
        }
        if isDirectory.boolValue {
            throw failure("This is a directory, not a catalog file.",
                          "Pass the .storekit file itself (Xcode keeps it in the project folder, e.g. Products.storekit).")
        }
        if let size = (try? FileManager.default.attributesOfItem(atPath: source))?[.size] as? Int, size > maximumFileBytes {
            throw failure("The file is \(size) bytes; a catalog file is at most \(maximumFileBytes) bytes (real .storekit files are well under 1 MB).",
                          "Check that this is the right file: an Xcode StoreKit configuration or an sksim catalog.")
        }
        // Read in pieces up to the bound: a pipe or a device (/dev/zero) has no size to check first.
        let data = isNamedPipe(source)
            ? try readNamedPipe(source, silenceMilliseconds: pipeSilenceMilliseconds, failure: failure)
            : try readPieces(url, failure: failure)
        if data.count > maximumFileBytes {
            throw failure("The file holds more than \(maximumFileBytes) bytes, the most a catalog file may (real .storekit files are well under 1 MB).",
                          "Check that this is the right file: an Xcode StoreKit configuration or an sksim catalog.")
        }
        return data
    }

    private static func readPieces(_ url: URL, failure: (String, String) -> CatalogError) throws(CatalogError) -> Data {
        var data = Data()
        do {
            let handle = try FileHandle(forReadingFrom: url)
            defer { try? handle.close() }
            while data.count <= maximumFileBytes, let piece = try handle.read(upToCount: 1 << 20), !piece.isEmpty {
                data.append(piece)
            }
        } catch {
            throw failure("The file could not be read (\(describeError(error, withPath: false))).",
                          "Check that the file is readable by this user.")
        }
        return data
    }

    private static func isNamedPipe(_ path: String) -> Bool {
        var information = stat()
        return stat(path, &information) == 0 && (information.st_mode & S_IFMT) == S_IFIFO
    }

    /// Reads a named pipe (a FIFO, or `<(command)`) up to the bound without blocking in `open`, and
    /// gives up when no byte comes for `silenceMilliseconds`: a pipe with no writer never ends.
    private static func readNamedPipe(
        _ path: String, silenceMilliseconds: Int32, failure: (String, String) -> CatalogError
    ) throws(CatalogError) -> Data {
        let descriptor = open(path, O_RDONLY | O_NONBLOCK)
        guard descriptor >= 0 else {
            throw failure("The named pipe could not be opened (\(String(cString: strerror(errno)))).", "Check that it is readable by this user.")
        }
        defer { close(descriptor) }
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while data.count <= maximumFileBytes {
            var entry = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            let ready = poll(&entry, 1, silenceMilliseconds)
            if ready == 0 {
                throw failure("This is a named pipe, and nothing came through it for \(silenceMilliseconds / 1000) s (\(data.count) bytes before that).",
                              "Start the program that writes the catalog into the pipe first, or pass the .storekit file itself.")
            }
            let count = ready < 0 ? -1 : read(descriptor, &buffer, buffer.count)
            if count > 0 {
                data.append(contentsOf: buffer[..<count])
            } else if count == 0 {
                break  // every writer has closed the pipe: the end of the catalog
            } else if errno != EINTR && errno != EAGAIN {
                throw failure("The named pipe could not be read (\(String(cString: strerror(errno)))).", "Pass the .storekit file itself.")
            }
        }
        return data
    }

    /// Why `data` is not the JSON it should be, in words a user can act on: an empty file, text
    /// that is not UTF-8, a merge conflict left in the file, XML or HTML, or the first syntax
    /// error with its line and column. Called only once decoding has failed.
    static func jsonSyntaxProblem(_ data: Data, documentKind: String, decodingError: any Error) -> (problem: String, remedy: String) {
        let bytes = [UInt8](data)
        let resave = "Export the file again from Xcode, or fix it by hand at that place."
        let firstContent = bytes.firstIndex { !Self.isJSONWhitespace($0) }
        guard let firstContent else {
            return ("The file is empty (\(bytes.count) bytes, no JSON); expected \(documentKind).",
                    "Pass the StoreKit configuration Xcode saved (File > New > File > StoreKit Configuration File), or another catalog.")
        }
        if let binary = Self.binaryFileKinds.first(where: { bytes.starts(with: $0.signature) }) {
            return ("The file is \(binary.kind), not JSON; expected \(documentKind).", binary.remedy)
        }
        if let offset = Self.firstInvalidUTF8(bytes) {
            let place = Self.lineAndColumn(bytes, offset)
            return ("The file is not UTF-8 text: byte 0x\(String(bytes[offset], radix: 16, uppercase: true)) at line \(place.line), column \(place.column) is not valid UTF-8, which Xcode always writes.",
                    "Save the file as UTF-8 (or export it again from Xcode).")
        }
        let text = String(decoding: bytes, as: UTF8.self)
        for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated()
        where line.hasPrefix("<<<<<<<") || line.hasPrefix(">>>>>>>") || line.hasPrefix("=======") {
            return ("The file holds a version-control merge conflict marker at line \(index + 1) (\"\(line.prefix(40))\"), so it is not JSON.",
                    "Resolve the merge conflict (keep one side of each conflict and delete the <<<<<<<, ======= and >>>>>>> lines), then try again.")
        }
        if bytes[firstContent] == UInt8(ascii: "<") {
            return ("The file starts with \"<\": it is XML or HTML (a property list, or a web page saved instead of the file), not JSON; expected \(documentKind).",
                    "Pass the file itself (on GitHub, its Raw version); a .storekit file is JSON starting with \"{\".")
        }
        // Foundation's JSONDecoder says only "not valid JSON"; JSONSerialization says where.
        var detail = "it could not be decoded (\(decodingError))"
        do {
            _ = try JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed])
        } catch {
            let description = ((error as NSError).userInfo[NSDebugDescriptionErrorKey] as? String) ?? "\(error)"
            if description.contains("Unexpected end of file") {
                let end = Self.lineAndColumn(bytes, bytes.count)
                return ("The JSON ends early, at line \(end.line) (the file is cut off, or a bracket or quote is missing); expected \(documentKind).", resave)
            }
            // "Invalid value around character 2554." becomes "at line 100, column 1 (invalid value)".
            var words = description.hasSuffix(".") ? String(description.dropLast()) : description
            var place = ""
            if let range = words.range(of: " around character "),
               let offset = Int(words[range.upperBound...].prefix { $0.isNumber }) {
                let location = Self.lineAndColumn(bytes, min(offset, bytes.count))
                place = " at line \(location.line), column \(location.column)"
                words = String(words[..<range.lowerBound])
            }
            detail = "the JSON is malformed\(place) (\(words.prefix(1).lowercased() + words.dropFirst()))"
        }
        return ("Expected \(documentKind) in JSON, but \(detail).", resave)
    }

    /// Files mistaken for a catalog that are known by their first bytes, so the message names
    /// them instead of reporting their first byte that is not UTF-8.
    private static let binaryFileKinds: [(signature: [UInt8], kind: String, remedy: String)] = [
        // macOS writes "._NAME" beside a file on disks without extended attributes and in archives.
        ([0x00, 0x05, 0x16, 0x07], "a macOS AppleDouble file (the Finder metadata macOS keeps as \"._NAME\" beside a file)",
         "Pass the file of the same name without the leading \"._\"."),
        ([0x00, 0x05, 0x16, 0x00], "a macOS AppleSingle file",
         "Pass the .storekit file Xcode saved."),
        (Array("bplist".utf8), "a binary property list",
         "Pass the .storekit file Xcode saved: JSON text starting with \"{\" (plutil -convert json turns a property list into JSON)."),
        ([0x50, 0x4B, 0x03, 0x04], "a zip archive",
         "Unzip it and pass the .storekit file inside."),
        ([0x1F, 0x8B], "gzip-compressed",
         "Decompress it (gunzip) and pass the .storekit file inside."),
    ]

    private static func isJSONWhitespace(_ byte: UInt8) -> Bool {
        byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09
    }

    /// The 1-based line and column of a byte offset (columns count bytes).
    private static func lineAndColumn(_ bytes: [UInt8], _ offset: Int) -> (line: Int, column: Int) {
        let before = bytes[..<offset]
        let line = before.reduce(1) { $1 == 0x0A ? $0 + 1 : $0 }
        let lineStart = before.lastIndex(of: 0x0A).map { $0 + 1 } ?? 0
        return (line, offset - lineStart + 1)
    }

    /// The offset of the first byte that does not decode as UTF-8, or nil when all of it does.
    private static func firstInvalidUTF8(_ bytes: [UInt8]) -> Int? {
        var iterator = bytes.makeIterator()
        var parser = Unicode.UTF8.ForwardParser()
        var offset = 0
        while true {
            switch parser.parseScalar(from: &iterator) {
            case .valid(let encoded): offset += encoded.count
            case .emptyInput: return nil
            case .error: return offset
            }
        }
    }
}
