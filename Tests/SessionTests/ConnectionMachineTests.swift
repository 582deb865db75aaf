import Testing
@testable import Session

/// The connection state machine, two at a time over an in-memory stream, with a manual clock.
@Suite struct ConnectionMachineTests {
    func isConnected(_ e: ConnectionEvent) -> Bool { e == .connected }

    @Test func plainHandshakeInvitationAndAccept() {
        var link = MachineLink(dialer: .none, listener: .optional)
        link.feed(.dialer, .start)
        link.feed(.listener, .start)
        link.feed(.dialer, .invite(context: Array("hi".utf8), timeout: .seconds(30)))
        link.pump()
        #expect(link.state(.dialer) == .invited(Invite(invitationID: 1, context: Array("hi".utf8), timeoutMilliseconds: 30_000)))
        guard case .awaitingAnswer(let invite) = link.state(.listener) else { Issue.record("\(link.state(.listener))"); return }
        #expect(link.events[.listener]?.contains(.invitation(invite)) == true)
        #expect(link.events[.listener]?.contains(.secured(peerID: MachineLink.dialerID, encrypted: false, pairingCode: nil)) == true)
        #expect(link.tlsStarted.isEmpty && link.machine(.dialer).encrypted == false)
        link.feed(.listener, .accept)
        link.pump()
        #expect(link.state(.dialer) == .connected && link.state(.listener) == .connected)
        #expect(link.count(.dialer, where: isConnected) == 1 && link.count(.listener, where: isConnected) == 1)
        #expect(link.machine(.dialer).version == 1)
    }

    @Test func tlsIsStartedWithTheDialerAsClient() {
        var link = MachineLink(dialer: .required, listener: .optional)
        link.feed(.dialer, .start)
        link.feed(.listener, .start)
        var asked: [MachineLink.Side: Bool] = [:]
        // Deliver the two HELLOs by hand to see the startTLS actions.
        for side in [MachineLink.Side.dialer, .listener] {
            var d = FrameDecoder()
            d.append(link.inbox[side] ?? [])
            link.inbox[side] = []
            guard let hello = try? d.nextFrame() else { Issue.record("no HELLO"); return }
            for case .startTLS(let client) in link.feed(side, .frame(hello)) { asked[side] = client }
        }
        #expect(asked == [.dialer: true, .listener: false])
        #expect(link.state(.dialer) == .securing && link.state(.listener) == .securing)
        link.feed(.dialer, .invite(context: [], timeout: .seconds(5)))
        link.pump()  // the fake TLS finishes; the INVITE goes out only now
        #expect(link.events[.dialer]?.contains(.secured(peerID: MachineLink.listenerID, encrypted: true, pairingCode: link.pairing)) == true)
        guard case .awaitingAnswer = link.state(.listener) else { Issue.record("\(link.state(.listener))"); return }
        #expect(link.machine(.listener).pairingCode?.text == "306183")
    }

    @Test(arguments: [
        (EncryptionPreference.none, EncryptionPreference.none, false as Bool?), (.none, .optional, false), (.none, .required, nil),
        (.optional, .none, false), (.optional, .optional, true), (.optional, .required, true),
        (.required, .none, nil), (.required, .optional, true), (.required, .required, true),
    ])
    func encryptionAgreement(_ a: EncryptionPreference, _ b: EncryptionPreference, _ tls: Bool?) {
        #expect(EncryptionPreference.agreement(a, b) == tls)
        var link = MachineLink(dialer: a, listener: b)
        link.connect()
        if let tls {
            #expect(link.state(.dialer) == .connected && link.machine(.listener).encrypted == tls)
        } else {
            // Each side decides alone from the two HELLOs; both report the mismatch.
            #expect(link.drops(.dialer) == [.encryptionMismatch] && link.drops(.listener) == [.encryptionMismatch])
            #expect(link.sent[.dialer]?.last == .close(.encryptionMismatch, text: "this side's encryption is \(a), the peer's \(b)"))
            #expect(link.transportClosed[.dialer] == true && link.transportClosed[.listener] == true)
        }
    }

    @Test func eachSideGivesMessagesTheirWiderWindowAsItConnects() {
        var link = MachineLink()
        link.connect()
        let extra = FlowWindow.messageWindow - FlowWindow.initialStream
        let opening = Frame.credit(streamID: 0, streamBytes: UInt32(extra), connectionBytes: UInt32(extra))
        for side in [MachineLink.Side.dialer, .listener] {
            #expect(link.sent[side]?.filter { $0 == opening }.count == 1)
            #expect(link.machine(side).sendCredit.available(on: 0) == FlowWindow.messageWindow)
            #expect(link.machine(side).sendCredit.connection == FlowWindow.initialConnection + extra)
            #expect(link.machine(side).sendCredit.available(on: 2) == FlowWindow.initialStream)
        }
    }

