/// Why a catalog could not be read or built.
///
/// The description names the file, the key path or product, what was expected, and what to do,
/// so it can be shown to the user as is.
public struct CatalogError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The broad reason, for code that reacts to particular failures.
    public enum Reason: String, Sendable, Hashable, CaseIterable {
        /// The file could not be read from disk.
        case unreadableFile
        /// The data is not valid JSON.
        case notJSON
        /// The data is JSON but is neither a StoreKit configuration nor a native catalog.
        case unrecognizedFormat
        /// A value has the wrong JSON type or structure.
        case wrongShape
        /// A required key is missing or empty.
        case missingValue
        /// A value has the right type but is not acceptable.
        case invalidValue
        /// A product `type` that StoreKit configurations do not define.
        case unknownProductType
        /// Two products share an identifier.
        case duplicateProduct
        /// Two pieces of hosted content share an identifier.
        case duplicateContent
        /// A format version this simulator does not read.
        case unsupportedVersion
        /// Something refers to a product the catalog does not contain.
        case unknownProduct
    }

    /// The broad reason.
    public var reason: Reason
    /// The file or other origin of the data, as given by the caller.
    public var source: String
    /// Where in the document the problem is, for example `subscriptionGroups[0].subscriptions[1].productID`.
    public var keyPath: String?
    /// What is wrong: what was expected and what was found.
    public var problem: String
    /// What the user can do about it.
    public var remedy: String

    /// Creates an error; `problem` and `remedy` are sentences.
    public init(reason: Reason, source: String, keyPath: String? = nil, problem: String, remedy: String) {
        self.reason = reason
        self.source = source
        self.keyPath = keyPath
        self.problem = problem
        self.remedy = remedy
    }

    public var description: String {
        let location = keyPath.map { "\(source): \($0)" } ?? source
        return "\(location): \(problem) \(remedy)"
    }
}
