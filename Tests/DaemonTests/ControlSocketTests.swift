import Control
import Daemon
import Foundation
import SystemKit
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// Bad input on the control socket: each gets the right JSON-RPC error (or is closed), and
/// the daemon keeps serving the next client.
@Suite(.ownThreads, .memoryHeavy) struct ControlSocketTests {
    /// (what is sent, expected error code, expected id)
    static let badLines: [(String, Int, JSONValue)] = [
        ("this is not json", RPCErrorCode.parseError, .null),
        ("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.status\"", RPCErrorCode.parseError, .null),
        ("[1,2,3", RPCErrorCode.parseError, .null),
        ("\"just a string\"", RPCErrorCode.invalidRequest, .null),
        ("42", RPCErrorCode.invalidRequest, .null),
        ("{}", RPCErrorCode.invalidRequest, .null),
        ("{\"jsonrpc\":\"1.0\",\"id\":2,\"method\":\"daemon.status\"}", RPCErrorCode.invalidRequest, .int(2)),
        ("{\"jsonrpc\":\"2.0\",\"id\":3}", RPCErrorCode.invalidRequest, .int(3)),
        ("{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":5}", RPCErrorCode.invalidRequest, .int(4)),
        ("{\"jsonrpc\":\"2.0\",\"id\":{\"a\":1},\"method\":\"daemon.status\"}", RPCErrorCode.invalidRequest, .null),
        ("{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"no.such.method\"}", RPCErrorCode.methodNotFound, .int(5)),
        ("{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"daemon.status\",\"params\":[1]}", RPCErrorCode.invalidParams, .int(6)),
        ("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"daemon.status\",\"params\":{\"x\":1}}", RPCErrorCode.invalidParams, .int(7)),
        ("{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"adapter.power\",\"params\":{}}", RPCErrorCode.invalidParams, .int(8)),
        ("{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"adapter.power\",\"params\":{\"on\":\"yes\"}}", RPCErrorCode.invalidParams, .int(9)),
        ("{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"adapter.power\",\"params\":{\"on\":true,\"adapter\":\"wlan0\"}}", RPCErrorCode.invalidParams, .int(10)),
        ("{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"adapter.power\",\"params\":{\"on\":true,\"timeout\":-1}}", RPCErrorCode.invalidParams, .int(11)),
        ("{\"jsonrpc\":\"2.0\",\"id\":12,\"method\":\"events.subscribe\",\"params\":{\"topics\":\"adapter\"}}", RPCErrorCode.invalidParams, .int(12)),
        ("{\"jsonrpc\":\"2.0\",\"id\":\"s\",\"method\":\"rpc.discover\"}", RPCErrorCode.invalidRequest, .string("s")),
        ("[]", RPCErrorCode.invalidRequest, .null),
        ("\u{FF}\u{FE}garbage", RPCErrorCode.parseError, .null),
    ]

    @Test func badRequestsGetTheRightErrorsOnOneConnection() async throws {
        let bus = try PrivateBus()
        let h = try await DaemonHarness(busAddress: bus.address)
        defer { h.stop() }
        let c = try RawClient(h.socketPath)
        for (line, code, id) in Self.badLines {
            try c.send(line + "\n")
            let reply = try #require(try c.readJSON(), "no reply to \(line)")
            #expect(reply["jsonrpc"] == "2.0")
            #expect(reply["error"]?["code"]?.intValue == Int64(code), "\(line) -> \(reply)")
            #expect(reply["id"] == id, "\(line) -> \(reply)")
            #expect((reply["error"]?["message"]?.stringValue ?? "").count > 10, "error message says something")
            // The same connection still works after every bad line.
            #expect(try c.call("daemon.status")["version"]?.stringValue == PeerlinkDaemon.version)
        }
    }

    @Test func invalidParamsNameTheParameter() async throws {
        let bus = try PrivateBus()
        let h = try await DaemonHarness(busAddress: bus.address)
        defer { h.stop() }
        do {
            _ = try h.call("adapter.power", ["on": true, "adapter": "wlan0"])
            Issue.record("expected invalid params")
        } catch let e as RPCError {
            #expect(e.code == RPCErrorCode.invalidParams)
            #expect(e.message.contains("adapter"))
            #expect(e.message.contains("wlan0"))
        }
    }

