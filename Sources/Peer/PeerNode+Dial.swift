// Linux Dispatch has no Sendable annotations; its queues are thread-safe.
@preconcurrency import Dispatch
import FoundationEssentials
import Glibc
import Session
import Synchronization
import SystemKit

/// Dialling: `connect` (resolve, connect within a bound, invite, wait for the session, with
/// the tie-break against the peer's own dial), and redialling trusted peers with the table's
/// backoff when their session ends.
extension PeerNode {
    /// Dials `target`, invites it with `context` and waits until the session is up (or
    /// declined, timed out, refused). `expected`: the peer ID it must have (from discovery).
    public func connect(to target: HostPort, context: [UInt8] = [], timeout: Duration = .seconds(30),
                        expected: PeerID? = nil) async throws -> PeerSummary {
        guard !state.withLock({ $0.stopped }) else { throw PeerError.stopped }
        guard context.count <= Wire.maxContext else {
            throw PeerError.invalid("context", "at most \(Wire.maxContext) bytes, got \(context.count)")
        }
        // A dial to a known peer takes part in the tie-break from the first moment, before
        // resolving and connecting (which may take long on a loaded machine): the peer's own
        // dial, arriving meanwhile, then meets it, instead of forming a session this dial
        // would replace once it got through.
        // The peer invited this side first and waits for an answer: this call is that answer,
        // and the peer's connection carries the session (a dial of ours would only race it).
        if let expected, let session = try await acceptingWaitingInvitation(from: expected) { return session }
        let id = state.withLock { s -> UInt64 in
            defer { s.nextID += 1 }
            return s.nextID
        }
        if let expected, let refusal = state.withLock({ $0.table.dialing(id, to: expected) }) {
            switch refusal {
            case .duplicate:
                // Connected already (the peer dialled too, and its connection won): that
                // session is what was asked for (none: it is ending just now).
                if let existing = session(with: expected) { return existing }
                throw PeerError.unreachable(target.description, "its session is ending just now: connect again")
            case .full: throw PeerError.full(config.maxPeers)
            case .selfConnection: throw PeerError.invalid("peer", "that is this node's own ID")
            default: throw PeerError.invalid("peer", "\(refusal)")
            }
        }
        let addresses: [SocketAddress]
        do {
            addresses = try await onOwnThread { try TCPSocket.resolve(target) }  // a lookup may hang: not on a pool
        } catch {
            abandonDial(id)
            throw PeerError.unreachable(target.description, "\(error)")
        }
        var lastError: any Error = PeerError.unreachable(target.description, "no address")
        for address in addresses {
            do {
                return try await withCheckedThrowingContinuation { (k: Waiter) in
                    dial(address, id: id, target: target, expected: expected, context: context, timeout: timeout, k)
                }
            } catch let failed as ConnectFailed {
                lastError = failed.error
            }
            // The peer's own connection won while this address failed: its session is the
            // answer, not the next address (nor "unreachable" once none is left).
            if let expected, state.withLock({ $0.table.isSuperseded(id) }) {
                abandonDial(id)
                return try await withCheckedThrowingContinuation { (k: Waiter) in awaitSession(with: expected, k) }
            }
        }
        abandonDial(id)
        throw PeerError.unreachable(target.description, "\(lastError)")
    }

