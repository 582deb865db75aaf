import Control
import Foundation
import TestSupport
import Testing
@testable import CLI

/// The CLI against a scripted fake daemon: output, `--json` and exit codes.
@Suite(.ownThreads, .serialized, .memoryHeavy) struct RunTests {
    @Test func statusHuman() throws {
        let daemon = try FakeDaemon { c in try c.reply(try c.expect("daemon.status"), Samples.status) }
        let run = peerlink(["status"], daemon: daemon)
        #expect(run.code == 0)
        #expect(run.err == "")
        #expect(run.out == """
            peerlinkd 0.1.0 (pid 123), up 5m 3s
            D-Bus: connected (system bus)   BlueZ: available
            Default adapter: hci0 (00:AA:01:00:00:00)
            Adapters: 2

            """)
        #expect(daemon.requests == [RPCRequest(id: 1, method: "daemon.status")])
    }

    @Test func statusWhenBlueZIsGone() throws {
        let result: JSONValue = ["version": "0.1.0", "pid": 9, "uptime_seconds": 7200.0, "bus": ["connected": false, "kind": "system"],
                                 "bluez": ["available": false], "default_adapter": nil, "adapters": [],
                                 "socket": "/s", "state_dir": "/d"]
        let daemon = try FakeDaemon { c in try c.reply(try c.expect("daemon.status"), result) }
        let run = peerlink(["status"], daemon: daemon)
        #expect(run.out == "peerlinkd 0.1.0 (pid 9), up 2h 0m\nD-Bus: disconnected   BlueZ: unavailable\nDefault adapter: none\nAdapters: 0\n")
    }

    @Test func statusJSONIsOneLine() throws {
        let daemon = try FakeDaemon { c in try c.reply(try c.expect("daemon.status"), Samples.status) }
        let run = peerlink(["--json", "status"], daemon: daemon)
        #expect(run.code == 0)
        #expect(run.out == Samples.status.description + "\n")
        #expect(try JSONValue.parse(run.out) == Samples.status)
    }

    @Test func socketOptionBeatsTheEnvironment() throws {
        let daemon = try FakeDaemon { c in try c.reply(try c.expect("daemon.status"), Samples.status) }
        let out = Capture(), err = Capture()
        let code = PeerlinkCLI.run(["status", "--socket", daemon.path], environment: ["PEERLINK_SOCKET": "/nonexistent.sock"],
                                   stdout: out, stderr: err)
        daemon.finish()
        #expect(code == 0)
    }

    /// `main` reads only the variables it needs, one by one, not the whole environment.
    @Test func readsOnlyTheNamedEnvironmentVariables() throws {
        let path = try #require(ProcessInfo.processInfo.environment["PATH"])
        #expect(PeerlinkCLI.readEnvironment(["PATH", "PEERLINK_TEST_SURELY_UNSET_VARIABLE"]) == ["PATH": path])
        #expect(PeerlinkCLI.readEnvironment([]) == [:])
    }

    @Test func adapterListTable() throws {
        let daemon = try FakeDaemon { c in try c.reply(try c.expect("adapter.list"), ["adapters": [Samples.hci0, Samples.hci1]]) }
        let run = peerlink(["adapter", "list"], daemon: daemon)
        #expect(run.code == 0)
        #expect(run.out == """
            NAME   ADDRESS            POWERED  STATE  ALIAS
            hci0*  00:AA:01:00:00:00  yes      on     peerlink-a
            hci1   00:AA:01:00:00:01  no       off    second one

            """)
    }

    @Test func adapterListEmpty() throws {
        let daemon = try FakeDaemon { c in try c.reply(try c.expect("adapter.list"), ["adapters": []]) }
        let run = peerlink(["adapter", "list"], daemon: daemon)
        #expect(run.out == "No adapters.\n")
    }

    @Test func adapterPower() throws {
        let daemon = try FakeDaemon { c in
            let r = try c.expect("adapter.power")
            var adapter = Samples.hci1.objectValue!
            adapter["powered"] = true
            try c.reply(r, .object(adapter))
        }
        let run = peerlink(["adapter", "power", "on", "--adapter", "hci1", "--timeout", "4"], daemon: daemon)
        #expect(run.code == 0)
        #expect(run.out == "hci1 (00:AA:01:00:00:01) powered on\n")
        #expect(daemon.requests.first?.params.values == ["on": true, "adapter": "hci1", "timeout": 4.0])
    }

    @Test func daemonErrorExitsOne() throws {
        let error = RPCError(code: RPCErrorCode.adapterNotFound, message: "no adapter named hci9", data: ["adapter": "hci9"])
        let daemon = try FakeDaemon { c in try c.reply(try c.expect("adapter.power"), error: error) }
        let run = peerlink(["adapter", "power", "off", "--adapter", "hci9"], daemon: daemon)
        #expect(run.code == 1)
        #expect(run.out == "")
        #expect(run.err == "peerlink: error: no adapter named hci9\n")
    }

    @Test func daemonErrorWithVerboseAddsTheJSONRPCDetail() throws {
        let error = RPCError(code: RPCErrorCode.adapterNotFound, message: "no adapter named hci9", data: ["adapter": "hci9"])
        let daemon = try FakeDaemon { c in try c.reply(try c.expect("adapter.power"), error: error) }
        let run = peerlink(["adapter", "power", "off", "--adapter", "hci9", "--verbose"], daemon: daemon)
        #expect(run.code == 1)
        #expect(run.out == "")
        #expect(run.err == "peerlink: error: no adapter named hci9\npeerlink: JSON-RPC error -32002 (adapter not found), data: {\"adapter\":\"hci9\"}\n")
    }

    @Test func daemonErrorWithJSONAlsoPrintsTheErrorObject() throws {
        let daemon = try FakeDaemon { c in try c.reply(try c.expect("daemon.status"), error: .internalError("boom")) }
        let run = peerlink(["--json", "status"], daemon: daemon)
        #expect(run.code == 1)
        #expect(run.out == "{\"error\":{\"code\":-32603,\"message\":\"internal error: boom\"}}\n")
        #expect(run.err == "peerlink: error: internal error: boom\n")
    }

    @Test func nullIDErrorIsReported() throws {
        let daemon = try FakeDaemon { c in
            _ = try c.nextRequest()
            try c.sendRaw(#"{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"request too large"}}"# + "\n")
        }
        let run = peerlink(["status"], daemon: daemon)
        #expect(run.code == 1)
        #expect(run.err.hasPrefix("peerlink: error: request too large\n"))
    }

    @Test func missingSocketExitsThreeNamingThePath() {
        let path = "/tmp/peerlink-cli-test-missing-\(UUID().uuidString.prefix(8)).sock"
        let run = peerlink(["status", "--socket", path])
        #expect(run.code == 3)
        #expect(run.out == "")
        #expect(run.err == "peerlink: cannot reach peerlinkd at \(path): No such file or directory. Is the daemon running? "
            + "(systemctl status peerlinkd; or pass --socket PATH / set PEERLINK_SOCKET)\n")
    }

    @Test func defaultSocketIsUsedWithoutOptionOrEnvironment() {
        let run = peerlink(["adapter", "list"], environment: ["PEERLINK_SOCKET": ""])
        #expect(run.code == 3)
        #expect(run.err.hasPrefix("peerlink: cannot reach peerlinkd at /run/peerlink/control.sock: "))
    }

    @Test func connectionClosedMidRequestExitsThree() throws {
        let daemon = try FakeDaemon { c in _ = try c.expect("daemon.status") }  // then hang up
        let run = peerlink(["status"], daemon: daemon)
        #expect(run.code == 3)
        #expect(run.err == "peerlink: peerlinkd closed the connection before replying to daemon.status\n")
    }

    @Test func partialReplyThenCloseExitsThree() throws {
        let daemon = try FakeDaemon { c in
            _ = try c.expect("daemon.status")
            try c.sendRaw(#"{"jsonrpc":"2.0","id":1,"res"#)
        }
        let run = peerlink(["status"], daemon: daemon)
        #expect(run.code == 3)
        #expect(run.err == "peerlink: peerlinkd closed the connection before replying to daemon.status\n")
    }

    @Test func noReplyTimesOutWithExitThree() throws {
        let daemon = try FakeDaemon { c in
            _ = try c.expect("daemon.status")
            c.waitForClose()
        }
        let started = ContinuousClock.now
        let run = peerlink(["status", "--timeout", "0.2"], daemon: daemon)
        #expect(ContinuousClock.now - started < .seconds(5))
        #expect(run.code == 3)
        #expect(run.err == "peerlink: no reply from peerlinkd within 0.2 s to daemon.status (pass --timeout SECONDS to wait longer)\n")
    }

    @Test func garbageReplyExitsThree() throws {
        let daemon = try FakeDaemon { c in
            _ = try c.expect("adapter.list")
            try c.sendRaw("hello\n")
        }
        let run = peerlink(["adapter", "list"], daemon: daemon)
        #expect(run.code == 3)
        #expect(run.err == "peerlink: invalid reply from peerlinkd to adapter.list: parse error: at byte 0: unexpected character 'h'\n")
    }

    @Test func notificationsBeforeTheReplyAreSkipped() throws {
        let daemon = try FakeDaemon { c in
            let r = try c.expect("adapter.list")
            try c.event("adapter.added", ["adapter": Samples.hci1])
            try c.sendRaw(#"{"jsonrpc":"2.0","id":99,"result":{}}"# + "\n")  // a stale reply
            try c.reply(r, ["adapters": []])
        }
        let run = peerlink(["adapter", "list"], daemon: daemon)
        #expect(run.code == 0)
        #expect(run.out == "No adapters.\n")
    }
}
