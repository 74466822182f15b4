import Foundation
import StoreKitModel

/// `SKPaymentTransactionState`, with Apple's raw values.
public enum SKPaymentTransactionState: Int, Sendable, Hashable {
    case purchasing = 0
    case purchased = 1
    case failed = 2
    case restored = 3
    case deferred = 4

    init(_ state: TransactionState) {
        switch state {
        case .purchasing: self = .purchasing
        case .purchased: self = .purchased
        case .failed: self = .failed
        case .restored: self = .restored
        case .deferred: self = .deferred
        }
    }
}

/// `SKPaymentTransaction`: one transaction of the device's queue. One object per transaction and
/// launch: the queue hands the same object again as the transaction changes.
open class SKPaymentTransaction: NSObject, @unchecked Sendable {
    /// The transaction as the queue last told it.
    package internal(set) var value: PaymentTransaction {
        didSet {
            cachedDownloads = nil
            if cachedPayment != nil, oldValue.payment != value.payment { cachedPayment = nil }
        }
    }
    private var cachedDownloads: [SKDownload]?
    /// The payment, one object while it stays the same, as StoreKit's.
    private var cachedPayment: SKPayment?
    /// A restored transaction's original, made once.
    private lazy var originalTransaction: SKPaymentTransaction? = value.originalTransaction.map { SKPaymentTransaction(original: $0, startDate: startDate) }

    /// The date the log's time 0 stands for (`Scenario.startDate`): a transaction logged `n`
    /// nanoseconds into the run is dated this plus `n`, as the App Store's server dates it.
    let startDate: Date

    init(_ value: PaymentTransaction, startDate: Date) {
        self.value = value
        self.startDate = startDate
    }

    private init(original: OriginalTransaction, startDate: Date) {
        var transaction = PaymentTransaction(key: TransactionKey(device: "", number: 0), payment: original.payment)
        transaction.transactionState = .purchased
        transaction.transactionIdentifier = original.transactionIdentifier
        transaction.transactionDate = original.transactionDate
        self.value = transaction
        self.startDate = startDate
    }

    open var payment: SKPayment {
        if let cachedPayment { return cachedPayment }
        let made = SKPayment(value.payment)
        cachedPayment = made
        return made
    }
    open var transactionState: SKPaymentTransactionState { SKPaymentTransactionState(value.transactionState) }
    /// Set once purchased or restored: Apple's decimal form, the `transactionId` the App Store's server
    /// and its signed transactions carry (`AppStoreIdentifier`, docs/log-format.md).
    open var transactionIdentifier: String? { value.appStoreTransactionIdentifier }
    /// Set once purchased or restored.
    open var transactionDate: Date? {
        // The App Store server's `purchaseDate`, in whole milliseconds.
        value.transactionDate.map { Date(timeIntervalSince1970: Double(Scenario.dateMilliseconds(logTime: $0, start: startDate)) / 1000) }
    }
    /// The purchase a restored transaction restores.
    open var original: SKPaymentTransaction? { originalTransaction }
    /// Set when failed.
    open var error: (any Error)? { value.error.map { SKError($0) } }
    /// The hosted content of a purchased or restored transaction.
    open var downloads: [SKDownload] {
        if let cachedDownloads { return cachedDownloads }
        let made = value.downloads.map { SKDownload($0, transaction: self) }
        cachedDownloads = made
        return made
    }

    open override var description: String {
        "<SKPaymentTransaction \(value.payment.productIdentifier) \(value.transactionState) \(value.appStoreTransactionIdentifier ?? "-")>"
    }
}

extension PaymentTransaction {
    /// The transaction's identifier as the app sees it: Apple's decimal `transactionId` of the log's.
    var appStoreTransactionIdentifier: String? { transactionIdentifier.map(AppStoreIdentifier.transactionIdentifier) }
}

/// `SKDownloadState`, with Apple's raw values.
public enum SKDownloadState: Int, Sendable, Hashable {
    case waiting = 0
    case active = 1
    case paused = 2
    case finished = 3
    case failed = 4
    case cancelled = 5

    init(_ state: DownloadState) {
        switch state {
        case .waiting: self = .waiting
        case .active: self = .active
        case .paused: self = .paused
        case .finished: self = .finished
        case .failed: self = .failed
        case .cancelled: self = .cancelled
        }
    }
}

/// What `SKDownload.timeRemaining` is while StoreKit cannot estimate it.
public let SKDownloadTimeRemainingUnknown: TimeInterval = -1

/// `SKDownload`: one piece of hosted content of a transaction.
open class SKDownload: NSObject, @unchecked Sendable {
    package let value: Download
    /// `SKDownloadTimeRemainingUnknown`.
    public static let timeRemainingUnknown: TimeInterval = SKDownloadTimeRemainingUnknown
    /// Weak: the transaction keeps its downloads. Should the app keep a download longer than its
    /// transaction object, `transaction` makes the object again from the value it had.
    private weak var owner: SKPaymentTransaction?
    private let ownerValue: PaymentTransaction
    private let ownerStartDate: Date

    init(_ value: Download, transaction: SKPaymentTransaction) {
        self.value = value
        self.owner = transaction
        self.ownerValue = transaction.value
        self.ownerStartDate = transaction.startDate
    }

    open var state: SKDownloadState { SKDownloadState(value.downloadState) }
    @available(*, deprecated, renamed: "state")
    open var downloadState: SKDownloadState { state }
    open var contentIdentifier: String { value.contentIdentifier }
    open var contentLength: Int64 { value.contentLength }
    @available(*, deprecated, renamed: "expectedContentLength")
    open var contentLengthNumber: Int64 { value.contentLength }
    open var expectedContentLength: Int64 { value.contentLength }
    open var contentVersion: String { value.contentVersion }
    open var progress: Float { Float(value.progress) }
    open var timeRemaining: TimeInterval { value.timeRemaining }
    open var error: (any Error)? { value.error.map { SKError($0) } }
    /// Where the finished content is, relative to the run's content root as the simulator keeps it.
    /// A file (`isDirectory` given: Foundation would otherwise ask the file system), made once per object.
    open var contentURL: URL? { cachedContentURL }
    private lazy var cachedContentURL: URL? = value.contentURL.map { URL(fileURLWithPath: $0, isDirectory: false) }
    open var transaction: SKPaymentTransaction { owner ?? SKPaymentTransaction(ownerValue, startDate: ownerStartDate) }
}

/// `SKStorefront`: the App Store country of the queue.
open class SKStorefront: NSObject, @unchecked Sendable {
    /// ISO 3166-1 alpha-3, e.g. "USA".
    open var countryCode: String { storefront.countryCode }
    open var identifier: String { storefront.identifier }
    private let storefront: Storefront
    init(_ storefront: Storefront) { self.storefront = storefront }
}