    /// Accepts `peer`'s invitation that waits for a client's answer and waits for the session
    /// it brings; nil when none waits (the caller dials). `context` is not sent then: the
    /// peer's invitation, with its own context, is the one both sides answered.
    private func acceptingWaitingInvitation(from peer: PeerID) async throws -> PeerSummary? {
        guard state.withLock({ waitingInvitation(from: peer, $0) != nil }) else { return nil }
        do {
            return try await withCheckedThrowingContinuation { (k: Waiter) in
                // Checked again in the step that parks `k` (and answers the invitation): it may
                // have ended, or been answered by a client, since.
                // (`stop` meanwhile: the connection is closing, its accept must not race that.)
                let parked = state.withLock { s -> Bool? in
                    if s.stopped { return nil }
                    guard s.session(peer) == nil, waitingInvitation(from: peer, s) != nil else { return false }
                    // Wanted, as a dial that lost would be: should this connection give way to
                    // another of the peer's (it dialled again), that one's invitation is accepted too.
                    s.table.want(peer)
                    moveWaiter(k, to: peer, &s)
                    return true
                }
                switch parked {
                case nil: k.resume(throwing: PeerError.stopped)
                case false?: k.resume(throwing: NoWaitingInvitation())  // dial (or find the session) as usual
                case true?: break
                }
            }
        } catch is NoWaitingInvitation {
            return nil
        }
    }

    private struct NoWaitingInvitation: Error {}

    /// Parks a `connect` call until `peer`'s session is up on another connection; it fails
    /// if none comes within the invitation time. The peer's invitation, if one waits for a
    /// client's answer, has it now: this `connect` (`acceptWaitingInvitation`). Without that
    /// the peer's connection, which carries the session, waited for a client that need not
    /// answer (both sides invited at once under `accept = ask`), and both calls failed when
    /// the invitation timed out.
    func moveWaiter(_ k: Waiter, to peer: PeerID, _ s: inout State) {
        s.movedWaiters[peer, default: []].append(k)
        acceptWaitingInvitation(from: peer, &s)
        let limit = Self.movedWaiterLimit
        queue.asyncAfter(deadline: .now() + .seconds(Int(limit.components.seconds))) { [weak self] in
            guard let self else { return }
            let expired = self.state.withLock { s -> [Waiter] in
                guard s.table.connection(for: peer) == nil, let ks = s.movedWaiters.removeValue(forKey: peer) else { return [] }
                s.table.stopWanting(peer)
                return ks
            }
            for k in expired { k.resume(throwing: PeerError.unreachable(peer.shortText, "its own connection never brought the session")) }
        }
    }

    /// The connection whose invitation from `peer` waits for a client's answer, if any (not
    /// one that lost the tie-break and is closing: its answer would go nowhere).
    func waitingInvitation(from peer: PeerID, _ s: State) -> PeerConnection? {
        s.invitations.first { $0.value.peer == peer && !s.table.isSuperseded($0.key) }.flatMap { s.connections[$0.key] }
    }

    /// A `connect` to `peer` answers its waiting invitation: accepted, as `answer` would (or
    /// declined `full` when the table has filled meanwhile). The answer is only queued on the
    /// connection (`input`), so this runs under the node's lock, in the same step that parks
    /// the `connect`: whatever the connection does next finds it waiting.
    private func acceptWaitingInvitation(from peer: PeerID, _ s: inout State) {
        guard !s.stopped, let c = waitingInvitation(from: peer, s) else { return }
        s.invitations[c.id] = nil
        let (logger, id) = (logger, c.id)
        queue.async { logger.info("a connect answers the peer's waiting invitation", ["peer.id": peer.shortText, "peer.connection": "\(id)"]) }
        c.input(s.table.isFull(for: peer) ? .decline(.full) : .accept)
    }

    /// A TCP connect that failed: `connect` tries the next address.
    private struct ConnectFailed: Error { let error: any Error }