    @Test func notificationsGetNoReplyAndBatchesWork() async throws {
        let bus = try PrivateBus()
        let h = try await DaemonHarness(busAddress: bus.address)
        defer { h.stop() }
        let c = try RawClient(h.socketPath)
        // A notification (no id) is executed but not answered; the next reply is for id 1.
        try c.send("{\"jsonrpc\":\"2.0\",\"method\":\"daemon.status\"}\n")
        try c.send("[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.status\"},{\"jsonrpc\":\"2.0\",\"method\":\"daemon.status\"},{\"bad\":1},{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"nope\"}]\n")
        let reply = try #require(try c.readJSON())
        let items = try #require(reply.arrayValue)
        #expect(items.count == 3)
        #expect(items[0]["id"] == 1 && items[0]["result"]?["version"] != nil)
        #expect(items[1]["error"]?["code"]?.intValue == Int64(RPCErrorCode.invalidRequest))
        #expect(items[2]["id"] == 2 && items[2]["error"]?["code"]?.intValue == Int64(RPCErrorCode.methodNotFound))
        // A batch of notifications only: no reply at all; the next line answers the next request.
        try c.send("[{\"jsonrpc\":\"2.0\",\"method\":\"daemon.status\"}]\n")
        #expect(try c.call("daemon.status")["pid"]?.intValue == Int64(h.pid))
    }

    /// The event selection: topics add to it, everything stays everything, removing from
    /// everything is refused (it cannot be said), and the list is bounded.
    @Test func subscribingAddsTopicsAndEverythingStaysEverything() async throws {
        let bus = try PrivateBus()
        let h = try await DaemonHarness(busAddress: bus.address)
        defer { h.stop() }
        let c = try RawClient(h.socketPath)
        func topics(_ method: String, _ topics: [String]?) throws -> [String]? {
            try c.call(method, topics.map { ["topics": .array($0.map { .string($0) })] } ?? [:])["topics"]?.arrayValue?.compactMap(\.stringValue)
        }
        func refused(_ method: String, _ topics: [String], naming param: String) {
            do {
                _ = try c.call(method, ["topics": .array(topics.map { .string($0) })])
                Issue.record("\(method) \(topics.prefix(2))... was not refused")
            } catch let e as RPCError {
                #expect(e.code == RPCErrorCode.invalidParams && e.message.contains(param), "\(e.message)")
            } catch { Issue.record("\(error)") }
        }
        #expect(try topics("events.subscribe", nil) == [])
        #expect(try topics("events.subscribe", ["peer"]) == [], "everything, with peer added, is still everything")
        refused("events.unsubscribe", ["adapter"], naming: "topics")
        #expect(try topics("events.unsubscribe", nil) == [])
        #expect(try topics("events.subscribe", ["peer"]) == ["peer"])
        #expect(try topics("events.subscribe", ["adapter"]) == ["adapter", "peer"])
        #expect(try topics("events.unsubscribe", ["peer"]) == ["adapter"])
        refused("events.subscribe", (0..<64).map { "made.up.\($0)" }, naming: "topics")
        refused("events.subscribe", ["x", String(repeating: "y", count: 65)], naming: "topics[1]")
        #expect(try topics("events.subscribe", (0..<63).map { "made.up.\($0)" })?.count == 64)
    }

    @Test func tenMebibyteLineIsRefusedAndClosedOthersServed() async throws {
        let bus = try PrivateBus()
        let h = try await DaemonHarness(busAddress: bus.address)
        defer { h.stop() }
        let big = try RawClient(h.socketPath)
        let other = try RawClient(h.socketPath)
        let chunk = [UInt8](repeating: UInt8(ascii: "x"), count: 1_048_576)
        let prefix = Array("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.status\",\"params\":{\"x\":\"".utf8)
        // The server stops reading once the line is over the limit, so sending may fail midway.
        var sendFailed = false
        do {
            try big.send(prefix)
            for _ in 0..<10 { try big.send(chunk) }
            try big.send("\"}}\n")
        } catch {
            sendFailed = true
        }
        if let reply = try? big.readJSON() {
            #expect(reply["error"]?["code"]?.intValue == Int64(RPCErrorCode.requestTooLarge))
            #expect(reply["error"]?["message"]?.stringValue?.contains("1048576") == true)
        } else {
            #expect(sendFailed, "the too-long line got neither an error nor a closed connection")
        }
        #expect(try big.waitForClose())
        #expect(try other.call("daemon.status")["version"] != nil)
        #expect(try h.call("daemon.status")["version"] != nil)
    }

