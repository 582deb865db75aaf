import Testing
@testable import Session

/// Two daemons dial each other at once: their connection machines and peer tables run
/// together, over TLS, as the `Peer` module will drive them. Exactly one connection
/// survives, the same on both sides, and each side reports the peer connected once.
@Suite struct SessionRaceTests {
    /// One daemon's view: its table and which (link, side) each of its connection ids is.
    struct Daemon {
        var table: SessionTable
        var conns: [ConnectionID: (link: Int, side: MachineLink.Side)]
        var peerConnected: [PeerID] = []
        var peerDisconnected: [Reason] = []
    }

    /// Runs the race; `firstLink` is the link whose bytes move first in each round.
    /// `aConnects`: false when a's dial never gets a socket (a stale address: its connect
    /// hangs), so only b's connection exists.
    static func run(a: PeerID, b: PeerID, firstLink: Int, userAccepts: Bool = true, aConnects: Bool = true) -> (Daemon, Daemon, [MachineLink]) {
        let t0 = ContinuousClock.now
        // Link 0: a dials b (a's connection 1, b's 11). Link 1: b dials a (b's 2, a's 12).
        var links = [MachineLink(dialer: .required, listener: .required, ids: (a, b), start: t0),
                     MachineLink(dialer: .required, listener: .required, ids: (b, a), start: t0)]
        // (a's dial has a machine only once connected.)
        var da = Daemon(table: SessionTable(localID: a), conns: aConnects ? [1: (0, .dialer), 12: (1, .listener)] : [12: (1, .listener)])
        var db = Daemon(table: SessionTable(localID: b), conns: [2: (1, .dialer)])
        #expect(da.table.dialing(1, to: b) == nil && db.table.dialing(2, to: a) == nil)
        // Each dial's socket connects (as the node reports it, before anything is sent) and
        // the peer accepts it.
        if aConnects {
            da.table.dialConnected(1)
            db.table.accepted(11)
            db.conns[11] = (0, .listener)
        }
        db.table.dialConnected(2)
        da.table.accepted(12)
        for i in (aConnects ? [0, 1] : [1]) {
            links[i].feed(.dialer, .start)
            links[i].feed(.listener, .start)
            links[i].feed(.dialer, .invite(context: [], timeout: .seconds(30)))
        }
        var seen: [String: Int] = [:]
        var moved = true
        var rounds = 0
        while moved && rounds < 50 {
            moved = false
            rounds += 1
            for i in [firstLink, 1 - firstLink] {
                links[i].pump()
                // Each daemon handles its machines' new events through its table.
                for isA in [true, false] {
                    var d = isA ? da : db
                    for (id, place) in d.conns where place.link == i {
                        let key = "\(isA)-\(id)"
                        let events = links[i].events[place.side] ?? []
                        for e in events.dropFirst(seen[key] ?? 0) {
                            moved = true
                            var inputs: [ConnectionInput] = []
                            switch e {
                            case .secured(let peer, _, _):
                                for case .close(let cid, let r) in d.table.identified(id, as: peer) where d.conns[cid] != nil {
                                    if cid == id { inputs.append(.close(r, text: "tie-break")) } else {
                                        if let other = d.conns[cid] { links[other.link].feed(other.side, .close(r, text: "tie-break")) }
                                    }
                                }
                            case .invitation:
                                switch d.table.invitation(on: id) {
                                case .ask: inputs.append(userAccepts ? .accept : .decline(.declined))
                                case .accept: inputs.append(.accept)
                                case .decline(let r): inputs.append(.decline(r))
                                }
                            case .connected:
                                for case .peerConnected(let p, _) in d.table.connected(id) { d.peerConnected.append(p) }
                            case .disconnected(let r, _, _):
                                for case .peerDisconnected(_, let why) in d.table.closed(id, reason: r, now: t0, random: 0.5) {
                                    d.peerDisconnected.append(why)
                                }
                            default: break
                            }
                            for input in inputs { links[i].feed(place.side, input) }
                        }
                        seen[key] = events.count
                    }
                    if isA { da = d } else { db = d }
                }
            }
        }
        return (da, db, links)
    }

    @Test(arguments: [0, 1])
    func exactlyOneConnectionSurvivesOnBothSides(firstLink: Int) {
        for (a, b) in [(Fixtures.peer(1), Fixtures.peer(2)), (Fixtures.peer(2), Fixtures.peer(1))] {
            let (da, db, links) = Self.run(a: a, b: b, firstLink: firstLink)
            let survivor = a < b ? 0 : 1  // the link dialled by the smaller ID
            #expect(links[survivor].state(.dialer) == .connected && links[survivor].state(.listener) == .connected)
            #expect(links[1 - survivor].state(.dialer) == .closed(.duplicate), "first link \(firstLink)")
            #expect(links[1 - survivor].state(.listener) == .closed(.duplicate), "first link \(firstLink)")
            #expect(da.peerConnected == [b] && db.peerConnected == [a])
            #expect(da.peerDisconnected.isEmpty && db.peerDisconnected.isEmpty)
            #expect(da.table.connectedPeers == [b] && db.table.connectedPeers == [a])
        }
    }

    /// a's dial goes to a stale address and its connect hangs; b's dial reaches a. b's
    /// connection carries the session whichever ID is smaller: by the ID rule alone, a (the
    /// smaller) closed b's working connection for a dial that never connected, and b waited
    /// for a connection that never came.
    @Test func aDialThatNeverConnectsGivesWayToThePeersConnection() {
        for (a, b) in [(Fixtures.peer(1), Fixtures.peer(2)), (Fixtures.peer(2), Fixtures.peer(1))] {
            // a's user does not answer: the session must come from a's own wish (its dial).
            var (da, db, links) = Self.run(a: a, b: b, firstLink: 1, userAccepts: false, aConnects: false)
            #expect(links[1].state(.dialer) == .connected && links[1].state(.listener) == .connected, "\(a < b ? "a" : "b") smaller")
            #expect(da.peerConnected == [b] && db.peerConnected == [a])
            #expect(da.table.isSuperseded(1), "a's dial gave way")
            // The dial's connect fails at last: nothing more happens.
            #expect(da.table.abandonDial(1, now: .now, random: 0.5) == [])
            #expect(da.table.connectedPeers == [b] && da.table.connectionCount == 1)
        }
    }
}
