// Linux Dispatch has no Sendable annotations; its queues are thread-safe.
@preconcurrency import Dispatch
import Synchronization
internal import CEpoll
#if canImport(Glibc)
import Glibc
#endif

/// Readiness of one descriptor, reported on a serial queue: the one readiness mechanism of the
/// project (`Channel`'s sockets, libdbus's and Avahi's watches).
///
/// One thread of the process waits in `epoll_wait` for every watch (`Reactor`). A watch is
/// registered one-shot: when its descriptor is ready for what is wanted, the handler for that
/// direction is queued on the watch's queue, and the direction is armed again only after the
/// handler has run (so a handler never runs twice at once, and a descriptor that stays ready
/// fires again: level-triggered, one wakeup per handler run).
///
/// Why not Dispatch's read and write sources, which the project used before: libdispatch's
/// epoll backend on Linux frees its per-descriptor bookkeeping (the "muxnote") while an event
/// it has already read from epoll may still point at it, and its manager thread then crashes
/// in `_dispatch_event_loop_drain` ("Bad pointer dereference"). It happens when sources are
/// made and cancelled at a high rate from several threads (swift-corelibs-libdispatch issue
/// 949, SR-12079; open upstream), which is what a daemon with many short-lived clients and
/// sockets does; the unit suite hit it about once in a dozen runs. Here an event carries a
/// token, never a pointer: a token whose watch is gone is looked up, not found, and ignored.
/// The descriptor is removed from epoll (`EPOLL_CTL_DEL`) when the watch is cancelled, before
/// it is closed, so a new descriptor with the same number never meets an old registration.
///
/// The queue must be serial: `cancel`'s completion is queued behind every handler already
/// queued, which is what makes "no handler runs after the completion" hold.
///
/// Reads inline (`setInlineReads`): a watch may have its read handler run on the reactor's
/// own thread, inside its queue (`sync`: exclusive with everything else on the queue, as an
/// async handler is), while a predicate of its owner's holds. That saves the hand-off to a
/// worker thread, a wakeup per event: on the host it cut a message's round trip through two
/// daemons (four crossings) from 0.109-0.137 ms to 0.079-0.083 (p50, `make bench`). The
/// price is that every other descriptor waits while such a handler runs (and while its
/// queue finishes what it is doing), so only owners whose read handler does a bounded amount
/// of work without blocking use it: a peer connection (not while it receives a file, whose
/// finish waits for the disk) and a message stream, each reading at most 64 KiB inline.
public final class DescriptorWatch: Sendable {
    /// The descriptor watched: the one handed over, or a private duplicate.
    public let fd: Int32
    private let closesDescriptor: Bool
    private let queue: DispatchQueue
    private let token: UInt64
    private let state: Mutex<State>

    private struct State {
        var onReadable: (@Sendable () -> Void)?
        var onWritable: (@Sendable () -> Void)?
        /// The read handler to run on the reactor's thread, and when (`setInlineReads`).
        var onReadableInline: (@Sendable () -> Void)?
        var inlineWhen: (@Sendable () -> Bool)?
        var wantRead = false
        var wantWrite = false
        /// A handler is queued or running for that direction (not armed meanwhile).
        var readBusy = false
        var writeBusy = false
        /// What epoll listens for now (nothing after it fired: one-shot).
        var armedIn = false
        var armedOut = false
        /// epoll refused the descriptor: a wanted direction is treated as always ready.
        var unregistered: Bool
        var cancelled = false
    }

    /// Watches `fd`, which the watch now owns: it is closed once the watch is cancelled and
    /// every handler has run. Nothing is reported before `setHandlers` and `want`.
    public convenience init(owning fd: Int32, queue: DispatchQueue) {
        self.init(fd: fd, closes: true, queue: queue)
    }

    /// Watches a private duplicate (close-on-exec) of `fd`, a descriptor someone else owns
    /// and may close as soon as it has cancelled the watch (libdbus, Avahi): the duplicate
    /// keeps the number taken until the watch is done with it.
    public convenience init(duplicating fd: Int32, queue: DispatchQueue) throws {
        let dup = try syscall("fcntl", context: "F_DUPFD_CLOEXEC") { fcntl(fd, F_DUPFD_CLOEXEC, 0) }
        self.init(fd: dup, closes: true, queue: queue)
    }

