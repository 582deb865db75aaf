import Control
import Daemon
import Foundation
import Glibc
import Logging
import Synchronization
import Testing

/// How the control server reads a client that writes more, or more slowly, than its
/// requests are answered: bounded memory, and a time limit that counts per line.
@Suite struct ControlInputTests {
    typealias Gate = QuickMethodTests.Gate

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
