// Linux Dispatch has no Sendable annotations; its sources and queues are thread-safe.
@preconcurrency import Dispatch
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// One non-blocking socket (stream or packet), read and written from a serial queue: the one
/// mechanism for every descriptor the daemon keeps open (control clients, notification and
/// stream sockets).
///
/// - Reads are batched: `onInput` gets up to `batchLimit` chunks (stream) or packets (packet
///   mode) per call, in order, on the channel's queue.
/// - Writes go out at once from the caller's thread when nothing waits before them; what the
///   socket does not take waits in a bounded outbox and goes out when there is room. Beyond
///   `outboxLimit` (bytes in stream mode, packets in packet mode) `send` answers `.full`: a
///   caller that drops counts it, a caller that waits uses `whenRoom` or `write`.
/// - The peer closing (end of file, `EPIPE`, `ECONNRESET`) or an error is reported once
///   through `onEnd`, on the queue (never inside a caller's `send`). An error closes the
///   channel; the end of input only stops reading (a stream client that half-closes still
///   gets its replies). The kernel lacking memory for a write is not an error: it waits.
/// - The descriptor is closed exactly once, after its watch is cancelled and every handler
///   has run, however many times and from wherever `close()` is called.
///
/// Readiness comes from a `DescriptorWatch`: one epoll thread for the process that queues
/// each channel's handlers on the channel's serial queue. The daemon needs that queue: a
/// control client's requests, its partial-line timer and the replies of its tasks are
/// ordered on it, and one shared thread running every handler would put every client behind
/// the slowest one. Measured on the host (2 shared cores) with
/// `scripts/channel-mechanism-bench.swift`, 510-byte packets through a packet socket pair:
///
/// |                        | Dispatch source  | epoll thread, handler on it |
/// |------------------------|------------------|-----------------------------|
/// | stream, CPU per packet | 2.6 to 2.8 us    | 1.7 to 1.8 us               |
/// | ping-pong, per packet  | 24 to 37 us wall | 6 to 7 us wall              |
///
/// The hop to a queue costs both the same, so speed did not decide; Dispatch sources went
/// because libdispatch's epoll backend crashes under source churn (see `DescriptorWatch`).
/// The hop is what the right-hand column saves, though: a channel whose reader does bounded
/// work that never blocks (a peer connection, a message stream) has its reads start on the
/// epoll thread itself, inside its queue (`readsInline`), up to 64 KiB, the rest on the queue.
public final class Channel: Sendable {
    /// What kind of socket: a byte stream, or packets kept whole (`SOCK_SEQPACKET`).
    public enum Mode: Sendable { case stream, packet }

    /// How the channel ended from the other side (reported once).
    public enum End: Sendable, Equatable {
        /// End of file, or `EPIPE`/`ECONNRESET`: the peer closed its end.
        case peerClosed
        /// A read or write failed otherwise; the channel is closed.
        case failed(SystemError)
    }

    /// The answer to `send`.
    public enum Offer: Sendable, Equatable {
        /// Written or queued, in order.
        case accepted
        /// The outbox is full: nothing was queued (the caller drops, or waits for room).
        case full
        /// The channel is closed: nothing was queued.
        case closed
    }

    /// Counts of sends: items written to the socket, and `.full` answers.
    public struct Counts: Sendable, Equatable {
        public var written: UInt64 = 0
        /// System calls that wrote (`send`, `sendmmsg`), the ones the socket refused included.
        public var writeCalls: UInt64 = 0
        public var refused: UInt64 = 0
        /// Times the read source fired (a wakeup that gathers a burst counts once).
        public var readWakeups: UInt64 = 0
        /// Times a write waited because the kernel had no memory for it (`ENOBUFS`, `ENOMEM`).
        public var memoryWaits: UInt64 = 0
    }

