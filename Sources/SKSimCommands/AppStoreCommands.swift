import AppStoreServer
import ArgumentParser
import Foundation
import Logging
import StoreKitLive
import StoreKitModel
import StoreKitRuntime

/// Where a run's App Store documents come from: its certificates folder and its bundle id.
struct AppStoreOptions: ParsableArguments {
    @Option(help: "Certificates folder: root.cer (the root a team's server trusts) and the rest of the signing chain; created when missing (default: RUN/app-store).")
    var certificates: String?
    @Option(name: .customLong("bundle-id"), help: "The app's bundle id in every signed object (default: com.example.sksim).")
    var bundleIdentifier: String = AppStoreSettings.defaultBundleIdentifier

    /// The run folder of a run directory or of its log folder.
    static func runDirectory(logDirectory: URL) -> URL {
        logDirectory.lastPathComponent == "log" ? logDirectory.deletingLastPathComponent() : logDirectory
    }

    func documents(logDirectory: URL) async throws -> AppStoreDocuments {
        let folder = certificates.map { URL(fileURLWithPath: $0, isDirectory: true) }
            ?? Self.runDirectory(logDirectory: logDirectory).appendingPathComponent("app-store", isDirectory: true)
        let chain: SigningChain
        do {
            chain = try SigningChain.loadOrCreate(directory: folder)
        } catch let error as SigningChainError {
            throw UserFacingError(error.description)
        }
        return try await AppStoreDocuments(chain: chain, settings: AppStoreSettings(bundleIdentifier: bundleIdentifier))
    }
}

extension LogCommand {
    static func appStoreLedger(_ directory: URL, through: UInt64?) throws -> AppStoreLedger {
        do {
            return try AppStoreLedger.build(logDirectory: directory, through: through ?? .max)
        } catch let error as LogSelectionError {
            throw UserFacingError(error.description)
        }
    }

    struct Receipt: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print a device's app receipt (PKCS #7, base64) as of the end of the log or a sequence number (docs/app-store-server.md).")
        @Argument(help: "A run directory or its log folder.") var directory: String
        @Option(help: "The device whose receipt to print, e.g. device-0001.") var device: String
        @Option(parsing: .unconditional, help: "As of this sequence number (a log with one partition; default: the end).") var at: UInt64?
        @OptionGroup var appStore: AppStoreOptions

        func run() async throws { try await LogCommand.reportingLogErrors(perform) }

        func perform() async throws {
            let url = try LogCommand.logDirectory(directory)
            let ledger = try LogCommand.appStoreLedger(url, through: at)
            let documents = try await appStore.documents(logDirectory: url)
            guard let receipt = try documents.appReceipt(device: device, in: ledger) else {
                let known = ledger.devices
                throw UserFacingError("the log has no device '\(device)'" + (known.isEmpty ? "" : "; it has \(known.prefix(5).joined(separator: ", "))\(known.count > 5 ? ", …" : "")"))
            }
            printLine(Data(receipt).base64EncodedString())
        }
    }

    struct Signed: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print every charged purchase and renewal as the App Store signs it (JSON lines: transactionId, logIdentifier, signedTransactionInfo, signedRenewalInfo), then every notification the log produces (docs/app-store-server.md).")
        @Argument(help: "A run directory or its log folder.") var directory: String
        @Option(parsing: .unconditional, help: "As of this sequence number (a log with one partition; default: the end).") var at: UInt64?
        @OptionGroup var appStore: AppStoreOptions

        func run() async throws { try await LogCommand.reportingLogErrors(perform) }

        func perform() async throws {
            let url = try LogCommand.logDirectory(directory)
            let ledger = try LogCommand.appStoreLedger(url, through: at)
            let documents = try await appStore.documents(logDirectory: url)
            for transaction in ledger.transactions {
                var fields: [(String, JSONValue)] = [
                    ("transactionId", .string(transaction.transactionId)), ("logIdentifier", .string(transaction.logIdentifier)),
                    ("signedTransactionInfo", .string(try await documents.signedTransaction(transaction, in: ledger))),
                ]
                if let subscription = ledger.subscription(of: transaction) {
                    fields.append(("signedRenewalInfo", .string(try await documents.signedRenewalInfo(subscription, in: ledger))))
                }
                printLine(JSONValue.object(fields).serialized())
            }
            for notification in ledger.notifications {
                let signed = try await documents.signedNotification(type: notification.notificationType, subtype: notification.subtype,
                                                                    uuid: notification.notificationUUID,
                                                                    transactionIndex: notification.transactionIndex, in: ledger)
                printLine(JSONValue.object([("notificationType", .string(notification.notificationType)),
                                            ("subtype", notification.subtype.map(JSONValue.string) ?? .null),
                                            ("notificationUUID", .string(notification.notificationUUID)),
                                            ("signedPayload", .string(signed))]).serialized())
            }
        }
    }
}