    @Test func flowEntriesLastUntilTheStreamIsSaidToHaveEnded() {
        var link = MachineLink()
        link.connect()
        // A CREDIT may come before the stream's first byte (when to grant is the receiver's
        // choice): its window is kept, for any id, until the connection says it ended.
        let before = link.machine(.listener).sendCredit.connection
        link.feed(.listener, .frame(.credit(streamID: 8, streamBytes: 65_536, connectionBytes: 1)))
        #expect(link.machine(.listener).sendCredit.available(on: 8) == 256 * 1024 + 65_536)
        #expect(link.machine(.listener).sendCredit.connection == before + 1)
        #expect(link.machine(.listener).flowEntryCount == 1)
        link.feed(.listener, .streamEnded(streamID: 8))
        #expect(link.machine(.listener).flowEntryCount == 0)
        // Counted bytes of a stream, consumed, then its end: nothing stays.
        link.feed(.listener, .frame(.streamData(streamID: 3, data: [1, 2, 3])))
        link.feed(.listener, .consumed(streamID: 3, bytes: 3))
        #expect(link.machine(.listener).flowEntryCount == 1)
        link.feed(.listener, .streamEnded(streamID: 3))
        #expect(link.machine(.listener).flowEntryCount == 0 && link.state(.listener) == .connected)
    }

