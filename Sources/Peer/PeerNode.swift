// Linux Dispatch has no Sendable annotations; its queues are thread-safe.
@preconcurrency import Dispatch
import Foundation
import Logging
import Session
import Synchronization
import SystemKit
import TLS

/// This board's side of peer sessions: its identity, a TCP listener, the connections it
/// dials and accepts, and the sessions that form on them (MultipeerConnectivity's session,
/// advertiser's invitation handler and browser's invite in one place; discovery is the
/// daemon's, through DNS-SD).
///
/// Rules kept here, above the single connection: at most `maxPeers` sessions (an invitation
/// past that is declined with `full`); one session per peer, and when two connections to
/// the same peer meet (both sides invited at once) the one dialled by the smaller peer ID
/// stays and the other closes with `duplicate`, the same choice on both sides, so each
/// reports `connected` once; the accept policy answers invitations nobody has to.
public final class PeerNode: Sendable {
    /// This node's identity (its peer ID is the certificate's SHA-256).
    public let identity: TLSIdentity
    /// This node's peer ID.
    public let peerID: PeerID
    /// Settings.
    public let config: PeerNodeConfig
    private let logger: Logger
    private let onEvent: @Sendable (PeerEvent) -> Void
    private let trust: TrustStore
    private let state = Mutex(State())
    private let queue = DispatchQueue(label: "peerlink.peer-node", target: .global(qos: .userInitiated))

    private struct State {
        var listener: DescriptorWatch?
        var port: UInt16 = 0
        var nextID: UInt64 = 1
        var connections: [UInt64: PeerConnection] = [:]
        /// Connected sessions: peer → connection.
        var sessions: [PeerID: UInt64] = [:]
        /// `connect` calls waiting for their session: connection → waiter.
        var dialWaiters: [UInt64: CheckedContinuation<PeerSummary, any Error>] = [:]
        /// Peers this side asked for whose own invitation must be accepted without asking
        /// (our dialled connection lost the tie-break), with the waiter moved over.
        var wanted: [PeerID: CheckedContinuation<PeerSummary, any Error>?] = [:]
        /// Invitations waiting for a client's answer: connection → invitation.
        var invitations: [UInt64: PeerInvitation] = [:]
        var stopped = false
    }

    /// A node with `identity`; nothing listens before `start`.
    public init(identity: TLSIdentity, config: PeerNodeConfig, trust: TrustStore, logger: Logger,
                onEvent: @escaping @Sendable (PeerEvent) -> Void) throws {
        guard let id = PeerID(bytes: identity.fingerprint) else {
            throw PeerError.invalid("identity", "the certificate's fingerprint is not 32 bytes")
        }
        self.identity = identity
        peerID = id
        self.config = config
        self.trust = trust
        self.logger = logger
        self.onEvent = onEvent
    }

    /// Listens for peers (on `config.port`, 0: any); returns the port.
    @discardableResult
    public func start() throws -> UInt16 {
        let (fd, port) = try TCPSocket.listen(port: config.port, loopback: config.loopbackOnly)
        let watch = DescriptorWatch(owning: fd, queue: queue)
        watch.setHandlers(onReadable: { [weak self] in self?.acceptAll(fd) }, onWritable: {})
        state.withLock {
            $0.listener = watch
            $0.port = port
        }
        watch.want(read: true)
        logger.info("peer sessions listening", ["peer.port": "\(port)", "peer.id": peerID.shortText])
        return port
    }

    /// The port peers reach this node on (0 before `start`).
    public var port: UInt16 { state.withLock { $0.port } }

    /// Stops listening and closes every connection with `shutting-down`.
    public func stop() {
        let (watch, connections) = state.withLock { s -> (DescriptorWatch?, [PeerConnection]) in
            s.stopped = true
            defer { s.listener = nil }
            return (s.listener, Array(s.connections.values))
        }
        watch?.cancel()
        for c in connections { c.input(.close(.shuttingDown, text: "the daemon is stopping")) }
    }

