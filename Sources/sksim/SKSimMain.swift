import SKSimCommands

@main
struct SKSimMain {
    static func main() async {
        await SKSim.main()
    }
}
