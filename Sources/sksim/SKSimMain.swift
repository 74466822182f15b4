import Benchmarks
import SKSimCommands

@main
struct SKSimMain {
    static func main() async {
        // The built-in observers only; a team's own executable registers its app here (docs/explore.md).
        await SKSim.main(apps: [:], commands: [BenchCommand.self])
    }
}
