/// Identifies one connection (chosen by the caller; never reused while the table knows it).
public typealias ConnectionID = UInt64

/// The rules across connections, pure: how many peers, which connection survives when two
/// peers dial each other at once, and when to redial a trusted peer. The caller reports
/// what each `ConnectionMachine` does and carries out the returned actions.
///
/// Tie-break: of two live connections to the same peer, the one dialled by the peer with
/// the smaller peer ID (byte-wise) survives; the other is closed with `duplicate`. Both
/// sides know both IDs and who dialled what, so both keep the same connection without
/// exchanging anything. Of two connections dialled by the same side, the newer survives
/// (the peer dials again only when it has given the older one up); the older is closed
/// with `replaced`. A dialer registers its connection with the peer ID it means to reach
/// (from discovery), so the rule applies from its connect on both sides (a dial whose
/// connect has not completed loses to the peer's identified connection: the peer has not
/// seen it); a dial registered after the peer's connection was identified meets it at that
/// connection's invitation (`invitation(on:)`).
public struct SessionTable: Sendable {
    /// What the caller must do.
    public enum Action: Sendable, Hashable {
        /// Close this connection with this reason (`ConnectionInput.close`).
        case close(ConnectionID, Reason)
        /// The peer's session is up (reported once per peer until it is down again).
        case peerConnected(PeerID, ConnectionID)
        /// The peer's session is down.
        case peerDisconnected(PeerID, Reason)
        /// Dial this trusted peer at this instant (attempt from 1).
        case reconnect(PeerID, at: ContinuousClock.Instant, attempt: Int)
        /// Stop redialling this peer: `attempts` failed.
        case gaveUp(PeerID, attempts: Int)
        /// At this instant, call `resumeWindowEnded` for this peer (taken back without asking
        /// after a restart for as long as it may be redialling this side).
        case resumeWindow(PeerID, endsAt: ContinuousClock.Instant)
    }

    /// The answer to an invitation received on a connection.
    public enum InvitationDecision: Sendable, Hashable {
        /// Ask the user (or the application).
        case ask
        /// Accept without asking: this side was inviting the same peer itself (its own
        /// connection lost the tie-break), so both users already want the session.
        case accept
        /// Decline with this reason (`full`, `duplicate`).
        case decline(Reason)
    }

    /// The most peers allowed by any configuration.
    public static let peerLimit = 64

    private struct Entry: Sendable {
        var peer: PeerID?
        var dialledByUs: Bool
        var connected = false
        /// Lost the tie-break: closed by the table, no longer a rival.
        var superseded = false
        /// Its invitation was let through (`ask` or `accept`): it holds a place.
        var admitted = false
        /// Order among the peer's connections: newer ones have larger numbers (a dial's is
        /// taken again when its socket connects: the peer orders it by its accept).
        var serial: UInt64
        /// Has a socket: accepted, or a dial whose connect succeeded. A dial without one loses
        /// to the peer's connections and is not yet a rival of this side's own.
        var linked = true
    }

    /// This side's peer ID.
    public let localID: PeerID
    /// At most this many peers connected at once (1 to 64; default 8).
    public let maxPeers: Int
    /// The reconnect policy for trusted peers.
    public let backoff: ReconnectBackoff

    private var entries: [ConnectionID: Entry] = [:]
    private var reported: [PeerID: ConnectionID] = [:]
    private var serial: UInt64 = 0
    /// Peers this side was inviting when the peer's own connection won the tie-break.
    private var wanted: Set<PeerID> = []
    /// Trusted peers, redialled after a drop, with the failed attempts so far.
    private var trusted: [PeerID: Int] = [:]
    /// Trusted peers whose session was lost (not ended by a choice) and not yet back: their
    /// invitations are accepted without asking, on both sides, so a session comes back by
    /// itself.
    private var resumable: Set<PeerID> = []
    /// Trusted peers with a redial scheduled and not yet due (`redialDue`), with the attempt
    /// it is: one chain of attempts per peer, however many of its connections end meanwhile
    /// (two closes in one attempt, say an address where another board answered and then the
    /// next address, scheduled two chains that ran side by side). A timer whose attempt is
    /// not the one pending is an earlier chain's (a session came up since, or a user ended
    /// it): it dials nobody.
    private var redialPending: [PeerID: Int] = [:]
    /// Trusted peers whose redials gave up: not redialled again until a session with them
    /// comes up (a later close of one of their connections does not start a new chain).
    private var gaveUpOn: Set<PeerID> = []

