// Linux Dispatch has no Sendable annotations; its sources and queues are thread-safe.
@preconcurrency import Dispatch
import Control
import Logging
import Synchronization
import SystemKit

/// One client of the control socket: reads request lines, writes replies and events.
///
/// All I/O runs through one `Channel` on the client's own serial queue (no thread per
/// client, no polling). Lines go, in order, to `onLines` on that queue; the server answers
/// them one at a time, so a client's requests take effect in the order it sent them.
final class ClientConnection: Sendable {
    /// A number for logs and events.
    let id: UInt64
    /// The client's serial queue: reading, the partial-line timer and quick requests run here.
    let queue: DispatchQueue
    private let channel: Channel
    private let state: Mutex<State>
    private let limits: ControlServerOptions
    private let logger: Logger
    private let onClose: @Sendable (UInt64) -> Void

    /// What the reader hands to the request loop.
    enum Line: Sendable {
        /// A complete request line, and the descriptors passed with it.
        case request([UInt8], PassedDescriptors?)
        /// The line was too long: answer with this error, then close.
        case fatal(RPCError)

        /// The memory it holds, about.
        var byteCount: Int {
            if case .request(let bytes, _) = self { return bytes.count }
            return 0
        }
    }

    private struct State {
        var framer: LineFramer
        var closed = false
        /// close() was called: what is still answered on the queue before it runs is dropped.
        var closing = false
        var inputDone = false
        var partialTimer: DispatchSourceTimer?
        /// Not read while its requests wait (`holdInput`).
        var held = false
        /// Bytes handed to `take` so far: which of them the passed descriptors came with.
        var bytesTaken: UInt64 = 0
        /// Descriptors passed with the line being read, for it once it ends.
        var unfinishedLineDescriptors: [Int32] = []
        /// Descriptors passed and held for lines not yet answered (at most
        /// `Channel.maxHeldDescriptors`; more are closed as they come).
        var heldDescriptors = 0
        /// Event topic filters; nil when the client has not subscribed.
        var topics: [String]?
        /// Run once when the connection closes (what the client made and owns), each while its
        /// `alive` says the thing it ends still exists.
        var closeHandlers: [CloseHandler] = []
        var nextCloseHandler: UInt64 = 0
    }

    /// Creates a connection for an accepted descriptor (it may send at once; `start` reads).
    init(id: UInt64, fd: Int32, limits: ControlServerOptions, logger: Logger, onClose: @escaping @Sendable (UInt64) -> Void) {
        self.id = id
        self.limits = limits
        self.logger = logger.with("client.id", "\(id)")
        self.onClose = onClose
        // A serial queue on the shared pool: one thread per client would not scale.
        queue = DispatchQueue(label: "peerlink.client.\(id)", target: .global(qos: .userInitiated))
        // Descriptors a client passes (a resource's bytes) wait for the request that takes them.
        channel = Channel(fd: fd, mode: .stream, label: "client.\(id)", queue: queue, outboxLimit: limits.maxOutboundBytes,
                          receivesDescriptors: true)
        state = Mutex(State(framer: LineFramer(maxLineBytes: limits.maxLineBytes)))
    }

    /// Starts reading: `onLines` gets complete lines in order, and `onInputEnd` once when no
    /// more will come (both on `queue`).
    func start(onLines: @escaping @Sendable ([Line]) -> Void, onInputEnd: @escaping @Sendable () -> Void) {
        channel.start(onInput: { [weak self] chunks in
            guard let self else { return }
            var out: [Line] = []
            var ended = false
            for chunk in chunks where !self.take(chunk, &out, ended: &ended) { break }
            if !out.isEmpty { onLines(out) }
            if ended { onInputEnd() }
        }, onEnd: { [weak self] end in
            guard let self else { return }
            switch end {
            case .peerClosed:
                // The client is done sending; requests already read are still answered.
                if self.endInput() { onInputEnd() }
            case .failed(let e):
                self.logger.debug("client gone", ["error": "\(e)"])
                self.close()
            }
        })
    }

    // MARK: Reading (on the queue)