    private func acceptAll(_ listener: Int32) {
        while true {
            let accepted: (fd: Int32, from: SocketAddress)?
            do {
                accepted = try TCPSocket.accept(listener)
            } catch {
                logger.warning("accepting a peer failed", ["error": "\(error)"])
                return
            }
            guard let (fd, from) = accepted else { return }
            let c = makeConnection(fd: fd, role: .listener, remote: from, expected: nil)
            c.start()
        }
    }

    private func makeConnection(fd: Int32, role: Role, remote: SocketAddress, expected: PeerID?) -> PeerConnection {
        var cc = ConnectionConfig(localID: peerID, displayName: config.displayName, encryption: config.encryption, expectedPeer: expected)
        cc.pingInterval = config.pingInterval
        cc.missedPings = config.missedPings
        let id = state.withLock { s -> UInt64 in
            defer { s.nextID += 1 }
            return s.nextID
        }
        let c = PeerConnection(id: id, fd: fd, role: role, remote: remote, config: cc, identity: identity,
                               logger: logger) { [weak self] c, e in self?.handle(c, e) }
        state.withLock { $0.connections[id] = c }
        return c
    }

    // MARK: Commands

    /// Dials `target`, invites it with `context` and waits until the session is up (or
    /// declined, timed out, refused). `expected`: the peer ID it must have (from discovery).
    public func connect(to target: HostPort, context: [UInt8] = [], timeout: Duration = .seconds(30),
                        expected: PeerID? = nil) async throws -> PeerSummary {
        guard context.count <= Wire.maxContext else {
            throw PeerError.invalid("context", "at most \(Wire.maxContext) bytes, got \(context.count)")
        }
        let addresses = try await Self.offPool { try TCPSocket.resolve(target) }
        var lastError: any Error = PeerError.unreachable(target.description, "no address")
        for address in addresses {
            let fd: Int32
            do {
                fd = try await connectSocket(address, within: .seconds(10))
            } catch {
                lastError = error
                continue
            }
            let c = makeConnection(fd: fd, role: .dialer, remote: address, expected: expected)
            return try await withCheckedThrowingContinuation { (k: CheckedContinuation<PeerSummary, any Error>) in
                state.withLock { $0.dialWaiters[c.id] = k }
                c.start()
                c.input(.invite(context: context, timeout: timeout))
            }
        }
        throw PeerError.unreachable(target.description, "\(lastError)")
    }

    /// Answers an invitation (by its connection number).
    public func answer(invitation id: UInt64, accept: Bool) throws {
        guard let (inv, c) = state.withLock({ s -> (PeerInvitation, PeerConnection)? in
            guard let inv = s.invitations.removeValue(forKey: id), let c = s.connections[id] else { return nil }
            return (inv, c)
        }) else { throw PeerError.notFound("invitation", "\(id)") }
        if accept, state.withLock({ $0.sessions.count >= config.maxPeers }) {
            c.input(.decline(.full))
            throw PeerError.full(config.maxPeers)
        }
        c.input(accept ? .accept : .decline(.declined))
        _ = inv
    }

    /// Sends a message to each of `peers` (all sessions when empty). Reliable messages wait
    /// for room on each connection; unreliable ones go at once or are dropped.
    public func send(_ bytes: [UInt8], to peers: [PeerID], reliable: Bool) async throws -> [PeerID] {
        if reliable, bytes.count > Wire.maxMessage { throw PeerError.invalid("data", "a message is at most \(Wire.maxMessage) bytes, got \(bytes.count)") }
        let targets = try state.withLock { s -> [(PeerID, PeerConnection)] in
            let ids = peers.isEmpty ? Array(s.sessions.keys) : peers
            return try ids.map { p in
                guard let cid = s.sessions[p], let c = s.connections[cid] else { throw PeerError.notConnected(p.shortText) }
                return (p, c)
            }
        }
        for (p, c) in targets {
            if reliable {
                guard await c.room() else { throw PeerError.notConnected(p.shortText) }
                c.input(.sendMessage(bytes))
            } else {
                c.input(.sendUnreliable(bytes))
            }
        }
        return targets.map(\.0)
    }

