import Testing
@testable import Session

/// The peer table: the invite race, the peer limit, reconnects with backoff.
@Suite struct SessionTableTests {
    static let t0 = ContinuousClock.now
    static let low = Fixtures.peer(0x01)
    static let high = Fixtures.peer(0x02)

    /// Two peers dial each other at once. Connection X is dialled by `a` (a's id 1, b's id
    /// 11), Y by `b` (b's 2, a's 12). `aFirst`/`bFirst`: which connection each side
    /// identifies first. Returns each side's closes and its peerConnected count after the
    /// surviving invitation is accepted.
    struct RaceResult: Equatable {
        var aClosed: [SessionTable.Action] = []
        var bClosed: [SessionTable.Action] = []
        var aConnected = 0
        var bConnected = 0
        var listenerDecision: SessionTable.InvitationDecision?
    }

    static func race(a: PeerID, b: PeerID, aFirst: String, bFirst: String) -> RaceResult {
        var ta = SessionTable(localID: a)
        var tb = SessionTable(localID: b)
        var r = RaceResult()
        #expect(ta.dialing(1, to: b) == nil)
        #expect(tb.dialing(2, to: a) == nil)
        // Both dials connected: each side accepted the other's.
        ta.dialConnected(1)
        tb.dialConnected(2)
        ta.accepted(12)
        tb.accepted(11)
        for c in aFirst == "X" ? [1, 12] : [12, 1] as [ConnectionID] { r.aClosed += ta.identified(c, as: b) }
        for c in bFirst == "X" ? [11, 2] : [2, 11] as [ConnectionID] { r.bClosed += tb.identified(c, as: a) }
        // Report the closes back, as the machines would.
        for case .close(let id, let reason) in r.aClosed { _ = ta.closed(id, reason: reason, now: t0, random: 0.5) }
        for case .close(let id, let reason) in r.bClosed { _ = tb.closed(id, reason: reason, now: t0, random: 0.5) }
        // The survivor's INVITE reaches its listener.
        let xSurvives = a < b
        let listener = xSurvives ? tb.invitation(on: 11) : ta.invitation(on: 12)
        r.listenerDecision = listener
        for (id, isA) in (xSurvives ? [(1, true), (11, false)] : [(12, true), (2, false)]) as [(ConnectionID, Bool)] {
            let actions = isA ? ta.connected(id) : tb.connected(id)
            let n = actions.filter { if case .peerConnected = $0 { true } else { false } }.count
            if isA { r.aConnected += n } else { r.bConnected += n }
        }
        // A late duplicate report does not report the peer again.
        #expect(ta.connected(xSurvives ? 1 : 12).isEmpty)
        #expect(ta.connectedPeers == [b] && tb.connectedPeers == [a])
        return r
    }

    @Test(arguments: ["X", "Y"], ["X", "Y"])
    func theConnectionDialledByTheSmallerIDSurvives(aFirst: String, bFirst: String) {
        // a < b: X (dialled by a) survives on both sides; Y is closed as a duplicate.
        let r = Self.race(a: Self.low, b: Self.high, aFirst: aFirst, bFirst: bFirst)
        #expect(r.aClosed == [.close(12, .duplicate)])
        #expect(r.bClosed == [.close(2, .duplicate)])
        #expect(r.aConnected == 1 && r.bConnected == 1)
        // b was inviting a too: a's invitation is accepted without asking b's user again.
        #expect(r.listenerDecision == .accept)
        // a > b: Y (dialled by b) survives.
        let s = Self.race(a: Self.high, b: Self.low, aFirst: aFirst, bFirst: bFirst)
        #expect(s.aClosed == [.close(1, .duplicate)])
        #expect(s.bClosed == [.close(11, .duplicate)])
        #expect(s.aConnected == 1 && s.bConnected == 1)
        #expect(s.listenerDecision == .accept)
    }

