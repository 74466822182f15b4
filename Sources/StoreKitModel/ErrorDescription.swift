import Foundation

/// An error in one line, without Foundation's NSError dumps: file errors as "PATH: reason" (only
/// the reason when `withPath` is false, for a message that names the file itself).
public func describeError(_ error: any Error, withPath: Bool = true) -> String {
    let nsError = error as NSError
    guard nsError.domain == NSCocoaErrorDomain || nsError.domain == NSPOSIXErrorDomain else { return "\(error)" }
    var reason: String
    if let underlying = nsError.userInfo[NSUnderlyingErrorKey] as? NSError, underlying.domain == NSPOSIXErrorDomain {
        reason = String(cString: strerror(Int32(underlying.code)))
    } else if nsError.domain == NSPOSIXErrorDomain {
        reason = String(cString: strerror(Int32(nsError.code)))
    } else {
        switch nsError.code {
        case NSFileWriteOutOfSpaceError: reason = "no space left on the device"
        case NSFileWriteNoPermissionError, NSFileReadNoPermissionError: reason = "permission denied"
        case NSFileNoSuchFileError, NSFileReadNoSuchFileError: reason = "no such file or directory"
        case NSFileWriteFileExistsError: reason = "a file is in the way"
        case NSFileWriteUnknownError:
            reason = (nsError.userInfo[NSFilePathErrorKey] as? String).flatMap(fileInTheWay).map { "\($0) is a file, not a folder" }
                ?? "could not be written"
        default: reason = nsError.localizedDescription
        }
    }
    if withPath, let path = nsError.userInfo[NSFilePathErrorKey] as? String { reason = "\(path): \(reason)" }
    return reason
}

/// The nearest existing ancestor of `path` (or `path` itself) when it is not a folder: what stops
/// a folder from being created there.
private func fileInTheWay(_ path: String) -> String? {
    var url = URL(fileURLWithPath: path)
    while url.path != "/" {
        var isFolder: ObjCBool = false
        if FileManager.default.fileExists(atPath: url.path, isDirectory: &isFolder) { return isFolder.boolValue ? nil : url.path }
        url.deleteLastPathComponent()
    }
    return nil
}
