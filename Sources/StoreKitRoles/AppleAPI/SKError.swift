import Foundation
import StoreKitModel

/// `SKErrorDomain`, the domain of every `SKError`.
public let SKErrorDomain = "SKErrorDomain"

/// StoreKit's error, with Apple's codes and numbers. `transaction.error as? SKError`, `error.code ==
/// .paymentCancelled` and `catch SKError.paymentCancelled` work as on iOS; bridged to `NSError` it
/// has the domain `SKErrorDomain` and the code's number.
public struct SKError: Error, CustomNSError, Hashable, Sendable {
    public enum Code: Int, Sendable, Hashable, CaseIterable {
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
    }

    public let code: Code
    public let userInfo: [String: any Sendable]

    public init(_ code: Code, userInfo: [String: any Sendable] = [:]) {
        self.code = code
        self.userInfo = userInfo
    }

    /// The error of a failed transaction, restore or download as the simulator logged it.
    init(_ error: StoreError) {
        self.init(Code(rawValue: Int(error.code.rawValue)) ?? .unknown, userInfo: [NSLocalizedDescriptionKey: error.message])
    }

    public static var errorDomain: String { SKErrorDomain }
    public var errorCode: Int { code.rawValue }
    public var errorUserInfo: [String: Any] { userInfo }
    public var localizedDescription: String { (userInfo[NSLocalizedDescriptionKey] as? String) ?? "\(code)" }

    public static func == (left: SKError, right: SKError) -> Bool { left.code == right.code }
    public func hash(into hasher: inout Hasher) { hasher.combine(code) }

    public static let unknown = Code.unknown
    public static let clientInvalid = Code.clientInvalid
    public static let paymentCancelled = Code.paymentCancelled
    public static let paymentInvalid = Code.paymentInvalid
    public static let paymentNotAllowed = Code.paymentNotAllowed
    public static let storeProductNotAvailable = Code.storeProductNotAvailable
    public static let cloudServicePermissionDenied = Code.cloudServicePermissionDenied
    public static let cloudServiceNetworkConnectionFailed = Code.cloudServiceNetworkConnectionFailed
    public static let cloudServiceRevoked = Code.cloudServiceRevoked
    public static let privacyAcknowledgementRequired = Code.privacyAcknowledgementRequired
    public static let unauthorizedRequestData = Code.unauthorizedRequestData
    public static let invalidOfferIdentifier = Code.invalidOfferIdentifier
    public static let invalidSignature = Code.invalidSignature
    public static let missingOfferParams = Code.missingOfferParams
    public static let invalidOfferPrice = Code.invalidOfferPrice
    public static let overlayCancelled = Code.overlayCancelled
    public static let overlayInvalidConfiguration = Code.overlayInvalidConfiguration
    public static let overlayTimeout = Code.overlayTimeout
    public static let ineligibleForOffer = Code.ineligibleForOffer
    public static let unsupportedPlatform = Code.unsupportedPlatform
    public static let overlayPresentedInBackgroundScene = Code.overlayPresentedInBackgroundScene
}

extension SKError.Code {
    /// `catch SKError.paymentCancelled` and `case SKError.paymentCancelled` match an error of this code.
    public static func ~= (code: SKError.Code, error: any Error) -> Bool {
        (error as? SKError)?.code == code
    }
}
