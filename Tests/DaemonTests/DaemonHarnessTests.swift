#if canImport(Glibc)
import Glibc
#endif
import TestSupport
import Testing

/// The harness's own reports about a daemon's end, which every daemon test relies on: a
/// daemon that hangs at stop must not pass as stopped because the harness killed it.
@Suite struct DaemonHarnessTests {
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

    @Test func aDaemonThatExitsAtStopIsNotReported() async throws {
        let bus = try PrivateBus()
        let h = try await DaemonHarness(busAddress: bus.address)
        #expect(h.stop() == 0)
    }
}