    /// A dial registered before its socket exists (the node registers at the start of
    /// `connect`): the peer's own connection, identified meanwhile, meets it. A dial that has
    /// not connected yet gives way to it whichever ID is smaller (the peer has not seen the
    /// dial: it keeps its own connection too); superseded before it has a connection, the
    /// dial is abandoned by its node. A connected dial takes part in the ID rule. A dial that
    /// reached no one is forgotten, leaving no rival behind.
    @Test func aDialRegisteredBeforeItsSocketTakesPartInTheTieBreak() {
        // This side (high) dials low; low's dial arrives first: low's survives, ours goes.
        var t = SessionTable(localID: Self.high)
        #expect(t.dialing(1, to: Self.low) == nil)
        t.accepted(2)
        #expect(t.identified(2, as: Self.low) == [.close(1, .duplicate)])
        #expect(t.isSuperseded(1) && !t.isSuperseded(2))
        _ = t.abandonDial(1, now: Self.t0, random: 0.5)
        // low's invitation is accepted without asking: this side was inviting it too.
        #expect(t.invitation(on: 2) == .accept)
        #expect(t.connected(2) == [.peerConnected(Self.low, 2)])

        // This side (low) dials high, connected; high's dial arrives first: ours survives
        // (high sees it too, and closes its own), high's goes.
        var u = SessionTable(localID: Self.low)
        #expect(u.dialing(1, to: Self.high) == nil)
        u.dialConnected(1)
        u.accepted(2)
        #expect(u.identified(2, as: Self.high) == [.close(2, .duplicate)])
        #expect(!u.isSuperseded(1))

        // The same with this side's dial still connecting (a stale address): high's goes on,
        // and its invitation is accepted, as this side was inviting too. (By the ID rule alone
        // high's working connection was closed for a dial that never connected.)
        var w = SessionTable(localID: Self.low)
        #expect(w.dialing(1, to: Self.high) == nil)
        w.accepted(2)
        #expect(w.identified(2, as: Self.high) == [.close(1, .duplicate)])
        #expect(w.isSuperseded(1) && !w.isSuperseded(2))
        #expect(w.invitation(on: 2) == .accept)
        #expect(w.connected(2) == [.peerConnected(Self.high, 2)])
        #expect(w.abandonDial(1, now: Self.t0, random: 0.5).isEmpty, "its connect failed at last")
        #expect(w.connection(for: Self.high) == 2)

        // A dial that reached no one leaves nothing: the peer's later dial is no rival's.
        var v = SessionTable(localID: Self.low)
        #expect(v.dialing(1, to: Self.high) == nil)
        _ = v.abandonDial(1, now: Self.t0, random: 0.5)
        v.accepted(2)
        #expect(v.identified(2, as: Self.high).isEmpty)
        #expect(v.invitation(on: 2) == .ask)
    }

    /// This side dials a peer whose own connection reached it first and is identified (the
    /// peer's `connect` ran a moment earlier), before that connection's invitation: the
    /// connection dialled by the smaller ID carries the session all the same, and each side
    /// reports the peer connected once. With this side the smaller, the peer's invitation is
    /// declined as the duplicate its connection is about to be (accepted, it made a session
    /// that this side's dial replaced once identified: `connected` twice on both sides).
    @Test(arguments: [false, true])
    func aDialAfterThePeersOwnConnectionWasIdentifiedStillMakesOneSession(localIsSmaller: Bool) {
        let (me, peer) = localIsSmaller ? (Self.low, Self.high) : (Self.high, Self.low)
        var t = SessionTable(localID: me)
        t.accepted(5)
        #expect(t.identified(5, as: peer).isEmpty)
        #expect(t.dialing(6, to: peer) == nil)
        t.dialConnected(6)
        var reports: [SessionTable.Action] = []
        if localIsSmaller {
            #expect(t.invitation(on: 5) == .decline(.duplicate))
            reports += t.identified(6, as: peer)
            #expect(reports == [.close(5, .duplicate)])
            reports += t.connected(6)
            #expect(t.connection(for: peer) == 6)
        } else {
            #expect(t.invitation(on: 5) == .ask)
            reports += t.connected(5)
            reports += t.identified(6, as: peer)
            #expect(t.connection(for: peer) == 5, "this side's dial lost: the session stays")
        }
        #expect(reports.filter { if case .peerConnected = $0 { true } else { false } }.count == 1, "\(reports)")
        #expect(!reports.contains { if case .peerDisconnected = $0 { true } else { false } }, "\(reports)")
    }