    /// No more lines: true the first time.
    private func endInput() -> Bool {
        let first = state.withLock { s -> Bool in
            if s.inputDone { return false }
            s.inputDone = true
            return true
        }
        cancelPartialTimer()
        return first
    }

    /// Frames received bytes into lines; false when the connection must stop reading.
    private func take(_ bytes: [UInt8], _ out: inout [Line], ended: inout Bool) -> Bool {
        var tooLong = false
        // A line begun in these bytes (after one they ended, or with none unfinished before)
        // has its own time to finish: the timer starts again.
        var lineBegun = false
        let through = state.withLock { s -> UInt64 in
            s.bytesTaken += UInt64(bytes.count)
            return s.bytesTaken
        }
        let passed = channel.takeDescriptors(through: through)
        var toClose: [Int32] = []
        defer { for fd in toClose { closeQuietly(fd) } }
        let done = state.withLock { s -> Bool in
            if s.inputDone || s.closed || s.closing {
                toClose = passed
                return true
            }
            var ended = s.framer.bufferedByteCount == 0
            s.framer.append(bytes[...])
            var lines: [[UInt8]] = []
            while true {
                do {
                    guard let line = try s.framer.nextLine() else { break }
                    ended = true
                    lines.append(line)
                } catch {
                    tooLong = true
                    break
                }
            }
            lineBegun = ended && s.framer.bufferedByteCount > 0
            // The descriptors belong to the line that holds the last of these bytes (the read
            // that brought them ended there): the unfinished one, or the last line ended here.
            let room = max(0, Channel.maxHeldDescriptors - s.heldDescriptors)
            toClose += passed.dropFirst(room)
            let kept = Array(passed.prefix(room))
            s.heldDescriptors += kept.count
            var perLine = [[Int32]](repeating: [], count: lines.count)
            if !lines.isEmpty {
                perLine[0] = s.unfinishedLineDescriptors
                s.unfinishedLineDescriptors = []
            }
            if lines.isEmpty || s.framer.bufferedByteCount > 0 { s.unfinishedLineDescriptors += kept } else { perLine[lines.count - 1] += kept }
            for (line, fds) in zip(lines, perLine) {
                // Blank lines between requests are tolerated (what came with one is closed).
                if line.allSatisfy({ $0 == 0x20 || $0 == 0x09 }) {
                    toClose += fds
                    s.heldDescriptors -= fds.count
                    continue
                }
                out.append(.request(line, fds.isEmpty ? nil : PassedDescriptors(fds) { [weak self] n in self?.released(n) }))
            }
            return false
        }
        if done { return false }
        if tooLong {
            // Stop reading: the rest of that line is not worth buffering. Answer, then close.
            channel.pauseReading()
            out.append(.fatal(RPCError(code: RPCErrorCode.requestTooLarge,
                                       message: "request too large: a request line may be at most \(limits.maxLineBytes) bytes",
                                       data: ["limit": .int(Int64(limits.maxLineBytes))])))
            ended = endInput()
            return false
        }
        armPartialTimerIfNeeded(restart: lineBegun)
        return true
    }

