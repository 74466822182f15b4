/// A request to buy a product (SKPayment). Validated by the queue when added (R-Q7).
public struct Payment: Sendable, Hashable {
    public var productIdentifier: String
    /// Must be greater than 0 (R-Q7).
    public var quantity: Int
    /// The opaque account identifier the app attaches to payments; restores pass the
    /// same value so the store finds the account's purchases (R-Q10).
    public var applicationUsername: String?
    /// Opaque bytes the app may attach; the simulator carries them unchanged.
    public var requestData: [UInt8]?
    /// `SKMutablePayment.simulatesAskToBuyInSandbox`: the store defers this purchase for a parent's
    /// approval (Ask to Buy, F-S1) whatever its own chances, then approves or declines it.
    public var simulatesAskToBuyInSandbox = false
    /// A promotional offer to buy at, signed by the developer (`SKPayment.paymentDiscount`, F-O5);
    /// only for auto-renewable subscriptions. Carried on the payment as added; a purchase's
    /// original transaction (restores, renewals, receipts) keeps the payment without it.
    public var discount: PaymentDiscount? {
        get { discountBox?.value }
        set { discountBox = newValue.map(DiscountBox.init) }
    }
    /// Boxed: a discount is rare and large (72 bytes); inline, it made every payment, and every
    /// event and command holding one, that much more to move and copy.
    private var discountBox: DiscountBox?

    /// The most items one payment may buy: StoreKit refuses a larger `quantity` (F-P1).
    public static let maximumQuantity = 10

    public init(productIdentifier: String, quantity: Int = 1, applicationUsername: String? = nil, requestData: [UInt8]? = nil,
                discount: PaymentDiscount? = nil) {
        self.productIdentifier = productIdentifier
        self.quantity = quantity
        self.applicationUsername = applicationUsername
        self.requestData = requestData
        self.discountBox = discount.map(DiscountBox.init)
    }

    /// The payment as an original transaction keeps it: without the discount (F-O5).
    public var withoutDiscount: Payment {
        guard discount != nil else { return self }
        var plain = self
        plain.discount = nil
        return plain
    }
}

/// A payment's discount, compared and hashed by value.
private final class DiscountBox: Sendable, Hashable {
    let value: PaymentDiscount
    init(_ value: PaymentDiscount) { self.value = value }
    static func == (left: DiscountBox, right: DiscountBox) -> Bool { left.value == right.value }
    func hash(into hasher: inout Hasher) { hasher.combine(value) }
}

/// Identifies a transaction inside the queue of one device. The queue numbers a
/// device's transactions 1, 2, 3, … in the order it creates them, so the key exists
/// from the moment a transaction is `purchasing`, before the store has given it a
/// `transactionIdentifier` (which R-T2 defines only once it is purchased or restored).
public struct TransactionKey: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var device: String
    public var number: UInt64

    public init(device: String, number: UInt64) {
        self.device = device
        self.number = number
    }

    public static func < (left: TransactionKey, right: TransactionKey) -> Bool {
        (left.device, left.number) < (right.device, right.number)
    }

    public var description: String { "\(device)#\(number)" }
}

/// Identifies one download of a transaction (its position in `downloads`).
public struct DownloadKey: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var transaction: TransactionKey
    public var index: Int

    public init(transaction: TransactionKey, index: Int) {
        self.transaction = transaction
        self.index = index
    }

    public static func < (left: DownloadKey, right: DownloadKey) -> Bool {
        (left.transaction, left.index) < (right.transaction, right.index)
    }

    public var description: String { "\(transaction)/\(index)" }
}

extension Payment: CustomStringConvertible {
    public var description: String {
        "\(productIdentifier) ×\(quantity)" + (applicationUsername.map { " for \($0)" } ?? "")
            + (requestData.map { " (\($0.count) bytes of requestData)" } ?? "")
            + (discount.map { " at offer \($0.identifier)" } ?? "")
    }
}

extension HostedContent: CustomStringConvertible {
    public var description: String { "\(contentIdentifier) \(contentVersion) (\(contentLength) bytes)" }
}