    /// The descriptor (owned by the channel; closed once both sources are done).
    public let fd: Int32
    /// The serial queue every handler runs on.
    public let queue: DispatchQueue
    let mode: Mode
    let outboxLimit: Int
    private let readLimit: Int
    private let batchLimit: Int
    private let gather: Duration
    private let receivesDescriptors: Bool
    /// `readsInline`'s predicate (nil: reads always on the queue).
    let readsInline: (@Sendable () -> Bool)?
    let sendFault: (@Sendable () -> Int32?)?
    let watch: DescriptorWatch
    let state = Mutex(State())

    struct Item {
        var bytes: [UInt8]
        var offset = 0
        /// Descriptors passed (SCM_RIGHTS) with the item's first byte; the channel's copies.
        var fds: [Int32] = []
    }

    struct State {
        var onInput: (@Sendable ([[UInt8]]) -> Void)?
        var onEnd: (@Sendable (End) -> Void)?
        var started = false
        var outbox: [Item] = []
        var head = 0
        /// Bytes (stream) or packets (packet) waiting.
        var queued = 0
        var writeArmed = false
        /// A write waits for the kernel's memory (its retry is scheduled).
        var waitingForMemory = false
        /// The last wait's delay, doubled by the next while writes keep failing so; zero
        /// once a write after a wait went through.
        var lastMemoryDelay: Duration = .zero
        var readPaused = false
        /// An inline read left bytes for the queue: the watch's reading is off until it is
        /// done (`continueReading`).
        var readingOnQueue = false
        var readEnded = false
        var closed = false
        var ended = false
        var roomWaiters: [@Sendable (Bool) -> Void] = []
        var flushWaiters: [@Sendable () -> Void] = []
        var counts = Counts()
        var descriptorClosed = false
        var releaseWaiters: [@Sendable () -> Void] = []
        /// Descriptors the peer passed (SCM_RIGHTS), oldest first, not yet taken, each with
        /// `bytesRead` at the end of the read that brought it.
        var received: [(fd: Int32, at: UInt64)] = []
        /// Bytes read so far (with `receivesDescriptors`): where each descriptor came.
        var bytesRead: UInt64 = 0
        /// Packet mode: the buffer packets are read into (`readLimit` bytes), kept between
        /// wakeups; used on the queue only.
        var scratch: UnsafeMutableRawBufferPointer?
    }

    /// Descriptors a channel holds for its reader at most; more are closed as they come, so
    /// a peer that passes descriptors nobody takes cannot fill the process's table.
    public static let maxHeldDescriptors = 8

