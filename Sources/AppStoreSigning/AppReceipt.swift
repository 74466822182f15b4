import Foundation
import SwiftASN1
@_spi(CMS) import X509

/// A device's app receipt in Apple's format (Receipt Validation Programming Guide, "Receipt Fields"): a
/// CMS SignedData (PKCS #7, DER) whose content is a SET of receipt attributes, each a SEQUENCE of type,
/// version and an OCTET STRING value; the in-app purchases are attributes of type 17, each holding a SET
/// of its own attributes (1701 quantity, 1702 product, 1703 transaction, 1704 purchase date, ...).
///
/// The sets are written in the receipt's order, not DER's sorted order, as Apple's are: in-app entries
/// in purchase order, and in each entry the transaction id before the original transaction id, which
/// is what Apple's `ReceiptUtility.extract_transaction_id_from_app_receipt` reads.
public enum AppReceipt {
    /// One in-app entry.
    public struct Entry: Sendable, Hashable {
        public var quantity: Int
        public var productIdentifier: String
        public var transactionId: String
        public var originalTransactionId: String
        /// Milliseconds since 1970.
        public var purchaseDate: Int64
        public var originalPurchaseDate: Int64
        public var expiresDate: Int64?
        public var cancellationDate: Int64?
        public var webOrderLineItemId: String?
        public var isTrialPeriod: Bool
        public var isInIntroductoryOfferPeriod: Bool
        public var promotionalOfferIdentifier: String?

        public init(quantity: Int, productIdentifier: String, transactionId: String, originalTransactionId: String, purchaseDate: Int64,
                    originalPurchaseDate: Int64, expiresDate: Int64?, cancellationDate: Int64?, webOrderLineItemId: String?,
                    isTrialPeriod: Bool, isInIntroductoryOfferPeriod: Bool, promotionalOfferIdentifier: String?) {
            self.quantity = quantity
            self.productIdentifier = productIdentifier
            self.transactionId = transactionId
            self.originalTransactionId = originalTransactionId
            self.purchaseDate = purchaseDate
            self.originalPurchaseDate = originalPurchaseDate
            self.expiresDate = expiresDate
            self.cancellationDate = cancellationDate
            self.webOrderLineItemId = webOrderLineItemId
            self.isTrialPeriod = isTrialPeriod
            self.isInIntroductoryOfferPeriod = isInIntroductoryOfferPeriod
            self.promotionalOfferIdentifier = promotionalOfferIdentifier
        }
    }

    /// The receipt's content (the SET of attributes), unsigned.
    public static func payload(bundleIdentifier: String, applicationVersion: String, creationDate: Int64, entries: [Entry]) throws -> [UInt8] {
        var serializer = DER.Serializer()
        try serializer.appendConstructedNode(identifier: .set) { set in
            try attribute(2, utf8: bundleIdentifier, into: &set)
            try attribute(3, utf8: applicationVersion, into: &set)
            try attribute(12, date: creationDate, into: &set)
            try attribute(19, utf8: applicationVersion, into: &set)
            for entry in entries {
                try attribute(17, value: try inApp(entry), into: &set)
            }
        }
        return serializer.serializedBytes
    }

    /// A device's receipt of `entries`, created and signed `now`: what `sksim log receipt`, the server
    /// and a simulated device's `Bundle.main.appStoreReceiptURL` give.
    public static func signed(entries: [Entry], bundleIdentifier: String, chain: SigningChain, now: Date) throws -> [UInt8] {
        let milliseconds = Int64((now.timeIntervalSince1970 * 1000).rounded(.down))
        let content = try payload(bundleIdentifier: bundleIdentifier, applicationVersion: "1", creationDate: milliseconds, entries: entries)
        return try sign(content, chain: chain, signingTime: Date(timeIntervalSince1970: Double(milliseconds) / 1000))
    }

