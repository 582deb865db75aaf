import Foundation
import Synchronization
import SystemKit
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `Channel` over socket pairs: reads in every chunking, a full outbox (waiting for room and
/// the drop answer), the peer closing mid-write, close while a write waits, and descriptors
/// closed exactly once.
@Suite struct ChannelTests {
    /// What a channel's handlers saw; waiters wake at each handler call.
    final class Seen: Sendable {
        let input = Mutex<[[UInt8]]>([])
        /// The bytes in `input` (a waiter's condition that summed `input` at every wake took
        /// time quadratic in the reads: 300,000 reads of a byte ran past its wait).
        let byteCount = Mutex(0)
        let batches = Mutex<[Int]>([])
        let ends = Mutex<[Channel.End]>([])
        let signal = Signal()

        func start(_ c: Channel) {
            c.start(onInput: { batch in
                self.input.withLock { $0 += batch }
                self.byteCount.withLock { n in n += batch.reduce(0) { $0 + $1.count } }
                self.batches.withLock { $0.append(batch.count) }
                self.signal.fire()
            }, onEnd: { end in
                self.ends.withLock { $0.append(end) }
                self.signal.fire()
            })
        }

        func wait(until condition: () -> Bool) async -> Bool { await signal.wait(until: condition) }
    }

    typealias Signal = AsyncSignal

    static func pair(_ type: Int32) throws -> (Int32, Int32) {
        var fds: [Int32] = [-1, -1]
        try syscall("socketpair") { socketpair(AF_UNIX, type | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) }
        return (fds[0], fds[1])
    }

    static let stream = Int32(SOCK_STREAM.rawValue)
    static let packet = Int32(SOCK_SEQPACKET.rawValue)

    /// Reads one packet (or what a stream has) from a blocking `fd`, waiting up to `seconds`.
    static func receive(_ fd: Int32, seconds: Int32 = 5) throws -> [UInt8]? {
        guard try SocketIO.waitReadable(fd, timeoutMilliseconds: seconds * 1000) else { return nil }
        return try SocketIO.receive(fd)
    }

    @Test(arguments: [1, 2, 3, 7, 64, 1000, 4096, 65_535, 65_536, 65_537, 200_000])
    func streamReadsEveryChunking(chunk: Int) async throws {
        let (ours, theirs) = try Self.pair(Self.stream)
        defer { closeQuietly(theirs) }
        let c = Channel(fd: ours, mode: .stream, label: "test", outboxLimit: 1 << 20)
        defer { c.close() }
        let seen = Seen()
        seen.start(c)
        // At most 10,000 writes: the bytes are what is checked, and 300,000 one-byte writes
        // (a system call each, and a wake-up of the reader) took more than the wait's 5 s with
        // the whole suite running beside them on two cores (one CI run in several).
        let data = (0..<min(300_000, chunk * 10_000)).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 8) }
        let writer = Thread {
            for start in stride(from: 0, to: data.count, by: chunk) {
                try? SocketIO.sendAll(theirs, Array(data[start..<min(start + chunk, data.count)]))
            }
        }
        writer.start()
        #expect(await seen.wait { seen.byteCount.withLock { $0 } >= data.count })
        #expect(seen.input.withLock { $0.flatMap { $0 } } == data, "every byte, in order")
        #expect(seen.ends.withLock { $0 }.isEmpty)
        _ = shutdown(theirs, Int32(SHUT_WR))
        #expect(await seen.wait { !seen.ends.withLock { $0 }.isEmpty })
        #expect(seen.ends.withLock { $0 } == [.peerClosed], "the end of input, once")
    }

    @Test(arguments: [1, 5, 63, 64, 65, 1000])
    func packetReadsKeepPacketsWholeInBatches(count: Int) async throws {
        let (ours, theirs) = try Self.pair(Self.packet)
        defer { closeQuietly(theirs) }
        let c = Channel(fd: ours, mode: .packet, label: "test", outboxLimit: 16, readLimit: 600, batchLimit: 64)
        defer { c.close() }
        let seen = Seen()
        seen.start(c)
        let packets = (0..<count).map { i in [UInt8(i >> 8), UInt8(i & 0xff)] + [UInt8](repeating: UInt8(i % 251), count: i % 510) }
        let writer = Thread { for p in packets { try? SocketIO.sendAll(theirs, p) } }
        writer.start()
        #expect(await seen.wait { seen.input.withLock { $0.count } >= count })
        #expect(seen.input.withLock { $0 } == packets, "whole, in order")
        #expect(seen.batches.withLock { $0.allSatisfy { $0 >= 1 && $0 <= 64 } })
        // A packet longer than the read limit is known by its length only.
        try SocketIO.sendAll(theirs, [UInt8](repeating: 9, count: 700))
        #expect(await seen.wait { seen.input.withLock { $0.count } > count })
        #expect(seen.input.withLock { $0.last } == [UInt8](repeating: 0, count: 700))
    }

    /// A started packet channel that gathers bursts for `gather`, once the start's own read
    /// pass (of what was there before) is done; `theirs` is the peer's end.
    static func gatheringChannel(_ gather: Duration) throws -> (Channel, Seen, theirs: Int32) {
        let (ours, theirs) = try pair(packet)
        let c = Channel(fd: ours, mode: .packet, label: "test", outboxLimit: 1, batchLimit: 64, gather: gather)
        let seen = Seen()
        seen.start(c)
        c.queue.sync {}
        return (c, seen, theirs)
    }

    /// Gathering a burst waits without spinning: the packets are there all along, and the
    /// read source must not fire again until they are read (libdispatch re-arms a source after
    /// each handler; a source left active during the wait fired thousands of times, 2 ms of
    /// CPU per notification in the central). One wakeup, one batch with every packet; then more
    /// packets, paused and resumed, in order.
    @Test func gatheringWaitsWithoutSpinning() async throws {
        let (c, seen, theirs) = try Self.gatheringChannel(.milliseconds(200))
        defer { closeQuietly(theirs) }
        for i in 0..<10 { try SocketIO.sendAll(theirs, [UInt8(i)]) }
        #expect(await seen.wait { seen.input.withLock { $0.count } >= 10 })
        #expect(seen.batches.withLock { $0 } == [10], "the burst in one batch")
        #expect(c.counts.readWakeups == 1, "one wakeup for the whole wait, not \(c.counts.readWakeups)")

        c.pauseReading()
        for i in 10..<20 { try SocketIO.sendAll(theirs, [UInt8(i)]) }
        c.resumeReading()
        #expect(await seen.wait { seen.input.withLock { $0.count } >= 20 })
        try SocketIO.sendAll(theirs, [20])
        #expect(await seen.wait { seen.input.withLock { $0.count } >= 21 }, "read again after the pause")
        #expect(seen.input.withLock { $0 } == (0..<21).map { [UInt8($0)] }, "in order across the pause")
        #expect(c.counts.readWakeups <= 4, "\(c.counts.readWakeups) wakeups")
        c.close()
    }

    /// A close while a burst is gathered still closes the descriptor (once the wait ends and
    /// the source's cancellation runs).
    @Test func closeWhileGatheringReleasesTheDescriptor() async throws {
        let (c, _, theirs) = try Self.gatheringChannel(.milliseconds(500))
        defer { closeQuietly(theirs) }
        try SocketIO.sendAll(theirs, [1])
        let woke = Signal()
        let watcher = Task { while !Task.isCancelled, c.counts.readWakeups == 0 { await Task.yield() }; woke.fire() }
        defer { watcher.cancel() }
        #expect(await woke.wait { c.counts.readWakeups == 1 }, "the packet woke the source")
        let released = Signal(), closed = Mutex(false)
        c.whenDescriptorClosed {
            closed.withLock { $0 = true }
            released.fire()
        }
        c.close()
        #expect(await released.wait { closed.withLock { $0 } }, "the descriptor is closed after a close while gathering")
    }

    /// A peer that does not read: the outbox takes up to its bound, then answers `.full`
    /// (counted); `whenRoom` fires once the peer reads; every accepted packet arrives in order.
    @Test func fullOutboxAnswersFullAndWakesWhenThereIsRoom() async throws {
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
        #expect(!c.hasRoom, "what whenRoom waits for")
        let room = Signal()
        let gotRoom = Mutex<Bool?>(nil)
        c.whenRoom { ok in
            gotRoom.withLock { $0 = ok }
            room.fire()
        }
        let want = accepted.count
        let got = try await onThread { () -> [[UInt8]] in
            var got: [[UInt8]] = []
            while got.count < want, let p = try Self.receive(theirs) { got.append(p) }
            return got
        }
        #expect(got == accepted, "every accepted packet, in order")
        #expect(await room.wait { gotRoom.withLock { $0 } != nil })
        #expect(gotRoom.withLock { $0 } == true)
        #expect(c.hasRoom)
        #expect(c.counts.written == UInt64(accepted.count))
    }

    /// Packets queued together go out in one call (`sendmmsg`) and arrive whole and in order:
    /// batches written at once, then (the peer not reading) one the socket takes part of,
    /// then batches that wait in the outbox, with a packet passing a descriptor among them
    /// (it goes alone, between runs).
    @Test func packetBatchesArriveWholeAndInOrder() async throws {
        let (ours, theirs) = try Self.pair(Self.packet)
        defer { closeQuietly(theirs) }
        let c = Channel(fd: ours, mode: .packet, label: "test", outboxLimit: 100_000)
        defer { c.close() }
        Seen().start(c)
        var sent: [[UInt8]] = []
        var i = 0
        func packet() -> [UInt8] {
            defer { i += 1 }
            return [UInt8(i >> 8), UInt8(i & 0xff)] + [UInt8](repeating: UInt8(i % 251), count: 1 + i * 37 % 3000)
        }
        // Until the socket no longer takes a whole batch: then more batches wait behind.
        var waiting = 0
        while waiting < 5 {
            let batch = (0..<(1 + i % 70)).map { _ in packet() }
            #expect(c.send(contentsOf: batch) == .accepted)
            sent += batch
            if !c.hasRoom || c.counts.written < UInt64(sent.count) { waiting += 1 }
            if waiting == 2 {
                let d = dup(theirs)
                let p = packet()
                #expect(c.send(p, passing: [d]) == .accepted)
                sent.append(p)
            }
            if i > 100_000 { break }
        }
        #expect(c.counts.written < UInt64(sent.count), "the socket filled and packets wait")
        let want = sent.count
        let got = try await onThread { () -> [[UInt8]] in
            var got: [[UInt8]] = []
            while got.count < want, let p = try Self.receive(theirs) { got.append(p) }
            return got
        }
        #expect(got.count == sent.count)
        #expect(got == sent, "every packet whole, in order")
        let flushed = Signal()
        c.whenFlushed { flushed.fire() }
        #expect(await flushed.wait { c.counts.written == UInt64(sent.count) })
    }

    /// A burst handed on as it came (`sendLeading`) goes in one call while the socket has
    /// room, even through an outbox that lets one packet wait (a message stream's: before, a
    /// burst was refused whole there and went a packet a call); once the socket is full one
    /// packet waits and the rest stay the caller's; what was taken arrives whole and in order,
    /// and nothing else.
    @Test func leadingPacketsGoInOneCallAndTheRestStayTheCallers() async throws {
        let (ours, theirs) = try Self.pair(Self.packet)
        defer { closeQuietly(theirs) }
        let c = Channel(fd: ours, mode: .packet, label: "test", outboxLimit: 1)
        defer { c.close() }
        Seen().start(c)
        func packets(_ range: Range<Int>) -> [[UInt8]] {
            range.map { i in [UInt8(i >> 8 & 0xff), UInt8(i & 0xff)] + [UInt8](repeating: UInt8(i % 251), count: 1000) }
        }
        var taken = packets(0..<40)
        #expect(c.sendLeading(taken[...]) == 40)
        #expect(c.counts.writeCalls == 1, "forty packets, one call")
        #expect(c.counts.written == 40)
        // The peer does not read: bursts until the socket takes no more.
        var next = 40
        var last = 40
        while last == 40 && next < 60_000 {
            let burst = packets(next..<next + 40)
            last = c.sendLeading(burst[...])
            taken += burst.prefix(last)
            next += 40
        }
        #expect(last < 40, "the socket filled")
        #expect(c.counts.written == UInt64(taken.count - 1), "one packet waits in the outbox")
        #expect(c.sendLeading(packets(next..<next + 5)[...]) == 0, "a full outbox takes none")
        let want = taken.count
        let got = try await onThread { () -> [[UInt8]] in
            var got: [[UInt8]] = []
            while got.count < want, let p = try Self.receive(theirs) { got.append(p) }
            return got
        }
        #expect(got == taken, "what was taken, whole and in order")
        let flushed = Signal()
        c.whenFlushed { flushed.fire() }
        #expect(await flushed.wait { c.counts.written == UInt64(want) })
        #expect(try !SocketIO.waitReadable(theirs, timeoutMilliseconds: 0), "and nothing else")
        c.close()
        #expect(c.sendLeading(packets(0..<3)[...]) == 0, "a closed channel takes none")
    }

    /// The one conversion of `Duration` for Dispatch, poll and nanosleep: rounding down to
    /// the unit, negative as zero, huge values clamped instead of trapping.
    /// What the peer has not taken yet counts as unsent (the kernel's queue included), and
    /// nothing once it read everything: a stall look tells a slow link from a stopped peer so.
    @Test func unsentBytesAreWhatThePeerHasNotTaken() throws {
        let (ours, theirs) = try Self.pair(Self.stream)
        defer { closeQuietly(theirs) }
        let c = Channel(fd: ours, mode: .stream, label: "test", outboxLimit: 1 << 20)
        defer { c.close() }
        #expect(c.unsentBytes == 0)
        #expect(c.send([UInt8](repeating: 7, count: 1_000)) != .full)
        #expect(c.unsentBytes >= 1_000)
        var got = 0
        while got < 1_000, let chunk = try Self.receive(theirs) { got += chunk.count }
        #expect(got == 1_000 && c.unsentBytes == 0)
    }

    @Test func durationConversions() {
        #expect(Duration.milliseconds(1500).clampedNanoseconds == 1_500_000_000)
        #expect(Duration.nanoseconds(1_999_999).clampedMilliseconds == 1)
        #expect(Duration.seconds(-3).clampedNanoseconds == 0)
        #expect(Duration.seconds(Int64.max).clampedNanoseconds == Int.max)
        #expect(Duration.seconds(Int64.max).clampedMilliseconds == Int32.max)
        let ts = Duration.milliseconds(2_250).timespecValue
        #expect(ts.tv_sec == 2 && ts.tv_nsec == 250_000_000)
        #expect(Duration.microseconds(7).dispatchInterval == .nanoseconds(7_000))
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
        // The writer is a task: on a loaded machine (other suites hold the cooperative pool's
        // threads) it may not run for seconds, so the reader's wait is a hang guard, not a
        // pace. A reader that gives up shuts its end, so the writes fail instead of waiting
        // forever for room.
        async let read = onThread { () -> Int in
            var n = 0
            while n < total, let b = try? Self.receive(theirs, seconds: 60), !b.isEmpty { n += b.count }
            if n < total { _ = shutdown(theirs, Int32(SHUT_RDWR)) }
            return n
        }
        for _ in 0..<(total / chunk.count) {
            #expect(await c.write(chunk))
        }
        #expect(await read == total)
        #expect(c.counts.refused == 0, "waiting is not refusing")
    }

    /// The peer closing while writes wait: reported once, as `.peerClosed`; then closed.
    @Test(arguments: [Channel.Mode.stream, .packet])
    func peerClosingMidWriteIsReportedOnce(mode: Channel.Mode) async throws {
        let (ours, theirs) = try Self.pair(mode == .stream ? Self.stream : Self.packet)
        let c = Channel(fd: ours, mode: mode, label: "test", outboxLimit: 1 << 30)
        defer { c.close() }
        let seen = Seen()
        seen.start(c)
        // Fill the socket, so that more waits in the outbox.
        for _ in 0..<2000 { c.send([UInt8](repeating: 1, count: 1000)) }
        closeQuietly(theirs)
        let flushed = Signal()
        let done = Mutex(false)
        c.whenFlushed {
            done.withLock { $0 = true }
            flushed.fire()
        }
        #expect(await flushed.wait { done.withLock { $0 } }, "closed after the failed write")
        #expect(await seen.wait { !seen.ends.withLock { $0 }.isEmpty })
        #expect(c.isClosed)
        #expect(c.send([2]) == .closed)
        #expect(seen.ends.withLock { $0 } == [.peerClosed], "once")
    }

    /// A write that fails inside `send` (a packet larger than the socket's send buffer:
    /// `EMSGSIZE`) is closed and reported on the channel's queue, after `send` returned: a
    /// caller that sends under a lock of its own which its `onEnd` (or a room waiter, which
    /// the close wakes) takes again, as a message stream writing to its client does, would
    /// otherwise lock it twice (a crash: "Recursive call to lock Mutex").
    @Test func aWriteFailingInsideSendIsReportedOnTheQueue() async throws {
        let (ours, theirs) = try Self.pair(Self.packet)
        defer { closeQuietly(theirs) }
        var size: Int32 = 4096
        _ = setsockopt(ours, SOL_SOCKET, SO_SNDBUF, &size, 4)
        let c = Channel(fd: ours, mode: .packet, label: "test", outboxLimit: 1)
        defer { c.close() }
        let key = DispatchSpecificKey<Bool>()
        c.queue.setSpecific(key: key, value: true)
        // The caller's own state, locked while it sends and taken again by its `onEnd`.
        let callerState = Mutex(0)
        let reported = Mutex<[(end: Channel.End, onQueue: Bool)]>([])
        let signal = Signal()
        c.start(onInput: { _ in }, onEnd: { end in
            let onQueue = DispatchQueue.getSpecific(key: key) == true
            callerState.withLock { $0 += 1 }
            reported.withLock { $0.append((end, onQueue)) }
            signal.fire()
        })
        callerState.withLock { _ in _ = c.send([UInt8](repeating: 7, count: 100_000)) }
        #expect(await signal.wait { !reported.withLock { $0 }.isEmpty })
        #expect(c.isClosed)
        #expect(try Self.receive(theirs) == [], "the peer sees the end")
        let r = reported.withLock { $0 }
        #expect(r.count == 1 && r[0].onQueue)
        if case .failed(let e) = r.first?.end { #expect(e.code == EMSGSIZE) } else { Issue.record("not reported as a failure: \(r)") }
    }

    /// The kernel without memory for a packet (`ENOBUFS`, here made by the test: a real one
    /// needs a fragmented machine) is not the end: the packet waits and is written once
    /// memory is back (tried again after 5, 10, 20 ms), the packets sent meanwhile after it,
    /// in order; nothing is reported and the channel stays open.
    @Test(arguments: [ENOBUFS, ENOMEM])
    func aWriteWithoutKernelMemoryWaitsAndLosesNothing(errno: Int32) async throws {
        let (ours, theirs) = try Self.pair(Self.packet)
        defer { closeQuietly(theirs) }
        let faults = Mutex(3)
        let c = Channel(fd: ours, mode: .packet, label: "test", outboxLimit: 8, sendFault: {
            faults.withLock { n in
                guard n > 0 else { return nil }
                n -= 1
                return errno
            }
        })
        defer { c.close() }
        let seen = Seen()
        seen.start(c)
        #expect(c.send([1]) == .accepted)
        #expect(c.send([2, 2]) == .accepted)
        #expect(c.send([3, 3, 3]) == .accepted)
        #expect(try Self.receive(theirs) == [1])
        #expect(try Self.receive(theirs) == [2, 2])
        #expect(try Self.receive(theirs) == [3, 3, 3])
        #expect(c.counts.memoryWaits == 3, "one try per wait, not a spin")
        #expect(c.counts.written == 3)
        #expect(!c.isClosed && seen.ends.withLock { $0 }.isEmpty)
        #expect(c.send([4]) == .accepted)
        #expect(try Self.receive(theirs) == [4])
    }

    /// Closing while a write waits for room ends the wait with false; so does a later wait.
    @Test func closeWhileAWriteWaits() async throws {
        let (ours, theirs) = try Self.pair(Self.packet)
        defer { closeQuietly(theirs) }
        let c = Channel(fd: ours, mode: .packet, label: "test", outboxLimit: 1)
        Seen().start(c)
        while c.send([UInt8](repeating: 3, count: 1000)) == .accepted {}
        let waiting = Mutex<Bool?>(nil)
        c.whenRoom { ok in waiting.withLock { $0 = ok } }
        #expect(waiting.withLock { $0 } == nil, "full: it waits")
        let writer = Task { await c.write([4]) }
        #expect(c.close())
        #expect(waiting.withLock { $0 } == false, "woken by close, at once")
        #expect(await writer.value == false)
        #expect(await c.write([5]) == false)
        #expect(!c.close(), "once")
    }

    /// The inode numbers of the sockets open in this process (from /proc/self/fd).
    static func openSocketInodes() -> Set<UInt64> {
        guard let d = opendir("/proc/self/fd") else { return [] }
        defer { closedir(d) }
        var out: Set<UInt64> = []
        while let e = readdir(d) {
            let name = withUnsafeBytes(of: e.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard let fd = Int32(name) else { continue }
            var st = stat()
            if fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFSOCK { out.insert(UInt64(st.st_ino)) }
        }
        return out
    }

    static func inode(_ fd: Int32) -> UInt64 {
        var st = stat()
        _ = fstat(fd, &st)
        return UInt64(st.st_ino)
    }

    /// 10,000 channel lifetimes (a round trip each, then close, half of them with a write
    /// still waiting): each descriptor is closed once and only once. Not once: its socket is
    /// still among the process's open descriptors. Twice: the second close hits the number the
    /// next socket pair reuses, and that round trip fails. (Other suites open descriptors
    /// meanwhile, so the check is on this test's own sockets, by inode.)
    @Test func descriptorsAreClosedExactlyOnce() async throws {
        var ours: Set<UInt64> = []
        for i in 0..<10_000 {
            let (mine, theirs) = try Self.pair(Self.packet)
            ours.insert(Self.inode(mine))
            let c = Channel(fd: mine, mode: .packet, label: "life", outboxLimit: 4)
            let seen = Seen()
            seen.start(c)
            try SocketIO.sendAll(theirs, [1, 2, 3])
            #expect(await seen.wait { seen.input.withLock { $0.count } == 1 }, "lifetime \(i)")
            #expect(c.send([4, 5]) == .accepted)
            #expect(try Self.receive(theirs) == [4, 5], "lifetime \(i)")
            // Half with a write still waiting: the peer reads nothing more, the socket and
            // then the outbox fill, and a waiter for room is told "closed" by the close.
            let roomAnswer = Mutex<Bool?>(nil)
            if i % 2 == 1 {
                let big = [UInt8](repeating: 7, count: 16_384)
                var sends = 0
                while c.send(big) == .accepted { sends += 1 }
                #expect(sends >= 4, "lifetime \(i): the outbox took \(sends)")
                c.whenRoom { ok in roomAnswer.withLock { $0 = ok } }
                #expect(roomAnswer.withLock { $0 } == nil, "lifetime \(i): no room while full")
            }
            let closed = Signal()
            let done = Mutex(false)
            c.whenDescriptorClosed {
                done.withLock { $0 = true }
                closed.fire()
            }
            c.close()
            #expect(await closed.wait { done.withLock { $0 } }, "lifetime \(i)")
            if i % 2 == 1 { #expect(roomAnswer.withLock { $0 } == false, "lifetime \(i): the waiter was told the channel closed") }
            closeQuietly(theirs)
        }
        let left = Self.openSocketInodes().intersection(ours)
        #expect(left.isEmpty, "\(left.count) of the channels' descriptors are still open")
    }
}
