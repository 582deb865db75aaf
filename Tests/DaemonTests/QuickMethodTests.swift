import Control
import Daemon
import Foundation
import Glibc
import Logging
import Synchronization
import TestSupport
import Testing

/// Quick methods (answered on the client's queue) beside async ones: the replies keep the
/// order of the requests, and a request runs only after the one before it is answered.
@Suite(.ownThreads, .memoryHeavy) struct QuickMethodTests {
    /// Opened by the test; the slow method waits for it (and says when it does).
    final class Gate: Sendable {
        private struct State {
            var open = false
            var entered = false
            var waiters: [CheckedContinuation<Void, Never>] = []
            var enteredWaiters: [CheckedContinuation<Void, Never>] = []
        }
        private let state = Mutex(State())

        func wait() async {
            for c in state.withLock({ s -> [CheckedContinuation<Void, Never>] in s.entered = true; defer { s.enteredWaiters = [] }; return s.enteredWaiters }) { c.resume() }
            await withCheckedContinuation { c in
                if state.withLock({ s -> Bool in if !s.open { s.waiters.append(c) }; return s.open }) { c.resume() }
            }
        }

        func entered() async {
            await withCheckedContinuation { c in
                if state.withLock({ s -> Bool in if !s.entered { s.enteredWaiters.append(c) }; return s.entered }) { c.resume() }
            }
        }

        func open() {
            for c in state.withLock({ s -> [CheckedContinuation<Void, Never>] in s.open = true; defer { s.waiters = [] }; return s.waiters }) { c.resume() }
        }
    }

    /// Reads one reply on a thread of its own (not blocking the cooperative pool, which the
    /// slow method needs).
    static func read(_ client: RawClient) async throws -> JSONValue? {
        try await withCheckedThrowingContinuation { c in
            nonisolated(unsafe) let client = client  // used by this thread alone until it resumes
            Thread { c.resume(with: Result { try client.readJSON() }) }.start()
        }
    }

    @Test func quickRepliesFollowAStillRunningAsyncOne() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("pl-quick-\(getpid())-\(UInt32.random(in: 0...UInt32.max))").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let server = ControlServer(options: ControlServerOptions(path: dir + "/control.sock"), logger: Logger(label: "test", level: .error))
        let gate = Gate()
        let order = Mutex<[String]>([])
        server.register("slow") { _, _ throws(RPCError) in
            await gate.wait()
            order.withLock { $0.append("slow") }
            return "slow"
        }
        server.register("quick", quick: { params, _ throws(RPCError) in
            let tag = try params.string("tag")
            order.withLock { $0.append(tag) }
            return .reply(.string(tag))
        })
        server.register("quick-later", quick: { _, _ throws(RPCError) in
            order.withLock { $0.append("later-started") }
            return .later { () async throws(RPCError) -> JSONValue in "later" }
        })
        server.register("quick-fails", quick: { _, _ throws(RPCError) in throw .invalidParams("x", "no") })
        try server.start()
        defer { server.stop() }
        let client = try RawClient(dir + "/control.sock")
        func req(_ id: Int, _ method: String, _ tag: String? = nil) -> String {
            let params = tag.map { ",\"params\":{\"tag\":\"\($0)\"}" } ?? ""
            return "{\"jsonrpc\":\"2.0\",\"id\":\(id),\"method\":\"\(method)\"\(params)}"
        }
        // One write: every line is read before the slow method is let go.
        try client.send([
            req(1, "quick", "a"), req(2, "slow"), req(3, "quick", "b"), req(4, "quick-later"), req(5, "quick-fails"),
            "[" + [req(6, "quick", "c"), req(7, "slow"), req(8, "quick", "d")].joined(separator: ",") + "]",
            req(9, "quick", "e"),
        ].joined(separator: "\n") + "\n")
        await gate.entered()
        #expect(order.withLock { $0 } == ["a"], "nothing after the slow request runs before it is answered")
        gate.open()
        var ids: [JSONValue] = []
        for _ in 0..<5 {
            let r = try #require(try await Self.read(client))
            ids.append(r["id"] ?? .null)
            if r["id"] == 5 { #expect(r["error"]?["code"] == .int(Int64(RPCErrorCode.invalidParams))) }
        }
        #expect(ids == [1, 2, 3, 4, 5].map { .int($0) }, "replies in request order: \(ids)")
        let batch = try #require(try await Self.read(client)?.arrayValue)
        #expect(batch.map { $0["id"] ?? .null } == [6, 7, 8].map { .int($0) }, "the batch's replies, in order: \(batch)")
        #expect(batch.map { $0["result"] ?? .null } == ["c", "slow", "d"])
        let last = try #require(try await Self.read(client))
        #expect(last["id"] == 9)
        #expect(order.withLock { $0 } == ["a", "slow", "b", "later-started", "c", "slow", "d", "e"])
    }
}