    /// The signed receipt: `payload` in a CMS SignedData by the chain's leaf, with the intermediate and root.
    public static func sign(_ payload: [UInt8], chain: SigningChain, signingTime: Date) throws -> [UInt8] {
        try CMS.sign(payload, signatureAlgorithm: .ecdsaWithSHA256, additionalIntermediateCertificates: [chain.intermediate, chain.root],
                     certificate: chain.leaf, privateKey: Certificate.PrivateKey(chain.leafKey), signingTime: signingTime, detached: false)
    }

    /// The content of a receipt this chain signed, or nil when it is not one (malformed, or signed by
    /// another chain): what `/verifyReceipt` checks before reading it.
    public static func verifiedPayload(_ receipt: [UInt8], chain: SigningChain) async -> [UInt8]? {
        let result = await CMS.isValidAttachedSignature(signatureBytes: receipt, trustRoots: CertificateStore([chain.root])) {
            RFC5280Policy()
        }
        guard case .success = result else { return nil }
        return try? content(ofSignedData: receipt)
    }

    /// The encapsulated content of a CMS SignedData (RFC 5652 5.1): ContentInfo { contentType,
    /// [0] SignedData { version, digestAlgorithms, encapContentInfo { eContentType, [0] OCTET STRING } } }.
    public static func content(ofSignedData bytes: [UInt8]) throws -> [UInt8] {
        let contextZero = ASN1Identifier(tagWithNumber: 0, tagClass: .contextSpecific)
        func children(_ node: ASN1Node) throws -> [ASN1Node] {
            guard case .constructed(let nodes) = node.content else { throw ASN1Error.invalidASN1Object(reason: "expected a constructed node") }
            return Array(nodes)
        }
        let info = try children(try DER.parse(bytes))
        guard info.count == 2, info[1].identifier == contextZero, let signedData = try children(info[1]).first,
              case let fields = try children(signedData), fields.count >= 3 else {
            throw ASN1Error.invalidASN1Object(reason: "not a CMS SignedData")
        }
        let encapsulated = try children(fields[2])
        guard encapsulated.count == 2, encapsulated[1].identifier == contextZero, let octets = try children(encapsulated[1]).first else {
            throw ASN1Error.invalidASN1Object(reason: "a CMS SignedData without content")
        }
        return Array(try ASN1OctetString(derEncoded: octets).bytes)
    }

    /// A receipt's content as `/verifyReceipt` returns it: `bundle_id`, `receipt_creation_date` and
    /// `in_app`, each entry with Apple's JSON names (dates as RFC 3339 text, as the receipt holds them).
    public static func fields(ofPayload payload: [UInt8]) throws -> [String: Any] {
        let root = try DER.parse(payload)
        guard root.identifier == .set, case .constructed(let attributes) = root.content else {
            throw ASN1Error.invalidASN1Object(reason: "a receipt is a SET of attributes")
        }
        let textNames = [2: "bundle_id", 3: "application_version", 12: "receipt_creation_date", 19: "original_application_version",
                         1702: "product_id", 1703: "transaction_id", 1705: "original_transaction_id", 1704: "purchase_date",
                         1706: "original_purchase_date", 1708: "expires_date", 1712: "cancellation_date", 1721: "promotional_offer_id"]
        let integerNames = [1701: "quantity", 1711: "web_order_line_item_id", 1713: "is_trial_period", 1719: "is_in_intro_offer_period"]
        func text(_ value: ArraySlice<UInt8>) throws -> String {
            let node = try DER.parse(value)
            if node.identifier == .ia5String { return String(decoding: try ASN1IA5String(derEncoded: node).bytes, as: UTF8.self) }
            return String(try ASN1UTF8String(derEncoded: node))
        }
        func read(_ type: Int, _ value: ArraySlice<UInt8>, into fields: inout [String: Any]) throws {
            if let name = textNames[type] { fields[name] = try text(value) }
            if let name = integerNames[type] {
                let number = try Int(derEncoded: try DER.parse(value))
                // Apple's JSON gives these as strings ("1", "false"/"true" for the flags).
                fields[name] = type == 1713 || type == 1719 ? (number == 1 ? "true" : "false") : String(number)
            }
        }
        var receipt: [String: Any] = [:]
        var inApp: [[String: Any]] = []
        for node in attributes {
            let (type, value) = try readAttribute(node)
            guard type == 17 else {
                try read(type, value, into: &receipt)
                continue
            }
            let entry = try DER.parse(value)
            guard entry.identifier == .set, case .constructed(let nodes) = entry.content else {
                throw ASN1Error.invalidASN1Object(reason: "an in-app entry is a SET of attributes")
            }
            var fields: [String: Any] = [:]
            for field in nodes {
                let (fieldType, fieldValue) = try readAttribute(field)
                try read(fieldType, fieldValue, into: &fields)
            }
            inApp.append(fields)
        }
        receipt["in_app"] = inApp
        return receipt
    }

