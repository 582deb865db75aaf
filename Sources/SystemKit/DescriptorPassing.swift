// Linux Dispatch has no Sendable annotations; its sources and queues are thread-safe.
@preconcurrency import Dispatch
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Packet socket pairs and descriptors passed over Unix sockets (`SCM_RIGHTS`): how the
/// daemon hands a client a data stream next to its JSON-RPC connection.
public enum DescriptorPassing {
    /// A connected pair of `SOCK_SEQPACKET` Unix sockets (close-on-exec): each `send` on one
    /// end is one `recv` on the other, whole and in order.
    public static func packetPair() throws -> (Int32, Int32) {
        var fds: [Int32] = [-1, -1]
        try syscall("socketpair") { socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) }
        return (fds[0], fds[1])
    }

    // cmsghdr is { size_t len; int level; int type; } followed by data aligned to size_t.
    private static let headerSize = MemoryLayout<cmsghdr>.stride
    private static func align(_ n: Int) -> Int { (n + MemoryLayout<Int>.size - 1) & ~(MemoryLayout<Int>.size - 1) }
    private static func space(fds: Int) -> Int { align(headerSize) + align(fds * 4) }

    /// Sends `bytes` with `descriptors` attached (to the first byte), without `SIGPIPE`.
    /// Returns the bytes sent, or nil when the socket is full (`EAGAIN`). The descriptors are
    /// duplicated into the receiver; the caller still owns (and closes) its own.
    public static func send(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, passing descriptors: [Int32]) throws -> Int? {
        precondition(!bytes.isEmpty && !descriptors.isEmpty, "descriptors travel with at least one byte")
        let control = UnsafeMutableRawBufferPointer.allocate(byteCount: space(fds: descriptors.count), alignment: MemoryLayout<Int>.alignment)
        defer { control.deallocate() }
        control.initializeMemory(as: UInt8.self, repeating: 0)
        let h = control.baseAddress!.assumingMemoryBound(to: cmsghdr.self)
        h.pointee.cmsg_len = align(headerSize) + 4 * descriptors.count
        h.pointee.cmsg_level = SOL_SOCKET
        h.pointee.cmsg_type = Int32(SCM_RIGHTS)
        for (i, d) in descriptors.enumerated() {
            control.storeBytes(of: d, toByteOffset: align(headerSize) + 4 * i, as: Int32.self)
        }
        var iov = iovec(iov_base: UnsafeMutableRawPointer(mutating: bytes.baseAddress), iov_len: bytes.count)
        return try withUnsafeMutablePointer(to: &iov) { iovp in
            var msg = msghdr()
            msg.msg_iov = iovp
            msg.msg_iovlen = 1
            msg.msg_control = control.baseAddress
            msg.msg_controllen = control.count
            return try syscallAllowingAgain("sendmsg") { sendmsg(fd, &msg, Int32(MSG_NOSIGNAL)) }
        }
    }

    /// Reads up to `maxBytes` (blocking unless `fd` is non-blocking) with any descriptors
    /// that came along (close-on-exec; the caller owns them). Empty bytes: end of file; nil:
    /// nothing to read now (`EAGAIN`).
    public static func receive(_ fd: Int32, maxBytes: Int = 65_536) throws -> (bytes: [UInt8], descriptors: [Int32])? {
        let maxFDs = 8
        let control = UnsafeMutableRawBufferPointer.allocate(byteCount: space(fds: maxFDs), alignment: MemoryLayout<Int>.alignment)
        defer { control.deallocate() }
        var buffer = [UInt8](repeating: 0, count: maxBytes)
        var msg = msghdr()
        let n: Int? = try buffer.withUnsafeMutableBytes { raw in
            var iov = iovec(iov_base: raw.baseAddress, iov_len: raw.count)
            return try withUnsafeMutablePointer(to: &iov) { iovp in
                msg.msg_iov = iovp
                msg.msg_iovlen = 1
                msg.msg_control = control.baseAddress
                msg.msg_controllen = control.count
                do {
                    return try syscallAllowingAgain("recvmsg") { recvmsg(fd, &msg, Int32(MSG_CMSG_CLOEXEC)) }
                } catch let e as SystemError where e.code == ECONNRESET {
                    return 0
                }
            }
        }
        guard let n else { return nil }
        buffer.removeSubrange(n...)
        var fds: [Int32] = []
        // Walk the control messages (CMSG_FIRSTHDR / CMSG_NXTHDR).
        var offset = 0
        let total = Int(msg.msg_controllen)
        while offset + headerSize <= total {
            let h = control.baseAddress!.advanced(by: offset).assumingMemoryBound(to: cmsghdr.self)
            let len = Int(h.pointee.cmsg_len)
            guard len >= headerSize, offset + len <= total else { break }
            if h.pointee.cmsg_level == SOL_SOCKET, h.pointee.cmsg_type == Int32(SCM_RIGHTS) {
                let count = (len - align(headerSize)) / 4
                for i in 0..<count {
                    fds.append(control.load(fromByteOffset: offset + align(headerSize) + 4 * i, as: Int32.self))
                }
            }
            offset += align(len)
        }
        return (buffer, fds)
    }
}

