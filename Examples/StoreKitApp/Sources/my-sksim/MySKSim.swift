// The team's own `sksim`: every command of StoreKitSim's, with the app's code registered as
// `storeApp`, so `--observers storeApp` runs it in simulate, explore, replay, run and load (and in
// the processes those start, which are this executable too).
import SKSimCommands
import StoreKitApp

@main
struct MySKSim {
    static func main() async {
        await SKSim.main(apps: ["storeApp": StoreObserver.simulatedApp()])
    }
}