    @Test func silentClientDoesNotBlockOthers() async throws {
        let bus = try PrivateBus()
        let h = try await DaemonHarness(busAddress: bus.address)
        defer { h.stop() }
        let silent = try RawClient(h.socketPath)
        let half = try RawClient(h.socketPath)
        try half.send("{\"jsonrpc\":\"2.0\",\"id\":1,\"meth")  // a partial line, never finished
        for _ in 0..<20 { #expect(try h.call("daemon.status")["version"] != nil) }
        _ = silent
    }

    @Test func unfinishedLineTimesOut() async throws {
        let bus = try PrivateBus()
        let h = try await DaemonHarness(busAddress: bus.address, requestTimeout: 0.3)
        defer { h.stop() }
        let half = try RawClient(h.socketPath)
        try half.send("{\"jsonrpc\":\"2.0\",\"id\":1,\"meth")
        let reply = try #require(try half.readJSON(timeout: 5))
        #expect(reply["error"]?["code"]?.intValue == Int64(RPCErrorCode.invalidRequest))
        #expect(reply["error"]?["message"]?.stringValue?.contains("end of line") == true)
        #expect(try half.waitForClose())
        #expect(try h.call("daemon.status")["version"] != nil)
    }

    @Test func clientDisconnectingMidRequestDoesNotHurt() async throws {
        let bus = try PrivateBus()
        let h = try await DaemonHarness(busAddress: bus.address)
        defer { h.stop() }
        for _ in 0..<50 {
            // A full request then an immediate close (the reply has nowhere to go) ...
            let a = try RawClient(h.socketPath)
            try a.send(RPCRequest(id: 1, method: "daemon.status").encodedLine())
            // ... and half a request then a close.
            let b = try RawClient(h.socketPath)
            try b.send("{\"jsonrpc\":\"2.0\",")
        }
        #expect(try h.call("daemon.status")["version"] != nil)
        // Every one of those connections is gone (closed by the daemon when the client left).
        // Each check is itself a connection, so the value measured by the last check is the answer.
        let deadline = Date().addingTimeInterval(5)
        var count = try h.clientCount()
        while count > 0, Date() < deadline {
            try await Task.sleep(for: .milliseconds(50))
            count = try h.clientCount()
        }
        #expect(count == 0, "daemon log:\n\(h.log.suffix(4000))")
    }

    @Test func twoHundredClientsAtOnce() async throws {
        let bus = try PrivateBus()
        let h = try await DaemonHarness(busAddress: bus.address)
        defer { h.stop() }
        let clients = try (0..<200).map { _ in try RawClient(h.socketPath) }
        // Send every request first, then read every reply: all 200 are served concurrently.
        for (i, c) in clients.enumerated() {
            try c.send(RPCRequest(id: .int(Int64(i)), method: "daemon.status").encodedLine())
        }
        for (i, c) in clients.enumerated() {
            let reply = try #require(try c.readJSON())
            #expect(reply["id"] == .int(Int64(i)))
            #expect(reply["result"]?["version"] != nil)
        }
        #expect(try h.clientCount() >= 200)  // plus any earlier connection still closing
    }

    @Test func clientsOverTheLimitAreToldAndClosed() async throws {
        let bus = try PrivateBus()
        let h = try await DaemonHarness(busAddress: bus.address, maxClients: 3)
        defer { h.stop() }
        // Connect until the daemon refuses; earlier test connections may still be closing, so
        // fewer than 3 may fit, never more.
        var held: [RawClient] = []
        var refusal: JSONValue?
        for _ in 0..<10 {
            let c = try RawClient(h.socketPath)
            try? c.send(RPCRequest(id: 1, method: "daemon.status").encodedLine())
            let reply = try #require(try c.readJSON())
            if reply["error"] != nil {
                refusal = reply
                #expect(try c.waitForClose())
                break
            }
            held.append(c)
        }
        let busy = try #require(refusal, "never refused")
        #expect(busy["error"]?["code"]?.intValue == Int64(RPCErrorCode.busy))
        #expect(busy["error"]?["message"]?.stringValue?.contains("3") == true)
        #expect(held.count <= 3 && !held.isEmpty)
        #expect(try held[0].call("daemon.status")["version"] != nil)
    }

    /// A client that sends requests and never reads the replies: they wait in the daemon up
    /// to the bound (16 MiB), then the client is closed with a warning that says why; the
    /// daemon's memory stays near that bound however much the client asks for, and everyone
    /// else is served throughout.
    @Test func aClientThatStopsReadingIsClosedAtTheBound() async throws {
        let bus = try PrivateBus()
        let h = try await DaemonHarness(busAddress: bus.address)
        defer { h.stop() }
        // A method that does not exist: answered at once, with a small error.
        let request = Array(RPCRequest(id: 1, method: "rpc.discover").encodedLine())
        // One connection asks for the size of a reply, then for the daemon's status throughout
        // and for the final count: a connection of the test's own closed just before that
        // count could still be in the daemon's table (it goes when the daemon reads its end).
        let status = try RawClient(h.socketPath)
        try status.send(request)
        let replyBytes = try #require(try status.readLine()).count + 1
        let before = try Self.memoryKiB(h.pid, "VmRSS")
        // Replies for 96 MiB: six times the bound.
        let count = 96 * 1_048_576 / replyBytes + 1
        let stuck = try RawClient(h.socketPath)
        let fd = stuck.fd
        // Its own thread: the daemon may stop reading this client before all of it is sent,
        // and the write then ends with the connection's close. The same 1 MiB of requests
        // again and again: this process measures its own memory in LeakTests.
        let perChunk = 1_048_576 / request.count
        let chunk = [UInt8]((0..<perChunk).map { _ in request }.joined())
        async let sent: Void = onThread {
            for _ in 0..<(count / perChunk + 1) { do { try SocketIO.sendAll(fd, chunk) } catch { return } }
        }
        var closedLogged = false
        for _ in 0..<1500 where !closedLogged {
            #expect(try status.call("daemon.status")["version"] != nil, "another client is served")
            closedLogged = h.log.contains("closing client: it is not reading (more than 16777216 bytes waiting)")
            if !closedLogged { try await Task.sleep(for: .milliseconds(20)) }
        }
        await sent
        #expect(closedLogged, "no warning in the log:\n\(h.log.suffix(2000))")
        let warnings = h.log.components(separatedBy: "it is not reading").count - 1
        #expect(warnings == 1, "the warning is logged once, not for every reply dropped: \(warnings)")
        #expect(try stuck.waitForClose(timeout: 30), "the client that does not read is closed")
        // Held to the bound: 96 MiB of replies never wait. What answering 700,000 requests
        // costs besides (the allocator's arenas; about 21 MiB for a client that reads every
        // reply) comes on top, so the check is 4 times the bound: 33 to 49 MiB were seen.
        let peak = try Self.memoryKiB(h.pid, "VmHWM")
        #expect(peak - before < 64 * 1024, "peak RSS \(peak) KiB from \(before) KiB: more than the bound waited")
        #expect(try status.call("daemon.status")["clients"] == 1, "only the caller of daemon.status is left")
    }

    /// The harness reports a daemon that died of a crash signal (here SIGABRT, as an
    /// abort would raise; Swift's backtracer, which takes such a signal sent from outside
    /// and goes on, is off for this daemon), so a crash fails the test that stopped it.
    @Test func aCrashedDaemonIsAnIssueOfItsTest() async throws {
        let bus = try PrivateBus()
        let h = try await DaemonHarness(busAddress: bus.address, environment: ["SWIFT_BACKTRACE": "enable=no"])
        kill(h.pid, SIGABRT)
        #expect(h.waitForExit(timeout: 10) == 128 + SIGABRT)
        withKnownIssue("the harness records the crash") {
            #expect(h.stop() == 128 + SIGABRT)
        }
        #expect(h.stop() == 128 + SIGABRT, "reported once: a second stop records nothing")
    }

    /// A line of /proc/PID/status, in KiB.
    static func memoryKiB(_ pid: Int32, _ key: String) throws -> Int {
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        let line = try #require(status.split(separator: "\n").first { $0.hasPrefix(key + ":") })
        return try #require(Int(line.split(separator: " ", omittingEmptySubsequences: true)[1]))
    }

    @Test func statusWithoutBluetooth() async throws {
        let bus = try PrivateBus()
        let h = try await DaemonHarness(busAddress: bus.address)
        defer { h.stop() }
        let s = try await h.waitForStatus { $0["bus"]?["connected"] == true }
        #expect(s["bluez"]?["available"] == false)
        #expect(s["socket"]?.stringValue == h.socketPath)
        #expect(s["default_adapter"] == .null)
        do {
            _ = try h.call("adapter.list")
            Issue.record("expected bluetooth-unavailable")
        } catch let e as RPCError {
            #expect(e.code == RPCErrorCode.bluetoothUnavailable)
        }
    }
}
