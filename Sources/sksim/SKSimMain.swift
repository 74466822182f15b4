import Foundation
import Logging
import SKSimCommands

@main
struct SKSimMain {
    static func main() async {
        // One logging backend for the whole process: --quiet, --verbose or SKSIM_LOG_LEVEL.
        let arguments = Array(CommandLine.arguments.dropFirst())
        let (level, warning) = logLevel(arguments: arguments, environment: ProcessInfo.processInfo.environment)
        if let warning { try? FileHandle.standardError.write(contentsOf: Data((warning + "\n").utf8)) }
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        await SKSim.main(arguments: arguments)
    }
}
