import StoreKitModel
import StoreKitRoles
import Testing

/// The app's own asynchronous work (`PaymentQueue.startWork`): timed by the runtime, lost with its launch.
@Suite struct AsynchronousWorkTests {
    @Test("started work is handed to the runtime once, and completes once")
    func completesOnce() {
        let queue = PaymentQueue(device: "d1", catalog: .sample, choices: SeededChoices(seed: 1))
        var outcomes: [Bool] = []
        let number = queue.startWork(canFail: true) { outcomes.append($0) }
        #expect(queue.takeStartedWork().map(\.number) == [number])
        #expect(queue.takeStartedWork().isEmpty)
        #expect(queue.hasPendingWork && queue.awaitedWorkCanFail(number) == true)
        #expect(queue.completeWork(number, succeeded: false))
        #expect(!queue.completeWork(number, succeeded: true))
        #expect(outcomes == [false])
        #expect(!queue.hasPendingWork)
    }

    @Test("an app that quits or is killed while waiting never hears the completion")
    func lostWithTheLaunch() {
        let queue = PaymentQueue(device: "d1", catalog: .sample, choices: SeededChoices(seed: 1))
        var completed = false
        let number = queue.startWork(canFail: false) { _ in completed = true }
        queue.terminateApp()
        #expect(queue.awaitedWorkCanFail(number) == nil)
        #expect(!queue.completeWork(number, succeeded: true))
        #expect(!completed && !queue.hasPendingWork && queue.takeStartedWork().isEmpty)
    }
}