/// `sksim app-store-server`: the App Store Server API and Server Notifications of a run, from its log.
struct AppStoreServerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "app-store-server",
        abstract: "Serve the App Store Server API and send App Store Server Notifications V2 for a run, from its log (docs/app-store-server.md).")

    @Argument(help: "A run directory or its log folder.") var directory: String
    @Option(help: "Where to serve HTTP, HOST:PORT (port 0: any free port, printed).") var listen: String
    @OptionGroup var appStore: AppStoreOptions
    @Option(help: "The App Store environment in every signed object: Sandbox or Production (default: Sandbox).")
    var environment: String = AppStoreSettings.defaultEnvironment
    @Flag(help: "Follow a running run: serve and notify from its log as it grows (default: the log as it is).") var follow = false
    @Option(name: .customLong("notification-url"), help: "Where to POST App Store Server Notifications V2 (default: none are sent).")
    var notificationURL: String?
    @Option(name: .customLong("notification-retry-delays"),
            help: "Seconds before each retry of a notification that was not accepted, comma-separated (default: 1,2,4,8,16, Apple's five retries at test speed).")
    var notificationRetryDelays: String = "1,2,4,8,16"
    @Option(name: .customLong("api-key"), help: "KID=PEMFILE: an API key whose signature bearer tokens must carry (repeatable; default: none, any well-formed ES256 token for the bundle id).")
    var apiKeys: [String] = []

    func validate() throws {
        guard AppStoreServerCommand.hostAndPort(listen) != nil else {
            throw ValidationError("--listen takes HOST:PORT, e.g. 127.0.0.1:8080")
        }
        guard ["Sandbox", "Production"].contains(environment) else {
            throw ValidationError("--environment is Sandbox or Production")
        }
        guard AppStoreServerCommand.delays(notificationRetryDelays) != nil else {
            throw ValidationError("--notification-retry-delays takes seconds, comma-separated, at most 10, e.g. 1,2,4,8,16")
        }
        if let notificationURL, URL(string: notificationURL)?.scheme.map({ $0 == "http" || $0 == "https" }) != true {
            throw ValidationError("--notification-url takes an http:// or https:// URL")
        }
    }

    static func hostAndPort(_ text: String) -> (String, Int)? {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]), (0...65_535).contains(port) else { return nil }
        let host = String(text[..<colon])
        return host.isEmpty ? nil : (host, port)
    }

    static func delays(_ text: String) -> [Double]? {
        let values = text.split(separator: ",").map { Double($0.trimmingCharacters(in: .whitespaces)) }
        guard values.count <= 10, values.allSatisfy({ $0 != nil && $0! >= 0 && $0! <= 3_600 }) else { return nil }
        return values.compactMap { $0 }
    }

    func run() async throws {
        let url = try LogCommand.logDirectory(directory)
        let (host, port) = AppStoreServerCommand.hostAndPort(listen)!
        let chainFolder = appStore.certificates.map { URL(fileURLWithPath: $0, isDirectory: true) }
            ?? AppStoreOptions.runDirectory(logDirectory: url).appendingPathComponent("app-store", isDirectory: true)
        let chain: SigningChain
        do {
            chain = try SigningChain.loadOrCreate(directory: chainFolder)
        } catch let error as SigningChainError {
            throw UserFacingError(error.description)
        }
        var keys: [String: String] = [:]
        for entry in apiKeys {
            guard let equals = entry.firstIndex(of: "="), let pem = try? String(contentsOfFile: String(entry[entry.index(after: equals)...]), encoding: .utf8) else {
                throw UserFacingError("--api-key \(entry): give KID=PEMFILE with a readable PEM file")
            }
            keys[String(entry[..<equals])] = pem
        }
        let settings = AppStoreSettings(bundleIdentifier: appStore.bundleIdentifier, environment: environment)
        let documents = try await AppStoreDocuments(chain: chain, settings: settings)
        let follower = LedgerFollower(logDirectory: url)
        try await follower.refresh()
        var logger = Logger(label: "sksim.app-store-server")
        logger.logLevel = .notice
        let notifier = try notificationURL.map { target in
            try NotificationSender(configuration: .init(url: target, journal: chainFolder.appendingPathComponent("notifications.journal"),
                                                        retryDelaysSeconds: AppStoreServerCommand.delays(notificationRetryDelays)!),
                                   documents: documents, follower: follower, logger: logger)
        }
        let server: AppStoreHTTPServer
        do {
            server = try await AppStoreHTTPServer(configuration: .init(host: host, port: port, settings: settings, apiKeys: keys),
                                                  documents: documents, follower: follower, notifier: notifier, logger: logger)
        } catch let error as AppStoreServerError {
            throw UserFacingError(error.description)
        }
        Shutdown.installSignalHandlers()
        let follow = self.follow
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                try await server.run { bound in
                    printLine(JSONValue.object([("listening", .string("\(host):\(bound)")), ("rootCertificate", .string(chainFolder.appendingPathComponent("root.cer").path))]).serialized())
                }
            }
            if let notifier {
                group.addTask {
                    if follow {
                        await notifier.follow()
                    } else {
                        try await notifier.catchUp()
                    }
                }
            }
            group.addTask {
                // SIGTERM and SIGINT set a flag (Shutdown); the server ends when it is set.
                while !Shutdown.isRequested { try await Task.sleep(for: .milliseconds(50)) }
                throw CancellationError()
            }
            do {
                for try await _ in group where Shutdown.isRequested { break }
            } catch is CancellationError {
            }
            group.cancelAll()
        }
        if let notifier {
            let left = await notifier.drain(seconds: 0)
            if left > 0 { printError("app-store-server: \(left) notifications not delivered yet; they are sent when it starts again") }
        }
    }
}
