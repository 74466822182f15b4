/// Why the queue refused a command. A rejected command changes no state; the
/// rejection itself is logged so that a retry of the same id gets the same answer
/// and a replay reproduces it.
public struct Rejection: Error, Sendable, Hashable, CustomStringConvertible {
    /// Raw values are part of the log and wire format; printed by case name.
    public enum Code: UInt8, Sendable, Hashable, CaseIterable {
        case unknownProduct = 1
        case invalidQuantity = 2
        case paymentsNotAllowed = 3
        case transactionStillPurchasing = 4
        case transactionNotFound = 5
        case downloadNotAllowed = 6
        case unknownDevice = 7
        case deviceAlreadyRegistered = 8
        case observerAlreadyAttached = 9
        case observerNotAttached = 10
        case appNotRunning = 11
        case appAlreadyRunning = 12
        case invalidDownloadTransition = 13
        case unknownDownload = 14
        case restoreNotInProgress = 15
        case transactionNotAwaitingStore = 16
        case invalidProgress = 17
        case invalidArgument = 18
        /// The command's number is far ahead of everything its sender sent: a forged or
        /// broken id, refused so it cannot make the sender's real commands look like duplicates.
        case commandNumberOutOfWindow = 19
        /// A command from a new sender when the queue already remembers as many senders as it
        /// may (a flood of invented origins); its id does not enter the command window.
        case tooManySenders = 20
        /// A device registration when the queue (partition) holds `QueueProjection.maximumDevices`.
        case tooManyDevices = 21

    }

    public var code: Code
    /// What was wrong and what to do, in one or two sentences.
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code): \(message)" }
}
