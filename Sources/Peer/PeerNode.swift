// Linux Dispatch has no Sendable annotations; its queues are thread-safe.
@preconcurrency import Dispatch
import FoundationEssentials
import Glibc
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
    let logger: Logger
    let onEvent: @Sendable (PeerEvent) -> Void
    let trust: TrustStore
    let state: Mutex<State>
    /// Resources across the connections.
    let transfers: NodeTransfers
    let queue = DispatchQueue(label: "peerlink.peer-node", target: .global(qos: .userInitiated))

    typealias Waiter = CheckedContinuation<PeerSummary, any Error>

    struct State {
        var listener: DescriptorWatch?
        var port: UInt16 = 0
        var nextID: UInt64 = 1
        /// The rules across connections (limit, tie-break, reconnects).
        var table: SessionTable
        var connections: [UInt64: PeerConnection] = [:]
        /// `connect` calls waiting for their session: connection → waiter.
        var dialWaiters: [UInt64: Waiter] = [:]
        /// `connect` calls whose connection lost the tie-break: they wait for the peer's session
        /// on its other connection.
        var movedWaiters: [PeerID: [Waiter]] = [:]
        /// Invitations waiting for a client's answer: connection → invitation.
        var invitations: [UInt64: PeerInvitation] = [:]
        /// Connections whose peer is verified: connection → peer.
        var verified: [UInt64: PeerID] = [:]
        /// Connections that carried a session reported connected: each is reported ended at
        /// its end, also when a newer connection with the peer replaced it (the table says
        /// so when it supersedes it; the session's own end came with no event then).
        var sessionConnections: Set<UInt64> = []
        /// Connections this side dialled: connection → the address typed or discovered.
        var dialTargets: [UInt64: HostPort] = [:]
        /// Where each peer was last reached by a dial of ours (a redial goes there first).
        var lastReached: [PeerID: HostPort] = [:]
        /// Addresses of peers known from elsewhere (the daemon's discovery).
        var addressSource: (@Sendable (PeerID) -> [HostPort])?
        var stopped = false
        /// Connections refused near the descriptor limit (every 100th is logged).
        var refusedForDescriptors = 0
        /// The table's answer to the sessions resumed at start, carried out by
        /// `resumeTrustedSessionsAtStart` (dials, and the ends of the resume windows).
        var startActions: [SessionTable.Action] = []

        /// The connection carrying `peer`'s session, if it is up.
        func session(_ peer: PeerID) -> PeerConnection? { table.connection(for: peer).flatMap { connections[$0] } }
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
        var table = SessionTable(localID: id, maxPeers: config.maxPeers)
        let trusted = trust.all
        for entry in trusted { table.trust(entry.peer) }
        // Sessions with trusted peers that were up (or lost) when this board last stopped are
        // taken back from the first moment (the listener starts before the daemon asks for
        // the dials: `resumeTrustedSessionsAtStart`), dialled where this board reached them.
        let resumed = trusted.filter(\.resume)
        let startActions = table.resumeAtStart(resumed.map { ($0.peer, $0.address != nil) }, now: .now, random: { Double.random(in: 0...1) })
        var initial = State(table: table)
        for entry in trusted { initial.lastReached[entry.peer] = entry.address }
        initial.startActions = startActions
        state = Mutex(initial)
        let outbox: Outbox?
        do {
            outbox = try config.outboxDirectory.map { try Outbox(directory: $0) }
        } catch {
            throw PeerError.invalid("outbox", "\(error)")
        }
        transfers = NodeTransfers(inbox: config.inbox, policy: config.acceptResources, journal: config.transferJournal, outbox: outbox,
                                  hashes: FileHashes(racyMargin: config.hashRacyMargin), logger: logger, mayOffer: config.mayOffer, beforeReopening: config.beforeReopening, isTrusted: { trust.isTrusted($0) }, emit: { onEvent(.resource($0)) })
        transfers.setSessionSource { [weak self] peer in self?.state.withLock { $0.session(peer) } }
    }

    /// Where to find a peer besides the addresses this node dialled itself (the daemon's
    /// DNS-SD browse results): asked when a trusted peer is redialled.
    public func setAddressSource(_ source: @escaping @Sendable (PeerID) -> [HostPort]) {
        state.withLock { $0.addressSource = source }
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

    /// Stops as `stop` does, then waits until every connection has ended (each peer told
    /// `shutting-down`, and its answer read, so it knows why; each received part recorded for
    /// a resume) and every received file being saved is saved, or until `limit` passes.
    /// What the daemon does before it exits: a process that exits at once may cut a CLOSE
    /// (the peer sees the link reset instead) or a save half way (its sender, without the
    /// confirmation, sends it again). True when everything settled within `limit`.
    public func stop(settlingWithin limit: Duration) async -> Bool {
        stop()
        let deadline = ContinuousClock.now + limit
        while true {
            let open = (state.withLock { $0.connections.count }, config.inbox?.openParts ?? 0)
            if open == (0, 0) { return true }
            guard ContinuousClock.now < deadline else {
                logger.notice("stopping without waiting longer", ["connections": "\(open.0)", "parts": "\(open.1)", "waited": "\(limit)"])
                return false
            }
            // Polled: a stop happens once, and its waits are short (a CLOSE answered, a flush).
            try? await Task.sleep(for: .milliseconds(10))
        }
    }

    private func acceptAll(_ listener: Int32) {
        while true {
            let accepted: (fd: Int32, from: SocketAddress)?
            do {
                accepted = try TCPSocket.accept(listener)
            } catch let e as SystemError where [EMFILE, ENFILE, ENOBUFS, ENOMEM].contains(e.code) {
                // Out of descriptors (or memory): the connection waits in the kernel's queue and
                // the listener stays readable, so trying again at once would spin. Rest a moment.
                pauseAccepting(e)
                return
            } catch {
                logger.warning("accepting a peer failed", ["error": "\(error)"])
                return
            }
            guard let (fd, from) = accepted else { return }
            // Descriptors are allocated lowest first: number `fd` means at least `fd` are open.
            // Past the reserve the connection is refused (closed at once), so that the process
            // never runs out: libdispatch stops the process when its thread-pool monitor cannot
            // open /proc (seen in the lab: SIGILL in _dispatch_workq_monitor_pools).
            if Int(fd) >= Self.descriptorCeiling() {
                closeQuietly(fd)
                refusedForDescriptors(from)
                continue
            }
            let c = makeConnection(fd: fd, role: .listener, remote: from, expected: nil)
            state.withLock { $0.table.accepted(c.id) }
            c.start()
        }
    }

    /// The highest descriptor number a peer connection may have: the soft RLIMIT_NOFILE less a
    /// reserve (a quarter of it, at most 64) for everything else the process opens.
    static func descriptorCeiling() -> Int {
        var limit = rlimit()
        guard getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur != rlim_t.max else { return Int.max }
        let soft = Int(min(limit.rlim_cur, rlim_t(Int.max)))
        return soft - min(64, soft / 4)
    }

    private func refusedForDescriptors(_ from: SocketAddress) {
        let first = state.withLock { s -> Bool in
            defer { s.refusedForDescriptors += 1 }
            return s.refusedForDescriptors % 100 == 0
        }
        if first {
            logger.warning("refusing peer connections: near the descriptor limit", ["peer.address": "\(from)", "limit.reserve": "\(Self.descriptorCeiling())"])
        }
    }

    /// How long the listener rests when the process is out of descriptors, in milliseconds.
    static let acceptPauseMilliseconds = 250

    /// Stops watching the listener for a moment (called from its handler: it stays off).
    private func pauseAccepting(_ error: SystemError) {
        guard let watch = state.withLock({ $0.stopped ? nil : $0.listener }) else { return }
        watch.want(read: false)
        logger.warning("not accepting peers for a moment", ["error": "\(error)", "pause.ms": "\(Self.acceptPauseMilliseconds)"])
        queue.asyncAfter(deadline: .now() + .milliseconds(Self.acceptPauseMilliseconds)) { [weak self] in
            guard let self, let watch = self.state.withLock({ $0.stopped ? nil : $0.listener }) else { return }
            watch.want(read: true)
        }
    }

    /// A connection on `fd`, under `id` (a dial's, taken when it started) or a new one.
    func makeConnection(fd: Int32, id given: UInt64? = nil, role: Role, remote: SocketAddress, expected: PeerID?) -> PeerConnection {
        let c = newConnection(fd: fd, id: given, role: role, remote: remote, expected: expected)
        state.withLock { $0.connections[c.id] = c }
        return c
    }

    /// A connection on `fd`, not yet among the node's (dropped unstarted, it closes `fd`).
    func newConnection(fd: Int32, id given: UInt64?, role: Role, remote: SocketAddress, expected: PeerID?) -> PeerConnection {
        var cc = ConnectionConfig(localID: peerID, displayName: config.displayName, encryption: config.encryption, expectedPeer: expected)
        cc.pingInterval = config.pingInterval
        cc.missedPings = config.missedPings
        let id = given ?? state.withLock { s -> UInt64 in
            defer { s.nextID += 1 }
            return s.nextID
        }
        let c = PeerConnection(id: id, fd: fd, role: role, remote: remote, config: cc, identity: identity,
                               logger: logger, maxQueuedBytes: config.maxQueuedBytes, transferIdleTimeout: config.transferIdleTimeout,
                               onEvent: { [weak self] c, e in self?.handle(c, e) },
                               onMessages: { [weak self] c, ms in self?.received(c, ms) },
                               onTransfer: { [weak self] c, e in self?.transferEvent(c, e) })
        return c
    }

    // MARK: Commands

    /// Answers an invitation (by its connection number).
    public func answer(invitation id: UInt64, accept: Bool) throws {
        guard let (inv, c) = state.withLock({ s -> (PeerInvitation, PeerConnection)? in
            guard let inv = s.invitations.removeValue(forKey: id), let c = s.connections[id] else { return nil }
            return (inv, c)
        }) else { throw PeerError.notFound("invitation", "\(id)") }
        if accept, state.withLock({ $0.table.isFull(for: inv.peer) }) {
            c.input(.decline(.full))
            throw PeerError.full(config.maxPeers)
        }
        c.input(accept ? .accept : .decline(.declined))
    }

    /// The sessions of `peers` (all sessions when empty); a peer without one is an error.
    func sessionConnections(_ peers: [PeerID]) throws(PeerError) -> [(PeerID, PeerConnection)] {
        try state.withLock { s throws(PeerError) -> [(PeerID, PeerConnection)] in
            let ids = peers.isEmpty ? Array(s.table.connectedPeers) : peers
            return try ids.map { p throws(PeerError) in
                guard let c = s.session(p) else { throw PeerError.notConnected(p.shortText) }
                return (p, c)
            }
        }
    }

    /// Sends a message to each of `peers` (all sessions when empty), in that order. A
    /// reliable message is queued under each peer's flow control; when a peer's queue is over
    /// its bound it waits for room (`wait`) or fails `busy` (the peers before it got the
    /// message). An unreliable one goes at once, or is dropped and counted when its lane is
    /// full; it never waits.
    public func send(_ bytes: [UInt8], to peers: [PeerID], reliable: Bool, wait: Bool = true) async throws -> [PeerID] {
        if reliable, bytes.count > Wire.maxMessage { throw PeerError.invalid("data", "a message is at most \(Wire.maxMessage) bytes, got \(bytes.count)") }
        let targets = try sessionConnections(peers)
        for (i, (p, c)) in targets.enumerated() {
            while try await tryAgain(after: reliable ? c.send(message: bytes) : c.send(datagram: bytes), on: c, to: p,
                                     bytes: bytes.count, wait: wait, sentTo: i) {}
        }
        return targets.map(\.0)
    }

    /// The first pass of `send(messages:to:onQueued:)`, which never waits: queues what
    /// `peer`'s lanes take now, in order, writes it together, and returns how many (fewer
    /// than all when its queue is over its bound: the rest go with `send(messages:to:onQueued:)`).
    /// For a caller on a queue of its own (a data stream's channel): while the session has
    /// room, a batch needs no task. Returns the session too, for the rest
    /// (`send(_:on:to:onQueued:)`). `onQueued` gets the count before this returns or throws.
    public func sendNow(messages: some Collection<[UInt8]>, to peer: PeerID,
                        onQueued: (Int) -> Void = { _ in }) throws -> (queued: Int, session: PeerConnection) {
        guard let c = state.withLock({ s in s.session(peer) }) else {
            throw PeerError.notConnected(peer.shortText)
        }
        let (queued, result) = c.send(messages: messages)
        if queued > 0 { onQueued(queued) }
        if case .refused(let why) = result { throw refused(peer, why) }
        return (queued, c)
    }

    /// Sends reliable messages to `peer`, in order, waiting for room whenever its queue is
    /// over its bound (a data stream's batch): each pass queues what the lanes take and writes
    /// it together. `onQueued` gets how many were queued at each pass, before this returns or
    /// throws: a send the session's end cuts short has its count too.
    public func send(messages: [[UInt8]], to peer: PeerID, onQueued: (Int) -> Void = { _ in }) async throws {
        guard let c = state.withLock({ s in s.session(peer) }) else {
            throw PeerError.notConnected(peer.shortText)
        }
        try await send(messages[...], on: c, to: peer, onQueued: onQueued)
    }

    /// `send(messages:to:onQueued:)` on session `c` (from `sendNow`): a session that ends
    /// meanwhile fails it, even if `peer` has made another.
    public func send(_ messages: ArraySlice<[UInt8]>, on c: PeerConnection, to peer: PeerID,
                     onQueued: (Int) -> Void = { _ in }) async throws {
        var rest = messages
        while !rest.isEmpty {
            let (queued, result) = c.send(messages: rest)
            if queued > 0 { onQueued(queued) }
            rest = rest.dropFirst(queued)
            // `.busy`: room for the first message not taken, then the rest again.
            _ = try await tryAgain(after: result, on: c, to: peer, bytes: rest.first?.count ?? 0)
        }
    }

    /// What a send to `peer` on `c` does after `result`: false when it is done; true once
    /// room came for `bytes` after `.busy` (try again); throws `busy` instead of waiting
    /// when not `wait` (`sentTo`: the peers before it that got the message), and
    /// `notConnected` when refused or when the connection closed while waiting.
    private func tryAgain(after result: ConnectionMachine.SendResult, on c: PeerConnection, to peer: PeerID, bytes: Int,
                          wait: Bool = true, sentTo: Int = 0) async throws -> Bool {
        switch result {
        case .queued, .dropped:
            return false
        case .busy:
            guard wait else { throw PeerError.busy(peer.shortText, sentTo: sentTo) }
            guard await c.room(for: bytes) else { throw PeerError.notConnected(peer.shortText) }
            return true
        case .refused(let why):
            throw refused(peer, why)
        }
    }

    /// The error for a send the connection refused (not connected any more, or too large).
    private func refused(_ peer: PeerID, _ why: String) -> PeerError {
        logger.debug("a send was refused", ["peer.id": peer.shortText, "why": why])
        return PeerError.notConnected(peer.shortText)
    }

    /// Holds back (true) or returns (false) the flow-control credit for messages from `peer`:
    /// for a consumer that cannot take more messages now (a data stream whose client does
    /// not read). The messages already under way still arrive, then the peer's window runs
    /// out and its sends queue up on its side; nothing is dropped. Unknown peers are ignored
    /// (their session is gone).
    public func holdMessages(from peer: PeerID, _ hold: Bool) {
        state.withLock { s in s.session(peer) }?.input(.holdMessageCredit(hold))
    }

    /// Ends the session with `peer`.
    public func disconnect(_ peer: PeerID) throws {
        guard let c = state.withLock({ s in s.session(peer) }) else {
            throw PeerError.notConnected(peer.shortText)
        }
        c.input(.close(.normal, text: "closed by the user"))
    }

    /// The sessions now.
    public var sessions: [PeerSummary] {
        let cs = state.withLock { s in s.table.connectedPeers.compactMap { s.session($0) } }
        return cs.compactMap { summary($0) }
    }

    /// Per connection, the streams with flow-control state (tests: gone streams keep none).
    package var flowEntryCounts: [Int] {
        let connections = state.withLock { Array($0.connections.values) }
        return connections.map(\.flowEntryCount)
    }

    /// What the node holds, for diagnostics: connections with their state, waiting `connect`
    /// calls, sessions.
    public var diagnostics: String {
        let (cs, dials, moved, sessions) = state.withLock { s in
            (Array(s.connections.values), Array(s.dialWaiters.keys), s.movedWaiters.mapValues(\.count), s.table.connectedPeers)
        }
        let conns = cs.sorted { $0.id < $1.id }.map { "#\($0.id) \($0.role) \($0.snapshot.state)" }.joined(separator: "; ")
        return "connections [\(conns)] dial-waiters \(dials.sorted()) moved \(moved.map { "\($0.key.shortText): \($0.value)" }) sessions \(sessions.map(\.shortText))"
    }

    /// Invitations waiting for an answer.
    public var pendingInvitations: [PeerInvitation] { state.withLock { Array($0.invitations.values) } }

    // MARK: Connection events (on each connection's queue)

    private func handle(_ c: PeerConnection, _ e: ConnectionEvent) {
        switch e {
        case .hello(let h):
            // A dial to an address that turns out to be a peer in session already (or one
            // past max_peers) ends here, before its TLS: the peer never identifies it, so no
            // tie-break replaces the session on either side; its `connect` gets that session.
            switch state.withLock({ $0.table.unknownDialMet(c.id, claiming: h.peerID) }) {
            case .duplicate?: apply([.close(c.id, .duplicate)], peer: h.peerID)
            case .full?: c.input(.close(.full, text: "this side has as many sessions as it takes (max_peers)"))
            default: break
            }
        case .secured(let peer, _, _):
            identified(c, peer)
        case .invitation(let inv):
            invited(c, inv)
        case .connected:
            apply(state.withLock { $0.table.connected(c.id) })
        case .message:
            break  // never here: the connection hands reliable messages on in batches (`received`)
        case .datagram(let bytes):
            if let p = c.snapshot.hello?.peerID { onEvent(.datagram(from: p, bytes: bytes)) }
        case .frame:
            break  // resources and streams: the connection's own (`onTransfer`)
        case .refused(let command, let why):
            logger.notice("peer connection refused a command", ["peer.connection": "\(c.id)", "command": command, "why": why])
        case .disconnected(let reason, let detail, let byPeer):
            disconnected(c, reason, detail, byPeer)
        }
    }

    /// Reliable messages from `c`'s peer, in order.
    private func received(_ c: PeerConnection, _ messages: [[UInt8]]) {
        if let p = c.snapshot.hello?.peerID { onEvent(.messages(from: p, messages)) }
    }

    /// The table's verdict once a connection's peer is verified (TLS, or HELLO in plain
    /// text; never the bare HELLO, or a forged claim could close a real connection).
    private func identified(_ c: PeerConnection, _ peer: PeerID) {
        let actions = state.withLock { s -> [SessionTable.Action] in
            s.verified[c.id] = peer
            return s.table.identified(c.id, as: peer)
        }
        apply(actions, peer: peer)
    }

    /// Carries out the table's actions (`peer`: whom the connections it closes lead to).
    func apply(_ actions: [SessionTable.Action], peer identifiedPeer: PeerID? = nil) {
        for action in actions {
            switch action {
            case .close(let id, let reason):
                let (c, done) = state.withLock { s -> (PeerConnection?, (Waiter, PeerConnection)?) in
                    // A `connect` whose connection lost gets the peer's session: the one up now,
                    // or the one its other connection brings.
                    var done: (Waiter, PeerConnection)?
                    if let k = s.dialWaiters.removeValue(forKey: id) {
                        // The connection may not be verified itself (a dial's rival won first).
                        guard let peer = s.verified[id] ?? identifiedPeer else {
                            s.dialWaiters[id] = k  // its own end reports to it
                            return (s.connections[id], nil)
                        }
                        if let session = s.session(peer) {
                            done = (k, session)
                        } else {
                            moveWaiter(k, to: peer, &s)
                        }
                    }
                    return (s.connections[id], done)
                }
                c?.input(.close(reason, text: "another connection with this peer was kept"))
                if let (k, session) = done {
                    if let summary = summary(session) { k.resume(returning: summary) } else { k.resume(throwing: PeerError.notConnected("?")) }
                }
            case .peerConnected(let peer, let id):
                guard let c = state.withLock({ $0.connections[id] }), let summary = summary(c) else { continue }
                let (waiters, target) = state.withLock { s -> ([Waiter], HostPort?) in
                    s.invitations[id] = nil
                    if s.connections[id] != nil { s.sessionConnections.insert(id) }
                    let target = s.dialTargets[id]
                    if let target { s.lastReached[peer] = target }
                    return ((s.dialWaiters.removeValue(forKey: id).map { [$0] } ?? []) + (s.movedWaiters.removeValue(forKey: peer) ?? []), target)
                }
                if config.trustOnConnect, !trust.isTrusted(peer) {
                    // (Trusted with the session up: marked to resume, where it was reached, at once.)
                    do { try setTrusted(peer, name: summary.displayName, true) } catch {
                        logger.warning("a peer accepted on connect is not trusted for next time", ["peer": peer.text, "error": "\(error)"])
                    }
                } else {
                    noteSessionUp(peer, reachedAt: target)
                }
                logger.info("peer session connected", ["peer.id": peer.shortText, "peer.name": summary.displayName,
                                                        "remote": "\(summary.remote)", "encrypted": "\(summary.encrypted)"])
                onEvent(.connected(summary))
                transfers.sessionUp(peer, c)
                for k in waiters { k.resume(returning: summary) }
            case .peerDisconnected:
                break  // reported with the connection's own end (`disconnected`)
            case .reconnect(let peer, let at, let attempt):
                scheduleRedial(peer, at: at, attempt: attempt)
            case .gaveUp(let peer, let attempts):
                logger.notice("gave up redialling a trusted peer", ["peer.id": peer.shortText, "attempts": "\(attempts)"])
                onEvent(.reconnectGaveUp(peer, attempts: attempts))
            case .resumeWindow(let peer, let endsAt):
                queue.asyncAfter(deadline: .now() + ContinuousClock.now.duration(to: endsAt).dispatchInterval) { [weak self] in
                    self?.state.withLock { $0.table.resumeWindowEnded(peer) }
                }
            }
        }
    }

    private func invited(_ c: PeerConnection, _ inv: Invite) {
        guard let hello = c.snapshot.hello else { return }
        let decision = state.withLock { $0.table.invitation(on: c.id) }
        switch decision {
        case .accept: return c.input(.accept)
        case .decline(let reason): return c.input(.decline(reason))
        case .ask: break
        }
        let invitation = PeerInvitation(id: c.id, peer: hello.peerID, displayName: hello.displayName, context: inv.context,
                                        pairingCode: c.snapshot.pairingCode, encrypted: c.snapshot.encrypted ?? false,
                                        trusted: trust.isTrusted(hello.peerID), timeout: .milliseconds(Int64(inv.timeoutMilliseconds)))
        switch config.accept {
        case .all: c.input(.accept)
        case .none: c.input(.decline(.declined))
        case .trusted where invitation.trusted: c.input(.accept)
        case .trusted, .ask:
            // A `connect` of ours parked for this peer's session (its dial lost the tie-break
            // since the table's answer above) is the answer; otherwise a client is asked.
            let answered = state.withLock { s -> Bool in
                if s.movedWaiters[hello.peerID]?.isEmpty == false { return true }
                s.invitations[c.id] = invitation
                return false
            }
            if answered { c.input(.accept) } else { onEvent(.invitation(invitation)) }
        }
    }

    private func disconnected(_ c: PeerConnection, _ reason: Reason, _ detail: String, _ byPeer: Bool) {
        let hello = c.snapshot.hello
        let (actions, waiters, invitation, superseded, verifiedPeer, wasSession) = state.withLock {
            s -> ([SessionTable.Action], [Waiter], PeerInvitation?, Bool, PeerID?, Bool) in
            s.connections[c.id] = nil
            let wasSession = s.sessionConnections.remove(c.id) != nil
            s.dialTargets[c.id] = nil
            let peer = s.verified.removeValue(forKey: c.id)
            let actions = s.table.closed(c.id, reason: reason, now: .now, random: Double.random(in: 0...1))
            var waiters = s.dialWaiters.removeValue(forKey: c.id).map { [$0] } ?? []
            // Our dial closed by the peer as the duplicate: its own connection carries the
            // session (this side may not have seen it yet); wait for it there.
            let parked = byPeer && (reason == .duplicate || reason == .replaced)
            // Only a verified peer's word counts: a CLOSE read in plain text before TLS (its
            // reason is reported) names whom it likes.
            if parked, let peer, let k = waiters.popLast() {
                s.table.want(peer)
                moveWaiter(k, to: peer, &s)
            }
            // Moved `connect` calls fail when no connection with their peer is left (not when
            // the peer has just said its own connection carries the session).
            if !parked, let peer, s.table.connection(for: peer) == nil, !s.verified.values.contains(peer) {
                waiters += s.movedWaiters.removeValue(forKey: peer) ?? []
            }
            let superseded = reason == .duplicate || reason == .replaced
            return (actions, waiters, s.invitations.removeValue(forKey: c.id), superseded, peer, wasSession)
        }
        // A connection with the peer (its session, or an invitation) ended by a user's choice,
        // on either side: the peer is not resumed after a restart either (as the table stops
        // taking it back now).
        if let verifiedPeer, SessionTable.endsByChoice(reason) {
            keepingTrust("a session ended by a choice is not marked so for a restart", verifiedPeer) { try trust.sessionEndedByChoice(verifiedPeer) }
        }
        let info = PeerDisconnect(connection: c.id, peer: hello?.peerID, displayName: hello?.displayName, remote: c.remote,
                                  reason: reason, detail: detail, byPeer: byPeer, wasConnected: wasSession,
                                  verified: verifiedPeer != nil && verifiedPeer == hello?.peerID)
        if wasSession {
            logger.info("peer session ended", ["peer.id": hello?.peerID.shortText ?? "?", "reason": reason.name, "why": detail,
                                               "by": byPeer ? "peer" : "us"])
        }
        apply(actions)
        if wasSession || !superseded { onEvent(.disconnected(info)) }
        if invitation != nil { onEvent(.invitationEnded(info)) }
        for w in waiters { w.resume(throwing: PeerError.refused(info)) }
    }

    func summary(_ c: PeerConnection) -> PeerSummary? {
        let snap = c.snapshot
        guard let hello = snap.hello else { return nil }
        return PeerSummary(peer: hello.peerID, displayName: hello.displayName, remote: c.remote, connection: c.id,
                           role: c.role, encrypted: snap.encrypted ?? false, pairingCode: snap.pairingCode,
                           trusted: trust.isTrusted(hello.peerID), droppedDatagrams: c.droppedDatagrams, queuedBytes: c.queuedBytes)
    }

}
