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
/// machine → `FrameEncoder` → TLS (`write`, `takeOutgoing`) → socket. HELLO travels in plain
/// text; when the machine says `startTLS`, the bytes the decoder holds past HELLO are the
/// peer's first TLS bytes and go to TLS. The machine's events go to `onEvent`, in order, on
/// the queue.
///
/// Memory per connection is bounded: what the socket does not take waits in the channel's
/// outbox and, past it, in a backlog that only reliable frames join; `hasRoom`/`room()` tell a
/// sender when to wait. Unreliable datagrams never wait behind anything: when anything is
/// waiting they are dropped and counted.
public final class PeerConnection: Sendable {
    /// A number for logs and the control protocol.
    public let id: UInt64
    /// Dialled (`.dialer`) or accepted (`.listener`).
    public let role: Role
    /// The other end's address.
    public let remote: SocketAddress
    private let queue: DispatchQueue
    private let channel: Channel
    private let identity: TLSIdentity
    private let logger: Logger
    private let onEvent: @Sendable (PeerConnection, ConnectionEvent) -> Void
    private let state: Mutex<State>

    /// Ciphertext (or plain frames) the channel's outbox had no room for, above which a
    /// reliable sender waits.
    static let backlogLimit = 4 << 20
    /// The channel's own outbox, in bytes.
    static let outboxLimit = 1 << 20

    private struct State {
        var machine: ConnectionMachine
        var decoder = FrameDecoder()
        var tls: TLSConnection?
        var tlsReported = false
        /// Bytes that arrived for TLS while frames were being decoded.
        var pendingForTLS: [UInt8] = []
        /// The decoder failed or the stream ended: nothing more is read.
        var inputDead = false
        var backlog: [[UInt8]] = []
        var backlogBytes = 0
        var waitingForRoom = false
        var roomWaiters: [@Sendable (Bool) -> Void] = []
        var timerGeneration: UInt64 = 0
        var closed = false
        var droppedDatagrams = 0
    }

    /// Wraps a connected, non-blocking TCP socket (the connection owns it from now on).
    /// Nothing happens before `start`.
    public init(id: UInt64, fd: Int32, role: Role, remote: SocketAddress, config: ConnectionConfig, identity: TLSIdentity,
                logger: Logger, onEvent: @escaping @Sendable (PeerConnection, ConnectionEvent) -> Void) {
        self.id = id
        self.role = role
        self.remote = remote
        self.identity = identity
        self.logger = logger
        self.onEvent = onEvent
        queue = DispatchQueue(label: "peerlink.peer.\(id)", target: .global(qos: .userInitiated))
        channel = Channel(fd: fd, mode: .stream, label: "peer.\(id)", queue: queue, outboxLimit: Self.outboxLimit)
        state = Mutex(State(machine: ConnectionMachine(config: config, role: role)))
    }

    /// Starts reading and sends HELLO.
    public func start() {
        // HELLO goes first: the peer's may already be waiting in the socket, and the machine
        // must have started before it reads it.
        queue.async { [self] in
            run(.start)
            // The end may be reported from inside a `send` (a write that fails), which runs
            // under this connection's lock: take it up after that, on the queue.
            channel.start(onInput: { [weak self] chunks in self?.received(chunks) },
                          onEnd: { [weak self] _ in
                guard let self else { return }
                self.queue.async { self.run(.transportClosed) }
            })
        }
    }

    // MARK: Commands (from any thread; carried out on the queue, in order)

    /// Feeds `command` to the machine on the connection's queue.
    public func input(_ command: ConnectionInput) {
        queue.async { [self] in run(command) }
    }

    /// Where the machine is, and what it knows of the peer.
    public var snapshot: (state: ConnectionState, hello: Hello?, encrypted: Bool?, pairingCode: PairingCode?) {
        state.withLock { ($0.machine.state, $0.machine.peerHello, $0.machine.encrypted, $0.machine.pairingCode) }
    }

    /// Unreliable datagrams dropped because something was waiting to be sent.
    public var droppedDatagrams: Int { state.withLock { $0.droppedDatagrams } }

