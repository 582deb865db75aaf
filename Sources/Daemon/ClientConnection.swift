// Linux Dispatch has no Sendable annotations; its sources and queues are thread-safe.
@preconcurrency import Dispatch
import Control
import Logging
import Synchronization
import SystemKit
#if canImport(Glibc)
import Glibc
#endif

/// One client of the control socket: reads request lines, writes replies and events.
///
/// All I/O runs on the client's own serial queue with Dispatch sources (no thread per
/// client, no polling). Lines go, in order, to the request stream; the server answers them
/// one at a time, so a client's requests take effect in the order it sent them.
final class ClientConnection: Sendable {
    /// A number for logs and events.
    let id: UInt64
    let fd: Int32
    let queue: DispatchQueue
    private let readSource: DispatchSourceRead
    private let writeSource: DispatchSourceWrite
    private let state: Mutex<State>
    private let lines: AsyncStream<Line>.Continuation
    private let limits: ControlServerOptions
    private let logger: Logger
    private let onClose: @Sendable (UInt64) -> Void

    /// What the reader hands to the request loop.
    enum Line: Sendable {
        /// A complete request line.
        case request([UInt8])
        /// The line was too long: answer with this error, then close.
        case fatal(RPCError)
    }

    private struct State {
        var framer: LineFramer
        var outbox: [UInt8] = []
        var outboxStart = 0
        /// Descriptors to pass (SCM_RIGHTS) with the outbox byte at `offset`, in order.
        var passes: [(offset: Int, fds: [Int32])] = []
        var writeArmed = false
        var writeActivated = false
        /// A flush is queued and will take whatever the outbox holds when it runs.
        var flushScheduled = false
        var closed = false
        var closeWhenFlushed = false
        var partialTimer: DispatchSourceTimer?
        /// Event topic filters; nil when the client has not subscribed.
        var topics: [String]?
        /// Run once when the connection closes (resources owned by the connection).
        var closeHandlers: [@Sendable () -> Void] = []
    }

    private init(id: UInt64, fd: Int32, limits: ControlServerOptions, logger: Logger,
                 lines: AsyncStream<Line>.Continuation, onClose: @escaping @Sendable (UInt64) -> Void) {
        self.id = id
        self.fd = fd
        self.limits = limits
        self.logger = logger.with("client.id", "\(id)")
        self.lines = lines
        self.onClose = onClose
        // A serial queue on the shared pool: one thread per client would not scale.
        queue = DispatchQueue(label: "peerlink.client.\(id)", target: .global(qos: .userInitiated))
        readSource = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
        writeSource = DispatchSource.makeWriteSource(fileDescriptor: fd, queue: queue)
        state = Mutex(State(framer: LineFramer(maxLineBytes: limits.maxLineBytes)))
    }

    /// Creates a connection for an accepted descriptor and starts reading.
    static func make(id: UInt64, fd: Int32, limits: ControlServerOptions, logger: Logger,
                     onClose: @escaping @Sendable (UInt64) -> Void) -> (ClientConnection, AsyncStream<Line>) {
        let (stream, continuation) = AsyncStream<Line>.makeStream()
        let c = ClientConnection(id: id, fd: fd, limits: limits, logger: logger, lines: continuation, onClose: onClose)
        c.readSource.setEventHandler { [weak c] in c?.readable() }
        c.writeSource.setEventHandler { [weak c] in c?.flush() }
        // The descriptor is closed only after both sources are cancelled (Dispatch's rule);
        // the read side may end early (the client half-closed) while replies still go out.
        let sourcesDone = DispatchGroup()
        sourcesDone.enter()
        sourcesDone.enter()
        c.readSource.setCancelHandler { sourcesDone.leave() }
        c.writeSource.setCancelHandler { sourcesDone.leave() }
        sourcesDone.notify(queue: c.queue) { closeQuietly(fd) }
        c.readSource.activate()
        return (c, stream)
    }

    // MARK: Reading (on the queue)

