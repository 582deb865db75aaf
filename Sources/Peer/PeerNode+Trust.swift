import Session
import SystemKit

/// Trusted peers: trusting and forgetting (`TrustStore`, the table's redials), and what the
/// trust store keeps so that a session with a trusted peer comes back after a restart (it
/// was up, where a dial of ours reached the peer) and how the node takes those back at start.
extension PeerNode {
    /// The peers this node knows of now: in a session (or connecting, identified), trusted,
    /// or inviting. (Where a short ID given by a person is looked for.)
    public var knownPeers: Set<PeerID> {
        var known = Set(trust.all.map(\.peer))
        state.withLock { s in
            known.formUnion(s.verified.values)
            known.formUnion(s.invitations.values.map(\.peer))
        }
        return known
    }

    /// Trusts `peer` (or stops trusting it): persisted in the trust store, and a trusted peer
    /// whose session is lost is redialled with backoff. Throws when the store cannot be
    /// saved; nothing changed then.
    @discardableResult
    public func setTrusted(_ peer: PeerID, name: String, _ trusted: Bool) throws(TrustStoreError) -> Bool {
        let changed = trusted ? try trust.trust(peer, name: name) : try trust.forget(peer)
        let (up, reached) = state.withLock { s -> (Bool, HostPort?) in
            trusted ? s.table.trust(peer) : s.table.distrust(peer)
            return (s.session(peer) != nil, s.lastReached[peer])
        }
        // Trusted while its session is up: that session comes back after a restart.
        if trusted, up { noteSessionUp(peer, reachedAt: reached) }
        return changed
    }

    /// A session with `peer` is up: if the peer is trusted, the trust store marks it to come
    /// back after a restart, with where a dial of ours reached it (`reachedAt`).
    func noteSessionUp(_ peer: PeerID, reachedAt: HostPort?) {
        keepingTrust("a trusted session is not marked to come back after a restart", peer) { try trust.sessionUp(peer, reachedAt: reachedAt) }
    }

    /// Runs a trust store change that only serves restarts: one that cannot be saved (a full
    /// or read-only disk) is logged, and the session is not worse for it.
    func keepingTrust(_ what: String, _ peer: PeerID, _ change: () throws -> Bool) {
        do {
            _ = try change()
        } catch {
            logger.warning(what, ["peer.id": peer.shortText, "error": "\(error)"])
        }
    }

    /// Takes back the trusted peers whose sessions were up (or lost) when this node last
    /// stopped (`resume` in the trust store): their invitations accepted without asking (from
    /// the node's creation, for as long as they may be redialling it), and those a dial of ours
    /// had reached dialled again at that address, as after a drop
    /// (`SessionTable.resumeAtStart`). A session cut by a restart or a reboot of either side
    /// comes back by itself: the side that dialled dials again, the side that was dialled
    /// takes it back, and a side that stayed up redials a peer that said it was stopping.
    /// The daemon calls it once at start, listening or not (a board that only dials is the
    /// one that must).
    public func resumeTrustedSessionsAtStart() {
        let actions = state.withLock { s in
            defer { s.startActions = [] }
            return s.startActions
        }
        guard !actions.isEmpty else { return }
        logger.info("resuming the sessions of trusted peers", ["peers": "\(actions.count)"])
        apply(actions)
    }

    /// Where a dial of this node last reached `peer`, dialled first when it is redialled.
    func reachedAddress(of peer: PeerID) -> HostPort? { state.withLock { $0.lastReached[peer] } }
}