    /// Wraps `fd` (made non-blocking; the channel owns it from now on). Nothing is read until
    /// `start`; `send` works at once.
    ///
    /// - Parameters:
    ///   - queue: the serial queue handlers run on (nil: a new one on the shared pool).
    ///   - outboxLimit: bytes (stream) or packets (packet) that may wait for room.
    ///   - readLimit: the largest read; in packet mode a longer packet is delivered as that
    ///     many zero bytes (only its length is known: `MSG_TRUNC`).
    ///   - batchLimit: chunks or packets handed to `onInput` at most per call.
    ///   - gather: after the first readable event of a burst, wait this long before reading,
    ///     so packets that arrive close together are read (and handed on) together. The wait
    ///     blocks the channel's queue (its own thread when `queue` is nil).
    ///   - receivesDescriptors: keep descriptors the peer passes with its bytes (SCM_RIGHTS)
    ///     for `takeDescriptors`, up to `maxHeldDescriptors`; otherwise the kernel closes them.
    ///   - readsInline: while this holds (asked on the reactor's thread: quick, no lock),
    ///     reads start on the reactor's thread, inside the queue, and read at most
    ///     `inlineBudget` bytes there (the rest on the queue): no thread hand-off for a small
    ///     read. Only for an owner whose `onInput` does bounded work and never blocks (see
    ///     `DescriptorWatch`); not with `gather`.
    ///   - sendFault: tests only: an errno a write fails with instead of writing (nil: write).
    public init(fd: Int32, mode: Mode, label: String, queue: DispatchQueue? = nil, outboxLimit: Int,
                readLimit: Int = 65_536, batchLimit: Int = 64, gather: Duration = .zero, receivesDescriptors: Bool = false,
                readsInline: (@Sendable () -> Bool)? = nil, sendFault: (@Sendable () -> Int32?)? = nil) {
        precondition(readsInline == nil || gather == .zero, "a gathering channel blocks its queue: its reads cannot run inline")
        self.readsInline = readsInline
        self.sendFault = sendFault
        self.fd = fd
        self.mode = mode
        self.outboxLimit = outboxLimit
        self.readLimit = readLimit
        self.batchLimit = batchLimit
        self.gather = gather
        self.receivesDescriptors = receivesDescriptors
        try? setNonBlocking(fd)
        // A gathering channel blocks its queue for `gather` at each burst: its own serial queue
        // then targets an overcommit root queue (libdispatch's default for a serial queue made
        // without a target), which gives it a thread of its own rather than one of the shared
        // pool's few. A channel given a queue must be allowed to block it that long.
        let q = queue ?? (gather > .zero ? DispatchQueue(label: "peerlink.channel.\(label)")
                                         : DispatchQueue(label: "peerlink.channel.\(label)", target: .global(qos: .userInitiated)))
        self.queue = q
        watch = DescriptorWatch(owning: fd, queue: q)
        watch.setHandlers(onReadable: { [weak self] in self?.readable() }, onWritable: { [weak self] in self?.flush() })
        if let readsInline { watch.setInlineReads({ [weak self] in self?.readableInline() }, when: readsInline) }
    }

    // No weak reference to a channel being freed may be formed: nobody waits on it anyway.
    deinit {
        shut(notifying: false)
        state.withLock { $0.scratch }?.deallocate()
    }

    /// Starts reading: `onInput` gets what arrives, `onEnd` the peer's close or an error
    /// (once; not after `close()`). Both run on `queue`. Call once.
    public func start(onInput: @escaping @Sendable ([[UInt8]]) -> Void, onEnd: @escaping @Sendable (End) -> Void) {
        let go = state.withLock { s -> Bool in
            guard !s.started, !s.closed else { return false }
            s.started = true
            s.onInput = onInput
            s.onEnd = onEnd
            if readsInline == nil { watch.want(read: true) }
            return true
        }
        // Read what is already there now instead of waiting for the source's first event. An
        // inline channel reads on the queue first and then turns the watch on, or the
        // reactor, woken at once, would wait in `sync` for that read.
        if go { readOnQueue() }
    }

    /// A read pass on the queue: for an inline channel, `continueReading` once reading is
    /// handed to the queue (`handOffToQueue`: nothing when a pass is under way already or
    /// reading stopped); otherwise the plain loop beside the watch.
    private func readOnQueue() {
        if readsInline == nil {
            queue.async { [weak self] in self?.readLoop() }
        } else if handOffToQueue() {
            queue.async { [weak self] in self?.continueReading() }
        }
    }

    /// Whether the channel is closed.
    public var isClosed: Bool { state.withLock { $0.closed } }

    /// Whether the watch is asked to report the socket readable now (tests: a paused channel
    /// must not be).
    package var readingWanted: Bool { watch.wantsRead }

    /// Items written and `.full` answers so far.
    public var counts: Counts { state.withLock { $0.counts } }

    /// The descriptors the peer passed that came with the first `bytes` bytes read (the
    /// caller owns them now), oldest first. A descriptor comes with the read that ends in the
    /// bytes it was sent with (the kernel hands it over with the first read that reaches
    /// them, and ends that read there), so a reader counting the bytes `onInput` handed it
    /// knows which of them it belongs to: the last of those the read brought.
    public func takeDescriptors(through bytes: UInt64) -> [Int32] {
        state.withLock { s in
            let n = s.received.prefix { $0.at <= bytes }.count
            defer { s.received.removeFirst(n) }
            return s.received.prefix(n).map(\.fd)
        }
    }

