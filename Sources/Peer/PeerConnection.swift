// Linux Dispatch has no Sendable annotations; its queues are thread-safe.
@preconcurrency import Dispatch
import Logging
import Session
import Synchronization
import SystemKit
import TLS

/// One peer connection: a TCP socket (a `Channel`), TLS when both sides agree on it, the frame
/// decoder and the `ConnectionMachine`, all on the channel's serial queue.
///
/// Bytes in: socket → TLS (`feed`, `readPlaintext`) → `FrameDecoder` → machine. Frames out:
/// machine and senders → `SendScheduler` (the four lanes, peer-protocol.md section 7) → the
/// peer's credit (`ConnectionMachine.nextFrame`) → `FrameEncoder` → TLS (`write`,
/// `takeOutgoing`) → socket. HELLO travels in plain text; when the machine says `startTLS`,
/// the bytes the decoder holds past HELLO are the peer's first TLS bytes and go to TLS. The
/// machine's events go to `onEvent`, in order, on the queue.
///
/// The lanes decide what goes next, so nothing may wait below them: the channel's outbox
/// holds one item (`outboxLimit` 1) and a frame is taken from the scheduler only when the
/// outbox is empty (`Channel.hasRoom`); when the socket is full the channel says so
/// (`whenRoom`) and writing resumes from the scheduler. A control frame or a datagram
/// therefore waits behind at most the one frame being written. Memory per connection is the
/// scheduler's bound (8 MiB of messages by default; `send` answers `busy` past it and
/// `room(for:)` waits for it) plus one frame.
///
/// Reads run inline (`Channel`'s `readsInline`: on the reactor's thread, no hand-off) while
/// the session is up and no resource is offered, sent or received: what a turn does is then
/// bounded (at most 64 KiB decrypted and decoded, messages handed on, frames written) and
/// does not wait for a disk. A resource's file is read (refills) under the connection's lock
/// (a received one is written, verified and flushed on its writer's queue, never under it),
/// and what a turn delivers after the lock may write to disk (the trust store when a session
/// comes up, the transfer journal when a resource ends): the reactor must not wait for
/// either, so reads are not inline while either may happen (resources) or happens (a
/// delivery under way, counted from before the turn's lock: `turn`). A peer's offer read
/// inline has its inbox's free space checked off the reactor (`NodeTransfers.offered`).
public final class PeerConnection: Sendable {
    /// A number for logs and the control protocol.
    public let id: UInt64
    /// Dialled (`.dialer`) or accepted (`.listener`).
    public let role: Role
    /// The other end's address.
    public let remote: SocketAddress
    let queue: DispatchQueue
    let channel: Channel
    private let identity: TLSIdentity
    let logger: Logger
    private let onEvent: @Sendable (PeerConnection, ConnectionEvent) -> Void
    private let onMessages: @Sendable (PeerConnection, [[UInt8]]) -> Void
    private let onTransfer: @Sendable (PeerConnection, TransferEvent) -> Void
    /// An accepted resource of the peer's that gets no data this long while the peer could
    /// send it is ended `timeout` (`ConnectionTransfers.stalled`).
    let transferIdleTimeout: Duration
    let state: Mutex<State>
    /// Whether reads may run inline now (see the type's documentation), for this connection
    /// and for a message stream whose batches it takes (they write and refill under its
    /// lock). Set by every `pump` (every turn and every send ends with one); read without a
    /// lock (the state's lock is taken before the watch's when writing, so the reactor must
    /// not take it under the watch's).
    public let readsInline = InlineReads()

    /// A flag read without a lock (see `readsInline`).
    public final class InlineReads: Sendable {
        private let flag = Atomic<Bool>(false)
        /// Deliveries under way (after a turn's lock, on any thread).
        let delivering = Atomic<Int>(0)
        public var allowed: Bool { flag.load(ordering: .relaxed) && delivering.load(ordering: .acquiring) == 0 }
        func set(_ on: Bool) { flag.store(on, ordering: .relaxed) }
    }

    /// What a sender hands over: the answer to `send(message:)` and `send(datagram:)`.
    public typealias SendResult = ConnectionMachine.SendResult