    private init(fd: Int32, closes: Bool, queue: DispatchQueue) {
        self.fd = fd
        self.closesDescriptor = closes
        self.queue = queue
        let reactor = Reactor.shared
        token = reactor.nextToken()
        // Registered with no interest yet; epoll refuses regular files (EPERM), which are
        // always ready, and a bad descriptor is then found by the handler's own call.
        let added = peerlink_epoll_ctl(reactor.epfd, 0, fd, 0, 0, token) == 0
        state = Mutex(State(unregistered: !added))
        if added { reactor.add(self, token: token) }
    }

    deinit {
        // Cancelled already, or its owner let go of it without cancelling: then no handler can
        // be queued any more (they hold the watch), so clean up here.
        let cancelled = state.withLock { $0.cancelled }
        if !cancelled {
            Reactor.shared.remove(token: token)
            _ = peerlink_epoll_ctl(Reactor.shared.epfd, 2, fd, 0, 0, token)
            if closesDescriptor { closeQuietly(fd) }
        }
    }

    /// The handlers, run on the queue when the descriptor is ready for reading (or at its end,
    /// or an error) and for writing. Set them before the first `want` (an owner that holds
    /// the watch can hand it `[weak self]` handlers only once it exists itself).
    public func setHandlers(onReadable: @escaping @Sendable () -> Void, onWritable: @escaping @Sendable () -> Void) {
        state.withLock { s in
            s.onReadable = onReadable
            s.onWritable = onWritable
        }
    }

    /// Runs `handler` instead of the read handler, on the reactor's thread inside the queue
    /// (`sync`), whenever the descriptor is readable and `when` holds (see the type's
    /// documentation); otherwise the read handler runs on the queue as usual. `when` is asked
    /// on the reactor's thread under the watch's lock: it must be quick and take no lock.
    /// The queue must never wait for the reactor (nothing on it may block on another
    /// descriptor's readiness), or the two would wait for each other.
    public func setInlineReads(_ handler: @escaping @Sendable () -> Void, when: @escaping @Sendable () -> Bool) {
        state.withLock { s in
            s.onReadableInline = handler
            s.inlineWhen = when
        }
    }

    /// Whether reading is wanted now (tests).
    package var wantsRead: Bool { state.withLock { $0.wantRead } }

    /// Whether this runs on the reactor's thread (an inline read's handler does).
    public static var onReactorThread: Bool { pthread_getspecific(Reactor.shared.threadMark) != nil }

    /// Says which directions are wanted now (nil: unchanged). A direction newly wanted whose
    /// descriptor is ready is reported soon after.
    public func want(read: Bool? = nil, write: Bool? = nil) {
        let run = state.withLock { s -> (Bool, Bool) in
            guard !s.cancelled else { return (false, false) }
            if let read { s.wantRead = read }
            if let write { s.wantWrite = write }
            return arm(&s)
        }
        queueHandlers(run)
    }

    /// Whether a direction is wanted now.
    public var wanted: (read: Bool, write: Bool) { state.withLock { ($0.wantRead, $0.wantWrite) } }

    /// Stops watching: nothing is reported from now on (a handler already running finishes).
    /// Then, on the queue behind every handler already queued, the descriptor is closed and
    /// `then` runs. Only the first call counts.
    public func cancel(then: (@Sendable () -> Void)? = nil) {
        let first = state.withLock { s -> Bool in
            if s.cancelled { return false }
            s.cancelled = true
            s.wantRead = false
            s.wantWrite = false
            // Handlers often hold their owner, which holds the watch.
            s.onReadable = nil
            s.onWritable = nil
            s.onReadableInline = nil
            s.inlineWhen = nil
            return true
        }
        guard first else { return }
        Reactor.shared.remove(token: token)
        // Removed while the descriptor is still open, so no registration outlives it.
        _ = peerlink_epoll_ctl(Reactor.shared.epfd, 2, fd, 0, 0, token)
        queue.async { [fd, closesDescriptor] in
            if closesDescriptor { closeQuietly(fd) }
            then?()
        }
    }

    /// The reactor saw `events` (PEERLINK_EPOLL_* bits). On the reactor's thread.
    fileprivate func fired(_ events: UInt32) {
        let (run, inline) = state.withLock { s -> ((Bool, Bool), Bool) in
            // One-shot: epoll has disarmed the descriptor.
            s.armedIn = false
            s.armedOut = false
            guard !s.cancelled else { return ((false, false), false) }
            let hup = events & UInt32(PEERLINK_EPOLL_HUP) != 0
            let r = s.wantRead && !s.readBusy && (hup || events & UInt32(PEERLINK_EPOLL_IN) != 0)
            let w = s.wantWrite && !s.writeBusy && (hup || events & UInt32(PEERLINK_EPOLL_OUT) != 0)
            if r { s.readBusy = true }
            if w { s.writeBusy = true }
            _ = arm(&s)
            return ((r, w), r && s.onReadableInline != nil && s.inlineWhen?() == true)
        }
        guard inline else { return queueHandlers(run) }
        // Behind whatever the queue runs now, and before anything queued after.
        queue.sync { self.handle(read: true, inline: true) }
        queueHandlers((false, run.1))
    }

