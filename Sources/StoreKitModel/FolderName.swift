/// Names that become one folder of a run directory (a device's content and app folders, a piece of hosted
/// content, a control group): one path component, so that a name from outside cannot lead elsewhere.
public enum FolderName {
    /// True for a non-empty name without '/' or NUL that is not '.' or '..'.
    public static func isSingleComponent(_ name: String) -> Bool {
        !name.isEmpty && !name.utf8.contains(where: { $0 == slash || $0 == 0 }) && name != "." && name != ".."
    }

    /// True for a relative path that stays under the folder it is taken from: no NUL and no '..'
    /// component. Read byte by byte: Foundation's `contains` and a split cost more than the rest of
    /// deciding the command that carries the path (a finished download's `contentURL`).
    public static func staysInside(_ path: String) -> Bool {
        var componentLength = 0
        var componentIsDots = true
        for byte in path.utf8 {
            if byte == 0 { return false }
            if byte == slash {
                if componentLength == 2, componentIsDots { return false }
                componentLength = 0
                componentIsDots = true
            } else {
                componentLength += 1
                componentIsDots = componentIsDots && byte == dot
            }
        }
        return !(componentLength == 2 && componentIsDots)
    }

    private static let slash = UInt8(ascii: "/")
    private static let dot = UInt8(ascii: ".")
}