    // The state, its delivery and the writing path are internal (not private) for the
    // resource and stream commands in PeerConnection+Transfers.swift; nothing else uses them.

    /// What the connection reports, in the order it happened, and stream writers to wake.
    enum Delivered {
        case connection(ConnectionEvent)
        case transfer(TransferEvent)
        case wake(@Sendable (Bool) -> Void, Bool)
    }

    struct RoomWaiter {
        let bytes: Int
        let resume: @Sendable (Bool) -> Void
    }

    struct State {
        var machine: ConnectionMachine
        var scheduler: SendScheduler
        var decoder = FrameDecoder()
        var tls: TLSConnection?
        var tlsReported = false
        /// The first byte after the peer's HELLO has been looked at (a TLS record or a CLOSE).
        var tlsInputSeen = false
        /// Bytes that arrived for TLS while frames were being decoded.
        var pendingForTLS: [UInt8] = []
        /// The decoder failed or the stream ended: nothing more is read.
        var inputDead = false
        /// Transport bytes that are not frames (TLS handshake records, alerts, close_notify)
        /// the channel had no room for; they go before any further frame.
        var stalled: [[UInt8]] = []
        /// A `whenRoom` is pending on the channel.
        var waitingForChannel = false
        /// Senders waiting for the scheduler to take a message of their size.
        var roomWaiters: [RoomWaiter] = []
        /// CLOSE was written: nothing follows it.
        var closeWritten = false
        /// A control frame found its lane full (a peer flooding PINGs while this side cannot
        /// write): the connection closes with `busy`.
        var controlOverflow = false
        var timerGeneration: UInt64 = 0
        /// A look for stalled resources is due (`lookForStalls`): one at a time, while a
        /// resource of the peer's is being received.
        var stallCheckArmed = false
        /// Data (MESSAGE, RESOURCE_DATA, STREAM_DATA) came since the last look: the peer is
        /// sending, if not that resource's bytes (the link is slow and shared, or its messages
        /// go first), and no resource is stalled.
        var dataSinceStallLook = false
        /// Flow-controlled data went to the peer, or a CREDIT came from it, since the last
        /// look: the link moves, and no resource of ours is stalled.
        var movedSinceStallLook = false
        var closed = false
        /// Resources both ways, with their files.
        var transfers: ConnectionTransfers
        /// Transfer events and stream wakeups from writing (a refill's progress, a file that
        /// changed, a stream's bytes queued), delivered at the end of the turn.
        var later: [Delivered] = []
    }

    /// Wraps a connected, non-blocking TCP socket (the connection owns it from now on).
    /// Nothing happens before `start`. `maxQueuedBytes`: the scheduler's bound on messages
    /// waiting to be sent (tests make it small). `transferIdleTimeout`: how long an accepted
    /// resource of the peer's may get no data while the peer could send it. Reliable
    /// messages go to `onMessages`, not `onEvent`: in order, as many together as one turn
    /// brought (a TCP read of 1 KiB messages holds dozens), so that what carries them on (a
    /// message stream's socket) takes them in one step, not one a message.
    public init(id: UInt64, fd: Int32, role: Role, remote: SocketAddress, config: ConnectionConfig, identity: TLSIdentity,
                logger: Logger, maxQueuedBytes: Int = 8 * 1_048_576, transferIdleTimeout: Duration = .seconds(60),
                onEvent: @escaping @Sendable (PeerConnection, ConnectionEvent) -> Void,
                onMessages: @escaping @Sendable (PeerConnection, [[UInt8]]) -> Void,
                onTransfer: @escaping @Sendable (PeerConnection, TransferEvent) -> Void = { _, _ in }) {
        self.id = id
        self.role = role
        self.remote = remote
        self.identity = identity
        self.logger = logger
        self.onEvent = onEvent
        self.onMessages = onMessages
        self.onTransfer = onTransfer
        self.transferIdleTimeout = transferIdleTimeout
        queue = DispatchQueue(label: "peerlink.peer.\(id)", target: .global(qos: .userInitiated))
        let inline = readsInline
        channel = Channel(fd: fd, mode: .stream, label: "peer.\(id)", queue: queue, outboxLimit: 1,
                          readsInline: { inline.allowed })
        state = Mutex(State(machine: ConnectionMachine(config: config, role: role),
                            scheduler: SendScheduler(maxQueuedBytes: maxQueuedBytes), transfers: ConnectionTransfers(role: role)))
    }

