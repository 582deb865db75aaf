import Control
import Foundation
import Synchronization
import SystemKit
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Peer sessions through the real `peerlinkd` binary: two daemons on loopback, driven over
/// their control sockets as a client would (identity, connect with a context, the invitation
/// answered by a client, the same pairing code on both, messages each way as events, trust,
/// bad parameters named).
@Suite(.ownThreads, .serialized, .memoryHeavy) struct PeerCapabilityTests {
    static func daemon(_ bus: PrivateBus, name: String, accept: String, listen: String = "loopback", more: String = "") async throws -> DaemonHarness {
        try await DaemonHarness(busAddress: bus.address, extraConfig: """
        peer.name = \(name)
        peer.listen = \(listen)
        peer.accept = \(accept)
        \(more)
        """)
    }

    /// Starts blocking `body` on a thread of its own now; `value` waits for its result.
    final class OnThread<T: Sendable>: Sendable {
        private let result = Mutex<Result<T, any Error>?>(nil)
        private let done = DispatchSemaphore(value: 0)

        init(_ body: @escaping @Sendable () throws -> T) {
            Thread { [self] in
                let r = Result { try body() }
                result.withLock { $0 = r }
                done.signal()
            }.start()
        }

        /// The result, waiting up to `seconds`.
        func value(within seconds: Double = 30) throws -> T {
            guard done.wait(timeout: .now() + seconds) == .success, let r = result.withLock({ $0 }) else {
                throw TestSupportError("no result within \(seconds) s")
            }
            return try r.get()
        }
    }