    /// A table; `maxPeers` is kept within 1...64.
    public init(localID: PeerID, maxPeers: Int = 8, backoff: ReconnectBackoff = .standard) {
        self.localID = localID
        self.maxPeers = min(max(maxPeers, 1), Self.peerLimit)
        self.backoff = backoff
    }

    /// Peers whose sessions are up.
    public var connectedPeers: Set<PeerID> { Set(reported.keys) }

    /// Connections the table knows (any phase).
    public var connectionCount: Int { entries.count }

    /// Peers that hold a place: connected, being dialled, or whose invitation is being
    /// answered. Counted by peer, so the two connections of a race take one place.
    public var occupiedPeers: Set<PeerID> {
        var peers = Set(reported.keys)
        for e in entries.values where !e.superseded && !e.connected && (e.dialledByUs || e.admitted) {
            if let p = e.peer { peers.insert(p) }
        }
        return peers
    }

    /// Whether one more peer (other than `peer`) would exceed the limit.
    public func isFull(for peer: PeerID) -> Bool {
        var occupied = occupiedPeers
        occupied.remove(peer)
        return occupied.count >= maxPeers
    }

    /// The connection reported for `peer`, if its session is up.
    public func connection(for peer: PeerID) -> ConnectionID? { reported[peer] }

    // MARK: connections

    /// This side is about to dial `peer` on `id`. Returns the reason not to (the peer is
    /// connected already, it is this side, or the table is full), or nil to go ahead.
    public mutating func dialing(_ id: ConnectionID, to peer: PeerID) -> Reason? {
        if peer == localID { return .selfConnection }
        if reported[peer] != nil { return .duplicate }
        if isFull(for: peer) { return .full }
        serial += 1
        entries[id] = Entry(peer: peer, dialledByUs: true, serial: serial, linked: false)
        return nil
    }

    /// This side dials an address whose peer ID it does not know yet (`HOST:PORT` typed by a
    /// user): the connection takes part in the tie-break once `identified`.
    public mutating func dialingUnknown(_ id: ConnectionID) {
        serial += 1
        entries[id] = Entry(peer: nil, dialledByUs: true, serial: serial)
    }

    /// A dial registered with `dialing` has its socket connected: it is ordered among the
    /// peer's connections from now (the peer orders it by its accept; ordered from its
    /// registration, a dial whose first address took 10 s to fail counted as older than one
    /// connected meanwhile here and newer there, and the same-side rule closed both).
    public mutating func dialConnected(_ id: ConnectionID) {
        guard entries[id] != nil else { return }
        serial += 1
        entries[id]?.serial = serial
        entries[id]?.linked = true
    }

    /// This side's dial to an address (`dialingUnknown`) met a peer claiming `peer` (its
    /// HELLO, before TLS: the verdict only closes this side's own dial, so a false claim
    /// costs nothing): `.duplicate` when a session with it is up (the dial would have
    /// replaced it, on both sides), `.full` when the table has no room for it (it went past
    /// `max_peers`); nil to go on.
    public func unknownDialMet(_ id: ConnectionID, claiming peer: PeerID) -> Reason? {
        guard let e = entries[id], e.dialledByUs, e.peer == nil, !e.superseded, peer != localID else { return nil }
        if reported[peer] != nil { return .duplicate }
        if isFull(for: peer) { return .full }
        return nil
    }

    /// A dial registered with `dialing` that never got a connection (unreachable, or its
    /// rival won while it dialled): forgotten.
    ///
    /// A trusted peer in a chain of redials (its attempt due while this dial was under way
    /// was let go: a connection existed) gets its next attempt now, if nothing else is left
    /// to bring the session back; the chain died there before.
    public mutating func abandonDial(_ id: ConnectionID, now: ContinuousClock.Instant, random: Double) -> [Action] {
        guard let entry = entries[id], !entry.connected else { return [] }
        entries[id] = nil
        guard let peer = entry.peer, let failures = trusted[peer], failures > 0, redialPending[peer] == nil,
              shouldRedial(peer) else { return [] }
        return scheduleRedial(peer, failures: failures, now: now, random: random)
    }

    /// Whether `id` lost a tie-break (it was closed as `duplicate` or `replaced`).
    public func isSuperseded(_ id: ConnectionID) -> Bool { entries[id]?.superseded ?? false }

    /// A peer connected to this side on `id` (its ID is not known until its HELLO).
    public mutating func accepted(_ id: ConnectionID) {
        serial += 1
        entries[id] = Entry(peer: nil, dialledByUs: false, serial: serial)
    }