    private func readable() {
        // Dispatch's read sources on Linux are edge-triggered: read until the socket is empty
        // (EAGAIN) or at its end, or an end that came with the last data is never reported.
        // Uninitialised: read(2) fills what is used (no 64 KiB memset per readable event).
        var buf = [UInt8](unsafeUninitializedCapacity: 65_536) { _, count in count = 65_536 }
        for _ in 0..<16 {
            if state.withLock({ $0.closed }) || readSource.isCancelled { return }
            let n: Int?
            do {
                n = try buf.withUnsafeMutableBytes { b in
                    try syscallAllowingAgain("read") { read(fd, b.baseAddress, b.count) }
                }
            } catch {
                logger.debug("read failed", ["error": "\(error)"])
                close()
                return
            }
            guard let n else { return }  // drained
            if n == 0 {
                // The client is done sending; requests already read are still answered.
                readSource.cancel()
                lines.finish()
                cancelPartialTimer()
                return
            }
            if !take(buf[0..<n]) { return }
        }
        // Still more to read: come back after other clients had their turn.
        queue.async { [weak self] in self?.readable() }
    }

    /// Frames received bytes into lines for the request loop; false when the connection must stop reading.
    private func take(_ bytes: ArraySlice<UInt8>) -> Bool {
        var out: [Line] = []
        var tooLong = false
        state.withLock { s in
            s.framer.append(bytes)
            while true {
                do {
                    guard let line = try s.framer.nextLine() else { break }
                    // Blank lines between requests are tolerated.
                    if !line.allSatisfy({ $0 == 0x20 || $0 == 0x09 }) { out.append(.request(line)) }
                } catch {
                    tooLong = true
                    break
                }
            }
        }
        for l in out { lines.yield(l) }
        if tooLong {
            // Stop reading: the rest of that line is not worth buffering. Answer, then close.
            readSource.cancel()
            lines.yield(.fatal(RPCError(code: RPCErrorCode.requestTooLarge,
                                        message: "request too large: a request line may be at most \(limits.maxLineBytes) bytes",
                                        data: ["limit": .int(Int64(limits.maxLineBytes))])))
            lines.finish()
            cancelPartialTimer()
            return false
        }
        armPartialTimerIfNeeded()
        return true
    }

    /// A client that starts a line must finish it within the request timeout.
    private func armPartialTimerIfNeeded() {
        let partial = state.withLock { $0.framer.bufferedByteCount > 0 }
        if !partial {
            cancelPartialTimer()
            return
        }
        let needTimer = state.withLock { $0.partialTimer == nil }
        guard needTimer else { return }
        let t = DispatchSource.makeTimerSource(queue: queue)
        t.schedule(deadline: .now() + limits.requestTimeout)
        t.setEventHandler { [weak self] in
            guard let self else { return }
            self.logger.info("closing client: request line not finished in time")
            self.send(RPCResponse(id: .null, error: RPCError(
                code: RPCErrorCode.invalidRequest,
                message: "invalid request: no end of line within \(limits.requestTimeout) s of the line's start",
                data: ["timeout_seconds": .double(limits.requestTimeout)])).encodedLine(), thenClose: true)
        }
        t.activate()
        state.withLock { $0.partialTimer = t }
    }

    private func cancelPartialTimer() {
        state.withLock { s in
            s.partialTimer?.cancel()
            s.partialTimer = nil
        }
    }

    // MARK: Writing (from any thread)

    /// Queues bytes to send; with `thenClose`, closes once they are written. `passing`:
    /// descriptors that travel with the first of these bytes (SCM_RIGHTS); the connection owns
    /// them from now on and closes its copies once they are sent (or it closes).
    ///
    /// The bytes join the outbox at once, in call order; one write is scheduled on the queue
    /// for whatever accumulates until it runs, so replies produced in quick succession (a
    /// pipelining client) go out together in one `send`.
    func send(_ bytes: [UInt8], thenClose: Bool = false, passing: [Int32] = []) {
        let (schedule, drop, refused) = state.withLock { s -> (Bool, Bool, [Int32]) in
            if s.closed { return (false, false, passing) }
            if !passing.isEmpty {
                if bytes.isEmpty { return (false, false, passing) }
                s.passes.append((s.outbox.count, passing))
            }
            s.outbox.append(contentsOf: bytes)
            if thenClose { s.closeWhenFlushed = true }
            if s.outbox.count - s.outboxStart > limits.maxOutboundBytes { return (false, true, []) }
            if s.flushScheduled { return (false, false, []) }
            s.flushScheduled = true
            return (true, false, [])
        }
        for fd in refused { closeQuietly(fd) }
        if drop {
            logger.warning("closing client: it is not reading (more than \(limits.maxOutboundBytes) bytes waiting)")
            close()
            return
        }
        if schedule {
            queue.async { [self] in
                state.withLock { $0.flushScheduled = false }
                flush()
            }
        }
    }