/// Awaits readiness of a descriptor (readable or writable) without blocking a thread: a
/// Dispatch source that runs only while someone waits, for a loop that reads or writes
/// until `EAGAIN` and then waits here (`wait()`), or calls back (`whenReady`).
public final class ReadinessWaiter: Sendable {
    public enum Kind: Sendable { case read, write }
    private let fd: Int32
    private let kind: Kind
    private let source: DispatchSourceProtocol
    private let state = Mutex(State())

    private struct State {
        var activated = false
        var running = false
        var cancelled = false
        var waiters: [@Sendable (Bool) -> Void] = []
    }

    /// A waiter for `fd` (which the caller keeps owning and closes after `cancel()`).
    public init(fd: Int32, kind: Kind, queue: DispatchQueue) {
        self.fd = fd
        self.kind = kind
        source = kind == .read ? DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
                               : DispatchSource.makeWriteSource(fileDescriptor: fd, queue: queue)
        source.setEventHandler { [weak self] in self?.ready() }
    }

    deinit { cancel() }

    /// Runs `handler` once the source is cancelled and released by Dispatch (after which the
    /// descriptor may be closed). Set before the first `wait()`.
    public func onCancelled(_ handler: @escaping @Sendable () -> Void) { source.setCancelHandler { handler() } }

    /// Returns true once `fd` is ready (or may be: callers retry their call), false when the
    /// waiter was cancelled.
    public func wait() async -> Bool {
        await withCheckedContinuation { (c: CheckedContinuation<Bool, Never>) in
            whenReady { c.resume(returning: $0) }
        }
    }

    /// Calls `handler` once, as `wait()` returns: true when `fd` is (or may be) ready, false
    /// when the waiter was cancelled. It may run before `whenReady` returns, on the caller's
    /// thread: call this without holding a lock that `handler` takes.
    public func whenReady(_ handler: @escaping @Sendable (Bool) -> Void) {
        let waiting = state.withLock { s -> Bool in
            if s.cancelled { return false }
            s.waiters.append(handler)
            // Suspend and resume are balanced under the lock (an unbalanced resume crashes).
            if !s.activated {
                s.activated = true
                s.running = true
                source.activate()
            } else if !s.running {
                s.running = true
                source.resume()
            }
            return true
        }
        guard waiting else { return handler(false) }
        // Readiness that came before the source ran is not reported again (edge-triggered).
        var p = pollfd(fd: fd, events: Int16(kind == .read ? POLLIN : POLLOUT), revents: 0)
        if poll(&p, 1, 0) == 1 { ready() }
    }

    private func ready() {
        let waiters = state.withLock { s -> [@Sendable (Bool) -> Void] in
            let list = s.waiters
            s.waiters = []
            if s.running && !s.cancelled {
                s.running = false
                source.suspend()
            }
            return list
        }
        for h in waiters { h(true) }
    }

    /// Stops waiting: current and later waits end with false.
    public func cancel() {
        let waiters = state.withLock { s -> [@Sendable (Bool) -> Void] in
            if s.cancelled { return [] }
            s.cancelled = true
            source.cancel()
            // A cancelled source must be activated and not suspended to be released.
            if !s.activated {
                s.activated = true
                source.activate()
            } else if !s.running {
                source.resume()
            }
            s.running = true
            let list = s.waiters
            s.waiters = []
            return list
        }
        for h in waiters { h(false) }
    }
}

/// A descriptor that one reader holds until it lets it go, and that others may close
/// meanwhile (to stop the reader): both under one lock, so closing never touches a
/// descriptor the reader has already let go (and the system may have reused).
public final class HeldDescriptor: Sendable {
    private let state = Mutex((closed: false, released: false))

    public init() {}

    /// Whether `close` was called (by either side).
    public var isClosed: Bool { state.withLock { $0.closed } }

    /// Marks it closed; true for the first caller. `whileHeld` (e.g. `shutdown`) runs under
    /// the lock, and only while the reader still holds the descriptor.
    @discardableResult
    public func close(_ whileHeld: () -> Void = {}) -> Bool {
        state.withLock { s in
            if s.closed { return false }
            s.closed = true
            if !s.released { whileHeld() }
            return true
        }
    }

    /// The reader lets the descriptor go; `letGo` (e.g. closing it) runs under the lock.
    public func release(_ letGo: () -> Void = {}) {
        state.withLock { s in
            s.released = true
            letGo()
        }
    }
}