    /// Ends the session with `peer`.
    public func disconnect(_ peer: PeerID) throws {
        guard let c = state.withLock({ s in s.sessions[peer].flatMap { s.connections[$0] } }) else {
            throw PeerError.notConnected(peer.shortText)
        }
        c.input(.close(.normal, text: "closed by the user"))
    }

    /// The sessions now.
    public var sessions: [PeerSummary] {
        let cs = state.withLock { s in s.sessions.values.compactMap { s.connections[$0] } }
        return cs.compactMap { summary($0) }
    }

    /// Invitations waiting for an answer.
    public var pendingInvitations: [PeerInvitation] { state.withLock { Array($0.invitations.values) } }

    // MARK: Connection events (on each connection's queue)

    private func handle(_ c: PeerConnection, _ e: ConnectionEvent) {
        switch e {
        case .hello:
            break
        case .secured(let peer, _, _):
            // Only once the identity is verified (TLS): a forged HELLO must not be able to
            // close someone's real connection.
            resolveDuplicate(c, peer)
        case .invitation(let inv):
            invited(c, inv)
        case .connected:
            connected(c)
        case .message(let bytes):
            if let p = c.snapshot.hello?.peerID { onEvent(.message(from: p, bytes: bytes, reliable: true)) }
        case .datagram(let bytes):
            if let p = c.snapshot.hello?.peerID { onEvent(.message(from: p, bytes: bytes, reliable: false)) }
        case .frame:
            break  // flow control, resources and streams: not handled yet
        case .refused(let command, let why):
            logger.notice("peer connection refused a command", ["peer.connection": "\(c.id)", "command": command, "why": why])
        case .disconnected(let reason, let detail, let byPeer):
            disconnected(c, reason, detail, byPeer)
        }
    }

    /// Two connections with one peer: the one dialled by the smaller peer ID stays.
    private func resolveDuplicate(_ c: PeerConnection, _ peer: PeerID) {
        let loser: PeerConnection? = state.withLock { s in
            if s.sessions[peer] != nil { return c }
            guard let other = s.connections.values.first(where: { $0.id != c.id && $0.snapshot.hello?.peerID == peer }) else { return nil }
            let smallerDialled = peerID < peer ? Role.dialer : Role.listener
            let lose = c.role == smallerDialled ? other : c
            if lose.role == .dialer, let k = s.dialWaiters.removeValue(forKey: lose.id) {
                // We invited this peer too: its invitation on the other connection is ours to accept.
                s.wanted[peer] = k
            } else if lose.role == .dialer {
                s.wanted[peer] = .some(nil)
            }
            return lose
        }
        loser?.input(.close(.duplicate, text: "another connection with this peer was kept"))
    }

    private func invited(_ c: PeerConnection, _ inv: Invite) {
        guard let hello = c.snapshot.hello else { return }
        let peer = hello.peerID
        let (full, wanted) = state.withLock { s in (s.sessions.count >= config.maxPeers, s.wanted[peer] != nil) }
        if full { return c.input(.decline(.full)) }
        if wanted { return c.input(.accept) }
        let invitation = PeerInvitation(id: c.id, peer: peer, displayName: hello.displayName, context: inv.context,
                                        pairingCode: c.snapshot.pairingCode, encrypted: c.snapshot.encrypted ?? false,
                                        trusted: trust.isTrusted(peer), timeout: .milliseconds(Int64(inv.timeoutMilliseconds)))
        switch config.accept {
        case .all: c.input(.accept)
        case .none: c.input(.decline(.declined))
        case .trusted where invitation.trusted: c.input(.accept)
        case .trusted, .ask:
            state.withLock { $0.invitations[c.id] = invitation }
            onEvent(.invitation(invitation))
        }
    }

