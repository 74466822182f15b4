import StoreKitModel
import StoreKitRoles

/// Builds a role of a scenario over an environment's choices and content storage. Both
/// runtimes build roles here, and a restarted role is built the same way.
public struct RoleFactory {
    /// The roles other than the queue, as a runtime hosts them.
    public enum Kind: String, Sendable, Hashable, Codable, CaseIterable {
        case store
        case downloader
        /// The apps (devices with their payment queues and observers); an observer process.
        case apps
    }

    public let scenario: Scenario
    public let choices: ChoiceSource
    public let content: ContentStorage

    public init(scenario: Scenario, choices: ChoiceSource, content: ContentStorage) {
        self.scenario = scenario
        self.choices = choices
        self.content = content
    }

    /// `deviceIndices` picks the devices an apps role hosts (all by default).
    public func make(_ kind: Kind, name: String, deviceIndices: [Int]? = nil) -> Role {
        switch kind {
        case .store:
            StoreRole(name: name, catalog: scenario.catalog, behavior: scenario.store, choices: choices.stream(ChoiceStream.store))
        case .downloader:
            DownloaderRole(name: name, content: content, behavior: scenario.downloader, choices: choices.stream(ChoiceStream.downloader))
        case .apps:
            AppRole(name: name, devices: scenario.makeApps(indices: deviceIndices, choices: choices, storage: content),
                    hooks: scenario.hooks, choicePoints: scenario.apps.choicePoints, choices: choices)
        }
    }
}