    /// The same, with this side's dial still connecting when the peer's invitation arrives
    /// (an address that does not answer): the invitation is not declined for it, whichever ID
    /// is smaller; the dial gives way and the invitation is accepted (this side wants the
    /// session). Declined, the peer waited for a connection that might never come.
    @Test(arguments: [false, true])
    func aDialStillConnectingGivesWayToTheInvitationOfThePeersConnection(localIsSmaller: Bool) {
        let (me, peer) = localIsSmaller ? (Self.low, Self.high) : (Self.high, Self.low)
        var t = SessionTable(localID: me)
        t.accepted(5)
        #expect(t.identified(5, as: peer).isEmpty)
        #expect(t.dialing(6, to: peer) == nil)
        #expect(t.invitation(on: 5) == .accept)
        #expect(t.isSuperseded(6))
        #expect(t.connected(5) == [.peerConnected(peer, 5)])
        // The dial's connect succeeds after all: the node sees it superseded and abandons it.
        t.dialConnected(6)
        #expect(t.abandonDial(6, now: Self.t0, random: 0.5).isEmpty)
        #expect(t.connection(for: peer) == 5 && t.connectionCount == 1)
    }

    /// A peer this side wanted (its own dial lost the tie-break, or the peer said its
    /// connection carries the session) is accepted without asking only while that wish can
    /// come true: once its last connection ended without a session, or the wait for its
    /// connection gave up, its next invitation is asked again (else a peer dialled once
    /// could later come in past `accept = ask` or `none`).
    @Test func aWishThatCannotComeTrueIsForgotten() {
        // high dials low; low's dial wins; then low's connection fails before its session.
        var t = SessionTable(localID: Self.high)
        #expect(t.dialing(1, to: Self.low) == nil)
        t.accepted(2)
        #expect(t.identified(2, as: Self.low) == [.close(1, .duplicate)])
        _ = t.closed(1, reason: .duplicate, now: Self.t0, random: 0.5)
        #expect(t.invitation(on: 2) == .accept, "wanted while low's connection lives")
        _ = t.closed(2, reason: .timeout, now: Self.t0, random: 0.5)
        t.accepted(3)
        #expect(t.identified(3, as: Self.low).isEmpty)
        #expect(t.invitation(on: 3) == .ask, "its last connection ended without a session")

        // The peer closed this side's dial as its duplicate and never came: the wait ends.
        var u = SessionTable(localID: Self.high)
        #expect(u.dialing(1, to: Self.low) == nil)
        _ = u.closed(1, reason: .duplicate, now: Self.t0, random: 0.5)
        u.want(Self.low)
        u.stopWanting(Self.low)
        u.accepted(2)
        #expect(u.identified(2, as: Self.low).isEmpty)
        #expect(u.invitation(on: 2) == .ask)
        // While the peer's connection is here, giving up the wait forgets nothing.
        u.want(Self.low)
        u.stopWanting(Self.low)
        #expect(u.invitation(on: 2) == .accept)
    }

    @Test func anInvitationIsAskedUnlessThisSideWasInvitingToo() {
        var t = SessionTable(localID: Self.low)
        t.accepted(5)
        #expect(t.identified(5, as: Self.high).isEmpty)
        #expect(t.invitation(on: 5) == .ask)
        #expect(t.invitation(on: 99) == .decline(.protocolError))
        _ = t.connected(5)
        // Already connected: a second session with the same peer is a duplicate.
        t.accepted(6)
        #expect(t.invitation(on: 6) == .decline(.protocolError))  // not identified yet
        #expect(t.dialing(7, to: Self.high) == .duplicate)
        #expect(t.dialing(8, to: Self.low) == .selfConnection)
    }

