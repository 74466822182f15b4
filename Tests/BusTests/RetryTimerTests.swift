import Bus
import Testing

/// The sender's retry interval follows the ACK times it measures (pure logic; the bus tests
/// and `sksim bench bus` exercise it over real sockets: no retries while the queue is busy).
@Suite("RetryTimer")
struct RetryTimerTests {
    let timer = RetryTimer(minimum: .milliseconds(500), maximum: .seconds(2))

    @Test("with nothing measured a command is retried after the minimum")
    func startsAtTheMinimum() {
        #expect(timer.interval == .milliseconds(500))
    }

    @Test("quick ACKs keep the minimum: a lost command is still retried at once")
    func quickAcknowledgementsKeepTheMinimum() {
        var timer = timer
        for _ in 0..<100 { timer.record(.microseconds(800)) }
        #expect(timer.interval == .milliseconds(500))
    }

    @Test("ACKs slower than the minimum (a busy queue) push the first retry past them")
    func slowAcknowledgementsLengthenTheInterval() {
        var timer = timer
        for _ in 0..<50 { timer.record(.milliseconds(700)) }
        #expect(timer.interval > .milliseconds(700))
        #expect(timer.interval < .seconds(2))
    }

    @Test("varying ACK times add their variation, up to the maximum")
    func variationIsAddedUpToTheMaximum() {
        var steady = timer
        var varying = timer
        for index in 0..<50 {
            steady.record(.milliseconds(600))
            varying.record(.milliseconds(index % 2 == 0 ? 300 : 900))
        }
        #expect(varying.interval > steady.interval)
        var slow = timer
        for _ in 0..<10 { slow.record(.seconds(5)) }
        #expect(slow.interval == .seconds(2))
    }

    @Test("when the queue is quick again the interval comes back down")
    func recovers() {
        var timer = timer
        for _ in 0..<20 { timer.record(.seconds(1)) }
        let busy = timer.interval
        for _ in 0..<100 { timer.record(.milliseconds(1)) }
        #expect(busy >= .seconds(1))
        #expect(timer.interval == .milliseconds(500))
    }
}