    /// Starts reading and sends HELLO.
    public func start() {
        // HELLO goes first: the peer's may already be waiting in the socket, and the machine
        // must have started before it reads it.
        queue.async { [self] in
            run(.start)
            // The channel reports its end on this queue (never inside a `send`); it is taken
            // up behind the turns already queued.
            channel.start(onInput: { [weak self] chunks in self?.received(chunks) },
                          onEnd: { [weak self] _ in
                guard let self else { return }
                self.queue.async { self.run(.transportClosed) }
            })
        }
    }

    // MARK: Commands (from any thread)

    /// Feeds `command` to the machine on the connection's queue (carried out in order).
    public func input(_ command: ConnectionInput) {
        queue.async { [self] in run(command) }
    }

    /// Where the machine is, and what it knows of the peer.
    public var snapshot: (state: ConnectionState, hello: Hello?, encrypted: Bool?, pairingCode: PairingCode?) {
        state.withLock { ($0.machine.state, $0.machine.peerHello, $0.machine.encrypted, $0.machine.pairingCode) }
    }

    /// Unreliable datagrams dropped because their lane was full.
    public var droppedDatagrams: Int { state.withLock { $0.scheduler.droppedUnreliable } }

    /// Bytes waiting in the send lanes (frames with their headers).
    public var queuedBytes: Int { state.withLock { $0.scheduler.queuedBytes } }

    /// Queues a reliable message now (from any thread): `.queued`, `.busy` when the lanes
    /// are over their bound (nothing was queued, no id taken; `room(for:)` says when to try
    /// again), or `.refused` (not connected, too large).
    public func send(message: [UInt8]) -> SendResult {
        send(messages: CollectionOfOne(message)).result
    }

    /// Queues reliable messages in order, as many as the lanes take, then writes them
    /// together (a data stream's batch: one TLS record and one write for many small
    /// messages). `queued`: how many were taken; `result`: `.queued` when all were, else what
    /// the first one not taken got (`.busy`: nothing of it was queued; try it again after
    /// `room(for:)`).
    public func send(messages: some Collection<[UInt8]>) -> (queued: Int, result: SendResult) {
        turn { s, _ -> (queued: Int, result: SendResult) in
            if s.closed { return (0, .refused("the connection is closed")) }
            var n = 0
            var result = SendResult.queued
            for m in messages {
                result = s.machine.send(message: m, into: &s.scheduler)
                guard result == .queued else { break }
                n += 1
            }
            guard n > 0 else { return (0, result) }
            // Written from the caller's thread, as `Channel.send` does: no hop per message.
            pump(&s)
            return (n, result)
        }
    }

    /// Queues an unreliable datagram now: `.queued`, or `.dropped` (counted) when its lane
    /// is full; never waits.
    public func send(datagram: [UInt8]) -> SendResult {
        sending { s in s.machine.send(datagram: datagram, into: &s.scheduler) }
    }

    private func sending(_ body: (inout State) -> SendResult) -> SendResult {
        turn { s, _ in
            if s.closed { return .refused("the connection is closed") }
            let r = body(&s)
            // Written from the caller's thread, as `Channel.send` does: no hop per message.
            if r == .queued { pump(&s) }
            return r
        }
    }

    /// Waits until the lanes would take a message of `bytes` (true), or the connection is
    /// closed (false). Its cost in the lanes is counted with its fragments' headers, as
    /// `send` counts it: on the bare size a waiter woke while the message still did not fit,
    /// and its sender spun between `busy` and this.
    public func room(for message: Int) async -> Bool {
        let bytes = SendScheduler.cost(ofMessage: message)
        return await withCheckedContinuation { (c: CheckedContinuation<Bool, Never>) in
            let now = state.withLock { s -> Bool? in
                if s.closed { return false }
                if s.scheduler.canAccept(byteCount: bytes) { return true }
                s.roomWaiters.append(RoomWaiter(bytes: bytes) { c.resume(returning: $0) })
                return nil
            }
            if let now { c.resume(returning: now) }
        }
    }

