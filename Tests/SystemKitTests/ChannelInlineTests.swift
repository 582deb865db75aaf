import Dispatch
import Synchronization
import SystemKit
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `Channel`'s inline reads (`readsInline`): on the reactor's thread inside the channel's
/// queue while the predicate holds, at most `inlineBudget` bytes there and the rest on the
/// queue, then inline again; pausing from an inline batch holds.
@Suite struct ChannelInlineTests {
    /// Batches seen: their bytes and whether each ran on the reactor's thread.
    final class Seen: Sendable {
        let batches = Mutex<[(bytes: [UInt8], inline: Bool)]>([])
        let signal = AsyncSignal()
        let allowed = Atomic<Bool>(true)

        var bytes: [UInt8] { batches.withLock { $0.flatMap(\.bytes) } }
        var count: Int { batches.withLock { $0.reduce(0) { $0 + $1.bytes.count } } }

        /// A started channel over `fd`; `onBatch` runs first for each batch (inside the queue).
        func channel(_ fd: Int32, _ mode: Channel.Mode, onBatch: @escaping @Sendable (Channel) -> Void = { _ in }) -> Channel {
            let c = Channel(fd: fd, mode: mode, label: "inline-test", outboxLimit: 1,
                            readsInline: { [self] in allowed.load(ordering: .relaxed) })
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
    static func burst(_ data: [UInt8], _ seen: Seen, onBatch: @escaping @Sendable (Channel) -> Void = { _ in }) throws -> (Channel, theirs: Int32) {
        let (ours, theirs) = try ChannelTests.pair(ChannelTests.stream)
        var size: Int32 = 1 << 20
        _ = setsockopt(theirs, SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        let c = seen.channel(ours, .stream, onBatch: onBatch)
        let held = DispatchSemaphore(value: 0)
        c.queue.async { held.wait() }
        defer { held.signal() }
        try SocketIO.sendAll(theirs, data)
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
        c.resumeReading()
        #expect(await seen.signal.wait { seen.count == data.count })
        #expect(seen.bytes == data)
    }
}