    /// Connects to `address` and, once connected, starts the connection and hands it `k`
    /// (resumed with the session, or why there is none); a connect that fails resumes `k` with
    /// `ConnectFailed`. The connection starts on the node's queue the moment TCP is up, not
    /// when the caller's task is next scheduled: the peer's handshake clock runs from its
    /// accept, and a busy executor (a loaded daemon, a test process full of other work) must
    /// not spend it before HELLO is even sent.
    private func dial(_ address: SocketAddress, id: UInt64, target: HostPort, expected: PeerID?, context: [UInt8],
                      timeout: Duration, _ k: Waiter) {
        connectSocket(address, within: .seconds(10)) { [self] result in
            let fd: Int32
            switch result {
            case .failure(let error): return k.resume(throwing: ConnectFailed(error: error))
            case .success(let connected): fd = connected
            }
            // `stop`, or the peer's own connection winning the tie-break, may come at any moment
            // until the connection is among the node's: both are checked in the lock that
            // registers it with its waiter, so that whatever ends it later finds the waiter.
            let c = newConnection(fd: fd, id: id, role: .dialer, remote: address, expected: expected)
            let outcome = state.withLock { s -> DialOutcome in
                if s.stopped { return .stopped }
                // The peer's own connection won while this one dialled: its session is the answer.
                if let expected, s.table.isSuperseded(id) { return .superseded(expected) }
                s.connections[c.id] = c
                s.dialTargets[c.id] = target
                if expected == nil { s.table.dialingUnknown(c.id) } else { s.table.dialConnected(c.id) }
                s.dialWaiters[c.id] = k
                return .registered
            }
            switch outcome {
            case .registered:
                c.start()
                c.input(.invite(context: context, timeout: timeout))
            case .stopped:
                abandonDial(id)  // `c`, never started, closes `fd` as it goes
                k.resume(throwing: PeerError.stopped)
            case .superseded(let peer):
                abandonDial(id)
                awaitSession(with: peer, k)
            }
        }
    }

    private enum DialOutcome { case registered, stopped, superseded(PeerID) }

    /// A dial that never got a connection leaves the table.
    private func abandonDial(_ id: UInt64) {
        apply(state.withLock { $0.table.abandonDial(id, now: .now, random: Double.random(in: 0...1)) })
    }

    /// `peer`'s session, if it is up.
    private func session(with peer: PeerID) -> PeerSummary? {
        state.withLock { s in s.session(peer) }.flatMap(summary)
    }

    /// Resumes `k` with `peer`'s session: the one up now, or the one the peer's own connection
    /// brings.
    private func awaitSession(with peer: PeerID, _ k: Waiter) {
        let now = state.withLock { s -> PeerConnection? in
            if let c = s.session(peer) { return c }
            moveWaiter(k, to: peer, &s)
            return nil
        }
        guard let now else { return }
        if let summary = summary(now) { k.resume(returning: summary) } else { k.resume(throwing: PeerError.notConnected(peer.shortText)) }
    }

    /// `connect` to each of `targets` in turn (a peer's addresses from discovery, or where it
    /// was last reached) until one is reached: a target that cannot be reached is passed over,
    /// and so is one where another board answers (`identity-mismatch`: the peer's old address,
    /// now someone else's; not dialled first again if it was where the peer was last reached),
    /// and one that ended the attempt before the peer showed who it is (a board that says it is
    /// the peer in its DNS-SD record and then stays silent, or closes, could otherwise keep the
    /// peer's real addresses from being tried). A refusal by the peer itself (declined, timed
    /// out, full) is the answer. With none reached, the `identity-mismatch` if there was one
    /// (a connection existed: for a trusted peer its end scheduled the next redial), else the
    /// last error.
    public func connect(toFirstOf targets: [HostPort], context: [UInt8] = [], timeout: Duration = .seconds(30),
                        expected: PeerID? = nil) async throws -> PeerSummary {
        var last = PeerError.unreachable(expected?.shortText ?? "the peer", "no address known")
        var someoneElse: PeerError?
        for target in targets {
            do {
                return try await connect(to: target, context: context, timeout: timeout, expected: expected)
            } catch let e as PeerError {
                switch e {
                case .unreachable:
                    last = e
                case .refused(let d) where d.reason == .identityMismatch && !d.byPeer && expected != nil:
                    someoneElse = e
                    if let expected { forgetReached(target, of: expected) }
                case .refused(let d) where !d.verified || (expected != nil && d.peer != expected):
                    last = e
                default:
                    throw e
                }
            }
        }
        throw someoneElse ?? last
    }

