import Foundation

/// What a team's server is told about its app: its bundle id and the App Store environment
/// (topology `appStoreServer.bundleIdentifier`, `appStoreServer.environment`, `--bundle-id`).
public struct AppStoreSettings: Sendable, Hashable {
    public var bundleIdentifier: String
    /// "Sandbox" (the default) or "Production".
    public var environment: String

    public static let defaultBundleIdentifier = "com.example.sksim"
    public static let defaultEnvironment = "Sandbox"

    public init(bundleIdentifier: String = AppStoreSettings.defaultBundleIdentifier, environment: String = AppStoreSettings.defaultEnvironment) {
        self.bundleIdentifier = bundleIdentifier
        self.environment = environment
    }
}