    @Test func aNewerConnectionFromTheSamePeerReplacesAStaleOne() {
        // high lost its connection to low without low noticing, and dials again.
        var t = SessionTable(localID: Self.low)
        t.accepted(1)
        _ = t.identified(1, as: Self.high)
        #expect(t.connected(1) == [.peerConnected(Self.high, 1)])
        t.accepted(2)
        #expect(t.identified(2, as: Self.high) == [.close(1, .replaced), .peerDisconnected(Self.high, .replaced)])
        #expect(t.closed(1, reason: .replaced, now: Self.t0, random: 0.5).isEmpty)
        #expect(t.invitation(on: 2) == .ask)
        #expect(t.connected(2) == [.peerConnected(Self.high, 2)])
    }

    @Test func theNinthPeerIsRefusedAsFull() {
        var t = SessionTable(localID: Fixtures.peer(0))
        for i in 1...8 as ClosedRange<UInt8> {
            t.accepted(ConnectionID(i))
            _ = t.identified(ConnectionID(i), as: Fixtures.peer(i))
            #expect(t.invitation(on: ConnectionID(i)) == .ask)
            #expect(t.connected(ConnectionID(i)) == [.peerConnected(Fixtures.peer(i), ConnectionID(i))])
        }
        t.accepted(9)
        _ = t.identified(9, as: Fixtures.peer(9))
        #expect(t.invitation(on: 9) == .decline(.full))
        #expect(t.dialing(10, to: Fixtures.peer(10)) == .full)
        // One leaves: room again.
        #expect(t.closed(3, reason: .normal, now: Self.t0, random: 0.5) == [.peerDisconnected(Fixtures.peer(3), .normal)])
        #expect(t.invitation(on: 9) == .ask)
        #expect(SessionTable(localID: Self.low, maxPeers: 100).maxPeers == 64)
    }

    @Test func invitationsBeingAnsweredAndDialsHoldAPlace() {
        var t = SessionTable(localID: Fixtures.peer(0), maxPeers: 3)
        #expect(t.dialing(1, to: Fixtures.peer(1)) == nil)
        t.accepted(2)
        _ = t.identified(2, as: Fixtures.peer(2))
        #expect(t.invitation(on: 2) == .ask)
        // The race's two connections to one peer take one place.
        #expect(t.dialing(3, to: Fixtures.peer(3)) == nil)
        t.dialConnected(3)
        t.accepted(4)
        #expect(t.identified(4, as: Fixtures.peer(3)) == [.close(4, .duplicate)])
        #expect(t.occupiedPeers.count == 3)
        t.accepted(5)
        _ = t.identified(5, as: Fixtures.peer(5))
        #expect(t.invitation(on: 5) == .decline(.full))
        #expect(t.dialing(6, to: Fixtures.peer(6)) == .full)
        // A dial that failed frees its place.
        _ = t.closed(1, reason: .timeout, now: Self.t0, random: 0.5)
        #expect(t.invitation(on: 5) == .ask)
        #expect(SessionTable(localID: Self.low, maxPeers: 0).maxPeers == 1)
    }

    @Test func backoffDoublesToItsCapWithTheJitterGiven() {
        let b = ReconnectBackoff.standard
        let middle = (1...9).map { b.delay(before: $0, random: 0.5) }
        #expect(middle == [.milliseconds(500), .seconds(1), .seconds(2), .seconds(4), .seconds(8), .seconds(16), .seconds(30), .seconds(30), .seconds(30)])
        #expect(b.delay(before: 1, random: 0) == .milliseconds(400))
        #expect(b.delay(before: 7, random: 1) == .seconds(36))
        #expect(b.delay(before: 12, random: 0.5) == .seconds(30))
        #expect(b.delay(before: 13, random: 0.5) == nil)
        #expect(ReconnectBackoff(jitter: 0).delay(before: 2, random: 0.9) == .seconds(1))
    }