    /// `target` now leads to another board than `peer`: not dialled first for it again while
    /// this daemon runs. (The trust store keeps it: the other board's word, a HELLO read before
    /// TLS, could come from anyone on the path; after a restart it is tried once more.)
    private func forgetReached(_ target: HostPort, of peer: PeerID) {
        state.withLock { s in if s.lastReached[peer] == target { s.lastReached[peer] = nil } }
    }

    // MARK: Redialling trusted peers

    /// Redials `peer` at `at` (the table's backoff): its last address first, then what
    /// discovery knows. An attempt that reaches no one reports back so the next is scheduled.
    func scheduleRedial(_ peer: PeerID, at: ContinuousClock.Instant, attempt: Int) {
        // (This node stopping closed the session: nothing to redial, nothing to announce.)
        guard !state.withLock({ $0.stopped }) else { return }
        let delay = ContinuousClock.now.duration(to: at)
        logger.info("redialling a trusted peer", ["peer.id": peer.shortText, "attempt": "\(attempt)", "in": "\(delay)"])
        onEvent(.reconnecting(peer, attempt: attempt, after: max(delay, .zero)))
        queue.asyncAfter(deadline: .now() + delay.dispatchInterval) { [weak self] in
            guard let self else { return }
            let targets = self.state.withLock { s -> [HostPort]? in
                guard !s.stopped, s.table.redialDue(peer, attempt: attempt) else { return nil }
                var list = s.lastReached[peer].map { [$0] } ?? []
                for a in s.addressSource?(peer) ?? [] where !list.contains(a) { list.append(a) }
                return list
            }
            guard let targets else { return }
            Task { await self.redial(peer, targets) }
        }
    }

    private func redial(_ peer: PeerID, _ targets: [HostPort]) async {
        do {
            _ = try await connect(toFirstOf: targets, expected: peer)
        } catch PeerError.refused {
            // A connection existed and ended: its close scheduled the next attempt.
        } catch {
            // Nobody reached, or the dial never started (the table full meanwhile: the next
            // attempt may find room): the next attempt, or giving up.
            logger.info("a trusted peer is not reachable", ["peer.id": peer.shortText, "why": "\(error)"])
            apply(state.withLock { $0.table.redialFailed(peer, now: .now, random: Double.random(in: 0...1)) })
        }
    }

    /// How long a `connect` whose connection lost the tie-break waits for the other one.
    static let movedWaiterLimit: Duration = .seconds(40)

    // MARK: Sockets

    /// Connects a TCP socket to `address` within `limit`; `done` gets the connected socket or
    /// why not, once, on the node's queue (at once when the connect cannot even start).
    private func connectSocket(_ address: SocketAddress, within limit: Duration,
                               then done: @escaping @Sendable (Result<Int32, any Error>) -> Void) {
        let fd: Int32
        let watch: DescriptorWatch
        do {
            fd = try TCPSocket.startConnect(to: address)
        } catch {
            return done(.failure(error))
        }
        do {
            watch = try DescriptorWatch(duplicating: fd, queue: queue)
        } catch {
            closeQuietly(fd)
            return done(.failure(error))
        }
        // Taken by the first of connected, failed and timed out; the timer then holds nothing.
        let pending = Mutex<(@Sendable (Result<Int32, any Error>) -> Void)?>(done)
        @Sendable func finish(_ r: Result<Void, any Error>) {
            guard let done = pending.withLock({ d in defer { d = nil }; return d }) else { return }
            watch.cancel()
            switch r {
            case .success: done(.success(fd))
            case .failure(let error):
                closeQuietly(fd)
                done(.failure(error))
            }
        }
        watch.setHandlers(onReadable: {}, onWritable: {
            finish(Result { try TCPSocket.connectResult(fd, to: address) })
        })
        watch.want(write: true)
        queue.asyncAfter(deadline: .now() + limit.dispatchInterval) {
            finish(.failure(SystemError(call: "connect", code: ETIMEDOUT, context: address.description)))
        }
    }
}