    /// Arms epoll for what is wanted and not busy. For a descriptor epoll refused, answers
    /// which handlers to queue instead (it is always ready). Under the lock.
    private func arm(_ s: inout State) -> (Bool, Bool) {
        let wantIn = s.wantRead && !s.readBusy
        let wantOut = s.wantWrite && !s.writeBusy
        if s.unregistered {
            if wantIn { s.readBusy = true }
            if wantOut { s.writeBusy = true }
            return (wantIn, wantOut)
        }
        guard wantIn != s.armedIn || wantOut != s.armedOut else { return (false, false) }
        // Nothing wanted: leave it disarmed (one-shot) unless it is armed for something now.
        if !wantIn && !wantOut && !s.armedIn && !s.armedOut { return (false, false) }
        _ = peerlink_epoll_ctl(Reactor.shared.epfd, 1, fd, wantIn ? 1 : 0, wantOut ? 1 : 0, token)
        s.armedIn = wantIn
        s.armedOut = wantOut
        return (false, false)
    }

    private func queueHandlers(_ run: (read: Bool, write: Bool)) {
        if run.read { queue.async { self.handle(read: true) } }
        if run.write { queue.async { self.handle(read: false) } }
    }

    /// Runs one direction's handler (unless cancelled meanwhile), then arms it again. On the queue.
    private func handle(read: Bool, inline: Bool = false) {
        let handler = state.withLock { s in s.cancelled ? nil : !read ? s.onWritable : inline ? s.onReadableInline : s.onReadable }
        handler?()
        let run = state.withLock { s -> (Bool, Bool) in
            if read { s.readBusy = false } else { s.writeBusy = false }
            guard !s.cancelled else { return (false, false) }
            return arm(&s)
        }
        queueHandlers(run)
    }
}

/// The one thread waiting in `epoll_wait` for every `DescriptorWatch`; it only looks up the
/// watch of each event's token and queues handlers, so it never blocks on anyone's work.
private final class Reactor: Sendable {
    static let shared = Reactor()

    let epfd: Int32
    private let watches = Mutex<[UInt64: Entry]>([:])
    private let tokens = Atomic<UInt64>(0)
    /// Set (non-nil) on the loop's thread only.
    let threadMark: pthread_key_t

    private struct Entry {
        weak var watch: DescriptorWatch?
    }

    private init() {
        let fd = peerlink_epoll_create()
        // Only when the process is out of descriptors or memory at its first socket.
        precondition(fd >= 0, "epoll_create1 failed: errno \(errno)")
        epfd = fd
        var key = pthread_key_t()
        precondition(pthread_key_create(&key, nil) == 0, "pthread_key_create failed")
        threadMark = key
        // A serial queue with no target gets a thread of its own (an overcommit root queue),
        // which this loop keeps for the life of the process.
        DispatchQueue(label: "peerlink.reactor", qos: .userInitiated).async { [self] in run() }
    }

    func nextToken() -> UInt64 { tokens.add(1, ordering: .relaxed).newValue }

    func add(_ w: DescriptorWatch, token: UInt64) {
        watches.withLock { $0[token] = Entry(watch: w) }
    }

    func remove(token: UInt64) {
        _ = watches.withLock { $0.removeValue(forKey: token) }
    }

    private func run() -> Never {
        _ = pthread_setspecific(threadMark, UnsafeRawPointer(bitPattern: 1))
        let max = 64
        var tokens = [UInt64](repeating: 0, count: max)
        var events = [UInt32](repeating: 0, count: max)
        while true {
            let n = tokens.withUnsafeMutableBufferPointer { t in
                events.withUnsafeMutableBufferPointer { e in
                    peerlink_epoll_wait(epfd, t.baseAddress, e.baseAddress, Int32(max), -1)
                }
            }
            // EINTR only: the descriptor and the buffers are always valid.
            guard n > 0 else { continue }
            for i in 0..<Int(n) {
                // A token whose watch was cancelled (or freed) is simply not found.
                if let w = watches.withLock({ $0[tokens[i]]?.watch }) { w.fired(events[i]) }
            }
        }
    }
}
