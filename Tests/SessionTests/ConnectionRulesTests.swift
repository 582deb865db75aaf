import Testing
@testable import Session

/// Frames out of place, identity checks and closes: each drop has its reason.
@Suite struct ConnectionRulesTests {
    static let t0 = ContinuousClock.now
    static let me = Fixtures.peer(1)
    static let them = Fixtures.peer(2)

    static func hello(_ role: Role, id: PeerID = them, enc: EncryptionPreference = .none, versions: [UInt16] = [1]) -> Frame {
        .hello(Hello(versions: versions, peerID: id, displayName: "peer", encryption: enc, role: role))
    }

    /// A machine past HELLO, in plain text: `.ready`.
    static func ready(_ role: Role) -> ConnectionMachine {
        var m = ConnectionMachine(config: ConnectionConfig(localID: me, displayName: "me", encryption: .none), role: role)
        _ = m.handle(.start, now: t0)
        _ = m.handle(.frame(hello(role == .dialer ? .listener : .dialer)), now: t0)
        return m
    }

    static func connected(_ role: Role) -> ConnectionMachine {
        var m = ready(role)
        if role == .dialer {
            _ = m.handle(.invite(context: [], timeout: .seconds(30)), now: t0)
            _ = m.handle(.frame(.inviteReply(InviteReply(invitationID: 1, declineReason: nil))), now: t0)
        } else {
            _ = m.handle(.frame(.invite(Invite(invitationID: 9))), now: t0)
            _ = m.handle(.accept, now: t0)
        }
        return m
    }

    /// The reason of the drop the actions report, and whether a CLOSE with it was sent.
    static func drop(_ actions: [ConnectionAction]) -> (Reason?, closeSent: Bool) {
        var reason: Reason?
        var sent = false
        for a in actions {
            if case .emit(.disconnected(let r, _, _)) = a { reason = r }
            if case .send(.close(let r, _)) = a, r == reason || reason == nil { sent = true }
        }
        return (reason, sent)
    }

    struct Case: Sendable, CustomStringConvertible {
        let description: String
        let machine: @Sendable () -> ConnectionMachine
        let frame: Frame
    }

    static let outOfPlace: [Case] = [
        Case(description: "a second HELLO", machine: { ready(.listener) }, frame: hello(.dialer)),
        Case(description: "a second HELLO once connected", machine: { connected(.dialer) }, frame: hello(.listener)),
        Case(description: "MESSAGE before connected", machine: { ready(.listener) },
             frame: .message(MessageFragment(messageID: 1, data: [1], isFinal: true))),
        Case(description: "UNRELIABLE before connected", machine: { ready(.dialer) }, frame: .unreliable([1])),
        Case(description: "INVITE_REPLY to the listener", machine: { ready(.listener) },
             frame: .inviteReply(InviteReply(invitationID: 1, declineReason: nil))),
        Case(description: "INVITE to the dialer", machine: { ready(.dialer) }, frame: .invite(Invite(invitationID: 1))),
        Case(description: "a second INVITE", machine: {
            var m = ready(.listener)
            _ = m.handle(.frame(.invite(Invite(invitationID: 1))), now: t0)
            return m
        }, frame: .invite(Invite(invitationID: 2))),
        Case(description: "INVITE once connected", machine: { connected(.listener) }, frame: .invite(Invite(invitationID: 2))),
        Case(description: "PING before HELLO", machine: {
            var m = ConnectionMachine(config: ConnectionConfig(localID: me, displayName: "me", encryption: .none), role: .dialer)
            _ = m.handle(.start, now: t0)
            return m
        }, frame: .ping(1)),
        Case(description: "CREDIT before connected", machine: { ready(.dialer) }, frame: .credit(streamID: 0, streamBytes: 1, connectionBytes: 1)),
        Case(description: "a reply to another invitation", machine: {
            var m = ready(.dialer)
            _ = m.handle(.invite(context: [], timeout: .seconds(30)), now: t0)
            return m
        }, frame: .inviteReply(InviteReply(invitationID: 2, declineReason: nil))),
        Case(description: "a MESSAGE out of sequence", machine: { connected(.dialer) },
             frame: .message(MessageFragment(messageID: 2, data: [], isFinal: true))),
    ]

    @Test(arguments: outOfPlace)
    func aFrameOutOfPlaceClosesWithProtocolError(_ c: Case) {
        var m = c.machine()
        let actions = m.handle(.frame(c.frame), now: Self.t0)
        let (reason, closeSent) = Self.drop(actions)
        #expect(reason == .protocolError)
        #expect(closeSent)
        #expect(m.state == .closing(.protocolError))
        // The peer's CLOSE (or the grace) ends it.
        #expect(m.handle(.frame(.close(.normal, text: "")), now: Self.t0).contains(.closeTransport(.protocolError)))
        #expect(m.state == .closed(.protocolError))
    }

