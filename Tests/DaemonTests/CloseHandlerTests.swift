import Control
import Daemon
import Foundation
import Glibc
import Logging
import Synchronization
import TestSupport
import Testing

/// What a client's connection keeps to end the things it made when it closes: one handler
/// per thing still open, however many it opened and ended before (a handler per stream or
/// browse ever opened stayed until the client went), and only those run at the close.
@Suite(.ownThreads, .memoryHeavy) struct CloseHandlerTests {
    /// Things a client opens and ends by number, and which the connection's close ended.
    final class Things: Sendable {
        let open = Mutex<Set<Int64>>([])
        let endedByClose = Mutex<[Int64]>([])
    }

    @Test func aClientKeepsOneCloseHandlerPerThingStillOpen() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("pl-close-\(getpid())-\(UInt32.random(in: 0...UInt32.max))").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let server = ControlServer(options: ControlServerOptions(path: dir + "/control.sock"), logger: Logger(label: "test", level: .error))
        let things = Things()
        server.register("open") { p, ctx throws(RPCError) in
            let n = try p.int("n")
            things.open.withLock { _ = $0.insert(n) }
            ctx.onConnectionClose(while: { things.open.withLock { $0.contains(n) } }) {
                things.endedByClose.withLock { $0.append(n) }
            }
            return .int(Int64(ctx.closeHandlerCount))
        }
        server.register("end") { p, _ throws(RPCError) in
            let n = try p.int("n")
            return .bool(things.open.withLock { $0.remove(n) != nil })
        }
        try server.start()
        defer { server.stop() }

        let client = try RawClient(dir + "/control.sock")
        for n in 0..<200 {
            _ = try client.call("open", ["n": .int(Int64(n))])
            #expect(try client.call("end", ["n": .int(Int64(n))]) == true)
        }
        var counts: [Int64] = []
        for n in 1000..<1003 { counts.append(try client.call("open", ["n": .int(Int64(n))]).intValue ?? -1) }
        // The 200 ended ones dropped as the next was added: the three open are all it keeps.
        #expect(counts == [1, 2, 3])

        _ = try client.call("end", ["n": 1001])
        client.close()
        _ = await eventually(timeout: .seconds(10)) { things.endedByClose.withLock { $0.count } >= 2 }
        // Only what was still open is ended by the close: not 1001, nor any of the 200 (the
        // handlers run in order, one after another: 1002's is the last).
        #expect(things.endedByClose.withLock { $0.sorted() } == [1000, 1002])
    }
}