    /// The connection's peer is known: call on the machine's `.secured` event (the HELLO's
    /// ID, verified by TLS when encrypted), never on the unverified `.hello`, or a forged
    /// claim could close a real connection. Applies the tie-break against every other live
    /// connection to the same peer.
    public mutating func identified(_ id: ConnectionID, as peer: PeerID) -> [Action] {
        guard var entry = entries[id], !entry.superseded else { return [] }
        entry.peer = peer
        entries[id] = entry
        // This side's own dial still connecting is no rival of another of this side's (the
        // peer has not seen it: it is ordered by its connect, compared once identified).
        let rivals = entries.filter {
            $0.key != id && $0.value.peer == peer && !$0.value.superseded && ($0.value.linked || $0.value.dialledByUs != entry.dialledByUs)
        }
        var out: [Action] = []
        var survivor = id
        for (other, _) in rivals.sorted(by: { $0.value.serial < $1.value.serial }) {
            guard let loser = loser(of: survivor, and: other, peer: peer), let lost = entries[loser] else { continue }
            let reason: Reason = lost.dialledByUs == entries[loser == survivor ? other : survivor]?.dialledByUs ? .replaced : .duplicate
            // Our dial, still inviting, lost to the peer's: its invitation is this side's
            // wish. Not a session that was up (the peer dialled again over it): whether it
            // comes back without asking is trust's (`resumable`), as after any drop.
            if lost.dialledByUs && reason == .duplicate && !lost.connected { wanted.insert(peer) }
            out.append(.close(loser, reason))
            if loser == survivor { survivor = other }
            // A closed connection no longer competes, whatever its machine does next.
            entries[loser]?.superseded = true
            if reported[peer] == loser {
                reported[peer] = nil
                out.append(.peerDisconnected(peer, reason))
                // The peer dialled again over a session this side still thought up (it saw
                // the link drop first): the same session coming back.
                if trusted[peer] != nil { resumable.insert(peer) }
            }
        }
        return out
    }

    /// Which of two connections to `peer` must go.
    private func loser(of a: ConnectionID, and b: ConnectionID, peer: PeerID) -> ConnectionID? {
        guard let ea = entries[a], let eb = entries[b] else { return nil }
        if ea.dialledByUs != eb.dialledByUs {
            // This side's dial without a socket yet loses to the peer's connection, which is
            // identified (a rival dialled by the peer always is): the peer cannot have seen
            // the dial (nothing is sent before the connect), so it keeps its own connection
            // too. By the ID rule alone, a dial to a stale address, its connect hanging,
            // closed the peer's working connection, and the peer waited for one that never came.
            if !(ea.dialledByUs ? ea : eb).linked { return ea.dialledByUs ? a : b }
            // Keep the one dialled by the smaller ID.
            let weDialSurvivor = localID < peer
            return ea.dialledByUs == weDialSurvivor ? b : a
        }
        return ea.serial < eb.serial ? a : b
    }

    /// An INVITE arrived on `id` (this side is its listener): what to answer.
    public mutating func invitation(on id: ConnectionID) -> InvitationDecision {
        guard let entry = entries[id], let peer = entry.peer else { return .decline(.protocolError) }
        if entry.superseded { return .decline(.duplicate) }
        if reported[peer] != nil { return .decline(.duplicate) }
        // This side's own dial to the peer, registered after this connection was identified,
        // wins the tie-break once identified itself (this side has the smaller ID): a session
        // formed here meanwhile would be replaced then, the peer reported connected twice
        // on both sides. Declined as the duplicate it is about to be, as the tie-break would.
        let ourDials = entries.filter { $0.key != id && $0.value.peer == peer && $0.value.dialledByUs && !$0.value.superseded }
        if !entry.dialledByUs, localID < peer, ourDials.contains(where: { $0.value.linked }) {
            return .decline(.duplicate)
        }
        // A dial of ours whose connect has not completed gives way to this connection (as in
        // `identified`): the dial, seeing that once connected or failed, waits for this
        // session; the invitation is accepted, as this side wants the session too.
        if !entry.dialledByUs {
            for (dial, e) in ourDials where !e.linked {
                entries[dial]?.superseded = true
                wanted.insert(peer)
            }
        }
        if isFull(for: peer) { return .decline(.full) }
        entries[id]?.admitted = true
        return wanted.contains(peer) || resumable.contains(peer) ? .accept : .ask
    }

    /// The connection's machine reported `connected`.
    public mutating func connected(_ id: ConnectionID) -> [Action] {
        guard var entry = entries[id], !entry.superseded, let peer = entry.peer else { return [] }
        entry.connected = true
        entries[id] = entry
        wanted.remove(peer)
        resumable.remove(peer)
        redialPending[peer] = nil
        gaveUpOn.remove(peer)
        if trusted[peer] != nil { trusted[peer] = 0 }
        guard reported[peer] == nil else { return [] }
        reported[peer] = id
        return [.peerConnected(peer, id)]
    }