    @Test func helloChecks() {
        func first(_ f: Frame, expected: PeerID? = nil, role: Role = .listener) -> Reason? {
            var m = ConnectionMachine(config: ConnectionConfig(localID: Self.me, displayName: "me", encryption: .none, expectedPeer: expected), role: role)
            _ = m.handle(.start, now: Self.t0)
            return Self.drop(m.handle(.frame(f), now: Self.t0)).0
        }
        #expect(first(Self.hello(.listener)) == .protocolError)  // both listeners
        #expect(first(Self.hello(.dialer, id: Self.me)) == .selfConnection)
        #expect(first(Self.hello(.dialer, versions: [2, 3])) == .versionMismatch)
        #expect(first(Self.hello(.dialer, versions: [1, 2])) == nil)
        #expect(first(Self.hello(.dialer, enc: .required)) == .encryptionMismatch)
        #expect(first(Self.hello(.listener), expected: Fixtures.peer(3), role: .dialer) == .identityMismatch)
    }

    /// Found by the connection-machine fuzz target (Tests/Fuzz/regressions/connection-machine):
    /// a HELLO refused for its encryption had already set the session's version.
    @Test func aRejectedHelloSetsNoVersionOrEncryption() {
        for (ours, theirs) in [(EncryptionPreference.none, EncryptionPreference.required), (.required, .none)] {
            var m = ConnectionMachine(config: ConnectionConfig(localID: Self.me, displayName: "me", encryption: ours), role: .listener)
            _ = m.handle(.start, now: Self.t0)
            let actions = m.handle(.frame(Self.hello(.dialer, enc: theirs)), now: Self.t0)
            #expect(Self.drop(actions).0 == .encryptionMismatch)
            #expect(m.version == nil && m.encrypted == nil)
        }
    }

    @Test func theCertificateMustMatchHello() {
        var m = ConnectionMachine(config: ConnectionConfig(localID: Self.me, displayName: "me", encryption: .required), role: .listener)
        _ = m.handle(.start, now: Self.t0)
        #expect(m.handle(.frame(Self.hello(.dialer, enc: .optional)), now: Self.t0).contains(.startTLS(asClient: false)))
        let code = PairingCode(exporterBytes: [0, 0, 0, 0, 0, 0, 0, 1])
        guard let code else { Issue.record("code"); return }
        let actions = m.handle(.tlsEstablished(certificateID: Fixtures.peer(3), pairingCode: code), now: Self.t0)
        // During TLS no CLOSE frame can be sent: the transport is just closed.
        #expect(Self.drop(actions).0 == .identityMismatch && !Self.drop(actions).closeSent)
        #expect(actions.contains(.closeTransport(.identityMismatch)))
        #expect(m.state == .closed(.identityMismatch))
    }

    @Test func aPlainCloseWhereTLSWasExpectedIsTheDialersRefusal() {
        // The dialer found another peer than it dialled and closed in plain text; the
        // listener, already securing, reads that CLOSE instead of a ClientHello.
        var m = ConnectionMachine(config: ConnectionConfig(localID: Self.me, displayName: "me", encryption: .optional), role: .listener)
        _ = m.handle(.start, now: Self.t0)
        _ = m.handle(.frame(Self.hello(.dialer, enc: .required)), now: Self.t0)
        #expect(m.state == .securing)
        let actions = m.handle(.frame(.close(.identityMismatch, text: "dialled AAAAAAA")), now: Self.t0)
        #expect(actions.contains(.emit(.disconnected(.identityMismatch, detail: "dialled AAAAAAA", byPeer: true))))
        #expect(m.state == .closed(.identityMismatch))
    }

    @Test func tlsFailureAndDecodeFailureAreDrops() {
        var m = ConnectionMachine(config: ConnectionConfig(localID: Self.me, displayName: "me", encryption: .required), role: .dialer)
        _ = m.handle(.start, now: Self.t0)
        _ = m.handle(.frame(Self.hello(.listener, enc: .required)), now: Self.t0)
        #expect(m.handle(.tlsFailed("certificate verify failed"), now: Self.t0).contains(.emit(.disconnected(.tlsFailed, detail: "certificate verify failed", byPeer: false))))
        var c = Self.connected(.listener)
        let e = FrameError(.unknownType(0x7E), frameType: 0x7E, frameIndex: 4, streamOffset: 99)
        let actions = c.handle(.decodeFailed(e), now: Self.t0)
        #expect(actions.contains(.send(.close(.protocolError, text: e.description))))
    }