/// Writes packets to a (packet) socket without blocking the caller: what the socket does not
/// take at once waits in a bounded queue and goes out when there is room; beyond `maxQueued`
/// waiting packets, new ones are dropped and counted. The other end closing (seen as the end
/// of reading, or `EPIPE`) is reported once through `onEnd`; `close()` ends it from here.
public final class PacketWriter: Sendable {
    public let fd: Int32
    private let maxQueued: Int
    private let queue: DispatchQueue
    private let readSource: DispatchSourceRead
    /// Calls `flush` when a full socket has room again.
    private let writable: ReadinessWaiter
    private let state = Mutex(State())
    private let onEnd: @Sendable (String) -> Void

    private struct State {
        var pending: [[UInt8]] = []
        var head = 0
        var dropped: UInt64 = 0
        var written: UInt64 = 0
        var closed = false
        /// A `flush` waits for room.
        var armed = false
    }

    /// Takes ownership of `fd` (made non-blocking) and starts watching for its end.
    public init(fd: Int32, label: String, maxQueued: Int = 4096, onEnd: @escaping @Sendable (String) -> Void) {
        self.fd = fd
        self.maxQueued = maxQueued
        self.onEnd = onEnd
        try? setNonBlocking(fd)
        queue = DispatchQueue(label: "peerlink.packets.\(label)", target: .global(qos: .userInitiated))
        readSource = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
        writable = ReadinessWaiter(fd: fd, kind: .write, queue: queue)
        let sourcesDone = DispatchGroup()
        sourcesDone.enter()
        sourcesDone.enter()
        readSource.setCancelHandler { sourcesDone.leave() }
        writable.onCancelled { sourcesDone.leave() }
        sourcesDone.notify(queue: queue) { closeQuietly(fd) }
        readSource.setEventHandler { [weak self] in self?.readable() }
        readSource.activate()
    }

    deinit { close() }

    /// Packets written so far, and dropped because too many waited.
    public var counts: (written: UInt64, dropped: UInt64) { state.withLock { ($0.written, $0.dropped) } }

    /// Sends `packets` in order after any that wait.
    public func send(_ packets: [[UInt8]]) {
        let outcome = state.withLock { s -> Drained in
            if s.closed { return .done }
            for p in packets {
                if s.pending.count - s.head >= maxQueued {
                    s.dropped += 1
                } else {
                    s.pending.append(p)
                }
            }
            return drain(&s)
        }
        after(outcome)
    }

    private enum Drained { case done, arm, failed(String) }

    /// Writes what waits until the socket is full. Under the lock; `.arm`: wait for room
    /// (outside the lock: the waiter may call back at once).
    private func drain(_ s: inout State) -> Drained {
        while s.head < s.pending.count {
            let n = s.pending[s.head].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT | MSG_NOSIGNAL)) }
            if n >= 0 {
                s.head += 1
                s.written += 1
                continue
            }
            let e = errno
            if e == EINTR { continue }
            if e == EAGAIN || e == EWOULDBLOCK {
                if s.armed { return .done }
                s.armed = true
                return .arm
            }
            return .failed(e == EPIPE || e == ECONNRESET ? "the client closed its socket" : SystemError(call: "send", code: e).description)
        }
        s.pending.removeAll(keepingCapacity: true)
        s.head = 0
        return .done
    }

    private func after(_ outcome: Drained) {
        switch outcome {
        case .done: break
        case .arm: writable.whenReady { [weak self] ready in if ready { self?.flush() } }
        case .failed(let why): end(why)
        }
    }

    private func flush() {
        let outcome = state.withLock { s -> Drained in
            s.armed = false
            return s.closed ? .done : drain(&s)
        }
        after(outcome)
    }

    private func readable() {
        // The client sends nothing on this socket: data is discarded; the end is the signal.
        var buf = [UInt8](repeating: 0, count: 512)
        while true {
            let n = recv(fd, &buf, buf.count, Int32(MSG_DONTWAIT))
            if n > 0 { continue }
            let e = errno
            if n < 0 && (e == EAGAIN || e == EINTR) { return }
            end(n == 0 || e == ECONNRESET ? "the client closed its socket" : SystemError(call: "recv", code: e).description)
            return
        }
    }

    private func end(_ why: String) {
        if close() { onEnd(why) }
    }

    /// Stops: the other end sees the end of the socket. True for the first call.
    @discardableResult
    public func close() -> Bool {
        let first = state.withLock { s -> Bool in
            if s.closed { return false }
            s.closed = true
            s.pending = []
            return true
        }
        if first {
            _ = shutdown(fd, Int32(SHUT_RDWR))
            readSource.cancel()
            writable.cancel()
        }
        return first
    }
}