    /// The connection is over (its machine reported `disconnected`, or it never got that
    /// far). For a trusted peer whose session is down and that did not end by a user's
    /// choice, the next reconnect is scheduled with the backoff, `random` placing it
    /// within the jitter.
    public mutating func closed(_ id: ConnectionID, reason: Reason, now: ContinuousClock.Instant, random: Double) -> [Action] {
        guard let entry = entries.removeValue(forKey: id) else { return [] }
        var out: [Action] = []
        // The last connection with a peer this side wanted may be gone without a session.
        if let p = entry.peer { stopWanting(p) }
        let peer = entry.superseded ? nil : entry.peer
        if let peer, reported[peer] == id {
            reported[peer] = nil
            out.append(.peerDisconnected(peer, reason))
        }
        // A connection that lost the tie-break is not a failure: the survivor carries on.
        guard let peer, reason != .duplicate, reason != .replaced, let failures = trusted[peer] else { return out }
        guard reported[peer] == nil, !hasLiveConnection(to: peer) else { return out }
        // A session that ends by a user's choice is not redialled. One whose peer's daemon
        // stopped is (a restart or a reboot: it comes back); this side's own stop dials nobody.
        if Self.endsByChoice(reason) {
            resumable.remove(peer)
            redialPending[peer] = nil  // a redial already scheduled dials nobody
            return out
        }
        return out + scheduleRedial(peer, failures: failures, now: now, random: random)
    }

    /// Whether a connection that ended for `reason` ended by a user's choice (on either
    /// side): its trusted peer is not redialled, now or after a restart.
    public static func endsByChoice(_ reason: Reason) -> Bool {
        reason == .normal || reason == .declined || reason == .cancelled
    }

    /// This side has just started, and each of `peers` (trusted) had a session that was not
    /// ended by a choice: its invitations are accepted without asking, as after a drop, and
    /// those with `dial` (a dial of this side reached them before) are dialled again from the
    /// first attempt. A session cut by a restart or a reboot of either side then comes back
    /// by itself: the side that dialled dials again, the side that was dialled takes it back
    /// while the other may still be redialling it (`ReconnectBackoff.longestChain` from
    /// now: `resumeWindow`, then `resumeWindowEnded`), not for ever.
    public mutating func resumeAtStart(_ peers: [(peer: PeerID, dial: Bool)], now: ContinuousClock.Instant,
                                       random: () -> Double) -> [Action] {
        var out: [Action] = []
        for (peer, dial) in peers where trusted[peer] != nil {
            resumable.insert(peer)
            if dial, shouldRedial(peer) {
                out += scheduleRedial(peer, failures: 0, now: now, random: random())
            } else {
                out.append(.resumeWindow(peer, endsAt: now + backoff.longestChain))
            }
        }
        return out
    }

    /// The window after a restart in which `peer` was taken back without asking is over:
    /// unless a session with it is up or this side is redialling it, its invitations are
    /// answered by the policy again.
    public mutating func resumeWindowEnded(_ peer: PeerID) {
        guard reported[peer] == nil, redialPending[peer] == nil, trusted[peer] ?? 0 == 0 else { return }
        resumable.remove(peer)
    }

    /// Whether a redial of `peer` due now should go ahead: it is still trusted and has no
    /// session or connection (the peer may have dialled this side meanwhile).
    public func shouldRedial(_ peer: PeerID) -> Bool {
        trusted[peer] != nil && reported[peer] == nil && !hasLiveConnection(to: peer)
    }

    /// The redial of `peer` scheduled by a `.reconnect` for `attempt` is due: whether to
    /// make it (`shouldRedial`; and it is the chain's pending attempt, not a timer left from
    /// an earlier chain). The next attempt may be scheduled from now on (by the attempt's end).
    public mutating func redialDue(_ peer: PeerID, attempt: Int) -> Bool {
        guard redialPending[peer] == attempt else { return false }
        redialPending[peer] = nil
        return shouldRedial(peer)
    }

    /// A redial of `peer` failed before any connection existed (no address known, the TCP
    /// connect refused or timed out): the next attempt, or giving up.
    public mutating func redialFailed(_ peer: PeerID, now: ContinuousClock.Instant, random: Double) -> [Action] {
        guard let failures = trusted[peer], shouldRedial(peer) else { return [] }
        return scheduleRedial(peer, failures: failures, now: now, random: random)
    }