    /// Whether a reliable sender may hand over more now.
    public var hasRoom: Bool { state.withLock { !$0.closed && $0.backlogBytes < Self.backlogLimit } }

    /// Waits until a reliable sender may hand over more (true) or the connection is closed (false).
    public func room() async -> Bool {
        await withCheckedContinuation { (c: CheckedContinuation<Bool, Never>) in
            let now = state.withLock { s -> Bool? in
                if s.closed { return false }
                if s.backlogBytes < Self.backlogLimit { return true }
                s.roomWaiters.append { c.resume(returning: $0) }
                return nil
            }
            if let now { c.resume(returning: now) }
        }
    }

    // MARK: On the queue

    private func run(_ input: ConnectionInput) {
        var events: [ConnectionEvent] = []
        state.withLock { s in
            guard !s.closed || input == .transportClosed else { return }
            let actions = s.machine.handle(input, now: .now)
            perform(actions, &s, &events)
            ingestPendingTLS(&s, &events)
        }
        deliver(events)
    }

    private func received(_ chunks: [[UInt8]]) {
        var events: [ConnectionEvent] = []
        state.withLock { s in
            for chunk in chunks where !s.inputDead {
                if s.tls != nil {
                    ingestTLS(chunk, &s, &events)
                } else {
                    s.decoder.append(chunk)
                    drainFrames(&s, &events)
                }
                ingestPendingTLS(&s, &events)
            }
        }
        deliver(events)
    }

    private func deliver(_ events: [ConnectionEvent]) {
        for e in events { onEvent(self, e) }
    }

    /// Decodes and hands on every whole frame; stops at a `startTLS` (what follows is TLS).
    private func drainFrames(_ s: inout State, _ events: inout [ConnectionEvent]) {
        while !s.inputDead {
            let frame: Frame?
            do {
                frame = try s.decoder.nextFrame()
            } catch {
                s.inputDead = true
                perform(s.machine.handle(.decodeFailed(error), now: .now), &s, &events)
                return
            }
            guard let frame else { return }
            perform(s.machine.handle(.frame(frame), now: .now), &s, &events)
        }
    }

    private func ingestPendingTLS(_ s: inout State, _ events: inout [ConnectionEvent]) {
        while !s.pendingForTLS.isEmpty, s.tls != nil, !s.inputDead {
            let bytes = s.pendingForTLS
            s.pendingForTLS = []
            ingestTLS(bytes, &s, &events)
        }
    }

    private func ingestTLS(_ bytes: [UInt8], _ s: inout State, _ events: inout [ConnectionEvent]) {
        guard let tls = s.tls else { return }
        do {
            try tls.feed(bytes)
        } catch {
            transmit(tls.takeOutgoing(), reliable: true, &s)  // the alert that says why
            s.inputDead = true
            // The pin is the HELLO's claim: a certificate it refuses is an identity mismatch.
            let input: ConnectionInput
            if case .pinRejected = error.kind { input = .certificateMismatch(error.description) } else { input = .tlsFailed(error.description) }
            perform(s.machine.handle(input, now: .now), &s, &events)
            return
        }
        transmit(tls.takeOutgoing(), reliable: true, &s)
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
        let plain = tls.readPlaintext()
        if !plain.isEmpty {
            s.decoder.append(plain)
            drainFrames(&s, &events)
        }
    }