    private func connected(_ c: PeerConnection) {
        guard let s = summary(c) else { return }
        let (waiter, wanted) = state.withLock { st -> (CheckedContinuation<PeerSummary, any Error>?, CheckedContinuation<PeerSummary, any Error>??) in
            st.sessions[s.peer] = c.id
            st.invitations[c.id] = nil
            return (st.dialWaiters.removeValue(forKey: c.id), st.wanted.removeValue(forKey: s.peer))
        }
        if config.trustOnConnect { trust.trust(s.peer, name: s.displayName) }
        onEvent(.connected(s))
        waiter?.resume(returning: s)
        if let wanted, let k = wanted { k.resume(returning: s) }
    }

    private func disconnected(_ c: PeerConnection, _ reason: Reason, _ detail: String, _ byPeer: Bool) {
        let hello = c.snapshot.hello
        let (wasSession, waiter, invitation) = state.withLock { s -> (Bool, CheckedContinuation<PeerSummary, any Error>?, PeerInvitation?) in
            s.connections[c.id] = nil
            var was = false
            if let p = hello?.peerID, s.sessions[p] == c.id {
                s.sessions[p] = nil
                was = true
            }
            return (was, s.dialWaiters.removeValue(forKey: c.id), s.invitations.removeValue(forKey: c.id))
        }
        let info = PeerDisconnect(connection: c.id, peer: hello?.peerID, displayName: hello?.displayName, remote: c.remote,
                                  reason: reason, detail: detail, byPeer: byPeer, wasConnected: wasSession)
        if reason != .duplicate || wasSession { onEvent(.disconnected(info)) }
        if invitation != nil { onEvent(.invitationEnded(info)) }
        waiter?.resume(throwing: PeerError.refused(info))
    }

    private func summary(_ c: PeerConnection) -> PeerSummary? {
        let snap = c.snapshot
        guard let hello = snap.hello else { return nil }
        return PeerSummary(peer: hello.peerID, displayName: hello.displayName, remote: c.remote, connection: c.id,
                           role: c.role, encrypted: snap.encrypted ?? false, pairingCode: snap.pairingCode,
                           trusted: trust.isTrusted(hello.peerID))
    }

    // MARK: Sockets

    /// A TCP connection to `address`, connected within `limit`.
    private func connectSocket(_ address: SocketAddress, within limit: Duration) async throws -> Int32 {
        let fd = try TCPSocket.startConnect(to: address)
        let watch: DescriptorWatch
        do {
            watch = try DescriptorWatch(duplicating: fd, queue: queue)
        } catch {
            closeQuietly(fd)
            throw error
        }
        let once = Mutex<CheckedContinuation<Void, any Error>?>(nil)
        @Sendable func finish(_ r: Result<Void, any Error>) {
            guard let k = once.withLock({ k in defer { k = nil }; return k }) else { return }
            watch.cancel()
            k.resume(with: r)
        }
        do {
            try await withCheckedThrowingContinuation { (k: CheckedContinuation<Void, any Error>) in
                once.withLock { $0 = k }
                watch.setHandlers(onReadable: {}, onWritable: {
                    finish(Result { try TCPSocket.connectResult(fd, to: address) })
                })
                watch.want(write: true)
                let nanos = limit.components.seconds * 1_000_000_000 + limit.components.attoseconds / 1_000_000_000
                queue.asyncAfter(deadline: .now() + .nanoseconds(Int(nanos))) {
                    finish(.failure(SystemError(call: "connect", code: ETIMEDOUT, context: address.description)))
                }
            }
        } catch {
            closeQuietly(fd)
            throw error
        }
        return fd
    }

    /// Runs blocking `body` (a name lookup) on a thread outside the cooperative pool.
    static func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { k in
            DispatchQueue.global(qos: .userInitiated).async { k.resume(with: Result { try body() }) }
        }
    }
}