    @Test func aTrustedPeerIsRedialledUntilTheBackoffGivesUp() {
        var t = SessionTable(localID: Self.low, backoff: ReconnectBackoff(initial: .seconds(1), maximum: .seconds(4), jitter: 0.5, maxAttempts: 3))
        t.trust(Self.high)
        _ = t.dialing(1, to: Self.high)
        _ = t.identified(1, as: Self.high)
        _ = t.connected(1)
        // Lost: first reconnect after 1 s (random 0.5: the middle of the jitter).
        #expect(t.closed(1, reason: .lost, now: Self.t0, random: 0.5)
                == [.peerDisconnected(Self.high, .lost), .reconnect(Self.high, at: Self.t0 + .seconds(1), attempt: 1)])
        // Each attempt times out (the handshake or invitation deadline): the next waits longer.
        var now = Self.t0 + .seconds(1)
        var schedule: [SessionTable.Action] = []
        for id in 2...4 as ClosedRange<ConnectionID> {
            do { let due = t.redialDue(Self.high, attempt: Int(id) - 1); #expect(due) }
            #expect(t.dialing(id, to: Self.high) == nil)
            now = now + .seconds(10)
            schedule += t.closed(id, reason: .timeout, now: now, random: 1)
        }
        #expect(schedule == [
            .reconnect(Self.high, at: Self.t0 + .seconds(11) + .seconds(3), attempt: 2),
            .reconnect(Self.high, at: Self.t0 + .seconds(21) + .seconds(6), attempt: 3),
            .gaveUp(Self.high, attempts: 3),
        ])
    }

    @Test func aChosenEndIsNotRedialledAndASessionResetsTheCount() {
        var t = SessionTable(localID: Self.low)
        t.trust(Self.high)
        _ = t.dialing(1, to: Self.high)
        _ = t.identified(1, as: Self.high)
        _ = t.connected(1)
        #expect(t.closed(1, reason: .normal, now: Self.t0, random: 0.5) == [.peerDisconnected(Self.high, .normal)])
        _ = t.dialing(2, to: Self.high)
        #expect(t.closed(2, reason: .transportClosed, now: Self.t0, random: 0.5) == [.reconnect(Self.high, at: Self.t0 + .milliseconds(500), attempt: 1)])
        do { let due = t.redialDue(Self.high, attempt: 1); #expect(due) }
        _ = t.dialing(3, to: Self.high)
        #expect(t.closed(3, reason: .timeout, now: Self.t0, random: 0.5) == [.reconnect(Self.high, at: Self.t0 + .seconds(1), attempt: 2)])
        // The peer comes back (it dialled us): the count starts again.
        t.accepted(4)
        _ = t.identified(4, as: Self.high)
        _ = t.connected(4)
        #expect(t.closed(4, reason: .lost, now: Self.t0, random: 0.5)
                == [.peerDisconnected(Self.high, .lost), .reconnect(Self.high, at: Self.t0 + .milliseconds(500), attempt: 1)])
        t.distrust(Self.high)
        _ = t.dialing(5, to: Self.high)
        #expect(t.closed(5, reason: .timeout, now: Self.t0, random: 0.5).isEmpty)
        #expect(!t.isTrusted(Self.high))
    }

    @Test func aLostTrustedSessionComesBackWithoutAsking() {
        // The side that sees the drop redials; the other accepts the INVITE without asking,
        // whether it saw the drop (lost) or not yet (the new connection replaces the old).
        for sawDrop in [true, false] {
            var t = SessionTable(localID: Self.low)
            t.trust(Self.high)
            t.accepted(1)
            _ = t.identified(1, as: Self.high)
            _ = t.connected(1)
            if sawDrop { _ = t.closed(1, reason: .lost, now: Self.t0, random: 0.5) }
            t.accepted(2)
            let closes = t.identified(2, as: Self.high)
            #expect(closes == (sawDrop ? [] : [.close(1, .replaced), .peerDisconnected(Self.high, .replaced)]))
            #expect(t.invitation(on: 2) == .accept)
            #expect(t.connected(2) == [.peerConnected(Self.high, 2)])
        }
        // Not trusted, or ended by a choice: asked as usual.
        var u = SessionTable(localID: Self.low)
        u.accepted(1)
        _ = u.identified(1, as: Self.high)
        _ = u.connected(1)
        _ = u.closed(1, reason: .lost, now: Self.t0, random: 0.5)
        u.accepted(2)
        _ = u.identified(2, as: Self.high)
        #expect(u.invitation(on: 2) == .ask)
        var v = SessionTable(localID: Self.low)
        v.trust(Self.high)
        v.accepted(1)
        _ = v.identified(1, as: Self.high)
        _ = v.connected(1)
        _ = v.closed(1, reason: .normal, now: Self.t0, random: 0.5)
        v.accepted(2)
        _ = v.identified(2, as: Self.high)
        #expect(v.invitation(on: 2) == .ask)
    }

    @Test func aRedialThatCannotConnectSchedulesTheNext() {
        var t = Self.lostTrustedSession()
        #expect(t.redialFailed(Self.high, now: Self.t0 + .seconds(1), random: 0.5) == [.reconnect(Self.high, at: Self.t0 + .seconds(3), attempt: 2)])
        do { let due = t.redialDue(Self.high, attempt: 2); #expect(due) }
        #expect(t.redialFailed(Self.high, now: Self.t0 + .seconds(3), random: 0.5) == [.gaveUp(Self.high, attempts: 2)])
        // The peer dialled this side meanwhile: no redial, and a failure report changes nothing.
        t.accepted(2)
        _ = t.identified(2, as: Self.high)
        #expect(!t.shouldRedial(Self.high))
        #expect(t.redialFailed(Self.high, now: Self.t0, random: 0.5).isEmpty)
        // An untrusted peer is never redialled.
        #expect(!t.shouldRedial(Self.peer3))
    }

    /// The peer's daemon stopping (a restart, a reboot) is not a user's choice: its trusted
    /// peer is redialled, and its invitation accepted without asking, as after a drop.
    @Test func aTrustedPeerThatStoppedIsRedialled() {
        var t = SessionTable(localID: Self.low)
        t.trust(Self.high)
        t.accepted(1)
        _ = t.identified(1, as: Self.high)
        _ = t.connected(1)
        #expect(t.closed(1, reason: .shuttingDown, now: Self.t0, random: 0.5)
                == [.peerDisconnected(Self.high, .shuttingDown), .reconnect(Self.high, at: Self.t0 + .milliseconds(500), attempt: 1)])
        t.accepted(2)
        _ = t.identified(2, as: Self.high)
        #expect(t.invitation(on: 2) == .accept)
        #expect([Reason.normal, .declined, .cancelled].allSatisfy(SessionTable.endsByChoice))
        #expect(![Reason.shuttingDown, .lost, .transportClosed, .timeout].contains(where: SessionTable.endsByChoice))
    }

    /// After a restart the peers given (trusted, their session not ended by a choice) are
    /// taken back without asking, and those this side had dialled are dialled from the first
    /// attempt; an untrusted one is neither, one already connected to this side not dialled.
    @Test func trustedSessionsResumeAtStart() {
        var t = SessionTable(localID: Self.low)
        t.trust(Self.high)
        t.trust(Self.peer3)
        let peer5 = Fixtures.peer(0x05)
        t.trust(peer5)
        t.accepted(1)
        _ = t.identified(1, as: Self.peer3)
        let untrusted = Fixtures.peer(0x04)
        let window = t.backoff.longestChain
        #expect(t.resumeAtStart([(Self.high, true), (Self.peer3, true), (untrusted, true), (peer5, false)], now: Self.t0, random: { 0.5 })
                == [.reconnect(Self.high, at: Self.t0 + .milliseconds(500), attempt: 1),
                    .resumeWindow(Self.peer3, endsAt: Self.t0 + window), .resumeWindow(peer5, endsAt: Self.t0 + window)])
        // The default chain: 0.5 s doubling to 30 s, 12 attempts, each at +20 %.
        #expect(window == .milliseconds(Int64((500 + 1000 + 2000 + 4000 + 8000 + 16000 + 6 * 30000) * 1.2)))
        for (id, peer) in [(2, Self.high), (3, peer5)] as [(ConnectionID, PeerID)] {
            t.accepted(id)
            _ = t.identified(id, as: peer)
            #expect(t.invitation(on: id) == .accept)
        }
        t.accepted(4)
        _ = t.identified(4, as: untrusted)
        #expect(t.invitation(on: 4) == .ask)
        var u = SessionTable(localID: Self.low)
        u.trust(Self.high)
        u.accepted(1)
        _ = u.identified(1, as: Self.high)
        #expect(u.invitation(on: 1) == .ask, "without the restart's resume, asked as usual")
        // The window ends: a peer this side does not redial is asked again; one it redials is not.
        var w = SessionTable(localID: Self.low)
        w.trust(Self.high)
        w.trust(peer5)
        _ = w.resumeAtStart([(Self.high, true), (peer5, false)], now: Self.t0, random: { 0.5 })
        w.resumeWindowEnded(peer5)
        w.resumeWindowEnded(Self.high)
        for (id, peer, answer) in [(1, peer5, SessionTable.InvitationDecision.ask), (2, Self.high, .accept)] as [(ConnectionID, PeerID, SessionTable.InvitationDecision)] {
            w.accepted(id)
            _ = w.identified(id, as: peer)
            #expect(w.invitation(on: id) == answer)
        }
    }

    /// One chain of redials per peer: two of its connections ending within one attempt (an
    /// address where another board answered, then the next address) schedule one redial,
    /// and once the chain gave up a later close does not start another.
    @Test func aPeerHasOneChainOfRedials() {
        var t = Self.lostTrustedSession()
        _ = t.dialing(2, to: Self.high)
        #expect(t.closed(2, reason: .identityMismatch, now: Self.t0, random: 0.5) == [.reconnect(Self.high, at: Self.t0 + .seconds(2), attempt: 2)])
        _ = t.dialing(3, to: Self.high)
        #expect(t.closed(3, reason: .timeout, now: Self.t0, random: 0.5).isEmpty, "the attempt's second close: the chain has its next attempt")
        do { let due = t.redialDue(Self.high, attempt: 2); #expect(due) }
        _ = t.dialing(4, to: Self.high)
        #expect(t.closed(4, reason: .timeout, now: Self.t0, random: 0.5) == [.gaveUp(Self.high, attempts: 2)])
        _ = t.dialing(5, to: Self.high)
        #expect(t.closed(5, reason: .timeout, now: Self.t0, random: 0.5).isEmpty, "given up: no new chain")
        // A session resets it all.
        t.accepted(6)
        _ = t.identified(6, as: Self.high)
        _ = t.connected(6)
        #expect(t.closed(6, reason: .lost, now: Self.t0, random: 0.5)
                == [.peerDisconnected(Self.high, .lost), .reconnect(Self.high, at: Self.t0 + .seconds(1), attempt: 1)])
    }

    /// A redial timer left from an earlier chain dials nobody: the session came back (the
    /// peer dialled) and a user ended it, or a new chain started; only the pending attempt's
    /// timer counts (the old one redialled against the user's choice, or ran a second chain).
    @Test func aTimerFromAnEarlierChainDialsNobody() {
        var t = Self.lostTrustedSession(maxAttempts: 5, due: false)
        // The peer dials back before the timer: a session; then a user ends it.
        t.accepted(2)
        _ = t.identified(2, as: Self.high)
        _ = t.connected(2)
        #expect(t.closed(2, reason: .normal, now: Self.t0, random: 0.5) == [.peerDisconnected(Self.high, .normal)])
        do { let due = t.redialDue(Self.high, attempt: 1); #expect(!due, "the old timer: the user ended the session") }
        // A new session lost: a new chain; the old chain's timer does not take its turn.
        t.accepted(3)
        _ = t.identified(3, as: Self.high)
        _ = t.connected(3)
        #expect(t.closed(3, reason: .lost, now: Self.t0, random: 0.5)
                == [.peerDisconnected(Self.high, .lost), .reconnect(Self.high, at: Self.t0 + .seconds(1), attempt: 1)])
        do { let due = t.redialDue(Self.high, attempt: 7); #expect(!due, "a timer of another chain's attempt") }
        do { let due = t.redialDue(Self.high, attempt: 1); #expect(due, "the chain's own") }
    }

    /// An attempt due while a dial of the peer was under way is let go (a connection
    /// existed); when that dial then never connects, the chain goes on from there (it died:
    /// no more attempts, no give-up, the peer taken back without asking for ever).
    @Test func aChainGoesOnAfterADialThatNeverConnected() {
        var t = Self.lostTrustedSession()  // attempt 1 due and made
        _ = t.dialing(2, to: Self.high)      // attempt 1's dial: an old address, another board
        #expect(t.closed(2, reason: .identityMismatch, now: Self.t0, random: 0.5) == [.reconnect(Self.high, at: Self.t0 + .seconds(2), attempt: 2)])
        _ = t.dialing(3, to: Self.high)      // the next address, still connecting
        do { let due = t.redialDue(Self.high, attempt: 2); #expect(!due, "a dial is under way: let go") }
        let next = t.abandonDial(3, now: Self.t0 + .seconds(5), random: 0.5)
        #expect(next == [.gaveUp(Self.high, attempts: 2)], "the dial never connected: the chain's next step (here its end, at 2 attempts)")
    }

    /// An untrusted peer's new connection winning over a session this side had dialled (the
    /// peer saw the link drop first and invited again) is asked about, as after any drop:
    /// the session that was up is not this side's wish for a new one (it was accepted
    /// without asking under `ask` and `none`). While this side's dial was still inviting, it is.
    @Test func anUntrustedPeersReturnIsAskedAbout() {
        var t = SessionTable(localID: Self.high)
        _ = t.dialing(1, to: Self.low)
        _ = t.identified(1, as: Self.low)
        _ = t.connected(1)
        t.accepted(2)
        #expect(t.identified(2, as: Self.low) == [.close(1, .duplicate), .peerDisconnected(Self.low, .duplicate)])
        #expect(t.invitation(on: 2) == .ask)
        // Still inviting (no session yet): the peer's connection is the one this side wanted.
        var u = SessionTable(localID: Self.high)
        _ = u.dialing(1, to: Self.low)
        _ = u.identified(1, as: Self.low)
        u.accepted(2)
        #expect(u.identified(2, as: Self.low) == [.close(1, .duplicate)])
        #expect(u.invitation(on: 2) == .accept)
    }

    /// Two dials of this side to one peer, the first registered first but connected second
    /// (its first address took long to fail): the newer by connection wins, as on the peer,
    /// which orders them by its accept (by registration, each side closed the other one).
    @Test func dialsAreOrderedByTheirConnectionNotTheirRegistration() {
        var t = SessionTable(localID: Self.low)
        _ = t.dialing(1, to: Self.high)  // registered first, connects second
        t.dialingUnknown(2)              // connects first
        _ = t.identified(2, as: Self.high)
        t.dialConnected(1)
        #expect(t.identified(1, as: Self.high) == [.close(2, .replaced)], "the older by connection loses, as the peer decides")
    }

    /// A table (backoff 1 s doubling to 8 s, no jitter, `maxAttempts` attempts) whose trusted session
    /// with `high`, dialled on connection 1, was lost: its first redial scheduled and due.
    /// (`due`: false leaves the first redial pending, not yet due.)
    static func lostTrustedSession(maxAttempts: Int = 2, due: Bool = true) -> SessionTable {
        var t = SessionTable(localID: Self.low, backoff: ReconnectBackoff(initial: .seconds(1), maximum: .seconds(8), jitter: 0, maxAttempts: maxAttempts))
        t.trust(Self.high)
        _ = t.dialing(1, to: Self.high)
        _ = t.identified(1, as: Self.high)
        _ = t.connected(1)
        #expect(t.closed(1, reason: .lost, now: Self.t0, random: 0.5)
                == [.peerDisconnected(Self.high, .lost), .reconnect(Self.high, at: Self.t0 + .seconds(1), attempt: 1)])
        guard due else { return t }
        let made = t.redialDue(Self.high, attempt: 1)
        #expect(made)
        return t
    }

    static let peer3 = Fixtures.peer(0x03)
}