    static func startThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) -> OnThread<T> { OnThread(body) }

    @Test func identityIsMadeOnceAndKept() async throws {
        let bus = try PrivateBus()
        let h = try await Self.daemon(bus, name: "KenshinCui_Advertiser", accept: "ask")
        defer { h.stop() }
        let id = try h.call("peer.identity")
        let hex = try #require(id["peer"]?.stringValue)
        #expect(hex.count == 64 && hex.allSatisfy(\.isHexDigit))
        #expect(id["name"] == "KenshinCui_Advertiser" && id["encryption"] == "required")
        #expect((id["port"]?.intValue ?? 0) > 0)
        #expect(id["peer_text"]?.stringValue?.count == 63, "8 groups of 7 with dashes")
        // The key is the daemon's alone; the certificate's SHA-256 is the peer ID.
        var st = stat()
        #expect(stat(h.directory + "/state/peer/identity.key", &st) == 0 && st.st_mode & 0o777 == 0o600)
        let fp = try await runTool("/usr/bin/openssl", ["x509", "-in", h.directory + "/state/peer/identity.crt", "-noout", "-fingerprint", "-sha256"])
        #expect(fp.stdout.replacingOccurrences(of: ":", with: "").lowercased().contains(hex))
    }

    @Test func connectInviteAcceptAndMessagesBothWays() async throws {
        let bus = try PrivateBus()
        let a = try await Self.daemon(bus, name: "KenshinCui_Advertiser", accept: "ask")
        defer { a.stop() }
        let b = try await Self.daemon(bus, name: "KenshinCui", accept: "ask")
        defer { b.stop() }
        let aID = try #require(try a.call("peer.identity")["peer"]?.stringValue)
        let bID = try #require(try b.call("peer.identity")["peer"]?.stringValue)
        let port = try #require(try a.call("peer.identity")["port"]?.intValue)

        let aWatch = try RawClient(a.socketPath)
        _ = try aWatch.call("events.subscribe", ["topics": ["peer"]])
        let bWatch = try RawClient(b.socketPath)
        _ = try bWatch.call("events.subscribe", ["topics": ["peer"]])

        // b invites a with a context; a's client sees the invitation and accepts it.
        let context = Data("join my game".utf8).base64EncodedString()
        // On a thread started here: a task would need a thread of the cooperative pool (two on
        // this machine), which the other suites' blocking calls may all hold meanwhile.
        let dial = Self.startThread {
            try RawClient(b.socketPath).call("peer.connect", ["address": .string("127.0.0.1:\(port)"), "context_base64": .string(context)])
        }
        let inv: JSONValue
        do { inv = try aWatch.nextEvent("peer.invitation") } catch {
            Issue.record("no invitation: \(error)\n--- a:\n\(a.log)\n--- b:\n\(b.log)")
            return
        }
        #expect(inv["data"]?["peer"]?.stringValue == bID && inv["data"]?["name"] == "KenshinCui")
        #expect(inv["data"]?["context_base64"]?.stringValue == context)
        let code = try #require(inv["data"]?["pairing_code"]?.stringValue)
        #expect(code.count == 6 && code.allSatisfy(\.isNumber))
        _ = try a.call("peer.accept", ["invitation": inv["data"]?["invitation"] ?? .null])
        let session = try dial.value()
        #expect(session["peer"]?.stringValue == aID && session["pairing_code"]?.stringValue == code, "the same code on both ends")
        #expect(session["encrypted"] == true)
        #expect(try aWatch.nextEvent("peer.connected")["data"]?["pairing_code"]?.stringValue == code)

        // A message each way, as events.
        _ = try b.call("peer.send", ["to": .array([.string(aID)]), "text": "hello from b"])
        let m1 = try aWatch.nextEvent("peer.message")
        #expect(m1["data"]?["data_base64"]?.stringValue == Data("hello from b".utf8).base64EncodedString())
        #expect(m1["data"]?["peer"]?.stringValue == bID && m1["data"]?["reliable"] == true)
        _ = try a.call("peer.send", ["to": "all", "data_base64": .string(Data([0, 1, 2, 255]).base64EncodedString())])
        let m2 = try bWatch.nextEvent("peer.message")
        #expect(m2["data"]?["data_base64"]?.stringValue == Data([0, 1, 2, 255]).base64EncodedString())
        let sessions = try a.call("peer.sessions")["sessions"]?.arrayValue ?? []
        #expect(sessions.count == 1 && sessions.first?["peer"]?.stringValue == bID)

        // Trust persists in the state directory; disconnect is seen by both.
        #expect(try a.call("peer.trust", ["peer": .string(bID)])["added"] == true)
        let trusted = try String(contentsOfFile: a.directory + "/state/peer/trusted-peers.json", encoding: .utf8)
        #expect(trusted.contains(bID))
        _ = try b.call("peer.disconnect", ["peer": .string(aID)])
        #expect(try aWatch.nextEvent("peer.disconnected")["data"]?["reason"] == "normal")
        #expect(try bWatch.nextEvent("peer.disconnected")["data"]?["by_peer"] == false)
    }

    /// Near its descriptor limit the daemon refuses peer connections (closes them at once)
    /// instead of running out: out of descriptors, libdispatch stops the process (its thread-pool
    /// monitor cannot open /proc), and accept failing with EMFILE spun a core before that. The
    /// daemon stays up, does not spin, and takes connections again once descriptors are back.
    @Test func nearTheDescriptorLimitPeerConnectionsAreRefusedNotSpunOn() async throws {
        let bus = try PrivateBus()
        let a = try await Self.daemon(bus, name: "a", accept: "all")
        defer { a.stop() }
        let port = UInt16(try #require(try a.call("peer.identity")["port"]?.intValue))
        let limited = try await runTool("/usr/bin/prlimit", ["--pid", "\(a.pid)", "--nofile=64:64"])
        try #require(limited.status == 0, "prlimit: \(limited.stderr)")
        // More connections than the daemon has descriptors for.
        var fds: [Int32] = []
        defer { for fd in fds { close(fd) } }
        for _ in 0..<80 { fds.append(try Self.connectLoopback(port)) }
        // Each gets the daemon's HELLO (taken) or the end of the stream at once (refused).
        var taken = 0, refused = 0
        for first in await onThread({ [fds] in Self.firstBytes(fds, within: 5) }) {
            switch first {
            case .some(let b) where b.count >= 2 && b[0] == 1 && b[1] == 1: taken += 1
            case .some(let b) where b.isEmpty: refused += 1
            default: break
            }
        }
        #expect(taken > 0 && refused > 0 && taken + refused == 80, "taken \(taken), refused \(refused)")
        #expect(Self.descriptors(a.pid) < 64, "the daemon reached its limit: \(Self.descriptors(a.pid))")
        let cpu0 = try Self.cpuTicks(a.pid)
        try await Task.sleep(for: .seconds(1))
        #expect(try Self.cpuTicks(a.pid) - cpu0 < 30, "the daemon spun with the held connections")
        #expect(kill(a.pid, 0) == 0, "the daemon is gone")
        #expect(Self.peerSockets(a.pid, port: port) == taken, "the daemon holds \(Self.peerSockets(a.pid, port: port)) peer connections, \(taken) taken")
        // Descriptors back: once the daemon has closed its ends of the held connections (it
        // must: they ended), a new connection is taken (it gets HELLO). Before that the new one
        // would rightly be refused: the daemon is still near its limit.
        for fd in fds { close(fd) }
        fds = []  // closed: the defer must not close these numbers again (another test's by then)
        let released = ContinuousClock.now + .seconds(10)
        while Self.peerSockets(a.pid, port: port) > 0, ContinuousClock.now < released { try await Task.sleep(for: .milliseconds(10)) }
        try #require(Self.peerSockets(a.pid, port: port) == 0,
                     "the daemon still holds \(Self.peerSockets(a.pid, port: port)) peer connections 10 s after their peers closed")
        fds = [try Self.connectLoopback(port)]
        let hello = await onThread({ [fds] in Self.firstBytes(fds, within: 10) })[0] ?? []
        #expect(hello.count >= 2 && hello[0] == 1 && hello[1] == 1, "no HELLO after the descriptors came back: \(hello)")
    }

    /// What the daemon sends first on each of `fds` (empty: it closed without sending; nil:
    /// nothing within the time, shared by all).
    static func firstBytes(_ fds: [Int32], within seconds: Double) -> [[UInt8]?] {
        var result = [[UInt8]?](repeating: nil, count: fds.count)
        var open = Set(fds.indices)
        let deadline = Date().addingTimeInterval(seconds)
        while !open.isEmpty, Date() < deadline {
            var polls = open.sorted().map { pollfd(fd: fds[$0], events: Int16(POLLIN), revents: 0) }
            guard poll(&polls, nfds_t(polls.count), 100) >= 0 else { break }
            for p in polls where p.revents != 0 {
                guard let i = fds.firstIndex(of: p.fd) else { continue }
                var buffer = [UInt8](repeating: 0, count: 64)
                let n = read(p.fd, &buffer, buffer.count)
                result[i] = n < 0 ? [] : Array(buffer[0..<n])
                open.remove(i)
            }
        }
        return result
    }

    static func connectLoopback(_ port: UInt16) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var sin = sockaddr_in()
        sin.sin_family = sa_family_t(AF_INET)
        sin.sin_port = port.bigEndian
        sin.sin_addr.s_addr = inet_addr("127.0.0.1")
        let rc = withUnsafePointer(to: &sin) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard fd >= 0, rc == 0 else { throw TestSupportError("connect to 127.0.0.1:\(port): errno \(errno)") }
        return fd
    }

    static func descriptors(_ pid: Int32) -> Int {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count) ?? 0
    }

    /// The TCP connections on local `port` (not the listener) that process `pid` holds open: its
    /// socket descriptors' inodes, matched in its network namespace's /proc/net/tcp{,6}.
    static func peerSockets(_ pid: Int32, port: UInt16) -> Int {
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd")) ?? []
        let inodes = Set(fds.compactMap { fd -> Substring? in
            guard let link = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\(fd)"),
                  link.hasPrefix("socket:[") else { return nil }
            return link.dropFirst(8).dropLast()
        })
        var held = 0
        for table in ["tcp", "tcp6"] {
            // Read to its end: a /proc file has no size, and one read gives a page at most.
            let data = FileHandle(forReadingAtPath: "/proc/\(pid)/net/\(table)")?.readDataToEndOfFile() ?? Data()
            let text = String(decoding: data, as: UTF8.self)
            for line in text.split(separator: "\n").dropFirst() {
                // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
                let f = line.split(separator: " ")
                guard f.count > 9, let local = f[1].split(separator: ":").last, UInt16(local, radix: 16) == port,
                      f[3] != "0A" else { continue }  // 0A: LISTEN
                if inodes.contains(f[9]) { held += 1 }
            }
        }
        return held
    }

    /// utime + stime of a process, in clock ticks (1/100 s).
    static func cpuTicks(_ pid: Int32) throws -> Int {
        let stat = try String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)
        let fields = stat[stat.index(after: try #require(stat.lastIndex(of: ")")))...].split(separator: " ")
        return Int(fields[11])! + Int(fields[12])!
    }

    @Test func aDeclinedInvitationFailsTheConnectWithItsReason() async throws {
        let bus = try PrivateBus()
        let a = try await Self.daemon(bus, name: "a", accept: "none")
        defer { a.stop() }
        let b = try await Self.daemon(bus, name: "b", accept: "ask")
        defer { b.stop() }
        let port = try #require(try a.call("peer.identity")["port"]?.intValue)
        let c = try RawClient(b.socketPath)
        let reply = try c.request("peer.connect", ["address": .string("127.0.0.1:\(port)")])
        #expect(reply["error"]?["code"]?.intValue == Int64(RPCErrorCode.peerRefused))
        #expect(reply["error"]?["data"]?["reason"] == "declined" && reply["error"]?["data"]?["by_peer"] == true)
    }

    /// A person copies a peer's short form from a list: the methods acting on a session or
    /// a trusted peer take the start of an ID (7 characters or more, either form) when one
    /// peer in session, trusted or inviting has an ID that starts so, and say so when none
    /// does (before, only whole IDs were taken, and the lists show only the short form).
    /// Where the ID is what a peer is checked against (trust, a dial's expected peer), only a
    /// whole one: a short form's 35 bits can be matched by a certificate made for it.
    @Test func theStartOfAnIDNamesAKnownPeer() async throws {
        let bus = try PrivateBus()
        let a = try await Self.daemon(bus, name: "a", accept: "all")
        defer { a.stop() }
        let b = try await Self.daemon(bus, name: "b", accept: "all")
        defer { b.stop() }
        let port = try #require(try a.call("peer.identity")["port"]?.intValue)
        let idA = try a.call("peer.identity")
        _ = try RawClient(b.socketPath).call("peer.connect", ["address": .string("127.0.0.1:\(port)")])
        let short = try #require(idA["short"]?.stringValue)
        let sent = try RawClient(b.socketPath).call("peer.send", ["to": .array([.string(short)]), "text": "by its short form"])
        #expect(sent["sent_to"]?.arrayValue?.first?.stringValue == idA["peer"]?.stringValue)
        let hexStart = String(try #require(idA["peer"]?.stringValue).prefix(10))
        let disconnected = try RawClient(b.socketPath).call("peer.disconnect", ["peer": .string(hexStart)])
        #expect(disconnected["peer"] == idA["peer"])
        let trust = try RawClient(b.socketPath).request("peer.trust", ["peer": .string(short)])
        #expect(trust["error"]?["message"]?.stringValue?.contains("expected a whole peer ID") == true, "\(trust)")
        let unknown = try RawClient(b.socketPath).request("peer.disconnect", ["peer": "ZZZZZZZ"])
        #expect(unknown["error"]?["code"]?.intValue == Int64(RPCErrorCode.invalidParams))
        #expect(unknown["error"]?["message"]?.stringValue?.contains("no peer in session, trusted or inviting has an ID starting with ZZZZZZZ") == true,
                "\(unknown)")
        let tooShort = try RawClient(b.socketPath).request("peer.disconnect", ["peer": .string(String(short.prefix(5)))])
        #expect(tooShort["error"]?["message"]?.stringValue?.contains("at least its first 7 characters") == true, "\(tooShort)")
    }

    /// An inbox that cannot be made (here its path runs through a regular file; on a board, a
    /// card not mounted or a directory the sandbox keeps read-only) costs the resources, not
    /// the daemon: it starts, sessions and messages work, `peer.inbox` says why there is no
    /// inbox, and a peer's offer is declined with the reason, the session kept.
    @Test func anInboxThatCannotBeMadeCostsOnlyTheResources() async throws {
        let blocker = FileManager.default.temporaryDirectory.appendingPathComponent("peerlink-noinbox-\(UUID().uuidString.prefix(8))").path
        try Data("a file, not a directory".utf8).write(to: URL(fileURLWithPath: blocker))
        defer { try? FileManager.default.removeItem(atPath: blocker) }
        let bus = try PrivateBus()
        let a = try await Self.daemon(bus, name: "no-inbox", accept: "all", more: "peer.accept_resources = all\npeer.inbox_dir = \(blocker)/inbox")
        defer { a.stop() }
        let b = try await Self.daemon(bus, name: "sender", accept: "all")
        defer { b.stop() }
        let noInbox = try RawClient(a.socketPath).request("peer.inbox")
        #expect(noInbox["error"]?["code"]?.intValue == Int64(RPCErrorCode.invalidState) && noInbox["error"]?["data"]?["kind"] == "no-inbox", "\(noInbox)")
        #expect(noInbox["error"]?["message"]?.stringValue?.contains(blocker + "/inbox") == true, "names the inbox: \(noInbox)")

        let port = try #require(try a.call("peer.identity")["port"]?.intValue)
        let aWatch = try RawClient(a.socketPath)
        _ = try aWatch.call("events.subscribe", ["topics": ["peer.message", "peer.resource-ended"]])
        let bWatch = try RawClient(b.socketPath)
        _ = try bWatch.call("events.subscribe", ["topics": ["peer.resource-ended"]])
        _ = try RawClient(b.socketPath).call("peer.connect", ["address": .string("127.0.0.1:\(port)")])
        let path = b.directory + "/photo.bin"
        try Data(count: 1000).write(to: URL(fileURLWithPath: path))
        _ = try b.call("peer.send-resource", ["path": .string(path), "to": "all"])
        #expect(try bWatch.nextEvent("peer.resource-ended")["data"]?["reason"] == "declined")
        let declined = try aWatch.nextEvent("peer.resource-ended")["data"]
        #expect(declined?["reason"] == "declined" && declined?["detail"]?.stringValue?.contains("no inbox") == true, "\(String(describing: declined))")
        _ = try b.call("peer.send", ["to": "all", "data_base64": "aGk="])
        #expect(try aWatch.nextEvent("peer.message")["data"]?["data_base64"] == "aGk=", "the session goes on")
    }

    /// `peer.send-resource` between two daemons: the file arrives in the receiver's inbox
    /// (its `inbox_dir`), reported on both sides; `peer.inbox` lists it; a missing file is an
    /// error naming it.
    @Test func aFileGoesToThePeersInbox() async throws {
        let bus = try PrivateBus()
        let a = try await Self.daemon(bus, name: "receiver", accept: "all", more: "peer.accept_resources = all\npeer.max_resource_bytes = 1M")
        defer { a.stop() }
        let b = try await Self.daemon(bus, name: "sender", accept: "all")
        defer { b.stop() }
        let port = try #require(try a.call("peer.identity")["port"]?.intValue)
        let aWatch = try RawClient(a.socketPath)
        _ = try aWatch.call("events.subscribe", ["topics": ["peer.resource-received"]])
        let bWatch = try RawClient(b.socketPath)
        _ = try bWatch.call("events.subscribe", ["topics": ["peer.resource-sent", "peer.resource-ended"]])
        _ = try RawClient(b.socketPath).call("peer.connect", ["address": .string("127.0.0.1:\(port)")])

        let path = b.directory + "/photo.bin"
        let bytes = Data((0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        try bytes.write(to: URL(fileURLWithPath: path))
        let sent = try b.call("peer.send-resource", ["path": .string(path), "to": "all"])
        #expect(sent["transfers"]?.arrayValue?.first?["size"] == 100_000)
        let got = try aWatch.nextEvent("peer.resource-received")["data"]
        let saved = try #require(got?["path"]?.stringValue)
        #expect(saved == a.directory + "/state/peer/inbox/photo.bin", "the default inbox_dir")
        #expect(try Data(contentsOf: URL(fileURLWithPath: saved)) == bytes)
        #expect(try bWatch.nextEvent("peer.resource-sent")["data"]?["name"] == "photo.bin")
        let inbox = try a.call("peer.inbox")
        #expect(inbox["files"]?.arrayValue?.map { $0["name"] } == ["photo.bin"] && inbox["files"]?.arrayValue?.first?["size"] == 100_000)

        // Over the receiver's max_resource_bytes (1M): declined, and the sender hears why.
        try Data(count: 1_048_577).write(to: URL(fileURLWithPath: path))
        _ = try b.call("peer.send-resource", ["path": .string(path), "to": "all"])
        #expect(try bWatch.nextEvent("peer.resource-ended")["data"]?["reason"] == "too-large")

        let missing = try RawClient(b.socketPath).request("peer.send-resource", ["path": "/nonexistent/file.png", "to": "all"])
        #expect(missing["error"]?["message"]?.stringValue?.contains("/nonexistent/file.png") == true, "\(missing)")

        // The daemon's own key is never sent by path.
        let key = b.directory + "/state/peer/identity.key"
        #expect(FileManager.default.fileExists(atPath: key))
        let refused = try RawClient(b.socketPath).request("peer.send-resource", ["path": .string(key), "to": "all"])
        #expect(refused["error"]?["message"]?.stringValue?.contains("one of the daemon's own files") == true, "\(refused)")

        // Bytes passed as a descriptor with the request (a socket standing in for a pipe),
        // written after it: copied into the outbox, received whole, the copy gone once sent.
        let (passed, kept) = try DescriptorPassing.streamPair()
        let piped = Array((0..<150_000).map { UInt8(truncatingIfNeeded: $0 &* 13) })
        let writer = Thread {
            try? SocketIO.sendAll(kept, piped)
            closeQuietly(kept)
        }
        writer.start()
        let client = try RawClient(b.socketPath)
        let reply = try client.request("peer.send-resource", ["descriptor": true, "name": "piped.bin", "to": "all"], passing: [passed])
        closeQuietly(passed)
        #expect(reply["result"]?["copied"] == true, "\(reply)")
        let pipedGot = try aWatch.nextEvent("peer.resource-received")["data"]
        #expect(pipedGot?["name"] == "piped.bin")
        #expect(try Data(contentsOf: URL(fileURLWithPath: try #require(pipedGot?["path"]?.stringValue))) == Data(piped))
        #expect(try bWatch.nextEvent("peer.resource-sent")["data"]?["name"] == "piped.bin")
        #expect(try FileManager.default.contentsOfDirectory(atPath: b.directory + "/state/peer/outbox").isEmpty, "the copy is gone once sent")
    }

    /// `peer.listen = off`: no port is open, yet the board dials out.
    @Test func aDialOnlyBoardOpensNoPortAndConnectsOut() async throws {
        let bus = try PrivateBus()
        let a = try await Self.daemon(bus, name: "hub", accept: "all")
        defer { a.stop() }
        let b = try await Self.daemon(bus, name: "dial-only", accept: "all", listen: "off")
        defer { b.stop() }
        #expect(try b.call("peer.identity")["port"] == 0)
        let port = try #require(try a.call("peer.identity")["port"]?.intValue)
        let session = try RawClient(b.socketPath).call("peer.connect", ["address": .string("127.0.0.1:\(port)")])
        #expect(session["name"] == "hub" && session["encrypted"] == true)
    }

    @Test(arguments: [
        ("peer.connect", ["address": JSONValue.string("nohost")], "address"),
        ("peer.connect", ["address": "127.0.0.1:1", "peer": "xyz"], "peer"),
        ("peer.connect", ["address": "127.0.0.1:1", "context_base64": .string(Data(count: 4097).base64EncodedString())], "context_base64: at most 4096"),
        ("peer.invite", ["peer": .string(String(repeating: "ab", count: 32)), "context": .string(String(repeating: "c", count: 4097))], "context: at most 4096"),
        ("peer.send", ["to": "everyone", "text": "x"], "to"),
        ("peer.send", ["to": "all"], "data_base64"),
        ("peer.accept", ["invitation": 99], "invitation"),
        ("peer.disconnect", ["peer": .string(String(repeating: "ab", count: 32))], "peer"),
        ("peer.advertise", ["type": "Cmj-Stream"], "no capitals"),
        ("peer.advertise", ["type": "cmj--stream"], "two hyphens"),
        ("peer.advertise", ["type": "a-service-type-too-long"], "at most 15"),
        ("peer.advertise", ["type": "cmj-stream", "info": ["pid": "forged"]], "reserved"),
        ("peer.advertise", ["type": "cmj-stream", "info": ["k": .int(1)]], "must be a string"),
        ("peer.advertise", ["type": "cmj-stream", "info": ["k": .string(String(repeating: "v", count: 300))]], "at most 255"),
        ("peer.browse", ["type": "-cmj"], "start with a hyphen"),
        ("peer.browse-stop", ["browse_id": "b99"], "no peer browse b99"),
        ("peer.unadvertise", ["type": "cmj-stream"], "not advertised"),
        ("peer.invite", ["peer": .string(String(repeating: "ab", count: 32))], "has not been found by a browse"),
        ("peer.invite", ["peer": .string(String(repeating: "ab", count: 32)), "timeout": 0], "timeout"),
        ("peer.send-resource", ["path": "relative.bin"], "absolute path"),
        ("peer.send-resource", ["to": "all"], "give the file's absolute path"),
        ("peer.send-resource", ["descriptor": true, "to": "all"], "no descriptor came with the request"),
        ("peer.send-resource", ["path": "/etc/hostname", "size": 3], "only with"),
        ("peer.send-resource", ["path": "/etc/hostname", "descriptor": "yes"], "descriptor"),
        ("peer.send-resource", ["path": "/etc/hostname"], "no session"),
        ("peer.send-resource", ["path": "/etc/hostname", "media_type": "text"], "media type"),
        ("peer.send-resource", ["path": "/etc/hostname", "to": "some"], "to"),
        ("peer.cancel", ["transfer": 7], "no resource transfer 7"),
        ("peer.accept-resource", ["transfer": 7], "no resource offer 7"),
        ("peer.transfers", ["x": 1], "x"),
    ] as [(String, [String: JSONValue], String)])
    func badParametersAreNamed(method: String, params: [String: JSONValue], names: String) async throws {
        let bus = try PrivateBus()
        let h = try await Self.daemon(bus, name: "p", accept: "ask")
        defer { h.stop() }
        let reply = try RawClient(h.socketPath).request(method, params)
        let message = reply["error"]?["message"]?.stringValue ?? ""
        #expect(reply["error"] != nil && message.contains(names), "\(method) \(params) -> \(reply)")
    }
}

/// Message streams (`peer.message-stream`) between two real daemons: packets both ways
/// through the sockets passed with the replies, the end of a session seen as the end of the
/// socket, a closed stream leaving its session alone.
extension PeerCapabilityTests {
    /// FNV-1a, 64 bits: a digest of each message to compare what went and what came back.
    static func digest(_ bytes: [UInt8]) -> UInt64 {
        bytes.reduce(0xcbf2_9ce4_8422_2325 as UInt64) { ($0 ^ UInt64($1)) &* 0x100_0000_01b3 }
    }

    /// The next packet on a blocking packet socket; nil at its end; throws after `seconds`.
    static func readPacket(_ fd: Int32, max: Int, seconds: Int32 = 30) throws -> [UInt8]? {
        guard try SocketIO.waitReadable(fd, timeoutMilliseconds: seconds * 1000) else { throw TestSupportError("no packet within \(seconds) s") }
        var buffer = [UInt8](repeating: 0, count: max + 1)
        let n = try buffer.withUnsafeMutableBytes { raw in try syscall("recv") { recv(fd, raw.baseAddress, raw.count, 0) } }
        return n == 0 ? nil : Array(buffer[..<n])
    }

    /// Two daemons on one private bus (both accepting every invitation), b connected to a and
    /// a's session reported to `aWatch` (subscribed to `peer` events): where the stream tests
    /// start.
    struct ConnectedPair {
        let bus: PrivateBus
        let a: DaemonHarness, b: DaemonHarness
        let aID: String, bID: String
        let aWatch: RawClient, bClient: RawClient

        init(a aName: String, b bName: String) async throws {
            bus = try PrivateBus()
            a = try await PeerCapabilityTests.daemon(bus, name: aName, accept: "all")
            b = try await PeerCapabilityTests.daemon(bus, name: bName, accept: "all")
            aID = try #require(try a.call("peer.identity")["peer"]?.stringValue)
            bID = try #require(try b.call("peer.identity")["peer"]?.stringValue)
            let port = try #require(try a.call("peer.identity")["port"]?.intValue)
            aWatch = try RawClient(a.socketPath)
            _ = try aWatch.call("events.subscribe", ["topics": ["peer"]])
            bClient = try RawClient(b.socketPath)
            _ = try bClient.call("peer.connect", ["address": .string("127.0.0.1:\(port)")])
            // a's session may be reported a moment after b's connect returns.
            _ = try aWatch.nextEvent("peer.connected")
        }

        /// Stops both; each must exit cleanly (a crash, whose report comes after a test's
        /// failure is written, is shown with its log).
        func stop() {
            for (name, d) in [("a", a), ("b", b)] {
                let (status, log) = d.stopReadingLog()
                #expect(status == 0, "\(name) exited with \(status):\n\(log.suffix(4000))")
            }
        }
    }

    /// The stream's socket passed with `peer.message-stream`'s reply, and the reply.
    static func openStream(_ c: RawClient, to peer: String) throws -> (fd: Int32, reply: JSONValue) {
        let r = try c.call("peer.message-stream", ["peer": .string(peer)])
        guard r["fd"] == true, let fd = c.descriptors.popLast() else { throw TestSupportError("no socket with the reply: \(r)") }
        try setNonBlocking(fd, false)
        return (fd, r)
    }

    @Test func messageStreamsRoundTripAndEndWithTheSession() async throws {
        let pair = try await ConnectedPair(a: "echo", b: "source")
        defer { pair.stop() }
        let (a, b, aID, bID, aWatch, bClient) = (pair.a, pair.b, pair.aID, pair.bID, pair.aWatch, pair.bClient)
        let aClient = try RawClient(a.socketPath)
        let (aFD, aReply) = try Self.openStream(aClient, to: bID)
        let (bFD, bReply) = try Self.openStream(bClient, to: aID)
        defer { closeQuietly(bFD) }
        let limit = Int(try #require(bReply["max_message"]?.intValue))
        #expect(aReply["max_message"]?.intValue == Int64(limit) && limit >= 200_000, "what the socket carries")
        // A second stream with the same peer is refused.
        #expect(try aClient.request("peer.message-stream", ["peer": .string(bID)])["error"]?["data"]?["kind"] == "stream-open")

        // 1000 messages of mixed sizes (one of the largest the stream carries) b → a, echoed
        // by a's client → b, in order.
        let messages: [[UInt8]] = await onThread { (0..<1000).map { i in
            var rng = SystemRandomNumberGenerator()
            let size = i == 500 ? limit : i % 20 == 0 ? Int.random(in: 60_000...200_000, using: &rng) : Int.random(in: 1...3000, using: &rng)
            var m = [UInt8](repeating: 0, count: size)
            var x = UInt64.random(in: 1...UInt64.max, using: &rng)
            for j in 0..<size {
                x ^= x << 13; x ^= x >> 7; x ^= x << 17  // xorshift: cheap bytes that differ
                m[j] = UInt8(truncatingIfNeeded: x)
            }
            return m
        } }
        // A failure names the step and the message, with both daemons' last words: a socket
        // the daemon closed (EPIPE) says the daemon ended the stream, and its log says why.
        @Sendable func failed(_ step: String, _ index: Int, _ error: any Error) -> TestSupportError {
            // The daemon logs a stream's end (with its reason) just after it shuts the socket:
            // give it a moment to, so that the failure says why.
            let deadline = Date().addingTimeInterval(5)
            while Date() < deadline, !a.log.contains("message stream ended"), !b.log.contains("message stream ended") { usleep(20_000) }
            return TestSupportError("\(step), message \(index): \(error)\n--- a's log:\n\(a.log.suffix(3000))\n--- b's log:\n\(b.log.suffix(3000))")
        }
        async let echo = onThread { () -> Int in
            var n = 0
            while n < messages.count {
                let m: [UInt8]?
                do { m = try Self.readPacket(aFD, max: limit) } catch { throw failed("a's client reading", n, error) }
                guard let m else { break }
                do { try SocketIO.sendPacket(aFD, m) } catch { throw failed("a's client echoing", n, error) }
                n += 1
            }
            return n
        }
        async let back = onThread { () -> [UInt64] in
            var got: [UInt64] = []
            while got.count < messages.count {
                let m: [UInt8]?
                do { m = try Self.readPacket(bFD, max: limit) } catch { throw failed("b's client reading the echo", got.count, error) }
                guard let m else { break }
                got.append(Self.digest(m))
            }
            return got
        }
        try await onThread {
            for (i, m) in messages.enumerated() {
                do { try SocketIO.sendPacket(bFD, m) } catch { throw failed("b's client sending", i, error) }
            }
        }
        #expect(try await echo == messages.count)
        #expect(try await back == messages.map(Self.digest), "every message once, in order, unchanged")
        let sessions = try b.call("peer.sessions")["sessions"]?.arrayValue ?? []
        #expect(sessions.first?["dropped_datagrams"] == 0 && sessions.first?["queued_bytes"] != nil)

        // a's client closes its stream: the session goes on, a's messages become events again.
        closeQuietly(aFD)
        let ended = try aClient.nextEvent("peer.stream-ended")
        #expect(ended["data"]?["reason"] == "closed" && ended["data"]?["sent"] == 1000 && ended["data"]?["received"] == 1000)
        try SocketIO.sendPacket(bFD, Array("after the stream".utf8))
        let m = try aWatch.nextEvent("peer.message")
        #expect(m["data"]?["data_base64"]?.stringValue == Data("after the stream".utf8).base64EncodedString())

        // The session ends: b's client reads the end of its stream, and is told why.
        _ = try a.call("peer.disconnect", ["peer": .string(bID)])
        #expect(try Self.readPacket(bFD, max: limit) == nil, "the end of the socket")
        let bEnded = try bClient.nextEvent("peer.stream-ended")
        #expect(bEnded["data"]?["reason"] == "session-ended" && bEnded["data"]?["received"] == 1000 && bEnded["data"]?["sent"] == 1001)
        // a logs the session's end once its connection has closed, which may be after b saw
        // it; its `peer.disconnected` event comes right after that line.
        #expect(try aWatch.nextEvent("peer.disconnected")["data"]?["reason"] == "normal")
        // The journal says so too, with the reasons: the session's end on both sides, and
        // each stream's end.
        for (name, log) in [("a", a.log), ("b", b.log)] {
            #expect(log.contains("peer session connected") && log.contains("peer session ended") && log.contains("reason=normal"), "\(name)'s log:\n\(log.suffix(2000))")
        }
        #expect(a.log.contains("message stream ended") && a.log.contains("reason=closed"), "a's log:\n\(a.log.suffix(2000))")
        #expect(b.log.contains("message stream ended") && b.log.contains("reason=session-ended"), "b's log:\n\(b.log.suffix(2000))")
    }
}

extension PeerCapabilityTests {
    /// A message stream ends with the control connection that opened it, also when the
    /// client opened and closed others before on that connection (their close handlers
    /// dropped, the open one's kept).
    @Test func aMessageStreamEndsWithItsClientsControlConnection() async throws {
        let pair = try await ConnectedPair(a: "holder", b: "other")
        defer { pair.stop() }
        let aClient = try RawClient(pair.a.socketPath)
        for _ in 0..<3 {
            let (fd, _) = try Self.openStream(aClient, to: pair.bID)
            closeQuietly(fd)
            #expect(try aClient.nextEvent("peer.stream-ended")["data"]?["reason"] == "closed")
        }
        let (fd, _) = try Self.openStream(aClient, to: pair.bID)
        defer { closeQuietly(fd) }
        aClient.close()
        #expect(try Self.readPacket(fd, max: 16) == nil, "the stream's socket ends with the client's connection")
        // The peer's messages are events again: the stream is gone.
        _ = try pair.bClient.call("peer.send", ["to": .array([.string(pair.aID)]), "data_base64": "aGk="])
        #expect(try pair.aWatch.nextEvent("peer.message")["data"]?["data_base64"] == "aGk=")
    }
}

extension PeerCapabilityTests {
    /// A stream's client that does not read: the daemon holds the session's credit, so the
    /// sending daemon's queue fills and `peer.send` with `"wait": false` fails busy; once the
    /// client reads, every message arrives, once and in order.
    @Test func aStreamClientThatDoesNotReadMakesTheSenderBusyAndLosesNothing() async throws {
        let pair = try await ConnectedPair(a: "slow-reader", b: "sender")
        defer { pair.stop() }
        let (a, b, aID, bID) = (pair.a, pair.b, pair.aID, pair.bID)
        let aClient = try RawClient(a.socketPath)
        let (fd, reply) = try Self.openStream(aClient, to: bID)
        defer { closeQuietly(fd) }
        let limit = Int(try #require(reply["max_message"]?.intValue))

        // 600 KB messages (a request line stays under 1 MiB in base64) until b is busy: a's
        // socket, the held window and b's 8 MiB queue hold a bounded number of them.
        let size = min(600_000, limit)
        @Sendable func message(_ i: Int) -> [UInt8] { [UInt8](repeating: UInt8(truncatingIfNeeded: i), count: size - 4) + withUnsafeBytes(of: UInt32(i).bigEndian, Array.init) }
        let socket = b.socketPath
        let (sent, busy) = try await onThread { () -> (Int, JSONValue?) in
            let c = try RawClient(socket)
            var sent = 0
            while sent < 200 {
                let r = try c.request("peer.send", ["to": .array([.string(aID)]), "data_base64": .string(Data(message(sent)).base64EncodedString()),
                                                    "wait": false])
                if let e = r["error"] { return (sent, e) }
                sent += 1
            }
            return (sent, nil)
        }
        #expect(busy?["code"]?.intValue == Int64(RPCErrorCode.busy) && busy?["data"]?["kind"] == "busy", "\(String(describing: busy))")
        #expect(sent < 200 && sent * size >= 8 * 1_048_576, "\(sent) sent before busy: b's queue filled")
        let queued = try b.call("peer.sessions")["sessions"]?.arrayValue?.first?["queued_bytes"]?.intValue ?? -1
        #expect(queued > 0 && queued <= 8 * 1_048_576, "\(queued) bytes queued")

        // The client reads: everything arrives; later sends wait for room instead of failing.
        let total = sent + 5
        async let reader = onThread { () -> [[UInt8]] in
            var got: [[UInt8]] = []
            while got.count < total, let m = try Self.readPacket(fd, max: limit) { got.append(m) }
            return got
        }
        try await onThread {
            let c = try RawClient(socket)
            for i in sent..<total {
                _ = try c.call("peer.send", ["to": .array([.string(aID)]), "data_base64": .string(Data(message(i)).base64EncodedString())])
            }
        }
        let got = try await reader
        #expect(got.count == total && got.map(Self.digest) == (0..<total).map { Self.digest(message($0)) }, "each once, in order")
    }
    /// A stream's sender whose peer does not take messages: the session's queue fills to its
    /// bound, the sending stream stops reading its client (whose writes then block, nothing
    /// dropped), and once the peer's client reads, everything arrives once, in order.
    @Test func aSendingStreamWaitsForRoomAndLosesNothing() async throws {
        let pair = try await ConnectedPair(a: "slow-reader", b: "stream-sender")
        defer { pair.stop() }
        let (a, b, aID, bID, bClient) = (pair.a, pair.b, pair.aID, pair.bID, pair.bClient)
        let aClient = try RawClient(a.socketPath)
        let (aFD, reply) = try Self.openStream(aClient, to: bID)
        defer { closeQuietly(aFD) }
        let (bFD, _) = try Self.openStream(bClient, to: aID)
        defer { closeQuietly(bFD) }
        let limit = Int(try #require(reply["max_message"]?.intValue))
        let size = 60_000, total = 400  // 24 MB: far more than b's 8 MiB queue and the sockets
        @Sendable func message(_ i: Int) -> [UInt8] { withUnsafeBytes(of: UInt32(i).bigEndian, Array.init) + [UInt8](repeating: UInt8(truncatingIfNeeded: i), count: size - 4) }
        let written = Mutex(0)
        async let writer: Void = onThread { for i in 0..<total { try SocketIO.sendPacket(bFD, message(i)); written.withLock { $0 += 1 } } }
        // a's client does not read: b's queue fills and its stream stops reading.
        var queued: Int64 = 0
        for _ in 0..<500 where queued < 6 * 1_048_576 {
            try await Task.sleep(for: .milliseconds(20))
            queued = try b.call("peer.sessions")["sessions"]?.arrayValue?.first?["queued_bytes"]?.intValue ?? 0
        }
        #expect(queued >= 6 * 1_048_576 && queued <= 8 * 1_048_576, "b's queue filled to its bound: \(queued) bytes")
        #expect(written.withLock { $0 } < total, "the writer is held back")
        let got = try await onThread { () -> [UInt64] in
            var got: [UInt64] = []
            while got.count < total, let m = try Self.readPacket(aFD, max: limit) { got.append(Self.digest(m)) }
            return got
        }
        try await writer
        #expect(got == (0..<total).map { Self.digest(message($0)) }, "each once, in order")
    }

}
