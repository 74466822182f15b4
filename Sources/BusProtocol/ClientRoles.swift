import StoreKitModel

/// The role a command belongs to: who in the system may send it (docs/reliability.md, "Roles").
public enum CommandRole: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// An app on one device: registration, launches, payments, finishes, restores, downloads' controls.
    case app
    /// The store: purchase decisions, restores' and receipts' answers, renewals, refunds.
    case store
    /// The downloader: download progress, completion and failure.
    case downloader

    public var description: String { rawValue }

    /// The role that sends `body`.
    public init(of body: CommandBody) {
        switch body {
        case .registerDevice, .launchApp, .terminateApp, .attachObserver, .detachObserver, .setPaymentsAllowed, .addPayment,
             .finishTransaction, .restoreCompletedTransactions, .startDownloads, .pauseDownloads, .resumeDownloads,
             .cancelDownloads, .recordAppAction, .refreshReceipt:
            self = .app
        case .decidePurchase, .completeRestore, .failRestore, .renewSubscription, .expireSubscription, .refundPurchase,
             .resumeInterruptedPurchase, .beginBillingRetry, .clearTransactions, .deliverReceipt:
            self = .store
        case .reportDownloadProgress, .completeDownload, .failDownload:
            self = .downloader
        }
    }
}

/// What one client key may send: its roles and, for the app role, the devices it plays
/// (nil: any device, as a load driver that invents its devices needs).
public struct ClientPermissions: Sendable, Hashable {
    public var roles: Set<CommandRole>
    public var devices: Set<String>?

    public init(roles: Set<CommandRole>, devices: Set<String>? = nil) {
        self.roles = roles
        self.devices = devices
    }

    /// Why `body` is outside these permissions, or nil when it is within them.
    public func refusal(of body: CommandBody) -> String? {
        let role = CommandRole(of: body)
        guard roles.contains(role) else {
            return "a \(role) command, and this key's roles are \(roles.map(\.rawValue).sorted().joined(separator: ", "))"
        }
        if role == .app, let devices, !devices.contains(body.device) {
            return "an app command for device '\(body.device)', which is not among this key's \(devices.count) devices"
        }
        return nil
    }
}
