import Dispatch
import Synchronization
import SystemKit
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `Channel`'s inline reads (`readsInline`): on the reactor's thread inside the channel's
/// queue while the predicate holds (asked again once the queue is free), at most
/// `inlineBudget` bytes there and the rest on the queue, then inline again; pausing from an
/// inline batch or from the queue's rest holds, and resuming reads the rest.
@Suite struct ChannelInlineTests {
    /// Batches seen: their bytes and whether each ran on the reactor's thread.
    final class Seen: Sendable {
        let batches = Mutex<[(bytes: [UInt8], inline: Bool)]>([])
        let signal = AsyncSignal()
        let allowed = Atomic<Bool>(true)
        /// Fired each time the predicate is asked (it holds the watch's lock then).
        let asked = DispatchSemaphore(value: 0)

        var bytes: [UInt8] { batches.withLock { $0.flatMap(\.bytes) } }
        var count: Int { batches.withLock { $0.reduce(0) { $0 + $1.bytes.count } } }

        /// A started channel over `fd`; `onBatch` runs first for each batch (inside the queue).
        func channel(_ fd: Int32, _ mode: Channel.Mode, batchLimit: Int = 64,
                     onBatch: @escaping @Sendable (Channel) -> Void = { _ in }) -> Channel {
            let c = Channel(fd: fd, mode: mode, label: "inline-test", outboxLimit: 1, batchLimit: batchLimit,
                            readsInline: { [self] in
                                asked.signal()
                                return allowed.load(ordering: .relaxed)
                            })
            c.start(onInput: { [self, weak c] batch in
                guard let c else { return }
                // Inline or not, a batch is handled inside the channel's queue.
                dispatchPrecondition(condition: .onQueue(c.queue))
                onBatch(c)
                batches.withLock { $0.append((batch.flatMap { $0 }, DescriptorWatch.onReactorThread)) }
                signal.fire()
            }, onEnd: { _ in })
            // The start's own first pass (on the queue) is over.
            c.queue.sync {}
            return c
        }
    }

    @Test func readsRunOnTheReactorWhileAllowed() async throws {
        let (ours, theirs) = try ChannelTests.pair(ChannelTests.packet)
        defer { closeQuietly(theirs) }
        let seen = Seen()
        let c = seen.channel(ours, .packet)
        defer { c.close() }
        try SocketIO.sendAll(theirs, [1, 2, 3])
        #expect(await seen.signal.wait { seen.count == 3 })
        seen.allowed.store(false, ordering: .relaxed)
        try SocketIO.sendAll(theirs, [4, 5])
        #expect(await seen.signal.wait { seen.count == 5 })
        seen.allowed.store(true, ordering: .relaxed)
        try SocketIO.sendAll(theirs, [6])
        #expect(await seen.signal.wait { seen.count == 6 })
        #expect(seen.batches.withLock { $0.map(\.inline) } == [true, false, true])
        #expect(seen.bytes == [1, 2, 3, 4, 5, 6])
    }

    /// 150 KB waiting when the reactor wakes (the queue is held meanwhile, so the reactor
    /// waits for it and then finds them all): 64 KiB inline, the rest on the queue, then a
    /// later write inline again (reading was turned back on).
    /// A stream channel, started, that finds `data` all there at its first wakeup: its queue
    /// is held while the peer (`theirs`) writes it, so the reactor, woken at the first byte,
    /// waits for the queue (briefly) and then reads.
    static func burst(_ data: [UInt8], _ seen: Seen, batchLimit: Int = 64,
                      onBatch: @escaping @Sendable (Channel) -> Void = { _ in }) throws -> (Channel, theirs: Int32) {
        let (ours, theirs) = try ChannelTests.pair(ChannelTests.stream)
        var size: Int32 = 1 << 20
        _ = setsockopt(theirs, SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        let c = seen.channel(ours, .stream, batchLimit: batchLimit, onBatch: onBatch)
        let held = DispatchSemaphore(value: 0)
        c.queue.async { held.wait() }
        defer { held.signal() }
        // At once or not at all: a blocking write that did not fit would hang with the queue
        // held (and the shared reactor waiting for it).
        let n = data.withUnsafeBytes { send(theirs, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT | MSG_NOSIGNAL)) }
        guard n == data.count else {
            throw SystemError(call: "send", code: n < 0 ? errno : EMSGSIZE, context: "the socket took \(n) of \(data.count) bytes")
        }
        return (c, theirs)
    }

