import Control
import DNSSD
import FoundationEssentials
import Glibc
import Logging
import Peer
import Session
import Synchronization
import SystemKit
import TLS

/// Peer sessions (MultipeerConnectivity's session, invitations and messages) over TCP and TLS:
/// the `peer.*` methods and events.
///
/// The identity (a P-256 key and a self-signed certificate whose SHA-256 is the peer ID) and
/// the trusted peers live in `<state_dir>/peer/`. The node listens from the daemon's start
/// (`peer.port`, default any; `peer.listen = off`: not at all); `peer.connect` dials `HOST:PORT`. Events go to every
/// subscribed client; an invitation waits for `peer.accept`/`peer.decline` from any client
/// (policy `ask`) or is answered by the policy.
final class PeerCapability: DaemonCapability {
    let name = "peer"
    private let state = Mutex<(node: PeerNode?, trust: TrustStore?, context: DaemonContext?)>((nil, nil, nil))
    /// Where advertising and browsing go (the daemon's one Avahi client).
    private let dnssd: DNSSDCapability
    /// Message streams (`peer.message-stream`, PeerMessageStream.swift): a peer's reliable
    /// messages go to its stream while one is open, instead of `peer.message` events.
    let streams = PeerMessageStreams()
    /// Byte streams (`peer.open-stream`, PeerByteStreams.swift).
    let byteStreams = PeerByteStreams()

    init(dnssd: DNSSDCapability) {
        self.dnssd = dnssd
    }

