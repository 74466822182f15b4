/// Names that become one folder of a run directory (a device's content and app folders, a piece of hosted
/// content, a control group): one path component, so that a name from outside cannot lead elsewhere.
public enum FolderName {
    /// True for a non-empty name without '/' or NUL that is not '.' or '..'.
    public static func isSingleComponent(_ name: String) -> Bool {
        !name.isEmpty && !name.contains("/") && !name.contains("\0") && name != "." && name != ".."
    }
}