    @Test func anInlineReadTakesItsBudgetAndTheQueueTheRest() async throws {
        let seen = Seen()
        let data = (0..<150_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 9) }
        let (c, theirs) = try Self.burst(data, seen)
        defer { closeQuietly(theirs) }
        defer { c.close() }
        #expect(await seen.signal.wait { seen.count == data.count })
        #expect(seen.bytes == data, "every byte, in order")
        let batches = seen.batches.withLock { $0.map { ($0.bytes.count, $0.inline) } }
        #expect(batches.first?.0 == Channel.inlineBudget && batches.first?.1 == true, "\(batches)")
        #expect(batches.dropFirst().allSatisfy { !$0.1 }, "the rest on the queue: \(batches)")
        try SocketIO.sendAll(theirs, [7, 7, 7])
        #expect(await seen.signal.wait { seen.count == data.count + 3 })
        #expect(seen.batches.withLock { $0.last?.inline } == true)
    }

    /// A reader that pauses in an inline batch gets nothing more until it resumes, then the
    /// rest, in order.
    @Test func pausingInAnInlineBatchHolds() async throws {
        let seen = Seen()
        let paused = Mutex(false)
        let data = (0..<150_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let (c, theirs) = try Self.burst(data, seen) { c in
            let first = paused.withLock { p in defer { p = true }; return !p }
            if first { c.pauseReading() }
        }
        defer { closeQuietly(theirs) }
        defer { c.close() }
        #expect(await seen.signal.wait { seen.count > 0 })
        c.queue.sync {}
        #expect(seen.count == Channel.inlineBudget, "nothing after the pause")
        #expect(!c.readingWanted, "the watch is not asked to read while paused")
        c.resumeReading()
        #expect(await seen.signal.wait { seen.count == data.count })
        #expect(seen.bytes == data)
    }

    /// A reader that pauses in a batch of the rest (read on the queue) gets nothing more, the
    /// watch off, until it resumes; then the rest, and later writes inline again.
    @Test func pausingInTheRestHoldsAndResumingReadsIt() async throws {
        let seen = Seen()
        let paused = Mutex(false)
        let data = (0..<150_000).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 5) }
        // A read a batch: the rest takes more than one.
        let (c, theirs) = try Self.burst(data, seen, batchLimit: 1) { c in
            guard !DescriptorWatch.onReactorThread else { return }
            let first = paused.withLock { p in defer { p = true }; return !p }
            if first { c.pauseReading() }
        }
        defer { closeQuietly(theirs) }
        defer { c.close() }
        #expect(await seen.signal.wait { seen.count > Channel.inlineBudget })
        c.queue.sync {}
        let held = seen.count
        #expect(held < data.count, "the pause held the rest back")
        #expect(!c.readingWanted)
        c.resumeReading()
        #expect(await seen.signal.wait { seen.count == data.count })
        #expect(seen.bytes == data)
        c.queue.sync {}
        #expect(c.readingWanted, "reading is on again after the rest")
        try SocketIO.sendAll(theirs, [9])
        #expect(await seen.signal.wait { seen.count == data.count + 1 })
        #expect(seen.batches.withLock { $0.last?.inline } == true)
    }

    /// The predicate held when the reactor woke, and no longer does once the queue is free
    /// (a turn of the queue turned it off meanwhile: a resource offered): the read is not
    /// inline.
    @Test func thePredicateIsAskedAgainOnceTheQueueIsFree() async throws {
        let (ours, theirs) = try ChannelTests.pair(ChannelTests.packet)
        defer { closeQuietly(theirs) }
        let seen = Seen()
        let c = seen.channel(ours, .packet)
        defer { c.close() }
        while seen.asked.wait(timeout: .now()) == .success {}
        // The queue is held until the reactor has asked (it then waits in `sync` behind this)
        // and turns the predicate off before letting it in. Released by the queue itself: a
        // test task holding it across an `await` would hold the reactor, and with it every
        // test's I/O, whenever the pool is slow to resume the task.
        let askedFirst = Mutex<Bool?>(nil)
        c.queue.async {
            let asked = seen.asked.wait(timeout: .now() + 10) == .success
            seen.allowed.store(false, ordering: .relaxed)
            askedFirst.withLock { $0 = asked }
        }
        try SocketIO.sendAll(theirs, [1, 2])
        #expect(await seen.signal.wait { seen.count == 2 })
        #expect(askedFirst.withLock { $0 } == true, "the reactor asked before waiting for the queue")
        #expect(seen.batches.withLock { $0.map(\.inline) } == [false])
    }

    /// A wakeup whose predicate did not hold reads on the queue with the watch's reading off
    /// until it is done (as an inline read's rest does): woken again meanwhile with the
    /// predicate holding, the reactor would wait for the whole loop.
    @Test func aReadOnTheQueueTurnsTheWatchOffUntilItIsDone() async throws {
        let seen = Seen()
        seen.allowed.store(false, ordering: .relaxed)
        let wanted = Mutex<[Bool]>([])
        let data = (0..<150_000).map { UInt8(truncatingIfNeeded: $0 &* 3 &+ 1) }
        let (c, theirs) = try Self.burst(data, seen, batchLimit: 1) { c in wanted.withLock { $0.append(c.readingWanted) } }
        defer { closeQuietly(theirs) }
        defer { c.close() }
        #expect(await seen.signal.wait { seen.count == data.count })
        #expect(seen.bytes == data)
        #expect(seen.batches.withLock { $0.allSatisfy { !$0.inline } })
        #expect(wanted.withLock { $0 }.allSatisfy { !$0 }, "the watch was off during the reads: \(wanted.withLock { $0 })")
        c.queue.sync {}
        #expect(c.readingWanted, "and on again after them")
    }
}