    // MARK: Reading (on the queue)

    /// Stops reading until `resumeReading` (the reader cannot take more now): what arrives
    /// waits in the socket, so the peer's writes wait too.
    public func pauseReading() {
        state.withLock { s in
            guard !s.readPaused, !s.closed, !s.readEnded, s.started else { return }
            s.readPaused = true
            watch.want(read: false)
        }
    }

    /// Reads again after `pauseReading`.
    public func resumeReading() {
        let go = state.withLock { s -> Bool in
            guard s.readPaused else { return false }
            s.readPaused = false
            if s.closed || s.readEnded { return false }
            if readsInline == nil { watch.want(read: true) }
            return true
        }
        // An inline channel: a pass on the queue, which turns the watch on at its end (one may
        // be under way already: it does).
        if go { readOnQueue() }
    }

    /// An inline channel's reading moves to the queue (`continueReading`, which the caller
    /// runs or queues when this says true): the watch's reading is off until it is done, so the
    /// reactor, woken meanwhile, does not wait in `sync` for it. False when reading stopped or
    /// a pass on the queue is under way already.
    private func handOffToQueue() -> Bool {
        state.withLock { s in
            guard !s.closed, !s.readPaused, !s.readEnded, !s.readingOnQueue else { return false }
            s.readingOnQueue = true
            watch.want(read: false)
            return true
        }
    }

    /// Bytes read at most on the reactor's thread at a wakeup (`readsInline`).
    public static let inlineBudget = 65_536

    /// A wakeup on the reactor's thread, inside the queue: one batch of at most `inlineBudget`
    /// bytes. What may be left is read on the queue, with the watch's reading off until
    /// then: the reactor never waits for a bulk read (nor, woken again meanwhile, for the
    /// queue to finish one).
    private func readableInline() {
        state.withLock { $0.counts.readWakeups += 1 }
        // The predicate was asked before the reactor waited for the queue, whose turn may have
        // changed it (a resource offered): asked again, the read goes to the queue if it no
        // longer holds.
        let outcome = readsInline?() == true ? readPasses(1, budget: Self.inlineBudget) : .more
        if outcome == .more { readOnQueue() }
    }

    /// The rest of an inline read's wakeup, on the queue; then the watch reads again.
    private func continueReading() {
        if readPasses(16) == .more {
            queue.async { [weak self] in self?.continueReading() }
            return
        }
        state.withLock { s in
            s.readingOnQueue = false
            if !s.closed, !s.readPaused, !s.readEnded { watch.want(read: true) }
        }
    }

    private func readable() {
        state.withLock { $0.counts.readWakeups += 1 }
        if readsInline != nil {
            // An inline channel whose predicate did not hold: its read on the queue turns the
            // watch off until it is done, as an inline read's rest does, or the reactor, woken
            // again with the predicate holding by then, would wait in `sync` for the loop.
            if handOffToQueue() { continueReading() }
            return
        }
        if gather > .zero {
            // Gathering: wait here, then read the burst. The channel's queue has a thread of
            // its own while it blocks (see `init`), and the watch does not arm reading again
            // while its handler runs, so nothing fires meanwhile: one wakeup per burst, as a
            // reader thread sleeping in poll would have. A timer instead cost three thread
            // hops per burst (wakeup, timer, re-arm), and with reading left armed it spun
            // (armed again after each handler while the packets were still unread).
            gather.sleepBlocking()
        }
        readLoop()
    }

    /// Only the pages of the packet scratch that packets reached are resident: after a
    /// wakeup that read a packet larger than this, the scratch is given back.
    static let scratchKeptUpTo = 262_144

