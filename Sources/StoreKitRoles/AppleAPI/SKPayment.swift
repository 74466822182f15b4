import Foundation
import StoreKitModel

/// A request to buy a product, as StoreKit's `SKPayment`.
open class SKPayment: NSObject, NSCopying, NSMutableCopying, @unchecked Sendable {
    fileprivate var storedProductIdentifier: String
    fileprivate var storedQuantity = 1
    fileprivate var storedApplicationUsername: String?
    fileprivate var storedRequestData: Data?
    fileprivate var storedSimulatesAskToBuy = false
    fileprivate var storedDiscount: SKPaymentDiscount?
    /// The transaction the queue made when the app added this payment (`SKPaymentQueue.add(_:)`), once
    /// it was delivered: what "the completion of this purchase" means (`AppBelief.PurchaseCompletion`).
    var madeTransaction: TransactionKey?

    public init(product: SKProduct) {
        storedProductIdentifier = product.productIdentifier
    }

    /// The payment a transaction the queue logged carries.
    init(_ payment: Payment) {
        storedProductIdentifier = payment.productIdentifier
        storedQuantity = payment.quantity
        storedApplicationUsername = payment.applicationUsername
        storedRequestData = payment.requestData.map { Data($0) }
        storedSimulatesAskToBuy = payment.simulatesAskToBuyInSandbox
        storedDiscount = payment.discount.map(SKPaymentDiscount.init)
    }

    fileprivate init(copying other: SKPayment) {
        storedProductIdentifier = other.storedProductIdentifier
        storedQuantity = other.storedQuantity
        storedApplicationUsername = other.storedApplicationUsername
        storedRequestData = other.storedRequestData
        storedSimulatesAskToBuy = other.storedSimulatesAskToBuy
        storedDiscount = other.storedDiscount
    }

    open var productIdentifier: String { storedProductIdentifier }
    open var quantity: Int { storedQuantity }
    open var applicationUsername: String? { storedApplicationUsername }
    open var requestData: Data? { storedRequestData }
    open var simulatesAskToBuyInSandbox: Bool { storedSimulatesAskToBuy }
    open var paymentDiscount: SKPaymentDiscount? { storedDiscount }

    open func copy(with zone: NSZone? = nil) -> Any { SKPayment(copying: self) }
    open func mutableCopy(with zone: NSZone? = nil) -> Any { SKMutablePayment(copying: self) }

    /// The payment as the simulator's queue takes it.
    var payment: Payment {
        var payment = Payment(productIdentifier: storedProductIdentifier, quantity: storedQuantity, applicationUsername: storedApplicationUsername,
                              requestData: storedRequestData.map { [UInt8]($0) }, discount: storedDiscount?.discount)
        // The store defers it for a parent's approval (F-S1), as the sandbox does.
        payment.simulatesAskToBuyInSandbox = storedSimulatesAskToBuy
        return payment
    }
}

/// `SKMutablePayment`: a payment whose fields the app sets before adding it.
open class SKMutablePayment: SKPayment, @unchecked Sendable {
    public override init(product: SKProduct) { super.init(product: product) }

    /// An empty payment, as `SKMutablePayment()`: the app sets `productIdentifier` before adding it.
    public init() { super.init(Payment(productIdentifier: "")) }

    fileprivate override init(copying other: SKPayment) { super.init(copying: other) }

    open override var productIdentifier: String {
        get { storedProductIdentifier }
        set { storedProductIdentifier = newValue }
    }
    open override var quantity: Int {
        get { storedQuantity }
        set { storedQuantity = newValue }
    }
    open override var applicationUsername: String? {
        get { storedApplicationUsername }
        set { storedApplicationUsername = newValue }
    }
    open override var requestData: Data? {
        get { storedRequestData }
        set { storedRequestData = newValue }
    }
    open override var simulatesAskToBuyInSandbox: Bool {
        get { storedSimulatesAskToBuy }
        set { storedSimulatesAskToBuy = newValue }
    }
    open override var paymentDiscount: SKPaymentDiscount? {
        get { storedDiscount }
        set { storedDiscount = newValue }
    }
}

/// `SKPaymentDiscount`: a promotional offer signed by the developer's server (F-O5).
open class SKPaymentDiscount: NSObject, @unchecked Sendable {
    public let identifier: String
    public let keyIdentifier: String
    public let nonce: UUID
    public let signature: String
    public let timestamp: NSNumber

    public init(identifier: String, keyIdentifier: String, nonce: UUID, signature: String, timestamp: NSNumber) {
        self.identifier = identifier
        self.keyIdentifier = keyIdentifier
        self.nonce = nonce
        self.signature = signature
        self.timestamp = timestamp
    }

    convenience init(_ discount: PaymentDiscount) {
        self.init(identifier: discount.identifier, keyIdentifier: discount.keyIdentifier,
                  nonce: UUID(uuidString: discount.nonce) ?? UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)),
                  signature: discount.signature, timestamp: NSNumber(value: discount.timestamp))
    }

    var discount: PaymentDiscount {
        PaymentDiscount(identifier: identifier, keyIdentifier: keyIdentifier, nonce: nonce.uuidString.lowercased(),
                        signature: signature, timestamp: timestamp.int64Value)
    }
}
