// Linux Dispatch has no Sendable annotations; its sources and queues are thread-safe.
@preconcurrency import Dispatch
internal import CEpoll
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A channel's writing half: the outbox, writes from the caller's thread, the flush when the
/// socket takes more, and the wait when the kernel has no memory for a write.
extension Channel {
    // MARK: Writing

    /// Bytes written and not yet taken by the peer (stream mode): the outbox's, and what the
    /// kernel holds unsent or unacknowledged (`TIOCOUTQ`). A peer that reads its socket
    /// drains it: bytes here mean the link is slow, not that the peer stopped reading.
    public var unsentBytes: Int {
        state.withLock { s in
            guard !s.descriptorClosed else { return 0 }
            var n: Int32 = 0
            let kernel = ioctl(fd, UInt(TIOCOUTQ), &n) == 0 ? Int(n) : 0
            return (mode == .stream ? s.queued : 0) + kernel
        }
    }

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

    /// Packet mode: writes as many of `packets` as the socket and the outbox take now, in
    /// order, and answers how many that is (0 when the channel is closed or the outbox full);
    /// the caller keeps the rest. Into an empty outbox the packets go in runs of up to 64 a
    /// call (`sendmmsg`) until the socket is full, and then up to `outboxLimit` wait: a
    /// burst is a few system calls even for a caller that lets one packet wait at most.
    public func sendLeading(_ packets: ArraySlice<[UInt8]>) -> Int {
        precondition(mode == .packet, "sendLeading writes packets")
        var failure: SystemError?
        let taken = state.withLock { s -> Int in
            if s.closed { return 0 }
            if s.head < s.outbox.count {
                // Something waits, so the socket is full: only the outbox's room is left.
                let n = min(packets.count, max(0, outboxLimit - s.queued))
                s.outbox.append(contentsOf: packets.prefix(n).map { Item(bytes: $0) })
                s.queued += n
                return n
            }
            s.outbox = packets.map { Item(bytes: $0) }
            s.head = 0
            s.queued = packets.count
            let outcome = drain(&s)
            // What the socket did not take: up to the outbox's room waits, the rest goes back.
            let left = s.outbox.count - s.head
            let giveBack = max(0, left - max(1, outboxLimit))
            if giveBack > 0 {
                s.outbox.removeLast(giveBack)
                s.queued -= giveBack
            }
            switch outcome {
            case .empty: break
            case .blocked: arm(&s)
            case .noMemory: waitForMemory(&s)
            case .failed(let e): failure = e
            }
            return packets.count - giveBack
        }
        if let failure { fail(failure, fromSend: true) }
        return taken
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
    func offer(_ items: [Item], counting: Bool) -> Offer {
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

    enum Drained { case empty, blocked, noMemory, failed(SystemError) }

    /// Writes what waits until the socket is full. Under the lock.
    func drain(_ s: inout State) -> Drained {
        while s.head < s.outbox.count {
            let item = s.outbox[s.head]
            // Packets without descriptors, two or more in a row, go in one call (`sendmmsg`):
            // a message stream delivering a burst makes one system call, not one a message.
            var run = s.head
            if mode == .packet {
                while run < s.outbox.count, run - s.head < Self.packetsPerCall, s.outbox[run].fds.isEmpty { run += 1 }
            }
            let n: Int?
            do {
                if let errno = sendFault?() { throw SystemError(call: "send", code: errno) }
                s.counts.writeCalls += 1
                if run - s.head >= 2 {
                    n = try Self.sendPackets(fd, s.outbox[s.head..<run])
                } else {
                    n = try item.bytes.withUnsafeBytes { raw in
                        let rest = UnsafeRawBufferPointer(rebasing: raw[item.offset...])
                        if !item.fds.isEmpty { return try DescriptorPassing.send(fd, rest, passing: item.fds) }
                        return try syscallAllowingAgain("send") { Glibc.send(fd, rest.baseAddress, rest.count, Int32(MSG_NOSIGNAL)) }
                    }
                }
            } catch let e as SystemError {
                return e.code == ENOBUFS || e.code == ENOMEM ? .noMemory : .failed(e)
            } catch {
                return .failed(SystemError(call: "send", code: EIO))
            }
            guard let n else { return .blocked }
            if run - s.head >= 2 {
                // `n` packets, each whole.
                s.queued -= n
                s.head += n
                s.counts.written += UInt64(n)
                continue
            }
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

    /// Packets written in one `sendmmsg` at most (the shim's bound).
    static let packetsPerCall = 64

    /// Writes `items` (whole packets, no descriptors) in one call: how many went (at least
    /// one), or nil when the socket took none.
    private static func sendPackets(_ fd: Int32, _ items: ArraySlice<Item>) throws -> Int? {
        var bases: [UnsafeRawPointer?] = []
        var lengths: [Int] = []
        bases.reserveCapacity(items.count)
        lengths.reserveCapacity(items.count)
        // Each array's storage is pinned for the call by nesting its `withUnsafeBytes`.
        func pinned(_ rest: ArraySlice<Item>) throws -> Int? {
            guard let first = rest.first else {
                let r = try syscallAllowingAgain("sendmmsg") {
                    peerlink_send_packets(fd, bases, lengths, Int32(bases.count))
                }
                return r.map(Int.init)
            }
            return try first.bytes.withUnsafeBytes { raw in
                bases.append(raw.baseAddress)
                lengths.append(raw.count)
                return try pinned(rest.dropFirst())
            }
        }
        return try pinned(items)
    }

    /// Asks to be told when the socket takes more. Under the lock.
    func arm(_ s: inout State) {
        if s.writeArmed { return }
        s.writeArmed = true
        watch.want(write: true)
    }

    /// The kernel had no memory for a write (`ENOBUFS`: a large packet needs a contiguous
    /// buffer, which a fragmented board may lack for a moment): not the socket's end, so the
    /// item waits and is tried again after 5 ms, doubling to 640 ms while it lasts. Nothing
    /// signals that memory came back, and the socket still reads as writable, so the write
    /// watch is off meanwhile (it would spin). Under the lock.
    func waitForMemory(_ s: inout State) {
        s.counts.memoryWaits += 1
        guard !s.waitingForMemory else { return }
        let delay: Duration = s.lastMemoryDelay == .zero ? .milliseconds(5) : min(s.lastMemoryDelay * 2, .milliseconds(640))
        s.waitingForMemory = true
        s.lastMemoryDelay = delay
        s.writeArmed = true
        watch.want(write: false)
        queue.asyncAfter(deadline: .now() + delay.dispatchInterval) { [weak self] in
            guard let self else { return }
            self.state.withLock { $0.waitingForMemory = false }
            self.flush(afterMemoryWait: true)
        }
    }

    /// Writes what waits (the socket takes more, or memory may have come back). On the queue.
    func flush(afterMemoryWait: Bool = false) {
        var failure: SystemError?
        let (room, flushed) = state.withLock { s -> ([@Sendable (Bool) -> Void], [@Sendable () -> Void]) in
            guard !s.closed, s.writeArmed, !s.waitingForMemory else { return ([], []) }
            // The kernel took the writes after a memory wait: the next wait starts short again.
            switch drain(&s) {
            case .blocked:
                if afterMemoryWait {
                    s.lastMemoryDelay = .zero
                    // The watch was off while memory was waited for.
                    watch.want(write: true)
                }
            case .noMemory:
                waitForMemory(&s)
            case .failed(let e): failure = e
            case .empty:
                s.lastMemoryDelay = .zero
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
}
