/// What an app did with what the queue told it, recorded so that invariants about apps (not
/// only about the queue) are checkable from the log alone. Observers report these through
/// `PaymentQueue`; they reach the log as `recordAppAction` commands like every other app action.
public enum AppAction: Sendable, Hashable {
    /// The app gave the user what the transaction paid for (unlocked, credited).
    case contentGranted(TransactionKey, observer: String, productIdentifier: String)
    /// The app moved a finished download's file to its own persistent storage (R-D3).
    case contentKept(DownloadKey, observer: String)
    /// The app told the user that a restore is done (R-O3).
    case restoreShownDone(device: String, restore: UInt64, observer: String)
    /// The app showed a failed transaction's error to the user (R-O1).
    case failureShown(TransactionKey, observer: String)

    public var device: String {
        switch self {
        case .contentGranted(let key, _, _), .failureShown(let key, _): key.device
        case .contentKept(let key, _): key.transaction.device
        case .restoreShownDone(let device, _, _): device
        }
    }

    /// The observer that did it.
    public var observer: String {
        switch self {
        case .contentGranted(_, let observer, _), .contentKept(_, let observer), .restoreShownDone(_, _, let observer),
             .failureShown(_, let observer):
            observer
        }
    }

    /// A short, stable name (the JSON `action`).
    public var name: String {
        switch self {
        case .contentGranted: "contentGranted"
        case .contentKept: "contentKept"
        case .restoreShownDone: "restoreShownDone"
        case .failureShown: "failureShown"
        }
    }
}

extension AppAction: CustomStringConvertible {
    /// As `log cat` prints it: the action's name and what it concerns, without Swift's type names.
    public var description: String {
        switch self {
        case .contentGranted(let key, let observer, let product): "contentGranted(\(key), \(product), by \(observer))"
        case .contentKept(let key, let observer): "contentKept(\(key), by \(observer))"
        case .restoreShownDone(let device, let restore, let observer): "restoreShownDone(\(device) restore \(restore), by \(observer))"
        case .failureShown(let key, let observer): "failureShown(\(key), by \(observer))"
        }
    }
}
