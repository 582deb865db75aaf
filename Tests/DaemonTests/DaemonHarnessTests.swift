#if canImport(Glibc)
import Glibc
#endif
import TestSupport
import Testing

/// The harness's own reports about a daemon's end, which every daemon test relies on: a
/// daemon that hangs at stop must not pass as stopped because the harness killed it.
@Suite(.ownThreads, .memoryHeavy) struct DaemonHarnessTests {
    @Test func aDaemonThatDoesNotExitAtStopIsReported() async throws {
        let bus = try PrivateBus()
        let h = try await DaemonHarness(busAddress: bus.address)
        // A stopped process acts on SIGTERM only once continued: it stands in for a daemon
        // that hangs at stop. The harness kills it after its grace and says so.
        kill(h.pid, SIGSTOP)
        withKnownIssue("the harness reports the hang") {
            #expect(h.stop() == 128 + SIGKILL)
        } matching: { issue in
            issue.comments.contains { $0.rawValue.contains("did not exit within 5 s of SIGTERM") }
        }
    }

    /// A daemon told to stop as soon as it answers stops: its signal handlers are in place
    /// before it says it is ready (a SIGTERM in the gap before was ignored, and the daemon ran
    /// on). Ten in a row, each exiting 0 within the harness's grace.
    @Test func aDaemonStoppedRightAfterItIsReadyStops() async throws {
        let bus = try PrivateBus()
        for _ in 0..<10 {
            let h = try await DaemonHarness(busAddress: bus.address)
            #expect(h.stop() == 0)
        }
    }

    @Test func aDaemonThatExitsAtStopIsNotReported() async throws {
        let bus = try PrivateBus()
        let h = try await DaemonHarness(busAddress: bus.address)
        #expect(h.stop() == 0)
    }
}