    /// TLS failing once the session is up (a bad record, the peer's alert) ends it at once
    /// with the reason: no CLOSE can go through a broken TLS stream, and waiting for the peer
    /// to be found lost took seconds.
    @Test func tlsFailingInASessionEndsItAtOnce() {
        var c = Self.connected(.dialer)
        let actions = c.handle(.tlsFailed("bad record mac"), now: Self.t0)
        #expect(actions.contains(.emit(.disconnected(.tlsFailed, detail: "bad record mac", byPeer: false))))
        #expect(actions.contains(.closeTransport(.tlsFailed)))
        #expect(!actions.contains { if case .send = $0 { true } else { false } }, "nothing sent through the broken TLS")
        #expect(c.state == .closed(.tlsFailed))
        #expect(c.handle(.tlsFailed("again"), now: Self.t0).isEmpty, "once")
    }

    @Test func aCertificateTheHELLODidNotAnnounceIsAnIdentityMismatch() {
        // TLS's pin (the HELLO's claim) refused the certificate: reported as identity-mismatch.
        var m = ConnectionMachine(config: ConnectionConfig(localID: Self.me, displayName: "me", encryption: .required), role: .listener)
        _ = m.handle(.start, now: Self.t0)
        _ = m.handle(.frame(Self.hello(.dialer, enc: .required)), now: Self.t0)
        #expect(m.state == .securing)
        let actions = m.handle(.certificateMismatch("certificate pin rejected"), now: Self.t0)
        #expect(actions.contains(.emit(.disconnected(.identityMismatch, detail: "certificate pin rejected", byPeer: false))))
        #expect(m.state == .closed(.identityMismatch))
    }

    @Test func thePeersCloseAndTheStreamsEnd() {
        var m = Self.connected(.dialer)
        let actions = m.handle(.frame(.close(.shuttingDown, text: "bye")), now: Self.t0)
        #expect(actions.contains(.emit(.disconnected(.shuttingDown, detail: "bye", byPeer: true))) && actions.contains(.closeTransport(.shuttingDown)))
        #expect(m.handle(.transportClosed, now: Self.t0).isEmpty)
        var n = Self.connected(.listener)
        #expect(n.handle(.transportClosed, now: Self.t0).contains(.emit(.disconnected(.transportClosed, detail: "the connection ended without CLOSE", byPeer: true))))
        // A local close sends CLOSE and closes the transport after the grace at the latest.
        var o = Self.connected(.listener)
        let closing = o.handle(.close(.normal, text: "done"), now: Self.t0)
        #expect(closing.prefix(2) == [.send(.close(.normal, text: "done")), .emit(.disconnected(.normal, detail: "done", byPeer: false))])
        #expect(closing.last == .armTimer(at: Self.t0 + .seconds(1)))
        #expect(o.handle(.tick, now: Self.t0 + .seconds(1)) == [.closeTransport(.normal)])  // the timer fired: nothing to cancel
        // A long text is cut to the limit, at a character boundary.
        var p = Self.connected(.listener)
        let long = String(repeating: "é", count: 200)
        #expect(p.handle(.close(.normal, text: long), now: Self.t0).first == .send(.close(.normal, text: String(repeating: "é", count: 128))))
    }

    @Test func commandsOutOfPlaceAreRefusedNotObeyed() {
        var m = Self.ready(.listener)
        #expect(m.handle(.accept, now: Self.t0) == [.emit(.refused(command: "accept", why: "not allowed before the invitation"))])
        var scheduler = SendScheduler()
        #expect(m.send(message: [1], into: &scheduler) == .refused("not allowed before the invitation"))
        #expect(m.send(datagram: [1], into: &scheduler) == .refused("not allowed before the invitation"))
        #expect(m.handle(.invite(context: [], timeout: .seconds(1)), now: Self.t0).first == .emit(.refused(command: "invite", why: "not allowed before the invitation")))
        var d = Self.connected(.dialer)
        #expect(d.send(message: [UInt8](repeating: 0, count: Wire.maxMessage + 1), into: &scheduler) == .refused("the message is 16777217 bytes, at most 16777216"))
        #expect(d.send(datagram: [UInt8](repeating: 0, count: Wire.maxPayload + 1), into: &scheduler) == .refused("a datagram is at most 65536 bytes, got 65537"))
        #expect(m.state == .ready && d.state == .connected && scheduler.queuedBytes == 0)
    }
}
