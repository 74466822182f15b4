/// The error a failed transaction, restore or download carries: an `SKError` of
/// `SKErrorDomain`, with Apple's names and numbers (SKError.Code, StoreKit 1).
public struct StoreError: Error, Sendable, Hashable, CustomStringConvertible {
    /// `SKError.Code`, with Apple's raw values; they are part of the log and wire format.
    /// Printed by its case name (Swift's default), which messages and JSON use.
    public enum Code: UInt8, Sendable, Hashable, CaseIterable {
        case unknown = 0
        case clientInvalid = 1
        case paymentCancelled = 2
        case paymentInvalid = 3
        case paymentNotAllowed = 4
        case storeProductNotAvailable = 5
        case cloudServicePermissionDenied = 6
        case cloudServiceNetworkConnectionFailed = 7
        case cloudServiceRevoked = 8
        case privacyAcknowledgementRequired = 9
        case unauthorizedRequestData = 10
        case invalidOfferIdentifier = 11
        case invalidSignature = 12
        case missingOfferParams = 13
        case invalidOfferPrice = 14
        case overlayCancelled = 15
        case overlayInvalidConfiguration = 16
        case overlayTimeout = 17
        case ineligibleForOffer = 18
        case unsupportedPlatform = 19
        case overlayPresentedInBackgroundScene = 20

        /// Codes sksim 0.3.0 and earlier invented (downloadFailed 21, restoreFailed 22); a log
        /// that holds them still decodes, as `unknown` with its message kept.
        static let legacyInventedCodes: ClosedRange<UInt8> = 21...22

        /// The code for a raw value read from a log or a frame: Apple's, or a legacy invented one as `unknown`.
        public init?(loggedValue raw: UInt8) {
            if Self.legacyInventedCodes.contains(raw) {
                self = .unknown
            } else {
                self.init(rawValue: raw)
            }
        }
    }

    /// The error domain every code belongs to, as `NSError.domain` reports it.
    public static let domain = "SKErrorDomain"

    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code): \(message)" }
}
