import Control
import Daemon
import Foundation
import Glibc
import Logging
import Synchronization
import SystemKit
import TestSupport
import Testing

/// How the control server reads a client that writes more, or more slowly, than its
/// requests are answered: bounded memory, and a time limit that counts per line.
@Suite(.ownThreads, .memoryHeavy) struct ControlInputTests {
    typealias Gate = QuickMethodTests.Gate

    /// Whether every copy of the passed end of the socket pair whose kept end is `kept` is
    /// closed, waiting up to 10 s (closing may finish on another thread). (Closed with the
    /// bytes written to it unread, the kept end reads a reset, not the end of file.)
    static func readersGone(_ kept: Int32) -> Bool {
        var p = pollfd(fd: kept, events: Int16(POLLIN), revents: 0)
        return poll(&p, 1, 10_000) == 1 && p.revents & Int16(POLLHUP) != 0
    }

    /// A server on a fresh socket with a `slow` method (waits for `gate`) and a `count`
    /// method (counts its calls); stopped, and its directory removed, by `finish`.
    final class Server {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("pl-input-\(getpid())-\(UInt32.random(in: 0...UInt32.max))").path
        let server: ControlServer
        let gate = Gate()
        final class Counter: Sendable {
            private let n = Mutex(0)
            func next() -> Int { n.withLock { $0 += 1; return $0 } }
            var value: Int { n.withLock { $0 } }
        }
        let counted = Counter()

        init(requestTimeout: Double = 30) throws {
            var options = ControlServerOptions(path: dir + "/control.sock")
            options.requestTimeout = requestTimeout
            server = ControlServer(options: options, logger: Logger(label: "test", level: .error))
            server.register("slow") { [gate] _, _ throws(RPCError) in
                await gate.wait()
                return "slow"
            }
            // The first few bytes of the descriptor passed with the request.
            server.register("take") { params, context throws(RPCError) in
                try params.rejectUnknown(allowed: [])
                guard let fd = context.takeDescriptor() else { throw .invalidParams("descriptor", "none came with the request") }
                defer { closeQuietly(fd) }
                var bytes = [UInt8](repeating: 0, count: 16)
                let n = read(fd, &bytes, bytes.count)
                return .string(String(decoding: bytes.prefix(max(n, 0)), as: UTF8.self))
            }
            server.register("count", quick: { [counted] _, _ throws(RPCError) in
                .reply(.int(Int64(counted.next())))
            })
            try server.start()
        }

        func client() throws -> RawClient { try RawClient(dir + "/control.sock") }

        func finish() {
            gate.open()
            server.stop()
            try? FileManager.default.removeItem(atPath: dir)
        }
    }

