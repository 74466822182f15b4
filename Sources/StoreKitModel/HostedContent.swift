/// A piece of downloadable content the App Store hosts for a product.
public struct HostedContent: Sendable, Hashable, Codable {
    /// Identifies the piece of content; unique within a catalog.
    public var contentIdentifier: String
    /// The size of the download in bytes; always greater than zero.
    public var contentLength: Int64
    /// Integers separated by dots, for example "1.0.2".
    public var contentVersion: String

    /// Creates a description of hosted content; `Catalog` validates it.
    public init(contentIdentifier: String, contentLength: Int64, contentVersion: String) {
        self.contentIdentifier = contentIdentifier
        self.contentLength = contentLength
        self.contentVersion = contentVersion
    }

    /// Whether `version` is integers separated by dots, such as "1" or "1.0.2".
    public static func isValidContentVersion(_ version: String) -> Bool {
        // Checked by hand rather than with a regular expression so it stays cheap and obvious.
        let parts = version.split(separator: ".", omittingEmptySubsequences: false)
        return parts.allSatisfy { part in
            !part.isEmpty && part.allSatisfy { $0.isASCII && $0.isNumber }
        }
    }
}
