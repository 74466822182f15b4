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

/// What one client key may send: its roles and, for the app role, the devices it plays (nil: any
/// device) and the device-name prefixes it plays (a load driver's `<name>-`: it invents its devices).
/// The queue also judges by them what the key may hear: its subscriptions and its FETCHes.
public struct ClientPermissions: Sendable, Hashable {
    public var roles: Set<CommandRole>
    public var devices: Set<String>?
    /// Devices whose names start with one of these are the key's too (with `devices` set).
    public var devicePrefixes: Set<String>

    public init(roles: Set<CommandRole>, devices: Set<String>? = nil, devicePrefixes: Set<String> = []) {
        self.roles = roles
        self.devices = devices
        self.devicePrefixes = devicePrefixes
    }

    /// Whether the key plays `device`: any device, one of its devices, or one under its prefixes.
    public func covers(device: String) -> Bool {
        guard let devices else { return true }
        return devices.contains(device) || devicePrefixes.contains { device.hasPrefix($0) }
    }

    /// Whether the key may hear every device's events: it sends the store's or the downloader's
    /// commands (which follow every device), or app commands for any device.
    public var hearsEveryDevice: Bool {
        roles.contains(.store) || roles.contains(.downloader) || (roles.contains(.app) && devices == nil)
    }

    /// Whether the key may hear `device`'s events, by subscription or FETCH: every device's, or its own.
    public func hears(device: String) -> Bool {
        hearsEveryDevice || (devices != nil && covers(device: device))
    }

    /// Why `body` is outside these permissions, or nil when it is within them.
    public func refusal(of body: CommandBody) -> String? {
        let role = CommandRole(of: body)
        guard roles.contains(role) else {
            return "a \(role) command, and this key's roles are \(rolesText)"
        }
        if role == .app, !covers(device: body.device) {
            return "an app command for device '\(body.device)', which is not among this key's \(devicesText)"
        }
        return nil
    }

    /// The roles for a log line: `app`, `store, downloader`, or `none`.
    public var rolesText: String {
        roles.isEmpty ? "none" : roles.map(\.rawValue).sorted().joined(separator: ", ")
    }

    /// The devices for a log line: `3 devices`, and `devices named driver-1-…`.
    public var devicesText: String {
        guard let devices else { return "devices (any)" }
        let named = devicePrefixes.sorted().map { "devices named \($0)…" }
        return ([devices.isEmpty && !named.isEmpty ? nil : "\(devices.count) devices"].compactMap { $0 } + named).joined(separator: " and ")
    }
}