    /// Writes `chunk` again and again without blocking until the socket takes no more (or
    /// `limit` bytes went): the bytes written.
    static func writeUntilFull(_ fd: Int32, _ chunk: [UInt8], limit: Int) -> Int {
        let flags = fcntl(fd, F_GETFL)
        _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
        defer { _ = fcntl(fd, F_SETFL, flags) }
        var total = 0
        // (Ten times in a row with no room, a moment apart: the server may just be between reads.)
        var full = 0
        while total < limit, full < 10 {
            let n = chunk.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            if n > 0 {
                total += n
                full = 0
                // A partial write leaves half a line: finish it blocking below.
                if n < chunk.count {
                    _ = fcntl(fd, F_SETFL, flags)
                    _ = chunk[n...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
                    _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
                    total += chunk.count - n
                }
            } else {
                full += 1
                usleep(20_000)
            }
        }
        return total
    }

    /// A request that waits (here for the gate; in the daemon on the bus or a peer) and a
    /// client that goes on writing requests behind it: the server stops reading once a few
    /// MiB wait (the client's writes wait in the socket), instead of keeping every line it
    /// is sent; once the request is answered, every line is answered in order.
    @Test func aClientWritingBehindAWaitingRequestWaitsInItsWrites() async throws {
        let s = try Server()
        defer { s.finish() }
        let c = try s.client()
        try c.send("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"slow\"}\n")
        await s.gate.entered()
        let line = Array("{\"jsonrpc\":\"2.0\",\"method\":\"count\"}\n".utf8)  // notifications: no replies
        let chunk = Array([[UInt8]](repeating: line, count: 1_000).joined())
        let written = Self.writeUntilFull(c.fd, chunk, limit: 64 * 1_048_576)
        #expect(written < 16 * 1_048_576, "the server read \(written) bytes of requests while one waited")
        #expect(s.counted.value == 0, "nothing behind the waiting request ran")
        s.gate.open()
        let reply = try #require(try await QuickMethodTests.read(c))
        #expect(reply["id"] == 1 && reply["result"] == "slow")
        // Every line written, and one more, answered after it.
        try c.send("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"count\"}\n")
        let last = try #require(try await QuickMethodTests.read(c))
        #expect(last["id"] == 2 && last["result"]?.intValue == Int64(written / line.count + 1))
    }

    /// A descriptor passed with a request goes to that request: one passed with a request
    /// that failed before taking it (an unknown parameter, an unknown method) is closed, not
    /// handed to the next request that asks for one (which then sent the wrong file); a batch's
    /// requests take its line's in order; one sent with the first half of a line is that line's.
    @Test func aPassedDescriptorGoesToItsOwnRequest() async throws {
        let s = try Server()
        defer { s.finish() }
        let c = try s.client()
        var kept: [String: Int32] = [:]
        defer { for fd in kept.values { closeQuietly(fd) } }
        /// A socket whose passed end reads `name`.
        func descriptor(_ name: String) throws -> Int32 {
            let (passed, keep) = try DescriptorPassing.streamPair()
            try SocketIO.sendAll(keep, Array(name.utf8))
            kept[name] = keep
            return passed
        }
        func send(_ line: String, _ names: [String]) throws {
            let fds = try names.map(descriptor)
            defer { for fd in fds { closeQuietly(fd) } }
            try c.send(Array(line.utf8), passing: fds)
        }
        func req(_ id: Int, _ method: String, _ params: String = "{}") -> String {
            "{\"jsonrpc\":\"2.0\",\"id\":\(id),\"method\":\"\(method)\",\"params\":\(params)}"
        }
        try send(req(1, "take", "{\"bogus\":1}") + "\n", ["A"])
        try send(req(2, "take") + "\n", ["B"])
        try send(req(3, "nope") + "\n", ["C"])
        try send(req(4, "take") + "\n", ["D"])
        try send(req(5, "take") + "\n", [])
        try send("[" + req(6, "take") + "," + req(7, "take") + "]\n", ["E", "F"])
        let line = req(8, "take") + "\n"
        try send(String(line.prefix(10)), ["G"])
        try send(String(line.dropFirst(10)), [])
        var replies: [Int64: JSONValue] = [:]
        while replies.count < 8, let reply = try await QuickMethodTests.read(c) {
            for r in reply.arrayValue ?? [reply] { if let id = r["id"]?.intValue { replies[id] = r } }
        }
        #expect(replies[1]?["error"]?["code"]?.intValue == Int64(RPCErrorCode.invalidParams))
        #expect(replies[2]?["result"] == "B")
        #expect(replies[3]?["error"]?["code"]?.intValue == Int64(RPCErrorCode.methodNotFound))
        #expect(replies[4]?["result"] == "D")
        #expect(replies[5]?["error"]?["message"]?.stringValue?.contains("none came with the request") == true, "\(replies[5] ?? .null)")
        #expect(replies[6]?["result"] == "E" && replies[7]?["result"] == "F")
        #expect(replies[8]?["result"] == "G")
        for name in ["A", "C"] {
            #expect(Self.readersGone(kept[name]!), "\(name), passed with a request that did not take it, is closed")
        }
    }

    /// The time a client has to finish a line counts from that line's start: a client whose
    /// every write ends in the middle of a line (a pipelined burst through a full socket),
    /// each line finished well within the limit, is not closed when the limit has passed
    /// since the first.
    @Test func theLineTimeLimitCountsFromEachLinesStart() async throws {
        let s = try Server(requestTimeout: 2)
        defer { s.finish() }
        let c = try s.client()
        let line = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"count\"}\n"
        let half = line.index(line.startIndex, offsetBy: 20)
        // Five lines over 3 s, each finished 0.6 s after it began, every write mid-line; on a
        // thread of its own (a sleeping task waits for the cooperative pool, which a whole
        // suite running beside it may keep busy for seconds).
        let writes = [String(line[..<half])] + (1...5).map { String(line[half...]) + ($0 < 5 ? String(line[..<half]) : "") }
        try await withCheckedThrowingContinuation { (k: CheckedContinuation<Void, any Error>) in
            nonisolated(unsafe) let c = c  // used by this thread alone until it resumes
            Thread {
                k.resume(with: Result {
                    for (i, w) in writes.enumerated() {
                        if i > 0 { usleep(600_000) }
                        try c.send(w)
                    }
                })
            }.start()
        }
        for i in 1...5 {
            let reply = try #require(try await QuickMethodTests.read(c), "the connection was closed before reply \(i)")
            #expect(reply["result"]?.intValue == Int64(i), "\(reply)")
        }
    }
}