    /// Reads until the socket is empty (one wakeup for a burst: the watch arms reading again
    /// after its handler, so what is left would fire it again), handing batches on; after 16
    /// batches it comes back later, so other channels on the pool get their turn.
    private func readLoop() {
        if readPasses(16) == .more { queue.async { [weak self] in self?.readLoop() } }
    }

    private enum ReadOutcome {
        /// The socket is empty for now.
        case drained
        /// Reading stopped: closed, paused, or the input ended.
        case stopped
        /// The passes or the budget ran out: there may be more.
        case more
    }

    /// Up to `passes` batches, handed on one by one; stops early once `budget` bytes were
    /// read (checked after each read).
    private func readPasses(_ passes: Int, budget: Int = .max) -> ReadOutcome {
        // Packets (small, many) are read into one scratch buffer and copied out at their
        // size. A stream is read straight into the array handed on, so a bulk transfer's
        // bytes are not copied again on their way out of the socket; a short read is then
        // copied to its size (a batch must not hold a whole read's worth of memory per chunk).
        // The scratch is kept between wakeups: made at each one, a large one (a message
        // stream's 4 MiB) was an mmap, a page fault and an munmap (with its TLB shootdown)
        // per wakeup, since the daemon fixes glibc's mmap threshold (`ProcessMemory`).
        let scratch = mode == .packet ? state.withLock { s in
            if s.scratch == nil { s.scratch = .allocate(byteCount: readLimit, alignment: 8) }
            return s.scratch
        } : nil
        var largest = 0
        defer {
            if largest > Self.scratchKeptUpTo { state.withLock { s in s.scratch = nil }; scratch?.deallocate() }
        }
        let flags = Int32(MSG_DONTWAIT) | (mode == .packet ? Int32(MSG_TRUNC) : 0)
        var total = 0
        for _ in 0..<passes {
            guard let onInput = state.withLock({ s in s.closed || s.readPaused || s.readEnded ? nil : s.onInput }) else { return .stopped }
            var batch: [[UInt8]] = []
            batch.reserveCapacity(batchLimit)  // not grown 1, 2, 4... per pass
            var end: End?
            var drained = false
            while batch.count < batchLimit {
                var n: Int?
                var chunk: [UInt8] = []
                do {
                    if let scratch {
                        n = try receive(into: scratch, flags: flags)
                    } else {
                        chunk = try [UInt8](unsafeUninitializedCapacity: readLimit) { buffer, initialized in
                            n = try receive(into: UnsafeMutableRawBufferPointer(buffer), flags: flags)
                            initialized = min(n ?? 0, buffer.count)
                        }
                    }
                } catch let e as SystemError {
                    end = e.code == ECONNRESET ? .peerClosed : .failed(e)
                    break
                } catch {
                    end = .failed(SystemError(call: "recv", code: EIO))
                    break
                }
                guard let n else {
                    drained = true
                    break
                }
                if n == 0 {
                    // The end of file sticks: it is read again once the batch is handed on.
                    if batch.isEmpty { end = .peerClosed }
                    break
                }
                if let scratch {
                    largest = max(largest, n)
                    batch.append(n > scratch.count ? [UInt8](repeating: 0, count: n) : Array(UnsafeRawBufferPointer(rebasing: scratch[0..<n])))
                } else if n < readLimit / 2 {
                    batch.append([UInt8](unsafeUninitializedCapacity: n) { $1 = $0.initialize(from: chunk).1 })
                } else {
                    batch.append(chunk)
                }
                total += n
                if total >= budget { break }
            }
            if !batch.isEmpty { onInput(batch) }
            if let end {
                inputEnded(end)
                return .stopped
            }
            if drained { return .drained }
            if total >= budget { return .more }
        }
        return .more
    }

    /// One read into `buffer`: the count (0: end of file; in packet mode possibly more than
    /// the buffer, `MSG_TRUNC`), or nil when there is nothing to read now.
    private func receive(into buffer: UnsafeMutableRawBufferPointer, flags: Int32) throws -> Int? {
        guard receivesDescriptors else {
            return try syscallAllowingAgain("recv") { recv(fd, buffer.baseAddress, buffer.count, flags) }
        }
        let got = try DescriptorPassing.receive(fd, into: buffer, flags: flags)
        if let (n, fds) = got { hold(fds, read: n) }
        return got?.0
    }

