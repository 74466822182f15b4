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
            throw UserFacingError(error.description, code: .invalidInput)
        }
        return try await AppStoreDocuments(chain: chain, settings: AppStoreSettings(bundleIdentifier: bundleIdentifier))
    }
}

extension LogCommand {
    static func appStoreLedger(_ directory: URL, through: UInt64?) throws -> AppStoreLedger {
        do {
            return try AppStoreLedger.build(logDirectory: directory, through: through ?? .max)
        } catch let error as LogSelectionError {
            throw UserFacingError(error.description, code: .invalidInput)
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
                throw UserFacingError("the log has no device '\(device)'" + (known.isEmpty ? "" : "; it has \(known.prefix(5).joined(separator: ", "))\(known.count > 5 ? ", …" : "")"), code: .unknownName)
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
    @Option(name: .customLong("idle-timeout"), help: ArgumentHelp("Close a connection idle this long, e.g. 30s: a client that stops sending mid-request (default: 30s).", valueName: "duration"),
            transform: parseDurationArgument)
    var idleTimeoutSeconds: Double = 30

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
        var keys: [String: String] = [:]
        for entry in apiKeys {
            guard let equals = entry.firstIndex(of: "=") else { throw UserFacingError("--api-key \(entry): give KID=PEMFILE") }
            keys[String(entry[..<equals])] = String(entry[entry.index(after: equals)...])
        }
        let service = AppStoreService(
            logDirectory: url, host: host, port: port,
            certificates: appStore.certificates.map { URL(fileURLWithPath: $0, isDirectory: true) }
                ?? AppStoreOptions.runDirectory(logDirectory: url).appendingPathComponent("app-store", isDirectory: true),
            settings: AppStoreSettings(bundleIdentifier: appStore.bundleIdentifier, environment: environment), apiKeyFiles: keys,
            notificationURL: notificationURL, retryDelays: AppStoreServerCommand.delays(notificationRetryDelays)!, follow: follow, drainSeconds: 0,
            idleTimeoutSeconds: idleTimeoutSeconds)
        Shutdown.installSignalHandlers()
        let undelivered = try await service.run { listening, root in
            printLine(JSONValue.object([("listening", .string(listening)), ("rootCertificate", .string(root))]).serialized())
        }
        if undelivered > 0 { printError("app-store-server: \(undelivered) notifications not delivered yet; they are sent when it starts again") }
    }
}

/// The App Store server as `sksim app-store-server` and the `appStoreServer` role run it: the HTTP API,
/// and notifications when a URL is set, until SIGTERM or SIGINT; then outstanding notifications get
/// `drainSeconds` to be delivered. Returns how many were left undelivered (the journal keeps them).
struct AppStoreService {
    var logDirectory: URL
    var host: String
    var port: Int
    var certificates: URL
    var settings: AppStoreSettings
    /// Key id → PEM file.
    var apiKeyFiles: [String: String]
    var notificationURL: String?
    var retryDelays: [Double]
    var follow: Bool
    var drainSeconds: Double
    var idleTimeoutSeconds: Double = 30

    func run(onListening: @escaping @Sendable (_ listening: String, _ rootCertificate: String) async -> Void) async throws -> Int {
        let chain: SigningChain
        do {
            chain = try SigningChain.loadOrCreate(directory: certificates)
        } catch let error as SigningChainError {
            throw UserFacingError(error.description, code: .invalidInput)
        }
        var keys: [String: String] = [:]
        for (kid, path) in apiKeyFiles {
            guard let pem = try? String(contentsOfFile: path, encoding: .utf8) else {
                throw UserFacingError("API key \(kid): cannot read the PEM file \(path)", code: .notFound)
            }
            keys[kid] = pem
        }
        let documents = try await AppStoreDocuments(chain: chain, settings: settings)
        let follower = LedgerFollower(logDirectory: logDirectory)
        try await follower.refresh()
        var logger = Logger(label: "sksim.app-store-server")
        logger.logLevel = .notice
        let notifier = try notificationURL.map { target in
            try NotificationSender(configuration: .init(url: target, journal: certificates.appendingPathComponent("notifications.journal"),
                                                        retryDelaysSeconds: retryDelays),
                                   documents: documents, follower: follower, logger: logger)
        }
        let server: AppStoreHTTPServer
        do {
            server = try await AppStoreHTTPServer(configuration: .init(host: host, port: port, settings: settings, apiKeys: keys,
                                                                       idleTimeoutSeconds: max(1, Int64(idleTimeoutSeconds.rounded(.up)))),
                                                  documents: documents, follower: follower, notifier: notifier, logger: logger)
        } catch let error as AppStoreServerError {
            throw UserFacingError(error.description, code: .invalidInput)
        }
        let follow = self.follow
        let host = self.host
        let root = certificates.appendingPathComponent(SigningChain.FileName.root).path
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                try await server.run { bound in await onListening("\(host):\(bound)", root) }
            }
            if let notifier {
                group.addTask {
                    if follow { await notifier.follow() } else { try await notifier.catchUp() }
                }
            }
            group.addTask {
                // SIGTERM and SIGINT set a flag (Shutdown); the server ends when it is set.
                while !Shutdown.isRequested { try await Task.sleep(for: .milliseconds(50)) }
                throw CancellationError()
            }
            do {
                for try await _ in group {}
            } catch is CancellationError {
            }
            group.cancelAll()
        }
        guard let notifier else { return 0 }
        // What the log holds by now (a run's last events) is queued before the drain.
        try? await notifier.catchUp()
        return await notifier.drain(seconds: drainSeconds)
    }
}