    // MARK: On the queue

    private func run(_ input: ConnectionInput) {
        turn { s, events in
            guard !s.closed || input == .transportClosed else { return }
            let actions = s.machine.handle(input, now: .now)
            perform(actions, &s, &events)
            ingestPendingTLS(&s, &events)
            endOfTurn(&s, &events)
        }
    }

    /// Every change of the state, from the queue (a turn) or from a caller's thread (a send,
    /// a command): `body` under the lock, then what writing left for after it (`later`) and
    /// the senders the lanes have room for now, then their delivery, in order. Counted as a
    /// delivery from before the lock (`InlineReads`): the `pump` in `body` may turn inline
    /// reads on (its last resource ended) before the delivery writes to disk (the journal),
    /// and a wakeup in between must not pass the predicate and wait for that.
    @discardableResult
    func turn<R: Sendable>(_ body: (inout State, inout [Delivered]) -> R) -> R {
        readsInline.delivering.add(1, ordering: .releasing)
        defer { readsInline.delivering.subtract(1, ordering: .releasing) }
        var events: [Delivered] = []
        let (result, waiters) = state.withLock { s in
            let r = body(&s, &events)
            events += takeLater(&s)
            return (r, roomForWaiters(&s))
        }
        deliver(events, waiters)
        return result
    }

    private func received(_ chunks: [[UInt8]]) {
        turn { s, events in
            for chunk in chunks where !s.inputDead {
                if s.tls != nil {
                    ingestTLS(chunk, &s, &events)
                } else {
                    s.decoder.append(chunk)
                    drainFrames(&s, &events)
                }
                ingestPendingTLS(&s, &events)
            }
            endOfTurn(&s, &events)
        }
    }

    /// Hands a turn's events on after its lock (`turn` counts it: what is delivered may
    /// write to disk).
    private func deliver(_ events: [Delivered], _ waiters: [RoomWaiter]) {
        for w in waiters { w.resume(true) }
        // Messages in a row go on together; anything else after them, in order.
        var messages: [[UInt8]] = []
        for e in events {
            if case .connection(.message(let m)) = e {
                messages.append(m)
                continue
            }
            if !messages.isEmpty {
                onMessages(self, messages)
                messages = []
            }
            switch e {
            case .connection(let e): onEvent(self, e)
            case .transfer(let e): onTransfer(self, e)
            case .wake(let writer, let queued): writer(queued)
            }
        }
        if !messages.isEmpty { onMessages(self, messages) }
    }

    /// The transfer events and wakeups that writing produced, for delivery after the lock.
    private func takeLater(_ s: inout State) -> [Delivered] {
        defer { s.later = [] }
        return s.later
    }

    /// After the machine's actions: a control lane that overflowed closes the connection
    /// (`busy`), whatever may go now is written (a CREDIT received, a frame queued), and a
    /// look for stalled resources is due while one is received or waits for the peer.
    func endOfTurn(_ s: inout State, _ events: inout [Delivered]) {
        if s.controlOverflow, !s.closed {
            s.controlOverflow = false
            let why = "more than \(s.scheduler.maxControlFrames) control frames wait while the peer does not read"
            perform(s.machine.handle(.close(.busy, text: why), now: .now), &s, &events)
        }
        pump(&s)
        armStallCheck(&s)
    }