    /// Writes as much as the socket takes. On the queue.
    private func flush() {
        while true {
            // A chunk ends where the next descriptors are attached: they go with its first byte.
            let next: (chunk: [UInt8], fds: [Int32])? = state.withLock { s in
                if s.closed || s.outboxStart >= s.outbox.count { return nil }
                var end = min(s.outbox.count, s.outboxStart + 262_144)
                var fds: [Int32] = []
                if let p = s.passes.first {
                    if p.offset == s.outboxStart {
                        fds = p.fds
                        if s.passes.count > 1 { end = min(end, s.passes[1].offset) }
                    } else {
                        end = min(end, p.offset)
                    }
                }
                return (Array(s.outbox[s.outboxStart..<end]), fds)
            }
            guard let next else { break }
            let n: Int?
            do {
                n = try next.chunk.withUnsafeBytes { b in
                    if !next.fds.isEmpty { return try DescriptorPassing.send(fd, b, passing: next.fds) }
                    return try syscallAllowingAgain("send") { Glibc.send(fd, b.baseAddress, b.count, Int32(MSG_NOSIGNAL)) }
                }
            } catch {
                // The client went away; what it asked for cannot be delivered.
                logger.debug("client gone while writing", ["error": "\(error)"])
                close()
                return
            }
            guard let n else {
                setWriteArmed(true)
                return
            }
            if !next.fds.isEmpty {
                // The client has its copies now.
                state.withLock { _ = $0.passes.removeFirst() }
                for d in next.fds { closeQuietly(d) }
            }
            state.withLock { s in
                s.outboxStart += n
                if s.outboxStart == s.outbox.count {
                    s.outbox.removeAll(keepingCapacity: s.outbox.count < 1_048_576)
                    s.outboxStart = 0
                } else if s.outboxStart > 1_048_576 {
                    s.outbox.removeFirst(s.outboxStart)
                    for i in s.passes.indices { s.passes[i].offset -= s.outboxStart }
                    s.outboxStart = 0
                }
            }
        }
        setWriteArmed(false)
        if state.withLock({ $0.closeWhenFlushed && !$0.closed }) { close() }
    }

    private func setWriteArmed(_ on: Bool) {
        let (change, firstTime) = state.withLock { s -> (Bool, Bool) in
            guard s.writeArmed != on, !s.closed else { return (false, false) }
            s.writeArmed = on
            let first = on && !s.writeActivated
            if first { s.writeActivated = true }
            return (true, first)
        }
        guard change else { return }
        if firstTime { writeSource.activate() } else if on { writeSource.resume() } else { writeSource.suspend() }
    }

    // MARK: Events

    /// Sets the event topics (nil: none).
    func setTopics(_ topics: [String]?) { state.withLock { $0.topics = topics } }

    /// The event topics, nil when not subscribed.
    var topics: [String]? { state.withLock { $0.topics } }

    // MARK: Closing

    /// Runs `handler` when the connection closes (at once if it is closed already).
    func addCloseHandler(_ handler: @escaping @Sendable () -> Void) {
        let closed = state.withLock { s -> Bool in
            if !s.closed { s.closeHandlers.append(handler) }
            return s.closed
        }
        if closed { handler() }
    }

    /// Closes the connection now (from any thread).
    func close() {
        queue.async { [self] in
            let closing = state.withLock { s -> (armed: Bool, activated: Bool, timer: DispatchSourceTimer?, handlers: [@Sendable () -> Void])? in
                if s.closed { return nil }
                s.closed = true
                s.outbox = []
                for p in s.passes { for d in p.fds { closeQuietly(d) } }
                s.passes = []
                let t = s.partialTimer
                s.partialTimer = nil
                let h = s.closeHandlers
                s.closeHandlers = []
                return (s.writeArmed, s.writeActivated, t, h)
            }
            guard let closing else { return }
            for h in closing.handlers { h() }
            closing.timer?.cancel()
            lines.finish()
            // Cancel both sources; a suspended or never-activated source must be resumed or
            // activated so its cancel handler runs (and so it may be released).
            if !readSource.isCancelled { readSource.cancel() }
            writeSource.cancel()
            if !closing.activated { writeSource.activate() } else if !closing.armed { writeSource.resume() }
            onClose(id)
        }
    }

    /// Whether the connection is closed.
    var isClosed: Bool { state.withLock { $0.closed } }
}
