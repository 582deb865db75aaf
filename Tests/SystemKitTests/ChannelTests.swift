// Linux Dispatch has no Sendable annotations; its semaphores are thread-safe.
@preconcurrency import Dispatch
import Foundation
import Synchronization
import SystemKit
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `Channel` over socket pairs: reads in every chunking, a full outbox (waiting for room and
/// the drop answer), the peer closing mid-write, close while a write waits, and descriptors
/// closed exactly once.
@Suite struct ChannelTests {
    /// What a channel's handlers saw, and a semaphore signalled on each call.
    final class Seen: Sendable {
        let input = Mutex<[[UInt8]]>([])
        let batches = Mutex<[Int]>([])
        let ends = Mutex<[Channel.End]>([])
        let signal = DispatchSemaphore(value: 0)

        func start(_ c: Channel) {
            c.start(onInput: { batch in
                self.input.withLock { $0 += batch }
                self.batches.withLock { $0.append(batch.count) }
                self.signal.signal()
            }, onEnd: { end in
                self.ends.withLock { $0.append(end) }
                self.signal.signal()
            })
        }

        /// Waits (up to 5 s in all) until `condition` holds; each wakeup is a handler call.
        func wait(until condition: () -> Bool) -> Bool {
            let deadline = DispatchTime.now() + 5
            while !condition() {
                if signal.wait(timeout: deadline) == .timedOut { return condition() }
            }
            return true
        }
    }

    static func pair(_ type: Int32) throws -> (Int32, Int32) {
        var fds: [Int32] = [-1, -1]
        try syscall("socketpair") { socketpair(AF_UNIX, type | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) }
        return (fds[0], fds[1])
    }

    static let stream = Int32(SOCK_STREAM.rawValue)
    static let packet = Int32(SOCK_SEQPACKET.rawValue)

    /// Reads one packet (or what a stream has) from a blocking `fd`, up to 5 s.
    static func receive(_ fd: Int32) throws -> [UInt8]? {
        guard try SocketIO.waitReadable(fd, timeoutMilliseconds: 5000) else { return nil }
        return try SocketIO.receive(fd)
    }

    @Test(arguments: [1, 2, 3, 7, 64, 1000, 4096, 65_535, 65_536, 65_537, 200_000])
    func streamReadsEveryChunking(chunk: Int) throws {
        let (ours, theirs) = try Self.pair(Self.stream)
        defer { closeQuietly(theirs) }
        let c = Channel(fd: ours, mode: .stream, label: "test", outboxLimit: 1 << 20)
        defer { c.close() }
        let seen = Seen()
        seen.start(c)
        let data = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 8) }
        let writer = Thread {
            for start in stride(from: 0, to: data.count, by: chunk) {
                try? SocketIO.sendAll(theirs, Array(data[start..<min(start + chunk, data.count)]))
            }
        }
        writer.start()
        #expect(seen.wait { seen.input.withLock { $0.reduce(0) { $0 + $1.count } } >= data.count })
        #expect(seen.input.withLock { $0.flatMap { $0 } } == data, "every byte, in order")
        #expect(seen.ends.withLock { $0 }.isEmpty)
        _ = shutdown(theirs, Int32(SHUT_WR))
        #expect(seen.wait { !seen.ends.withLock { $0 }.isEmpty })
        #expect(seen.ends.withLock { $0 } == [.peerClosed], "the end of input, once")
    }

    @Test(arguments: [1, 5, 63, 64, 65, 1000])
    func packetReadsKeepPacketsWholeInBatches(count: Int) throws {
        let (ours, theirs) = try Self.pair(Self.packet)
        defer { closeQuietly(theirs) }
        let c = Channel(fd: ours, mode: .packet, label: "test", outboxLimit: 16, readLimit: 600, batchLimit: 64)
        defer { c.close() }
        let seen = Seen()
        seen.start(c)
        let packets = (0..<count).map { i in [UInt8(i >> 8), UInt8(i & 0xff)] + [UInt8](repeating: UInt8(i % 251), count: i % 510) }
        let writer = Thread { for p in packets { try? SocketIO.sendAll(theirs, p) } }
        writer.start()
        #expect(seen.wait { seen.input.withLock { $0.count } >= count })
        #expect(seen.input.withLock { $0 } == packets, "whole, in order")
        #expect(seen.batches.withLock { $0.allSatisfy { $0 >= 1 && $0 <= 64 } })
        // A packet longer than the read limit is known by its length only.
        try SocketIO.sendAll(theirs, [UInt8](repeating: 9, count: 700))
        #expect(seen.wait { seen.input.withLock { $0.count } > count })
        #expect(seen.input.withLock { $0.last } == [UInt8](repeating: 0, count: 700))
    }

    /// A peer that does not read: the outbox takes up to its bound, then answers `.full`
    /// (counted); `whenRoom` fires once the peer reads; every accepted packet arrives in order.
    @Test func fullOutboxAnswersFullAndWakesWhenThereIsRoom() throws {
        let (ours, theirs) = try Self.pair(Self.packet)
        defer { closeQuietly(theirs) }
        let c = Channel(fd: ours, mode: .packet, label: "test", outboxLimit: 10)
        defer { c.close() }
        Seen().start(c)
        var accepted: [[UInt8]] = []
        var i = 0
        while true {
            let p = [UInt8(i >> 8), UInt8(i & 0xff)] + [UInt8](repeating: 0xAB, count: 1000)
            let answer = c.send(p)
            if answer == .full { break }
            #expect(answer == .accepted)
            accepted.append(p)
            i += 1
            if i > 10_000 { break }
        }
        #expect(i < 10_000, "the socket and the outbox fill")
        #expect(c.counts.refused == 1)
        #expect(c.send([1]) == .full)
        #expect(c.counts.refused == 2)
        let room = DispatchSemaphore(value: 0)
        let gotRoom = Mutex<Bool?>(nil)
        c.whenRoom { ok in
            gotRoom.withLock { $0 = ok }
            room.signal()
        }
        var got: [[UInt8]] = []
        while got.count < accepted.count, let p = try Self.receive(theirs) { got.append(p) }
        #expect(got == accepted, "every accepted packet, in order")
        #expect(room.wait(timeout: .now() + 5) == .success)
        #expect(gotRoom.withLock { $0 } == true)
        #expect(c.counts.written == UInt64(accepted.count))
    }

    /// The waiting form: `write` waits while the outbox is full, and completes, in order,
    /// as the peer reads (stream mode: the bound is in bytes).
    @Test func writeWaitsForRoom() async throws {
        let (ours, theirs) = try Self.pair(Self.stream)
        defer { closeQuietly(theirs) }
        let c = Channel(fd: ours, mode: .stream, label: "test", outboxLimit: 4096)
        defer { c.close() }
        Seen().start(c)
        let chunk = [UInt8](repeating: 0x5A, count: 1024)
        let total = 4 * 1024 * 1024  // far more than the socket and the outbox hold
        let reader = Task.detached { () -> Int in
            var n = 0
            while n < total, let b = try? Self.receive(theirs), !b.isEmpty { n += b.count }
            return n
        }
        for _ in 0..<(total / chunk.count) {
            #expect(await c.write(chunk))
        }
        #expect(await reader.value == total)
        #expect(c.counts.refused == 0, "waiting is not refusing")
    }

    /// The peer closing while writes wait: reported once, as `.peerClosed`; then closed.
    @Test(arguments: [Channel.Mode.stream, .packet])
    func peerClosingMidWriteIsReportedOnce(mode: Channel.Mode) throws {
        let (ours, theirs) = try Self.pair(mode == .stream ? Self.stream : Self.packet)
        let c = Channel(fd: ours, mode: mode, label: "test", outboxLimit: 1 << 30)
        defer { c.close() }
        let seen = Seen()
        seen.start(c)
        // Fill the socket, so that more waits in the outbox.
        for _ in 0..<2000 { c.send([UInt8](repeating: 1, count: 1000)) }
        closeQuietly(theirs)
        let flushed = DispatchSemaphore(value: 0)
        c.whenFlushed { flushed.signal() }
        #expect(flushed.wait(timeout: .now() + 5) == .success, "closed after the failed write")
        #expect(seen.wait { !seen.ends.withLock { $0 }.isEmpty })
        #expect(c.isClosed)
        #expect(c.send([2]) == .closed)
        #expect(seen.ends.withLock { $0 } == [.peerClosed], "once")
    }

    /// Closing while a write waits for room ends the wait with false; so does a later wait.
    @Test func closeWhileAWriteWaits() async throws {
        let (ours, theirs) = try Self.pair(Self.packet)
        defer { closeQuietly(theirs) }
        let c = Channel(fd: ours, mode: .packet, label: "test", outboxLimit: 1)
        Seen().start(c)
        while c.send([UInt8](repeating: 3, count: 1000)) == .accepted {}
        let waiting = Mutex<Bool?>(nil)
        let woke = DispatchSemaphore(value: 0)
        c.whenRoom { ok in
            waiting.withLock { $0 = ok }
            woke.signal()
        }
        #expect(waiting.withLock { $0 } == nil, "full: it waits")
        let writer = Task { await c.write([4]) }
        #expect(c.close())
        #expect(woke.wait(timeout: .now() + 5) == .success)
        #expect(waiting.withLock { $0 } == false)
        #expect(await writer.value == false)
        #expect(await c.write([5]) == false)
        #expect(!c.close(), "once")
    }

    /// 10,000 channel lifetimes (a round trip each, then close, half of them with a write
    /// still waiting): each descriptor is closed once and only once. A second close would hit
    /// the number the next socket pair reuses, and that round trip would fail.
    @Test func descriptorsAreClosedExactlyOnce() async throws {
        let before = openFileDescriptorCount()
        for i in 0..<10_000 {
            let (ours, theirs) = try Self.pair(Self.packet)
            let c = Channel(fd: ours, mode: .packet, label: "life", outboxLimit: 4)
            let seen = Seen()
            seen.start(c)
            try SocketIO.sendAll(theirs, [1, 2, 3])
            #expect(seen.wait { seen.input.withLock { $0.count } == 1 }, "lifetime \(i)")
            #expect(c.send([4, 5]) == .accepted)
            #expect(try Self.receive(theirs) == [4, 5], "lifetime \(i)")
            if i % 2 == 1 { c.whenRoom { _ in } }
            let closed = DispatchSemaphore(value: 0)
            c.whenDescriptorClosed { closed.signal() }
            c.close()
            #expect(closed.wait(timeout: .now() + 5) == .success)
            closeQuietly(theirs)
        }
        // Other suites run meanwhile and open descriptors of their own: give them time to let go.
        let deadline = ContinuousClock.now + .seconds(5)
        while openFileDescriptorCount() > before, ContinuousClock.now < deadline { await Task.yield() }
        #expect(openFileDescriptorCount() <= before, "no descriptor left open: \(openFileDescriptorCount()) > \(before)")
    }
}