    /// Counts `read` bytes and keeps the descriptors that came with them for
    /// `takeDescriptors`; beyond the bound, or once closed, they are closed.
    private func hold(_ fds: [Int32], read: Int) {
        let extra = state.withLock { s -> ArraySlice<Int32> in
            s.bytesRead += UInt64(read)
            let room = s.closed ? 0 : max(0, Self.maxHeldDescriptors - s.received.count)
            let at = s.bytesRead
            s.received += fds.prefix(room).map { (fd: $0, at: at) }
            return fds.dropFirst(room)
        }
        for d in extra { closeQuietly(d) }
    }

    /// The end of input, or a read error (which closes the channel).
    private func inputEnded(_ end: End) {
        if case .failed(let e) = end { return fail(e) }
        let report = state.withLock { s -> (@Sendable (End) -> Void)? in
            guard !s.readEnded, !s.closed else { return nil }
            s.readEnded = true
            // Not wanted any more: an end of file stays readable and would fire again and again.
            watch.want(read: false)
            if s.ended { return nil }
            s.ended = true
            return s.onEnd
        }
        report?(.peerClosed)
    }

    /// A write or read failed: close, then report once. On the queue (at once when this
    /// runs there; later, `fromSend`, for a failure met inside a caller's `send`).
    func fail(_ e: SystemError, fromSend: Bool = false) {
        let report = state.withLock { s -> (@Sendable (End) -> Void)? in
            if s.ended || s.closed { return nil }
            s.ended = true
            return s.onEnd
        }
        let end: End = e.code == EPIPE || e.code == ECONNRESET ? .peerClosed : .failed(e)
        if fromSend {
            queue.async { [self] in
                close()
                report?(end)
            }
        } else {
            close()
            report?(end)
        }
    }

    // MARK: Closing

    /// Calls `handler` once the descriptor is closed (after `close()` and every handler already
    /// queued), on the queue; at once if it is closed already.
    public func whenDescriptorClosed(_ handler: @escaping @Sendable () -> Void) {
        let now = state.withLock { s -> Bool in
            if !s.descriptorClosed { s.releaseWaiters.append(handler) }
            return s.descriptorClosed
        }
        if now { handler() }
    }

    /// Closes the channel (from any thread): the peer sees the end at once, queued writes are
    /// dropped, waiters get false, and the descriptor is closed once no handler can run.
    /// No `onEnd`. True for the first call.
    @discardableResult
    public func close() -> Bool { shut(notifying: true) }

    @discardableResult
    private func shut(notifying: Bool) -> Bool {
        let waiters = state.withLock { s -> ([@Sendable (Bool) -> Void], [@Sendable () -> Void])? in
            if s.closed { return nil }
            s.closed = true
            for item in s.outbox[s.head...] { for d in item.fds { closeQuietly(d) } }
            for d in s.received { closeQuietly(d.fd) }
            s.received = []
            s.outbox = []
            s.head = 0
            s.queued = 0
            s.onInput = nil
            s.onEnd = nil
            _ = shutdown(fd, Int32(SHUT_RDWR))
            if notifying {
                watch.cancel { [weak self] in
                    guard let self else { return }
                    for h in self.state.withLock({ s in defer { s.releaseWaiters = [] }; s.descriptorClosed = true; return s.releaseWaiters }) { h() }
                }
            } else {
                watch.cancel()
            }
            let w = (s.roomWaiters, s.flushWaiters)
            s.roomWaiters = []
            s.flushWaiters = []
            return w
        }
        guard let waiters else { return false }
        for h in waiters.0 { h(false) }
        for h in waiters.1 { h() }
        return true
    }
}
