import Control
import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// SIGHUP against the real daemon: what a reload applies, what it reports (also when the new
/// `log_level` would hide the report), and a refused file reported as such.
@Suite(.ownThreads, .serialized, .memoryHeavy) struct ReloadTests {
    @Test func aReloadReportsAtTheMoreVerboseLevelAndARefusedFileIsAnEvent() async throws {
        let bus = try PrivateBus()
        let h = try await DaemonHarness(busAddress: bus.address)
        defer { h.stop() }
        let watcher = try RawClient(h.socketPath)
        _ = try watcher.call("events.subscribe", ["topics": ["daemon"]])
        let path = h.directory + "/peerlink.conf"
        let original = try String(contentsOfFile: path, encoding: .utf8)

        // To `error`, with a key that needs a restart: both still reported.
        let quieter = original.replacingOccurrences(of: "log_level = debug", with: "log_level = error")
            .replacingOccurrences(of: "max_clients = 256", with: "max_clients = 32")
        #expect(quieter != original)
        try quieter.write(toFile: path, atomically: true, encoding: .utf8)
        #expect(kill(h.pid, SIGHUP) == 0)
        let reloaded = try watcher.nextEvent("daemon.reloaded")["data"]
        #expect(reloaded?["restart_needed"] == ["max_clients"], "\(String(describing: reloaded))")
        #expect(try h.call("daemon.status")["log_level"] == "error")
        let log = h.log
        #expect(log.contains("configuration changes need a restart to apply") && log.contains("max_clients"), "\(log)")
        #expect(log.contains("configuration reloaded"), "\(log)")

        // A file with an error: refused, said so, the running configuration kept.
        try (quieter + "\nno_such_key = 1\n").write(toFile: path, atomically: true, encoding: .utf8)
        #expect(kill(h.pid, SIGHUP) == 0)
        let failed = try watcher.nextEvent("daemon.reload-failed")["data"]
        #expect(failed?["error"]?.stringValue?.contains(path) == true && failed?["error"]?.stringValue?.contains("no_such_key") == true,
                "\(String(describing: failed))")
        #expect(try h.call("daemon.status")["log_level"] == "error")
    }
}
