import Foundation
import StoreKitModel

/// `SKRequestDelegate`, with Apple's optional methods as empty defaults.
public protocol SKRequestDelegate: NSObjectProtocol {
    func requestDidFinish(_ request: SKRequest)
    func request(_ request: SKRequest, didFailWithError error: any Error)
}

extension SKRequestDelegate {
    public func requestDidFinish(_ request: SKRequest) {}
    public func request(_ request: SKRequest, didFailWithError error: any Error) {}
}

/// `SKProductsRequestDelegate`.
public protocol SKProductsRequestDelegate: SKRequestDelegate {
    func productsRequest(_ request: SKProductsRequest, didReceive response: SKProductsResponse)
}

/// `SKRequest`: a request to the App Store, answered later through its delegate. Each subclass
/// declares its own `delegate` (Swift cannot narrow an inherited property's type, as Objective-C does).
open class SKRequest: NSObject, @unchecked Sendable {
    /// The device that started it; nil outside a simulated device's code.
    let device: SimulatedDevice?
    var isCancelled = false

    public override init() {
        device = SimulatedDevice.current
        super.init()
    }

    open func start() {}

    /// Stops the request: its delegate hears nothing more.
    open func cancel() { isCancelled = true }

}

/// `SKProductsResponse`.
open class SKProductsResponse: NSObject, @unchecked Sendable {
    open var products: [SKProduct] { storedProducts }
    open var invalidProductIdentifiers: [String] { storedInvalid }
    private let storedProducts: [SKProduct]
    private let storedInvalid: [String]

    init(products: [SKProduct], invalidProductIdentifiers: [String]) {
        storedProducts = products
        storedInvalid = invalidProductIdentifiers
    }
}

/// `SKProductsRequest`: the store's products for identifiers. The answer is asynchronous work of
/// the app: in exploration it comes before or after any delivery, or fails
/// (`request(_:didFailWithError:)`), as the scenario's choices say.
open class SKProductsRequest: SKRequest, @unchecked Sendable {
    open weak var delegate: (any SKProductsRequestDelegate)?
    private let identifiers: Set<String>

    public init(productIdentifiers: Set<String>) {
        identifiers = productIdentifiers
        super.init()
    }

    open override func start() {
        guard let device else { return answer(catalog: nil, succeeded: false) }
        device.startWork(canFail: true) { [self] succeeded in answer(catalog: device.queue.catalog, succeeded: succeeded) }
    }

    private func answer(catalog: Catalog?, succeeded: Bool) {
        guard !isCancelled, let delegate else { return }
        guard succeeded, let catalog else {
            return delegate.request(self, didFailWithError: SKError(.cloudServiceNetworkConnectionFailed))
        }
        let locale = Locale(identifier: catalog.testSettings.locale ?? "en_US")
        let sorted = identifiers.sorted()
        let response = SKProductsResponse(products: sorted.compactMap { catalog.product($0) }.map { SKProduct($0, locale: locale) },
                                          invalidProductIdentifiers: sorted.filter { catalog.product($0) == nil })
        delegate.productsRequest(self, didReceive: response)
        delegate.requestDidFinish(self)
    }
}

/// Keys of `SKReceiptRefreshRequest(receiptProperties:)`, which StoreKit reads only in the sandbox
/// (a test receipt that is expired, revoked or a volume purchase); the simulated store ignores them.
public let SKReceiptPropertyIsExpired = "expired"
public let SKReceiptPropertyIsRevoked = "revoked"
public let SKReceiptPropertyIsVolumePurchase = "vpp"

/// `SKReceiptRefreshRequest` (R-R2): asks the store for the latest receipt; once it arrived, the
/// file at `Bundle.main.appStoreReceiptURL` holds it and the delegate hears `requestDidFinish`.
/// The answer reaches the app through its payment queue: an observer must be attached.
open class SKReceiptRefreshRequest: SKRequest, @unchecked Sendable {
    open weak var delegate: (any SKRequestDelegate)?
    open var receiptProperties: [String: Any]?

    public init(receiptProperties properties: [String: Any]? = nil) {
        receiptProperties = properties
        super.init()
    }

    public override convenience init() { self.init(receiptProperties: nil) }

    open override func start() {
        guard let device else {
            if !isCancelled { delegate?.request(self, didFailWithError: SKError(.unknown)) }
            return
        }
        device.receiptRefreshes.append(self)
        device.queue.refreshReceipt()
    }

    /// The store's receipt arrived.
    func finished() {
        guard !isCancelled else { return }
        delegate?.requestDidFinish(self)
    }
}