    /// A client that starts a line must finish it within the request timeout, from the
    /// line's start (`restart`: a new line began), while the connection reads it.
    private func armPartialTimerIfNeeded(restart: Bool) {
        let partial = state.withLock { $0.framer.bufferedByteCount > 0 && !$0.held }
        if !partial || restart { cancelPartialTimer() }
        guard partial else { return }
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

    /// Stops reading while the requests read wait to be answered (a client that writes
    /// faster than its requests are answered waits in its writes, instead of the daemon
    /// keeping every line). The line being read meanwhile is not timed. On the queue.
    func holdInput() {
        state.withLock { $0.held = true }
        cancelPartialTimer()
        channel.pauseReading()
    }

    /// Reads again after `holdInput`; the unfinished line, if any, is timed afresh. On the queue.
    func releaseInput() {
        let wasHeld = state.withLock { s -> Bool in
            defer { s.held = false }
            return s.held
        }
        guard wasHeld else { return }
        armPartialTimerIfNeeded(restart: true)
        channel.resumeReading()
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
    /// The bytes go out at once when nothing waits before them, else join the outbox in call
    /// order; a client that lets more than `maxOutboundBytes` wait is dropped.
    func send(_ bytes: [UInt8], thenClose: Bool = false, passing: [Int32] = []) {
        // Descriptors travel with a byte: with none, they are refused.
        switch bytes.isEmpty ? (passing.isEmpty ? .accepted : .closed) : channel.send(bytes, passing: passing) {
        case .accepted: break
        case .closed:
            for fd in passing { closeQuietly(fd) }
        case .full:
            for fd in passing { closeQuietly(fd) }
            if close() { logger.warning("closing client: it is not reading (more than \(limits.maxOutboundBytes) bytes waiting)") }
            return
        }
        if thenClose { channel.whenFlushed { [weak self] in self?.close() } }
    }

    /// `count` descriptors passed with a line are no longer held (taken, or closed).
    private func released(_ count: Int) {
        state.withLock { $0.heldDescriptors -= count }
    }

    // MARK: Events

    /// Sets the event topics (nil: none).
    func setTopics(_ topics: [String]?) { state.withLock { $0.topics = topics } }

    /// The event topics, nil when not subscribed.
    var topics: [String]? { state.withLock { $0.topics } }

    // MARK: Closing

    /// What ends one thing the client made when the connection closes.
    struct CloseHandler {
        let number: UInt64
        /// False once the thing has ended by itself: the handler is dropped then.
        let alive: @Sendable () -> Bool
        let run: @Sendable () -> Void
    }

    /// Runs `handler` when the connection closes (at once if it is closed already), unless
    /// `alive` says by then that what it ends has ended by itself. Handlers whose thing has
    /// ended are dropped as the next one is added, so a client that opens and ends thousands
    /// of streams keeps one handler per stream still open, not one per stream ever opened.
    func addCloseHandler(while alive: @escaping @Sendable () -> Bool, _ handler: @escaping @Sendable () -> Void) {
        // Asked outside the lock: `alive` takes its owner's lock, which may be held by one
        // waiting for this connection's. Dropped by number: another call may add or drop
        // handlers between the two locks.
        let old = state.withLock { $0.closeHandlers }
        let ended = Set(old.lazy.filter { !$0.alive() }.map(\.number))
        let closed = state.withLock { s -> Bool in
            if s.closed { return true }
            if !ended.isEmpty { s.closeHandlers.removeAll { ended.contains($0.number) } }
            s.closeHandlers.append(CloseHandler(number: s.nextCloseHandler, alive: alive, run: handler))
            s.nextCloseHandler += 1
            return false
        }
        if closed && alive() { handler() }
    }

    /// Close handlers kept now (for tests: those of ended things go as the next is added).
    var closeHandlerCount: Int { state.withLock { $0.closeHandlers.count } }

    /// Closes the connection (from any thread; on its queue, so whatever runs there now sees
    /// `isClosed` at once and the close right after); true the first time.
    @discardableResult
    func close() -> Bool {
        let first = state.withLock { s -> Bool in
            if s.closing { return false }
            s.closing = true
            return true
        }
        guard first else { return false }
        queue.async { [self] in
            let closing = state.withLock { s -> (timer: DispatchSourceTimer?, handlers: [CloseHandler])? in
                if s.closed { return nil }
                s.closed = true
                let t = s.partialTimer
                s.partialTimer = nil
                for fd in s.unfinishedLineDescriptors { closeQuietly(fd) }
                s.unfinishedLineDescriptors = []
                let h = s.closeHandlers
                s.closeHandlers = []
                return (t, h)
            }
            guard let closing else { return }
            for h in closing.handlers where h.alive() { h.run() }
            closing.timer?.cancel()
            // Out of the server's table before the client can see the close: once it has read
            // its end of the socket, `daemon.status` no longer counts it (the other order let
            // a status request between the two count a client that had already gone).
            onClose(id)
            channel.close()
        }
        return true
    }

    /// Whether the connection is closed or closing.
    var isClosed: Bool { state.withLock { $0.closed || $0.closing } }
}