    private mutating func scheduleRedial(_ peer: PeerID, failures: Int, now: ContinuousClock.Instant, random: Double) -> [Action] {
        // One chain at a time; none after giving up.
        guard redialPending[peer] == nil, !gaveUpOn.contains(peer) else { return [] }
        let attempt = failures + 1
        trusted[peer] = attempt
        resumable.insert(peer)
        if let delay = backoff.delay(before: attempt, random: random) {
            redialPending[peer] = attempt
            return [.reconnect(peer, at: now + delay, attempt: attempt)]
        }
        trusted[peer] = 0
        resumable.remove(peer)
        gaveUpOn.insert(peer)
        return [.gaveUp(peer, attempts: failures)]
    }

    /// This side wants a session with `peer` whose own connection will carry it (the peer
    /// closed ours as the duplicate before this side saw its rival): its invitation is
    /// accepted without asking.
    public mutating func want(_ peer: PeerID) { wanted.insert(peer) }

    /// The wait for `peer`'s own connection (after `want`) is over, or one of its connections
    /// ended: with no session and no connection left, its later invitations are answered by
    /// the policy again, not accepted.
    public mutating func stopWanting(_ peer: PeerID) {
        guard reported[peer] == nil, !hasLiveConnection(to: peer) else { return }
        wanted.remove(peer)
    }

    /// Whether a connection with `peer` is in progress or up (not one that lost a tie-break).
    private func hasLiveConnection(to peer: PeerID) -> Bool {
        entries.values.contains { $0.peer == peer && !$0.superseded }
    }

    // MARK: trust

    /// Redial `peer` after drops from now on.
    public mutating func trust(_ peer: PeerID) { if trusted[peer] == nil { trusted[peer] = 0 } }

    /// Stop redialling `peer`.
    public mutating func distrust(_ peer: PeerID) {
        trusted[peer] = nil
        resumable.remove(peer)
        redialPending[peer] = nil
        gaveUpOn.remove(peer)
    }

    /// Whether `peer` is redialled after drops.
    public func isTrusted(_ peer: PeerID) -> Bool { trusted[peer] != nil }
}

/// The delay before each reconnect to a trusted peer: `initial`, doubled per failed attempt,
/// at most `maximum`, spread by a jitter the caller draws (so tests pass fixed values, and
/// two peers that lost each other at the same moment do not redial in lockstep), and no
/// attempt after `maxAttempts`.
///
/// The shape of the central's `Backoff` (a delay per attempt from 1), plus the jitter and
/// the give-up that a peer that may have left for good needs.
public struct ReconnectBackoff: Sendable, Hashable {
    /// The delay before the first reconnect.
    public var initial: Duration
    /// The longest delay (before jitter).
    public var maximum: Duration
    /// How far the jitter moves a delay: 0.2 means anywhere from 80 % to 120 %.
    public var jitter: Double
    /// Attempts before giving up.
    public var maxAttempts: Int

    /// A policy.
    public init(initial: Duration = .milliseconds(500), maximum: Duration = .seconds(30), jitter: Double = 0.2, maxAttempts: Int = 12) {
        self.initial = initial
        self.maximum = maximum
        self.jitter = min(max(jitter, 0), 1)
        self.maxAttempts = maxAttempts
    }

    /// The default: 0.5 s doubling to 30 s, ±20 %, 12 attempts (about 4 minutes in all).
    public static let standard = ReconnectBackoff()

    /// The longest a whole chain of attempts can take (every delay at the top of its jitter;
    /// the attempts' own time not counted): how long a peer may go on redialling.
    public var longestChain: Duration {
        (1...max(maxAttempts, 1)).reduce(Duration.zero) { $0 + (delay(before: $1, random: 1) ?? .zero) }
    }

    /// The delay before attempt `attempt` (from 1), `random` in 0...1 placing it within the
    /// jitter (0.5: no jitter); nil past `maxAttempts`: give up.
    public func delay(before attempt: Int, random: Double) -> Duration? {
        guard attempt <= maxAttempts else { return nil }
        var d = initial
        var n = max(attempt, 1)
        while n > 1, d < maximum {
            d = d * 2
            n -= 1
        }
        let u = min(max(random, 0), 1)
        // Whole milliseconds, so equal inputs give equal durations on every platform.
        let base = min(d, maximum).components
        let ms = Double(base.seconds) * 1000 + Double(base.attoseconds) / 1e15
        return .milliseconds(Int64((ms * (1 - jitter + 2 * jitter * u)).rounded()))
    }
}
