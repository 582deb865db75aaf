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
    private let mode: Mode
    private let outboxLimit: Int
    private let readLimit: Int
    private let batchLimit: Int
    private let gather: Duration
    private let receivesDescriptors: Bool
    private let sendFault: (@Sendable () -> Int32?)?
    private let watch: DescriptorWatch
    private let state = Mutex(State())

    private struct Item {
        var bytes: [UInt8]
        var offset = 0
        /// Descriptors passed (SCM_RIGHTS) with the item's first byte; the channel's copies.
        var fds: [Int32] = []
    }

    private struct State {
        var onInput: (@Sendable ([[UInt8]]) -> Void)?
        var onEnd: (@Sendable (End) -> Void)?
        var started = false
        var outbox: [Item] = []
        var head = 0
        /// Bytes (stream) or packets (packet) waiting.
        var queued = 0
        var writeArmed = false
        /// A write waits for the kernel's memory: the retry's delay (doubling while it lasts).
        var memoryWait: Duration?
        var lastMemoryDelay: Duration = .zero
        var readPaused = false
        var readEnded = false
        var closed = false
        var ended = false
        var roomWaiters: [@Sendable (Bool) -> Void] = []
        var flushWaiters: [@Sendable () -> Void] = []
        var counts = Counts()
        var descriptorClosed = false
        var releaseWaiters: [@Sendable () -> Void] = []
        /// Descriptors the peer passed (SCM_RIGHTS), oldest first, not yet taken.
        var received: [Int32] = []
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
    ///     for `takeDescriptor`, up to `maxHeldDescriptors`; otherwise the kernel closes them.
    ///   - sendFault: tests only: an errno a write fails with instead of writing (nil: write).
    public init(fd: Int32, mode: Mode, label: String, queue: DispatchQueue? = nil, outboxLimit: Int,
                readLimit: Int = 65_536, batchLimit: Int = 64, gather: Duration = .zero, receivesDescriptors: Bool = false,
                sendFault: (@Sendable () -> Int32?)? = nil) {
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
            watch.want(read: true)
            return true
        }
        // Read what is already there now instead of waiting for the source's first event.
        if go { queue.async { [weak self] in self?.readLoop() } }
    }

    /// Whether the channel is closed.
    public var isClosed: Bool { state.withLock { $0.closed } }

    /// Items written and `.full` answers so far.
    public var counts: Counts { state.withLock { $0.counts } }

    /// The oldest descriptor the peer passed that nobody took yet (the caller owns it now),
    /// or nil. A descriptor comes with the bytes it was sent with, so one passed with a
    /// request is here by the time `onInput` hands that request on.
    public func takeDescriptor() -> Int32? {
        state.withLock { s in s.received.isEmpty ? nil : s.received.removeFirst() }
    }

    // MARK: Writing

    /// Writes `bytes` (one packet in packet mode) after anything that waits, without blocking.
    /// `passing`: descriptors that travel with the first byte (SCM_RIGHTS); when the answer is
    /// `.accepted` the channel owns them (and closes them once sent, or at close); otherwise
    /// the caller still does.
    @discardableResult
    public func send(_ bytes: [UInt8], passing: [Int32] = []) -> Offer {
        offer([Item(bytes: bytes, fds: passing)], counting: true)
    }

    /// Writes all of `packets` in order, or nothing (`.full`, `.closed`): for a caller that
    /// must not send part of a batch and wait for the rest. More packets than the bound are
    /// always `.full` (send them one by one).
    @discardableResult
    public func send(contentsOf packets: [[UInt8]]) -> Offer {
        offer(packets.map { Item(bytes: $0) }, counting: true)
    }

    /// Like `send`, but waits (without blocking a thread) while the outbox is full; false
    /// when the channel is closed (before or while waiting).
    public func write(_ bytes: [UInt8]) async -> Bool {
        while true {
            switch offer([Item(bytes: bytes)], counting: false) {
            case .accepted: return true
            case .closed: return false
            case .full: if !(await room()) { return false }
            }
        }
    }

    /// Returns once the outbox has room (true) or the channel is closed (false).
    public func room() async -> Bool {
        await withCheckedContinuation { (c: CheckedContinuation<Bool, Never>) in
            whenRoom { c.resume(returning: $0) }
        }
    }

    /// Whether the outbox has room now (what `whenRoom` waits for): a caller that must not
    /// let anything wait in the outbox (it keeps its own priorities, as a peer connection's
    /// lanes do) hands over one item only while this holds, with an `outboxLimit` of 1.
    public var hasRoom: Bool { state.withLock { !$0.closed && $0.queued < outboxLimit } }

    /// Calls `handler` once: true when the outbox has room (at once, on this thread, if it has
    /// now), false when the channel is closed. In stream mode "room" is fewer than
    /// `outboxLimit` bytes waiting: a larger item may still be refused (`.full`), so a caller
    /// whose items may be large waits with `whenFlushed` (an empty outbox takes any item).
    public func whenRoom(_ handler: @escaping @Sendable (Bool) -> Void) {
        let now = state.withLock { s -> Bool? in
            if s.closed { return false }
            if s.queued < outboxLimit { return true }
            s.roomWaiters.append(handler)
            return nil
        }
        if let now { handler(now) }
    }

    /// Calls `handler` once everything queued is written, or the channel is closed (at once
    /// when that is so now).
    public func whenFlushed(_ handler: @escaping @Sendable () -> Void) {
        let now = state.withLock { s -> Bool in
            if s.closed || s.head == s.outbox.count { return true }
            s.flushWaiters.append(handler)
            return false
        }
        if now { handler() }
    }

    /// Items queued in stream mode join the last waiting item until it holds this many bytes.
    static let coalesceBytes = 262_144

    /// Queues `items` after what waits (all or none) and writes at once when nothing did.
    private func offer(_ items: [Item], counting: Bool) -> Offer {
        precondition(items.allSatisfy { $0.fds.isEmpty || !$0.bytes.isEmpty }, "descriptors travel with at least one byte")
        let size = mode == .stream ? items.reduce(0) { $0 + $1.bytes.count } : items.count
        var failure: SystemError?
        let answer = state.withLock { s -> Offer in
            if s.closed { return .closed }
            let empty = s.head == s.outbox.count
            // One item always fits an empty outbox, or a too-big value could never go.
            if s.queued + size > outboxLimit && !(empty && items.count == 1) {
                if counting { s.counts.refused += 1 }
                return .full
            }
            let last = s.outbox.count - 1
            if mode == .stream, items.count == 1, items[0].fds.isEmpty, !empty, s.outbox[last].bytes.count < Self.coalesceBytes {
                // Small replies in quick succession go out together in one send (descriptors
                // of the last item still go with its first byte). Grown once to the limit,
                // not by doubling past it: doubling left up to half of every item unused, and
                // a full outbox held twice the bytes it counts.
                let needed = s.outbox[last].bytes.count + items[0].bytes.count
                if needed > s.outbox[last].bytes.capacity {
                    s.outbox[last].bytes.reserveCapacity(max(needed, Self.coalesceBytes))
                }
                s.outbox[last].bytes.append(contentsOf: items[0].bytes)
            } else {
                s.outbox.append(contentsOf: items)
            }
            s.queued += size
            if empty {
                switch drain(&s) {
                case .empty: break
                case .blocked: arm(&s)
                case .noMemory: waitForMemory(&s)
                case .failed(let e): failure = e
                }
            }
            return .accepted
        }
        // The caller may hold a lock of its own that its handlers take (a stream writing to
        // its client under its state's lock, whose `onEnd` and room waiter lock it again):
        // the close, which runs waiters, and the report happen on the queue, never inside
        // `send`.
        if let failure { fail(failure, fromSend: true) }
        return answer
    }

    private enum Drained { case empty, blocked, noMemory, failed(SystemError) }

    /// Writes what waits until the socket is full. Under the lock.
    private func drain(_ s: inout State) -> Drained {
        while s.head < s.outbox.count {
            let item = s.outbox[s.head]
            let n: Int?
            do {
                if let errno = sendFault?() { throw SystemError(call: "send", code: errno) }
                n = try item.bytes.withUnsafeBytes { raw in
                    let rest = UnsafeRawBufferPointer(rebasing: raw[item.offset...])
                    if !item.fds.isEmpty { return try DescriptorPassing.send(fd, rest, passing: item.fds) }
                    return try syscallAllowingAgain("send") { Glibc.send(fd, rest.baseAddress, rest.count, Int32(MSG_NOSIGNAL)) }
                }
            } catch let e as SystemError {
                return e.code == ENOBUFS || e.code == ENOMEM ? .noMemory : .failed(e)
            } catch {
                return .failed(SystemError(call: "send", code: EIO))
            }
            guard let n else { return .blocked }
            s.lastMemoryDelay = .zero
            if !item.fds.isEmpty {
                // The peer has its copies now.
                for d in item.fds { closeQuietly(d) }
                s.outbox[s.head].fds = []
            }
            if mode == .stream && item.offset + n < item.bytes.count {
                s.outbox[s.head].offset += n
                s.queued -= n
                continue
            }
            s.queued -= mode == .stream ? item.bytes.count - item.offset : 1
            s.head += 1
            s.counts.written += 1
        }
        s.outbox.removeAll(keepingCapacity: s.outbox.capacity <= 1024)
        s.head = 0
        return .empty
    }

    /// Asks to be told when the socket takes more. Under the lock.
    private func arm(_ s: inout State) {
        if s.writeArmed { return }
        s.writeArmed = true
        watch.want(write: true)
    }

    /// The kernel had no memory for a write (`ENOBUFS`: a large packet needs a contiguous
    /// buffer, which a fragmented board may lack for a moment): not the socket's end, so the
    /// item waits and is tried again after 5 ms, doubling to 640 ms while it lasts. Nothing
    /// signals that memory came back, and the socket still reads as writable, so the write
    /// watch is off meanwhile (it would spin). Under the lock.
    private func waitForMemory(_ s: inout State) {
        s.counts.memoryWaits += 1
        guard s.memoryWait == nil else { return }
        let delay = s.lastMemoryDelay == .zero ? .milliseconds(5) : min(s.lastMemoryDelay * 2, .milliseconds(640))
        s.memoryWait = delay
        s.lastMemoryDelay = delay
        s.writeArmed = true
        watch.want(write: false)
        queue.asyncAfter(deadline: .now() + delay.dispatchInterval) { [weak self] in
            guard let self else { return }
            self.state.withLock { $0.memoryWait = nil }
            self.flush(afterMemoryWait: true)
        }
    }

    /// Writes what waits (the socket takes more, or memory may have come back). On the queue.
    private func flush(afterMemoryWait: Bool = false) {
        var failure: SystemError?
        let (room, flushed) = state.withLock { s -> ([@Sendable (Bool) -> Void], [@Sendable () -> Void]) in
            guard !s.closed, s.writeArmed, s.memoryWait == nil else { return ([], []) }
            switch drain(&s) {
            case .blocked:
                // The watch was off while memory was waited for.
                if afterMemoryWait { watch.want(write: true) }
            case .noMemory:
                waitForMemory(&s)
            case .failed(let e): failure = e
            case .empty:
                s.writeArmed = false
                watch.want(write: false)
            }
            var room: [@Sendable (Bool) -> Void] = []
            var flushed: [@Sendable () -> Void] = []
            if s.queued < outboxLimit { swap(&room, &s.roomWaiters) }
            if s.head == s.outbox.count { swap(&flushed, &s.flushWaiters) }
            return (room, flushed)
        }
        if let failure { return fail(failure) }
        for h in room { h(true) }
        for h in flushed { h() }
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
            watch.want(read: true)
            return true
        }
        if go { queue.async { [weak self] in self?.readLoop() } }
    }

    private func readable() {
        state.withLock { $0.counts.readWakeups += 1 }
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
        for _ in 0..<16 {
            guard let onInput = state.withLock({ s in s.closed || s.readPaused || s.readEnded ? nil : s.onInput }) else { return }
            var batch: [[UInt8]] = []
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
            }
            if !batch.isEmpty { onInput(batch) }
            if let end { return inputEnded(end) }
            if drained { return }
        }
        queue.async { [weak self] in self?.readLoop() }
    }

    /// One read into `buffer`: the count (0: end of file; in packet mode possibly more than
    /// the buffer, `MSG_TRUNC`), or nil when there is nothing to read now.
    private func receive(into buffer: UnsafeMutableRawBufferPointer, flags: Int32) throws -> Int? {
        guard receivesDescriptors else {
            return try syscallAllowingAgain("recv") { recv(fd, buffer.baseAddress, buffer.count, flags) }
        }
        let got = try DescriptorPassing.receive(fd, into: buffer, flags: flags)
        if let fds = got?.1, !fds.isEmpty { hold(fds) }
        return got?.0
    }

    /// Keeps descriptors the peer passed for `takeDescriptor`; beyond the bound, or once
    /// closed, they are closed.
    private func hold(_ fds: [Int32]) {
        let extra = state.withLock { s -> ArraySlice<Int32> in
            let room = s.closed ? 0 : max(0, Self.maxHeldDescriptors - s.received.count)
            s.received += fds.prefix(room)
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
    private func fail(_ e: SystemError, fromSend: Bool = false) {
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
            for d in s.received { closeQuietly(d) }
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