/// `sksim run`'s and `sksim load`'s App Store server flags, passed on to every child so each reads the
/// same topology (docs/app-store-server.md).
struct AppStoreServerOverrides: ParsableArguments {
    @Option(name: .customLong("app-store-server"), help: "Run the App Store server role (docs/app-store-server.md), listening on HOST:PORT (topology: appStoreServer.listen).")
    var listen: String?
    @Option(name: .customLong("notification-url"), help: "Run the App Store server role and POST App Store Server Notifications V2 to this URL (topology: appStoreServer.notificationURL).")
    var notificationURL: String?
    @Option(name: .customLong("certificates"), help: "The App Store signing chain's folder: root.cer and the rest, created when missing (topology: appStoreServer.certificates; default: RUN/app-store).")
    var certificates: String?
    @Option(name: .customLong("notification-drain"), help: ArgumentHelp("How long the run waits for outstanding notifications before it stops, e.g. 30s (default: 30s).", valueName: "duration"),
            transform: parseDurationArgument)
    var drainSeconds: Double?

    func validate() throws {
        if let listen, AppStoreServerCommand.hostAndPort(listen) == nil { throw ValidationError("--app-store-server takes HOST:PORT, e.g. 127.0.0.1:8080") }
        if let notificationURL, !(notificationURL.hasPrefix("http://") || notificationURL.hasPrefix("https://")) {
            throw ValidationError("--notification-url takes an http:// or https:// URL")
        }
    }

    /// The topology with these overrides; it gains the App Store server role when a flag asks for it.
    func apply(to topology: Topology) -> Topology {
        guard listen != nil || notificationURL != nil || certificates != nil || drainSeconds != nil || topology.appStoreServer != nil else { return topology }
        var section = topology.appStoreServer ?? AppStoreServerSection()
        if let listen { section.listen = listen }
        if let notificationURL { section.notificationURL = notificationURL }
        if let certificates { section.certificates = URL(fileURLWithPath: certificates).standardizedFileURL.path }
        if let drainSeconds { section.notificationDrainSeconds = drainSeconds }
        return topology.withAppStoreServer(section)
    }

    /// The same flags for a child process.
    var childArguments: [String] {
        (listen.map { ["--app-store-server", $0] } ?? []) + (notificationURL.map { ["--notification-url", $0] } ?? [])
            + (certificates.map { ["--certificates", URL(fileURLWithPath: $0).standardizedFileURL.path] } ?? [])
            + (drainSeconds.map { ["--notification-drain", "\($0)"] } ?? [])
    }
}

/// `sksim appStoreServer --topology FILE --name NAME`: the App Store server role of a topology, which
/// `sksim run` and `sksim load` start. It follows the run's log, restartable like every role.
struct AppStoreServerRoleCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: RoleKind.appStoreServer.rawValue,
                                                    abstract: "Run the App Store server of a topology (docs/app-store-server.md).")
    @OptionGroup var options: RoleOptions

    func run() async throws {
        let (topology, directory, logger) = try options.resolve()
        let process = try topology.process(named: options.name)
        guard process.role == .appStoreServer, let section = topology.appStoreServer else {
            throw UserFacingError("'\(options.name)' is a \(process.role.rawValue) in \(topology.file), not an appStoreServer")
        }
        try RoleOptions.create(directory)
        let (host, port) = AppStoreServerCommand.hostAndPort(section.listen) ?? ("127.0.0.1", 0)
        let service = AppStoreService(
            logDirectory: directory.appendingPathComponent("log", isDirectory: true), host: host, port: port,
            certificates: section.certificates.map { URL(fileURLWithPath: $0, isDirectory: true) } ?? directory.appendingPathComponent("app-store", isDirectory: true),
            settings: AppStoreSettings(bundleIdentifier: section.bundleIdentifier, environment: section.environment), apiKeyFiles: section.apiKeys,
            notificationURL: section.notificationURL, retryDelays: [1, 2, 4, 8, 16], follow: true, drainSeconds: section.notificationDrainSeconds)
        let note = directory.appendingPathComponent("app-store-server.json")
        let undelivered: Int
        do {
            undelivered = try await service.run { listening, root in
                let text = JSONValue.object([("listening", .string(listening)), ("rootCertificate", .string(root))]).serialized()
                try? Data((text + "\n").utf8).write(to: note, options: .atomic)
                logger.notice("App Store server listening", metadata: ["address": "\(listening)"])
                try? ReadyNote.write(process: process.name, runDirectory: directory)
            }
        } catch {
            FailureNote.write(describeError(error), process: options.name, runDirectory: directory)
            throw error
        }
        if undelivered > 0 {
            logger.warning("notifications left undelivered; they are sent when the server starts again", metadata: ["undelivered": "\(undelivered)"])
        }
        // The run reports what was left (AppStoreServerReport).
        if var object = (try? JSONSerialization.jsonObject(with: Data(contentsOf: note))) as? [String: Any] {
            object["undelivered"] = undelivered
            if let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) { try? data.write(to: note, options: .atomic) }
        }
    }
}