    /// Carries out the machine's actions, in order. Under the lock, on the queue.
    private func perform(_ actions: [ConnectionAction], _ s: inout State, _ events: inout [ConnectionEvent]) {
        for action in actions {
            switch action {
            case .send(let frame):
                send(frame, &s)
            case .startTLS(let asClient):
                startTLS(asClient: asClient, &s, &events)
            case .emit(let e):
                events.append(e)
            case .armTimer(let at):
                s.timerGeneration += 1
                let generation = s.timerGeneration
                let delay = ContinuousClock.now.duration(to: at)
                let nanos = max(0, delay.components.seconds * 1_000_000_000 + delay.components.attoseconds / 1_000_000_000)
                queue.asyncAfter(deadline: .now() + .nanoseconds(Int(min(nanos, Int64(Int.max))))) { [weak self] in
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

    private func startTLS(asClient: Bool, _ s: inout State, _ events: inout [ConnectionEvent]) {
        // The certificate must be the one whose SHA-256 the peer's HELLO announced.
        let pin = s.machine.peerID.map { PinPolicy.expect($0.bytes) } ?? PinPolicy { _ in .reject("no HELLO before TLS") }
        do {
            let tls = try TLSConnection(role: asClient ? .client : .server, identity: identity, pin: pin)
            s.tls = tls
            transmit(tls.takeOutgoing(), reliable: true, &s)
            s.pendingForTLS += s.decoder.takeBufferedBytes()
        } catch {
            perform(s.machine.handle(.tlsFailed(error.description), now: .now), &s, &events)
        }
    }

    private func send(_ frame: Frame, _ s: inout State) {
        let bytes: [UInt8]
        do {
            bytes = try FrameEncoder.encode(frame)
        } catch {
            // The machine builds only valid frames; an invalid one is a bug, said loudly.
            logger.error("a frame could not be encoded", ["peer.connection": "\(id)", "error": "\(error)"])
            return
        }
        let reliable: Bool
        if case .unreliable = frame { reliable = false } else { reliable = true }
        if let tls = s.tls {
            do {
                try tls.write(bytes)
            } catch {
                logger.warning("TLS refused a frame", ["peer.connection": "\(id)", "error": "\(error)"])
                return
            }
            transmit(tls.takeOutgoing(), reliable: reliable, &s)
        } else {
            transmit(bytes, reliable: reliable, &s)
        }
    }

    /// Hands bytes to the channel, or to the backlog when the channel is full (reliable), or
    /// drops them (unreliable, when anything waits).
    private func transmit(_ bytes: [UInt8], reliable: Bool, _ s: inout State) {
        guard !bytes.isEmpty, !s.closed else { return }
        if !s.backlog.isEmpty {
            if reliable {
                s.backlog.append(bytes)
                s.backlogBytes += bytes.count
            } else {
                s.droppedDatagrams += 1
            }
            return
        }
        switch channel.send(bytes) {
        case .accepted, .closed: return
        case .full:
            guard reliable else {
                s.droppedDatagrams += 1
                return
            }
            s.backlog.append(bytes)
            s.backlogBytes += bytes.count
            waitForChannelRoom(&s)
        }
    }

    private func waitForChannelRoom(_ s: inout State) {
        guard !s.waitingForRoom else { return }
        s.waitingForRoom = true
        // The handler may run at once, on this thread, inside our lock: hop to the queue.
        channel.whenRoom { [weak self] open in
            guard let self else { return }
            self.queue.async { self.drainBacklog(open) }
        }
    }

    private func drainBacklog(_ open: Bool) {
        let waiters = state.withLock { s -> [@Sendable (Bool) -> Void] in
            s.waitingForRoom = false
            guard open, !s.closed else { return [] }
            while let first = s.backlog.first {
                guard channel.send(first) == .accepted else {
                    waitForChannelRoom(&s)
                    break
                }
                s.backlog.removeFirst()
                s.backlogBytes -= first.count
            }
            guard s.backlogBytes < Self.backlogLimit else { return [] }
            defer { s.roomWaiters = [] }
            return s.roomWaiters
        }
        for w in waiters { w(true) }
    }

    private func closeTransport(_ s: inout State) {
        guard !s.closed else { return }
        if let tls = s.tls {
            tls.close()
            transmit(tls.takeOutgoing(), reliable: true, &s)
        }
        s.closed = true
        let waiters = s.roomWaiters
        s.roomWaiters = []
        queue.async { for w in waiters { w(false) } }
        let channel = self.channel
        if s.backlog.isEmpty {
            channel.whenFlushed { channel.close() }
        }
        // A peer that stops reading must not keep the socket: close it after a moment anyway.
        queue.asyncAfter(deadline: .now() + .seconds(2)) { channel.close() }
    }
}