    @Test func declineIsSeenByBothSidesWithItsReason() {
        var link = MachineLink()
        link.feed(.dialer, .start)
        link.feed(.listener, .start)
        link.feed(.dialer, .invite(context: [], timeout: .seconds(30)))
        link.pump()
        link.feed(.listener, .decline(.busy))
        link.pump()
        #expect(link.sent[.listener]?.suffix(2) == [.inviteReply(InviteReply(invitationID: 1, declineReason: .busy)),
                                                    .close(.busy, text: "invitation 1 declined")])
        #expect(link.drops(.listener) == [.busy] && link.drops(.dialer) == [.busy])
        #expect(link.state(.dialer) == .closed(.busy) && link.state(.listener) == .closed(.busy))
        #expect(link.count(.dialer, where: isConnected) == 0)
    }

    @Test func anUnansweredInvitationTimesOutOnBothSides() {
        var link = MachineLink()
        link.feed(.dialer, .start)
        link.feed(.listener, .start)
        link.feed(.dialer, .invite(context: [], timeout: .seconds(30)))
        link.pump()
        // Liveness keeps both alive while the user thinks: PINGs and PONGs every 2 s.
        for s in stride(from: 1, through: 29, by: 1) { link.advance(to: .seconds(s)) }
        guard case .awaitingAnswer = link.state(.listener) else { Issue.record("\(link.state(.listener))"); return }
        #expect(link.sent[.dialer]?.contains(.ping(1)) == true && link.sent[.listener]?.contains(.pong(1)) == true)
        link.advance(to: .seconds(30))
        #expect(link.sent[.listener]?.contains(.inviteReply(InviteReply(invitationID: 1, declineReason: .timeout))) == true)
        #expect(link.drops(.listener) == [.timeout] && link.drops(.dialer) == [.timeout])
        #expect(link.events[.dialer]?.last == .disconnected(.timeout, detail: "the invitation was declined", byPeer: true))
    }

    @Test func theDialerGivesUpWhenTheListenerNeverAnswers() {
        var m = ConnectionMachine(config: ConnectionConfig(localID: Fixtures.peer(1), displayName: "d", encryption: .none), role: .dialer)
        let t0 = ContinuousClock.now
        _ = m.handle(.start, now: t0)
        _ = m.handle(.frame(.hello(Hello(peerID: Fixtures.peer(2), displayName: "l", encryption: .none, role: .listener))), now: t0)
        let sent = m.handle(.invite(context: [], timeout: .seconds(10)), now: t0)
        #expect(sent.first == .send(.invite(Invite(invitationID: 1, context: [], timeoutMilliseconds: 10_000))))
        // The listener answers PINGs but not the invitation.
        var t = t0
        for _ in 0..<5 {
            t = t + .seconds(2)
            _ = m.handle(.tick, now: t)
            _ = m.handle(.frame(.pong(0)), now: t)
        }
        #expect(m.handle(.tick, now: t0 + .milliseconds(11_999)).allSatisfy { if case .emit(.disconnected) = $0 { false } else { true } })
        let end = m.handle(.tick, now: t0 + .seconds(12))
        #expect(end.contains(.emit(.disconnected(.timeout, detail: "no answer to invitation 1 within 10000 ms", byPeer: false))))
        #expect(end.contains(.send(.close(.timeout, text: "no answer to invitation 1 within 10000 ms"))))
    }

    @Test func livenessPingsWhenIdleAndDropsAfterThreeMissed() {
        var link = MachineLink()
        link.connect()
        // From here on the listener hears nothing: its stream from the dialer is cut.
        var l = link.machine(.listener)
        var pings: [Duration] = []
        var lostAt: Duration?
        for ms in stride(from: 100, through: 10_000, by: 100) {
            let actions = l.handle(.tick, now: link.t0 + .milliseconds(ms))
            for a in actions {
                if case .send(.ping) = a { pings.append(.milliseconds(ms)) }
                if case .emit(.disconnected(.lost, _, false)) = a { lostAt = .milliseconds(ms) }
            }
        }
        #expect(pings == [.seconds(2), .seconds(4), .seconds(6)])
        #expect(lostAt == .seconds(8))
        #expect(l.state == .closed(.lost))
    }

    @Test func anyFrameHeardResetsLiveness() {
        var link = MachineLink { c, _ in c.pingInterval = .seconds(1); c.missedPings = 2 }
        link.connect()
        var d = link.machine(.dialer)
        #expect(d.handle(.tick, now: link.t0 + .seconds(1)).contains(.send(.ping(1))))
        _ = d.handle(.frame(.unreliable([1])), now: link.t0 + .milliseconds(1500))
        #expect(d.nextDeadline == link.t0 + .milliseconds(2500))
        #expect(d.handle(.tick, now: link.t0 + .milliseconds(2500)).contains(.send(.ping(2))))
        #expect(d.handle(.tick, now: link.t0 + .milliseconds(3500)).contains(.send(.ping(3))))
        #expect(d.handle(.tick, now: link.t0 + .milliseconds(4500)).contains(.emit(.disconnected(.lost, detail: "nothing heard for 3.0 seconds (2 PINGs unanswered)", byPeer: false))))
    }

    /// The timer can fire a little before the deadline by the machine's clock (Dispatch's
    /// and Swift's clocks, rounding): that tick has nothing to do, but the timer it consumed
    /// must be armed again, or a peer that then goes silent is never found lost.
    @Test func aTimerFiringEarlyIsArmedAgainAndASilentPeerIsStillLost() {
        var link = MachineLink { c, _ in c.pingInterval = .seconds(1); c.missedPings = 2 }
        link.connect()
        var d = link.machine(.dialer)
        let due = link.t0 + .seconds(1)
        #expect(d.nextDeadline == due)
        // The timer fires 1 ms early: nothing to do yet, and a new timer for the deadline.
        #expect(d.handle(.tick, now: due - .milliseconds(1)) == [.armTimer(at: due)])
        // Following only the timers the machine asks for, the silent peer is lost at 3 s.
        var timer: ContinuousClock.Instant? = due
        var lost = false
        var rounds = 0
        while let at = timer, !lost, rounds < 20 {
            rounds += 1
            let actions = d.handle(.tick, now: at)
            timer = nil
            for a in actions {
                if case .armTimer(let next) = a { timer = next }
                if case .emit(.disconnected(.lost, _, false)) = a { lost = true }
            }
        }
        #expect(lost && d.state == .closed(.lost), "the timers stopped after \(rounds) ticks")
    }

    @Test func theHandshakeHasADeadline() {
        // The listener never answers HELLO.
        var m = ConnectionMachine(config: ConnectionConfig(localID: Fixtures.peer(1), displayName: "d", encryption: .none), role: .dialer)
        let t0 = ContinuousClock.now
        #expect(m.handle(.start, now: t0).last == .armTimer(at: t0 + .seconds(10)))
        // A tick before the deadline only arms the timer again.
        #expect(m.handle(.tick, now: t0 + .seconds(9)) == [.armTimer(at: t0 + .seconds(10))])
        #expect(m.state == .helloSent)
        let actions = m.handle(.tick, now: t0 + .seconds(10))
        #expect(actions.contains(.emit(.disconnected(.timeout, detail: "the handshake did not finish within 10.0 seconds", byPeer: false))))
        #expect(actions.contains(.send(.close(.timeout, text: "the handshake did not finish within 10.0 seconds"))))
        // A listener that never gets an INVITE gives up at the same deadline.
        var l = ConnectionMachine(config: ConnectionConfig(localID: Fixtures.peer(1), displayName: "l", encryption: .none), role: .listener)
        _ = l.handle(.start, now: t0)
        _ = l.handle(.frame(.hello(Hello(peerID: Fixtures.peer(2), displayName: "d", encryption: .none, role: .dialer))), now: t0)
        _ = l.handle(.frame(.pong(0)), now: t0 + .seconds(9))
        #expect(l.handle(.tick, now: t0 + .seconds(10)).contains(.emit(.disconnected(.timeout, detail: "no invitation arrived within 10.0 seconds", byPeer: false))))
    }

    @Test func messagesAreFragmentedAndReassembled() {
        var link = MachineLink()
        link.connect()
        let big = (0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        link.send(.dialer, message: big)
        link.send(.dialer, message: [])
        link.send(.listener, datagram: [9])
        link.pump()
        let fragments = (link.sent[.dialer] ?? []).filter { $0.type == .message }
        #expect(fragments.count == 5)  // 65,532 × 3 + 3,404, then the empty message
        #expect(link.events[.listener]?.filter { if case .message = $0 { true } else { false } } == [.message(big), .message([])])
        #expect(link.events[.dialer]?.contains(.datagram([9])) == true)
    }
}