    // MARK: Encoding

    private static func inApp(_ entry: Entry) throws -> [UInt8] {
        var serializer = DER.Serializer()
        try serializer.appendConstructedNode(identifier: .set) { set in
            try attribute(1701, integer: entry.quantity, into: &set)
            try attribute(1702, utf8: entry.productIdentifier, into: &set)
            try attribute(1703, utf8: entry.transactionId, into: &set)
            try attribute(1704, date: entry.purchaseDate, into: &set)
            try attribute(1705, utf8: entry.originalTransactionId, into: &set)
            try attribute(1706, date: entry.originalPurchaseDate, into: &set)
            if let expires = entry.expiresDate { try attribute(1708, date: expires, into: &set) }
            if let web = entry.webOrderLineItemId, let number = Int(web) { try attribute(1711, integer: number, into: &set) }
            if let cancelled = entry.cancellationDate { try attribute(1712, date: cancelled, into: &set) }
            try attribute(1713, integer: entry.isTrialPeriod ? 1 : 0, into: &set)
            try attribute(1719, integer: entry.isInIntroductoryOfferPeriod ? 1 : 0, into: &set)
            if let offer = entry.promotionalOfferIdentifier { try attribute(1721, utf8: offer, into: &set) }
        }
        return serializer.serializedBytes
    }

    private static func attribute(_ type: Int, value: [UInt8], into coder: inout DER.Serializer) throws {
        try coder.appendConstructedNode(identifier: .sequence) { sequence in
            try sequence.serialize(type)
            try sequence.serialize(1)
            try sequence.serialize(ASN1OctetString(contentBytes: ArraySlice(value)))
        }
    }

    private static func attribute(_ type: Int, utf8 text: String, into coder: inout DER.Serializer) throws {
        var inner = DER.Serializer()
        try inner.serialize(ASN1UTF8String(text))
        try attribute(type, value: inner.serializedBytes, into: &coder)
    }

    private static func attribute(_ type: Int, integer: Int, into coder: inout DER.Serializer) throws {
        var inner = DER.Serializer()
        try inner.serialize(integer)
        try attribute(type, value: inner.serializedBytes, into: &coder)
    }

    /// Dates are IA5Strings in RFC 3339 form, as Apple's receipts write them.
    private static func attribute(_ type: Int, date milliseconds: Int64, into coder: inout DER.Serializer) throws {
        var inner = DER.Serializer()
        try inner.serialize(try ASN1IA5String(rfc3339(milliseconds)))
        try attribute(type, value: inner.serializedBytes, into: &coder)
    }

    static func rfc3339(_ milliseconds: Int64) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.string(from: Date(timeIntervalSince1970: Double(milliseconds) / 1000))
    }

    private static func readAttribute(_ node: ASN1Node) throws -> (Int, ArraySlice<UInt8>) {
        try DER.sequence(node, identifier: .sequence) { nodes in
            guard let typeNode = nodes.next(), let versionNode = nodes.next(), let valueNode = nodes.next() else {
                throw ASN1Error.invalidASN1Object(reason: "a receipt attribute is a type, a version and a value")
            }
            _ = try Int(derEncoded: versionNode)
            return (try Int(derEncoded: typeNode), try ASN1OctetString(derEncoded: valueNode).bytes)
        }
    }
}
