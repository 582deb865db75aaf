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
        let id = state.withLock { s -> UInt64 in
            defer { s.nextID += 1 }
            return s.nextID
        }
        if let expected, let refusal = state.withLock({ $0.table.dialing(id, to: expected) }) {
            // Connected already (the peer dialled too, and its connection won): that session
            // is what was asked for.
            if refusal == .duplicate, let existing = session(with: expected) { return existing }
            throw PeerError.invalid("peer", refusal == .full ? "the session table is full" : "\(refusal)")
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
            let fd: Int32
            do {
                fd = try await connectSocket(address, within: .seconds(10))
            } catch {
                lastError = error
                continue
            }
            // `stop` may have run while this dialled: it closed every connection it knew of.
            guard !state.withLock({ $0.stopped }) else {
                closeQuietly(fd)
                abandonDial(id)
                throw PeerError.stopped
            }
            // The peer's own connection won while this one dialled: its session is the answer.
            if let expected, state.withLock({ $0.table.isSuperseded(id) }) {
                closeQuietly(fd)
                abandonDial(id)
                return try await sessionComing(with: expected)
            }
            let c = makeConnection(fd: fd, id: id, role: .dialer, remote: address, expected: expected)
            state.withLock { s in
                s.dialTargets[c.id] = target
                if expected == nil { s.table.dialingUnknown(c.id) }
            }
            return try await withCheckedThrowingContinuation { (k: Waiter) in
                state.withLock { $0.dialWaiters[c.id] = k }
                c.start()
                c.input(.invite(context: context, timeout: timeout))
            }
        }
        abandonDial(id)
        throw PeerError.unreachable(target.description, "\(lastError)")
    }

    /// A dial that never got a connection leaves the table.
    private func abandonDial(_ id: UInt64) {
        state.withLock { $0.table.abandonDial(id) }
    }

    /// `peer`'s session, if it is up.
    private func session(with peer: PeerID) -> PeerSummary? {
        state.withLock { s in s.session(peer) }.flatMap(summary)
    }

    /// `peer`'s session: the one up now, or the one the peer's own connection brings.
    private func sessionComing(with peer: PeerID) async throws -> PeerSummary {
        try await withCheckedThrowingContinuation { (k: Waiter) in
            let now = state.withLock { s -> PeerConnection? in
                if let c = s.session(peer) { return c }
                moveWaiter(k, to: peer, &s)
                return nil
            }
            guard let now else { return }
            if let summary = summary(now) { k.resume(returning: summary) } else { k.resume(throwing: PeerError.notConnected(peer.shortText)) }
        }
    }

    /// `connect` to each of `targets` in turn (a peer's addresses from discovery, or where it
    /// was last reached) until one is reached: a target that cannot be reached is passed over;
    /// any other failure (declined, timed out, refused) is the answer. With none reached, the
    /// last `unreachable` error.
    public func connect(toFirstOf targets: [HostPort], context: [UInt8] = [], timeout: Duration = .seconds(30),
                        expected: PeerID? = nil) async throws -> PeerSummary {
        var last = PeerError.unreachable(expected?.shortText ?? "the peer", "no address known")
        for target in targets {
            do {
                return try await connect(to: target, context: context, timeout: timeout, expected: expected)
            } catch let e as PeerError {
                guard case .unreachable = e else { throw e }
                last = e
            }
        }
        throw last
    }

    // MARK: Redialling trusted peers

    /// Redials `peer` at `at` (the table's backoff): its last address first, then what
    /// discovery knows. An attempt that reaches no one reports back so the next is scheduled.
    func scheduleRedial(_ peer: PeerID, at: ContinuousClock.Instant, attempt: Int) {
        let delay = ContinuousClock.now.duration(to: at)
        logger.info("redialling a trusted peer", ["peer.id": peer.shortText, "attempt": "\(attempt)", "in": "\(delay)"])
        onEvent(.reconnecting(peer, attempt: attempt, after: max(delay, .zero)))
        queue.asyncAfter(deadline: .now() + delay.dispatchInterval) { [weak self] in
            guard let self else { return }
            let targets = self.state.withLock { s -> [HostPort]? in
                guard !s.stopped, s.table.shouldRedial(peer) else { return nil }
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
        } catch PeerError.unreachable(let target, let why) {
            logger.info("a trusted peer is not reachable", ["peer.id": peer.shortText, "address": target, "why": why])
            apply(state.withLock { $0.table.redialFailed(peer, now: .now, random: Double.random(in: 0...1)) })
        } catch {
            // A connection existed and ended: its close scheduled the next attempt.
        }
    }

    /// How long a `connect` whose connection lost the tie-break waits for the other one.
    static let movedWaiterLimit: Duration = .seconds(40)

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
                queue.asyncAfter(deadline: .now() + limit.dispatchInterval) {
                    finish(.failure(SystemError(call: "connect", code: ETIMEDOUT, context: address.description)))
                }
            }
        } catch {
            closeQuietly(fd)
            throw error
        }
        return fd
    }
}