    func register(_ context: DaemonContext) throws {
        let (settings, listens) = try Self.settings(context.settings)
        let directory = AtomicFile.join(context.stateDirectory, "peer")
        let logger = context.logger.child("peer")
        let identity: TLSIdentity
        let trust: TrustStore
        let (inboxDirectory, limits) = try Self.inboxSettings(context.settings, stateDirectory: context.stateDirectory)
        do {
            // Identity, trusted peers and the outgoing journal: what a `kill -9` mid-write left.
            AtomicFile.removeAbandonedTemporaries(in: directory)
            identity = try TLSIdentity.loadOrCreate(directory: directory)
            // Made 0700 by earlier versions: the group (the CLI's users) could not reach the
            // inbox below it.
            AtomicFile.widenOwnDirectory(directory, from: 0o700, to: 0o750)
            trust = try TrustStore(path: AtomicFile.join(directory, "trusted-peers.json"))
        } catch {
            throw DaemonError("peer sessions: \(error)")
        }
        for w in trust.loadWarnings { logger.warning("trusted peers: an entry passed over", ["reason": w]) }
        // An inbox that cannot be made (a card not mounted, a directory the sandbox keeps
        // read-only) costs the resources from peers, not the daemon: BLE, DNS-SD, sessions,
        // messages and sending go on; offers are declined, `peer.inbox` says why.
        let inbox: Inbox?
        let inboxProblem: String?
        do {
            inbox = try Inbox(directory: inboxDirectory, limits: limits)
            inboxProblem = nil
        } catch {
            var readOnly = false
            if case InboxError.io(_, let e as SystemError) = error { readOnly = e.code == EROFS }
            let hint = readOnly ? " (under the packaged unit, a directory outside \(context.stateDirectory) needs a drop-in: ReadWritePaths=-\(inboxDirectory); docs/packaging.md)" : ""
            inbox = nil
            inboxProblem = "\(error)\(hint)"
            logger.error("peer sessions take no resources until the inbox can be made and the daemon restarted",
                         ["error": "\(error)\(hint)"])
        }
        if let inbox, inbox.removedParts > 0 {
            logger.notice("removed transfer parts nobody resumed in time",
                          ["parts": "\(inbox.removedParts)", "kept.days": "\(Inbox.partRetention.components.seconds / 86_400)",
                           "inbox": inbox.partDirectory])
        }
        let config = {
            var c = settings
            c.inbox = inbox
            c.transferJournal = AtomicFile.join(directory, "outgoing.json")
            c.outboxDirectory = AtomicFile.join(directory, "outbox")
            // A client names any path the daemon can read: never the daemon's own key and
            // state (a client that can read them itself passes a descriptor instead).
            let own = FileSystem.resolved(context.stateDirectory) ?? context.stateDirectory
            let received = FileSystem.resolved(inboxDirectory) ?? inboxDirectory
            c.mayOffer = { path in !FileSystem.isInside(path, own) || FileSystem.isInside(path, received) }
            return c
        }()
        let node = try PeerNode(identity: identity, config: config, trust: trust, logger: logger) { [weak self] e in self?.deliver(e) }
        // `peer.listen = off`: this board only dials (no port open to peers).
        if listens {
            do {
                try node.start()
            } catch let e as SystemError where e.code == EACCES || e.code == EPERM {
                // A port below 1024 without CAP_NET_BIND_SERVICE (the packaged unit has no
                // capabilities): the file's mistake, not the machine's (exit 2, not retried).
                throw ConfigError(file: "configuration", key: "peer.port",
                                  reason: "port \(config.port) cannot be listened on (\(e)): ports below 1024 need privileges the daemon does not have; use 1024 or above, or 0 for any")
            } catch {
                throw DaemonError("peer sessions: cannot listen on port \(config.port): \(error)")
            }
        }
        state.withLock { $0 = (node, trust, context) }
        let discovery = PeerDiscovery(dnssd: dnssd, node: node, logger: logger)
        node.setAddressSource { [weak discovery] peer in discovery?.addresses(for: peer) ?? [] }
        // Sessions this board had with trusted peers come back after its restart.
        node.resumeTrustedSessionsAtStart()
        registerDiscovery(context, node, discovery)

        context.register(ControlMethod.peerIdentity) { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: [])
            var o = Self.json(node.peerID)
            o["name"] = .string(config.displayName)
            o["port"] = .int(Int64(node.port))
            o["encryption"] = .string(Self.name(config.encryption))
            o["accept"] = .string(config.accept.rawValue)
            o["max_peers"] = .int(Int64(config.maxPeers))
            o["advertising"] = .array(discovery.advertisedTypes.map { .string($0) })
            return .object(o)
        }
        context.register(ControlMethod.peerConnect) { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: ["address", "peer", "context_base64", "timeout"])
            let text = try p.string("address")
            let target: HostPort
            do throws(SystemError) { target = try HostPort(text) } catch { throw .invalidParams("address", error.context ?? "\(error)") }
            let expected = try p.optionalString("peer").map { t throws(RPCError) in try Self.peerID(t, "peer") }
            let context = try Self.context(p)
            let timeout = try p.optionalDouble("timeout", in: 1...600) ?? 30
            let s = try await rpc {
                try await node.connect(to: target, context: context, timeout: .milliseconds(Int64(timeout * 1000)), expected: expected)
            }
            return Self.json(s)
        }
        context.register(ControlMethod.peerInvitations) { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: [])
            return ["invitations": .array(node.pendingInvitations.sorted { $0.id < $1.id }.map { Self.json($0) })]
        }
        for (method, accept) in [(ControlMethod.peerAccept, true), (ControlMethod.peerDecline, false)] {
            context.register(method) { p, _ throws(RPCError) in
                try p.rejectUnknown(allowed: ["invitation"])
                let id = try p.int("invitation", in: 1...Int64.max)
                try await rpc { try node.answer(invitation: UInt64(id), accept: accept) }
                return ["invitation": .int(id), "accepted": .bool(accept)]
            }
        }
        context.register(ControlMethod.peerSessions) { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: [])
            return ["sessions": .array(node.sessions.sorted { $0.connection < $1.connection }.map { Self.json($0) })]
        }
        context.register(ControlMethod.peerSend) { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: ["to", "data_base64", "text", "reliable", "wait"])
            guard let data = try Self.bytes(p, base64: "data_base64", text: "text") else {
                throw .invalidParams("data_base64", "required (or \"text\")")
            }
            let peers = try Self.peers(p, "to", among: node.knownPeers)
            let reliable = try p.optionalBool("reliable") ?? true
            // false: a full queue answers busy (-32006) instead of waiting for room.
            let wait = try p.optionalBool("wait") ?? true
            let sent = try await rpc { try await node.send(data, to: peers, reliable: reliable, wait: wait) }
            return ["sent_to": .array(sent.map { .string($0.hex) }), "bytes": .int(Int64(data.count))]
        }
        registerMessageStream(context, node: node)
        registerResources(context, node: node, inbox: inbox, inboxProblem: inboxProblem)
        registerByteStreams(context, node: node)
        context.register(ControlMethod.peerDisconnect) { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: ["peer"])
            let peer = try Self.peer(p, "peer", among: node.knownPeers)
            try await rpc { try node.disconnect(peer) }
            return .object(Self.json(peer))
        }
        context.register(ControlMethod.peerTrust) { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: ["peer", "name"])
            let peer = try Self.peer(p, "peer")
            let name = try p.optionalString("name") ?? node.sessions.first { $0.peer == peer }?.displayName ?? ""
            let added = try Self.saving { () throws(TrustStoreError) in try node.setTrusted(peer, name: name, true) }
            var o = Self.json(peer)
            o["added"] = .bool(added)
            return .object(o)
        }
        context.register(ControlMethod.peerForget) { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: ["peer"])
            let peer = try Self.peer(p, "peer", among: node.knownPeers)
            let removed = try Self.saving { () throws(TrustStoreError) in try node.setTrusted(peer, name: "", false) }
            var o = Self.json(peer)
            o["removed"] = .bool(removed)
            return .object(o)
        }
        context.register(ControlMethod.peerTrusted) { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: [])
            return ["peers": .array(trust.all.map { e in
                var o = Self.json(e.peer)
                o["name"] = .string(e.name)
                o["since"] = .int(e.since)
                // Whether its session comes back after a restart, and where a dial of this
                // board last reached it (dialled there then).
                o["resume"] = .bool(e.resume)
                if let a = e.address { o["address"] = .string(a.description) }
                return .object(o)
            })]
        }
    }

    /// `peer.advertise`, `peer.unadvertise`, `peer.browse`, `peer.browse-stop`, `peer.invite`.
    private func registerDiscovery(_ context: DaemonContext, _ node: PeerNode, _ discovery: PeerDiscovery) {
        context.register(ControlMethod.peerAdvertise) { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: ["type", "info"])
            let type = try PeerDiscovery.serviceType(try p.string("type"))
            var info: [String: String] = [:]
            switch p["info"] {
            case nil, .null?: break
            case .object(let o)?:
                for (k, v) in o {
                    guard let s = v.stringValue else { throw .invalidParams("info", "the value of \"\(k)\" must be a string") }
                    info[k] = s
                }
            case let v?: throw .invalidParams("info", "expected an object of strings, got \(v.typeName)")
            }
            return try await discovery.advertise(type: type, info: info)
        }
        context.register(ControlMethod.peerUnadvertise) { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: ["type"])
            let type = try PeerDiscovery.serviceType(try p.string("type"))
            try await discovery.unadvertise(type: type)
            return ["type": .string(type), "advertising": false]
        }
        context.register(ControlMethod.peerBrowse) { p, ctx throws(RPCError) in
            try p.rejectUnknown(allowed: ["type"])
            let type = try PeerDiscovery.serviceType(try p.string("type"))
            let id = try await discovery.browse(type: type, ctx)
            return ["browse_id": .string(id), "type": .string(type), "peers": .array(discovery.peers(in: id))]
        }
        context.register(ControlMethod.peerBrowseStop) { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: ["browse_id"])
            let id = try p.string("browse_id")
            guard await discovery.stopBrowse(id) else {
                throw RPCError(code: RPCErrorCode.notFound, message: "no peer browse \(id)", data: ["kind": "not-found", "what": "browse"])
            }
            return ["browse_id": .string(id), "stopped": true]
        }
        context.register(ControlMethod.peerInvite) { p, _ throws(RPCError) in try await Self.invite(p, node, discovery) }
    }

    /// `peer.invite`: dials the addresses a browse found for the peer, in turn, until one answers.
    private static func invite(_ p: RPCParams, _ node: PeerNode, _ discovery: PeerDiscovery) async throws(RPCError) -> JSONValue {
        try p.rejectUnknown(allowed: ["peer", "context_base64", "context", "timeout"])
        let peer = try Self.peer(p, "peer")
        let invitation = try Self.context(p, text: "context")
        let timeout = try p.optionalDouble("timeout", in: 1...600) ?? 30
        let targets = discovery.addresses(for: peer)
        guard !targets.isEmpty else {
            throw RPCError(code: RPCErrorCode.notFound, message: "peer \(peer.shortText) has not been found by a browse (peer.browse first, or peer.connect HOST:PORT)",
                           data: ["kind": "not-found", "what": "peer", "id": .string(peer.hex)])
        }
        let s = try await rpc {
            try await node.connect(toFirstOf: targets, context: invitation, timeout: .milliseconds(Int64(timeout * 1000)), expected: peer)
        }
        return Self.json(s)
    }

    func attach(_ session: BusSession) async {}
    func detach() async {}

    func shutdown() async {
        // Peers told why, received files saved and parts recorded before the process exits
        // (systemd's stop waits 90 s; a peer that never answers its CLOSE costs 1 s).
        _ = await state.withLock { $0.node }?.stop(settlingWithin: Self.settleLimit)
    }

    /// How long a stopping daemon waits for its peer connections and received files.
    static let settleLimit: Duration = .seconds(5)

    private func deliver(_ e: PeerEvent) {
        guard let context = state.withLock({ $0.context }) else { return }
        switch e {
        case .invitation(let i): context.publish(topic: ControlEvent.peerInvitation, data: Self.json(i))
        case .invitationEnded(let d): context.publish(topic: ControlEvent.peerInvitationEnded, data: Self.json(d))
        case .connected(let s): context.publish(topic: ControlEvent.peerConnected, data: Self.json(s))
        case .disconnected(let d):
            if d.wasConnected, let peer = d.peer { streams.sessionEnded(peer, reason: d.reason.description) }
            context.publish(topic: ControlEvent.peerDisconnected, data: Self.json(d))
        case .messages(let from, let batch):
            // What the peer's message stream does not take (there is none, or it ended) goes
            // to events.
            let taken = streams.deliver(batch, from: from)
            for m in batch[taken...] {
                context.publish(topic: ControlEvent.peerMessage, data: Self.messageEvent(from: from, m, reliable: true))
            }
        case .datagram(let from, let bytes):
            context.publish(topic: ControlEvent.peerMessage, data: Self.messageEvent(from: from, bytes, reliable: false))
        case .reconnecting(let peer, let attempt, let after):
            var o = Self.json(peer)
            o["attempt"] = .int(Int64(attempt))
            o["in_seconds"] = .double(Double(after.components.seconds) + Double(after.components.attoseconds) / 1e18)
            context.publish(topic: ControlEvent.peerReconnecting, data: .object(o))
        case .reconnectGaveUp(let peer, let attempts):
            var o = Self.json(peer)
            o["attempts"] = .int(Int64(attempts))
            context.publish(topic: ControlEvent.peerReconnectGaveUp, data: .object(o))
        case .resource(let r):
            let (topic, data) = Self.event(r)
            context.publish(topic: topic, data: data)
        case .stream(let e):
            byteStreams.handle(e) { [weak self] topic, stream, extra in self?.reportByteStream(context, topic, stream, extra) }
        }
    }
}
