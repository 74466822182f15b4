import ArgumentParser
import Foundation
import StoreKitLive
import StoreKitLoad

/// `sksim topology show|check`: the built-in topology, and a check of a file without running it.
struct TopologyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "topology",
        abstract: "Print the built-in topology, or check a topology file without running it.",
        subcommands: [Show.self, Check.self])

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print a built-in topology: `local` (what `sksim run` runs without a file) or `load` (what `sksim load` runs); save it to start your own.")
        @Argument(help: "Which built-in topology: local or load.") var name = "local"

        func run() async throws {
            guard let text = Topology.builtInText("built-in:\(name)") else {
                throw UserFacingError("there is no built-in topology '\(name)'; choose local (sksim run's) or load (sksim load's)", code: .unknownName)
            }
            writeStandardOutput(text)
        }
    }

    struct Check: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Load a topology file as `sksim run` would (keys, ranges, endpoints, catalog, CURVE keys) and say what it runs.",
            discussion: "Exit status 0 when the file is valid, 2 with the first problem (file, key path, what to do) otherwise.")
        @Argument(help: "The topology file (default: the built-in one).") var file: String?

        func run() async throws {
            let topology = try loadTopology(file)
            do {
                _ = try topology.curveClientKeys()
                try topology.checkClientKeyAllowed()
                // The queue's key file is only on the queue's host: a client host checks its own key alone.
                if topology.holdsServerKeyFile {
                    _ = try topology.curveServerSecurity()
                }
            } catch {
                throw UserFacingError("\(error)", code: .invalidInput)
            }
            // The `load:` section, as `sksim load` reads it (its keys and values).
            do {
                _ = try LoadSettings.fromTopology(path: file ?? topology.file).resolve(seed: topology.scenario.seed)
            } catch {
                throw UserFacingError("\(error)", code: .invalidInput)
            }
            for warning in topology.observerKeyWarnings() { printError("warning: \(warning)") }
            let scenario = topology.scenario
            let roles = topology.processes.map { process in
                process.role == .observer ? "\(process.name) (devices \(process.deviceIndices.first! + 1)-\(process.deviceIndices.last! + 1))" : process.name
            }
            printLine("\(topology.file): valid")
            printLine("  name \(topology.name), seed \(scenario.seed), durability \(topology.durabilityName)")
            printLine("  \(scenario.devices) devices, \(scenario.apps.purchasesPerDevice) purchases each, " + (scenario.apps.app.map { "app \($0)" + (RegisteredApps.app(named: $0) == nil ? " (not registered by this executable)" : "") } ?? "observers \(scenario.apps.observers.map(\.rawValue).joined(separator: ", "))"))
            printLine("  catalog \(scenario.catalogSource): \(scenario.catalog.products.count) products")
            printLine("  processes: \(roles.joined(separator: ", "))")
            let security = topology.curve == nil ? "" : " with CURVE"
            if topology.queues.count == 1 {
                printLine("  queue binds \(topology.queue.eventsEndpoint!) and \(topology.queue.requestsEndpoint!)" + security)
            } else {
                printLine("  \(topology.queues.count) partitions, devices routed by account (docs/load-testing.md):")
                for queue in topology.queues {
                    printLine("    \(queue.name) writes partition \(queue.partition!), binds \(queue.eventsEndpoint!) and \(queue.requestsEndpoint!)" + security)
                }
            }
        }
    }
}
