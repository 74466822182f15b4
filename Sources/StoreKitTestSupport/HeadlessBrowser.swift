import Foundation

/// Programs a test needs from the machine (a browser, python3), found on PATH.
public enum InstalledProgram {
    /// The full path of `program` on PATH, or nil when it is not installed.
    public static func path(of program: String) -> String? {
        for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":") {
            let path = "\(directory)/\(program)"
            if FileManager.default.isExecutableFile(atPath: path) { return path }
        }
        return nil
    }
}

/// Headless Chromium, for tests that check a page as a real browser renders it (the load
/// report, the explorer's trace). One helper, so every such test runs the browser the same way.
public enum HeadlessChromium {
    /// Chromium's path, or nil when it is not installed (scripts/setup installs it; tests then
    /// skip their browser check and say so).
    public static var executable: String? { InstalledProgram.path(of: "chromium") ?? InstalledProgram.path(of: "chromium-browser") }

    /// What a test prints when it skips its browser check.
    public static func skipMessage(_ what: String) -> String {
        "skipped the browser check of \(what): chromium is not installed and scripts/setup could not install it"
    }

    /// The page's DOM after it loaded and its scripts ran (`--dump-dom`), or nil without Chromium.
    public static func dumpDOM(_ page: URL) throws -> ProgramOutcome? {
        guard let chromium = executable else { return nil }
        return try SKSimProgram.run(URL(fileURLWithPath: chromium), arguments + ["--dump-dom", page.absoluteString])
    }

    /// The flags every run uses: no sandbox (tests may run as root), no GPU, nothing remembered.
    static let arguments = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions"]
}