    /// Decodes and hands on every whole frame; stops at a `startTLS` (what follows is TLS).
    private func drainFrames(_ s: inout State, _ events: inout [Delivered]) {
        while !s.inputDead {
            let frame: Frame?
            do {
                frame = try s.decoder.nextFrame()
            } catch {
                s.inputDead = true
                perform(s.machine.handle(.decodeFailed(error), now: .now), &s, &events)
                return
            }
            guard var frame else { return }
            // A CREDIT for a resource or stream not in progress (it crossed the end on the
            // wire, or names none) counts for the connection alone: its stream bytes are
            // dropped unchecked (docs/peer-protocol.md, section 7).
            if case .credit(let id, _, let connectionBytes) = frame, id != 0, !s.transfers.isLive(id) {
                frame = .credit(streamID: 0, streamBytes: 0, connectionBytes: connectionBytes)
            }
            if frame.flowControlledBytes > 0 { s.dataSinceStallLook = true }
            if case .credit = frame { s.movedSinceStallLook = true }
            perform(s.machine.handle(.frame(frame), now: .now), &s, &events)
            // A frame may name a stream that has ended (a CREDIT or data that crossed the end
            // on the wire, a refused STREAM_OPEN) or one that never was: the machine counted
            // it, and the id's flow-control entries go now. One check for every kind, after
            // the transfers have had the frame (it may have ended the stream).
            let id = frame.streamID
            if id != 0, !s.transfers.isLive(id) { _ = s.machine.handle(.streamEnded(streamID: id), now: .now) }
        }
    }

    /// Streams with flow-control state in the machine (tests: gone streams keep none).
    package var flowEntryCount: Int { state.withLock { $0.machine.flowEntryCount } }

    private func ingestPendingTLS(_ s: inout State, _ events: inout [Delivered]) {
        while !s.pendingForTLS.isEmpty, s.tls != nil, !s.inputDead {
            let bytes = s.pendingForTLS
            s.pendingForTLS = []
            ingestTLS(bytes, &s, &events)
        }
    }

    private func ingestTLS(_ bytes: [UInt8], _ s: inout State, _ events: inout [Delivered]) {
        guard let tls = s.tls else { return }
        if !s.tlsInputSeen, let first = bytes.first {
            s.tlsInputSeen = true
            // A frame header where the peer's first TLS record was due: a peer that refused
            // this side's HELLO, or gave up waiting for it, sends its CLOSE in plain text
            // before any TLS. Read as frames it says why; fed to TLS it would only be "wrong
            // version number". A TLS record never starts with the frame version byte (record
            // types are 20 to 23), and the machine refuses every frame but CLOSE before TLS
            // is up, so nothing else gets through this way.
            if first == Wire.frameVersion {
                s.tls = nil
                s.decoder.append(bytes)
                drainFrames(&s, &events)
                return
            }
        }
        do {
            try tls.feed(bytes)
        } catch {
            transmit(tls.takeOutgoing(), &s)  // the alert that says why
            s.inputDead = true
            // The pin is the HELLO's claim: a certificate it refuses is an identity mismatch.
            let input: ConnectionInput
            if case .pinRejected = error.kind { input = .certificateMismatch(error.description) } else { input = .tlsFailed(error.description) }
            perform(s.machine.handle(input, now: .now), &s, &events)
            return
        }
        transmit(tls.takeOutgoing(), &s)
        if !s.tlsReported, tls.handshakeState == .done {
            s.tlsReported = true
            guard let fp = tls.peerFingerprint, let certificateID = PeerID(bytes: fp), let claimed = s.machine.peerID else {
                perform(s.machine.handle(.tlsFailed("no peer certificate after the handshake"), now: .now), &s, &events)
                return
            }
            let context = PairingCode.exporterContext(s.machine.config.localID, claimed)
            guard let material = try? tls.exportKeyingMaterial(label: PairingCode.exporterLabel, context: context,
                                                               length: PairingCode.exporterLength),
                  let code = PairingCode(exporterBytes: material) else {
                perform(s.machine.handle(.tlsFailed("the TLS exporter gave no pairing code"), now: .now), &s, &events)
                return
            }
            perform(s.machine.handle(.tlsEstablished(certificateID: certificateID, pairingCode: code), now: .now), &s, &events)
        }
        // Each record's piece is decoded before the next is added: a large frame's payload
        // is then gathered in the frame's own array as its records come (one copy of each
        // byte), instead of piling up in the decoder's buffer to be copied out again.
        for piece in tls.readPlaintextPieces() {
            s.decoder.append(piece)
            drainFrames(&s, &events)
        }
    }

