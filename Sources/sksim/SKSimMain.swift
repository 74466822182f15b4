import Foundation
import Logging
import SKSimCommands

@main
struct SKSimMain {
    static func main() async {
        // One logging backend for the whole process; SKSIM_LOG_LEVEL=debug shows more.
        let level = ProcessInfo.processInfo.environment["SKSIM_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .info
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        await SKSim.main()
    }
}