    /// Carries out the machine's actions, in order. Under the lock, on the queue.
    private func perform(_ actions: [ConnectionAction], _ s: inout State, _ events: inout [Delivered]) {
        for action in actions {
            switch action {
            case .send(let frame):
                enqueue(frame, &s)
            case .startTLS(let asClient):
                startTLS(asClient: asClient, &s, &events)
            case .emit(.frame(let f)):
                transferFrame(f, &s, &events)
            case .emit(let e):
                if case .disconnected(let reason, let detail, let byPeer) = e {
                    let o = s.transfers.connectionEnded(reason, detail, byPeer: byPeer)
                    events += o.events.map { .transfer($0) }
                    events += o.wakeups.map { .wake($0.0, $0.1) }
                }
                events.append(.connection(e))
            case .armTimer(let at):
                s.timerGeneration += 1
                let generation = s.timerGeneration
                queue.asyncAfter(deadline: .now() + ContinuousClock.now.duration(to: at).dispatchInterval) { [weak self] in
                    guard let self, self.state.withLock({ $0.timerGeneration == generation }) else { return }
                    self.run(.tick)
                }
            case .cancelTimer:
                s.timerGeneration += 1
            case .closeTransport:
                closeTransport(&s)
            }
        }
    }

    /// A resource or stream frame from the peer, for the transfers.
    private func transferFrame(_ f: Frame, _ s: inout State, _ events: inout [Delivered]) {
        // Whether the stream's flow-control entries go is `drainFrames`' check, after this.
        apply(s.transfers.received(f, from: s.machine.peerID, now: .now), &s, &events)
    }

    /// Carries out what the transfers asked: ended resources' and streams' bulk frames
    /// dropped, then frames queued (a stream's last answer is a bulk frame of its own), used
    /// bytes returned to the peer's window, events reported and writers woken in order.
    func apply(_ o: ConnectionTransfers.Outcome, _ s: inout State, _ events: inout [Delivered]) {
        for id in o.dropped { _ = s.scheduler.removeStream(id) }
        startWrites(o.writes)
        startFinishes(o.finishes)
        for f in o.frames { enqueue(f, &s) }
        events += o.events.map { .transfer($0) }
        events += o.wakeups.map { .wake($0.0, $0.1) }
        for id in o.dropped where !s.transfers.isLive(id) { _ = s.machine.handle(.streamEnded(streamID: id), now: .now) }
        for (id, n) in o.consumed { perform(s.machine.handle(.consumed(streamID: id, bytes: n), now: .now), &s, &events) }
        if o.released > 0 { perform(s.machine.handle(.released(bytes: o.released), now: .now), &s, &events) }
    }

    /// A frame of the machine's into its lane. HELLO, and the CLOSE that may follow it before
    /// TLS, are written at once: what comes next (TLS) must not be taken for a frame nor go
    /// before them.
    func enqueue(_ frame: Frame, _ s: inout State) {
        guard !s.closeWritten else { return }
        switch s.scheduler.enqueue(frame) {
        case .queued:
            if s.tls == nil { pump(&s) }
        case .dropped:
            break  // a datagram, counted by the scheduler
        case .busy:
            s.controlOverflow = true
        }
    }

    private func startTLS(asClient: Bool, _ s: inout State, _ events: inout [Delivered]) {
        // The certificate must be the one whose SHA-256 the peer's HELLO announced.
        let pin = s.machine.peerID.map { PinPolicy.expect($0.bytes) } ?? PinPolicy { _ in .reject("no HELLO before TLS") }
        do {
            let tls = try TLSConnection(role: asClient ? .client : .server, identity: identity, pin: pin)
            s.tls = tls
            transmit(tls.takeOutgoing(), &s)
            s.pendingForTLS += s.decoder.takeBufferedBytes()
        } catch {
            perform(s.machine.handle(.tlsFailed(error.description), now: .now), &s, &events)
        }
    }
}
