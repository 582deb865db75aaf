import Control
import DNSSD
import FoundationEssentials
import Logging
import Peer
import Session
import Synchronization
import SystemKit

/// Peer discovery over DNS-SD (MultipeerConnectivity's advertiser and browser): the peer
/// capability composed with the DNS-SD capability, so neither `Session` nor `Peer` knows
/// about Avahi.
///
/// `advertise` publishes `_<type>._tcp` for the node's port under the display name, with the
/// TXT record `pv`/`pid`/`pn` plus the application's discovery info. `browse` resolves every
/// instance of `_<type>._tcp`, reads the record back (`DiscoveredRecord`: untrusted input,
/// checked again), leaves out this node itself, and reports `peer.found` (again when the
/// addresses or info change) and `peer.lost` (when the last instance of that peer is gone)
/// to the connection that asked. What every browse has seen is also the address book
/// `peer.invite` and the node's redials of trusted peers use.
final class PeerDiscovery: Sendable {
    private let dnssd: DNSSDCapability
    private let node: PeerNode
    private let logger: Logger
    private let state = Mutex(State())

    /// One resolved instance, seen by one browse on one interface (by index: a removed
    /// interface has no name any more when its services' removals arrive) and protocol.
    private struct Key: Hashable {
        var browse: String
        var name: String
        var interface: Int32
        var proto: String
    }

    private struct Sighting {
        var record: DiscoveredRecord
        var addresses: [HostPort]
    }

    private struct Browse {
        var type: String
        var owner: ClientConnection
    }

    private struct State {
        /// Advertised service types → their publication IDs.
        var advertised: [String: String] = [:]
        /// Types whose first publication is under way (a second `advertise` meanwhile would
        /// publish them twice: Avahi renames the second "NAME #2", and the first is lost).
        var publishing: Set<String> = []
        var browses: [String: Browse] = [:]
        var sightings: [Key: Sighting] = [:]
        /// What each browse last reported per peer (so repeats of the same view are not sent).
        var reported: [String: [PeerID: JSONValue]] = [:]

        /// Forgets every instance browse `id` has seen.
        mutating func forgetSightings(of id: String) {
            for k in sightings.keys where k.browse == id { sightings[k] = nil }
        }
    }

    init(dnssd: DNSSDCapability, node: PeerNode, logger: Logger) {
        self.dnssd = dnssd
        self.node = node
        self.logger = logger
    }

    /// A MultipeerConnectivity service type ("cmj-stream"; "_cmj-stream._tcp" is taken too).
    static func serviceType(_ text: String) throws(RPCError) -> String {
        var t = text
        if t.hasPrefix("_"), t.hasSuffix("._tcp") { t = String(t.dropFirst().dropLast(5)) }
        do { return try SessionValidation.serviceType(t, param: "type") } catch { throw .invalidParams("type", error.reason) }
    }

    /// The types advertised now.
    var advertisedTypes: [String] { state.withLock { $0.advertised.keys.sorted() } }

    // MARK: Advertising

    /// Publishes (or updates) the advertisement of `type` with `info`.
    func advertise(type: String, info: [String: String]) async throws(RPCError) -> JSONValue {
        guard node.port != 0 else {
            throw RPCError(code: RPCErrorCode.invalidState, message: "peer.listen is off: this board takes no sessions, so there is nothing to advertise",
                           data: ["kind": "not-listening"])
        }
        let record: DiscoveryRecord
        do {
            record = try SessionValidation.discoveryInfo(info, peerID: node.peerID, displayName: node.config.displayName, param: "info")
        } catch { throw .invalidParams("info", error.reason) }
        guard let client = dnssd.client else { throw .internalError("DNS-SD is not set up") }
        let txt = try check { try TXTRecord(record.entries, param: "info") }
        let service = try check { try ServiceType("_\(type)._tcp") }
        let existing = state.withLock { s -> String?? in
            if let id = s.advertised[type] { return .some(id) }
            return s.publishing.insert(type).inserted ? .some(nil) : nil
        }
        guard let existing else {
            throw RPCError(code: RPCErrorCode.busy, message: "\"\(type)\" is being advertised by another request: try again once it is up",
                           data: ["kind": "busy"])
        }
        let publication: PublicationInfo
        if let existing {
            publication = try await rpc { try await client.updateTXT(existing, txt) }
        } else {
            defer { _ = state.withLock { $0.publishing.remove(type) } }
            publication = try await rpc { try await client.publish(ServiceSpec(name: node.config.displayName, type: service, port: node.port, txt: txt)) }
            state.withLock { $0.advertised[type] = publication.id }
        }
        logger.info("advertising peer sessions", ["type": service.description, "name": publication.name, "port": "\(node.port)"])
        return [
            "type": .string(type), "service_type": .string(service.description), "id": .string(publication.id),
            "name": .string(publication.name), "port": .int(Int64(node.port)), "state": .string(publication.state.rawValue),
            "txt": .array(record.entries.map { .string($0) }), "warnings": .array(record.warnings.map { .string($0) }),
        ]
    }

    /// Withdraws the advertisement of `type`.
    func unadvertise(type: String) async throws(RPCError) {
        guard let id = state.withLock({ $0.advertised.removeValue(forKey: type) }) else {
            throw RPCError(code: RPCErrorCode.notFound, message: "\"\(type)\" is not advertised", data: ["kind": "not-found", "what": "advertisement"])
        }
        guard let client = dnssd.client else { return }
        _ = try await rpc { try await client.unpublish(id) }
    }

    // MARK: Browsing

    /// Browses for peers advertising `type`; events go to `ctx`'s connection until it closes
    /// or `stopBrowse`.
    func browse(type: String, _ ctx: RequestContext) async throws(RPCError) -> String {
        let service = "_\(type)._tcp"
        let owner = ctx.client
        // Known before the browser exists: Avahi may answer from its cache before `browse`
        // returns, and `update` drops what comes for a browse it does not know.
        let started = Mutex<String?>(nil)
        let id: String
        do {
            id = try await rpc {
                try await dnssd.browse(BrowseSpec(type: service, resolve: true), registered: { [weak self] id in
                    started.withLock { $0 = id }
                    self?.state.withLock { $0.browses[id] = Browse(type: type, owner: owner) }
                }, handler: { [weak self] e in self?.handle(e) })
            }
        } catch {
            if let id = started.withLock({ $0 }) { _ = state.withLock { $0.browses.removeValue(forKey: id) } }
            throw error
        }
        ctx.onConnectionClose(while: { [weak self] in self?.state.withLock { $0.browses[id] != nil } ?? false }) { [weak self] in
            guard let self else { return }
            Task { await self.stopBrowse(id) }
        }
        return id
    }

    /// Stops a browse; false when there is no such browse.
    @discardableResult
    func stopBrowse(_ id: String) async -> Bool {
        let known = state.withLock { s -> Bool in
            s.reported[id] = nil
            s.forgetSightings(of: id)
            return s.browses.removeValue(forKey: id) != nil
        }
        if known { await dnssd.stopBrowse(id) }
        return known
    }

    /// The peers a browse sees now.
    func peers(in browse: String) -> [JSONValue] {
        state.withLock { s in (s.reported[browse] ?? [:]).values.sorted { $0["name"]?.stringValue ?? "" < $1["name"]?.stringValue ?? "" } }
    }

    /// Every address any browse has for `peer` (IPv4 first).
    func addresses(for peer: PeerID) -> [HostPort] {
        let all = state.withLock { s in s.sightings.values.filter { $0.record.peer == peer }.flatMap(\.addresses) }
        var seen = Set<HostPort>()
        return (all.filter { !$0.host.contains(":") } + all.filter { $0.host.contains(":") }).filter { seen.insert($0).inserted }
    }

    private func handle(_ event: DNSSDEvent) {
        switch event {
        case .resolved(let id, let r):
            let key = Key(browse: id, name: r.name, interface: r.interfaceIndex, proto: r.proto)
            let record: DiscoveredRecord
            do {
                record = try DiscoveredRecord(entries: r.txt.entries)
            } catch {
                logger.notice("a service of a peer type is not a usable peer; skipped",
                              ["service": r.name, "type": r.type, "interface": r.interface, "why": error.description])
                return remove(key)
            }
            guard record.peer != node.peerID else { return }
            let addresses = r.addresses.compactMap { Self.hostPort($0, port: r.port, interface: r.interface) }
            update(id) { $0.sightings[key] = Sighting(record: record, addresses: addresses) }
        case .removed(let id, let f):
            remove(Key(browse: id, name: f.name, interface: f.interfaceIndex, proto: f.proto))
        case .browseFailed(let id, let error):
            // Nothing more will be seen: what was seen is reported lost (not kept as if there).
            update(id) { $0.forgetSightings(of: id) }
            send(id, ControlEvent.peerBrowseFailed, ["error": .string(error)])
        case .browseInterrupted(let id):
            // avahi-daemon went away: nothing is seen until it is back, and then only what is
            // there (a peer that left meanwhile is never removed by the new browser). Lost
            // now; found again as the resumed browse sees them.
            update(id) { $0.forgetSightings(of: id) }
        case .resolveFailed(let id, let f, let error):
            // A kept resolver fails when the service's records expire (a peer that lost power
            // or left the network without a goodbye): gone, long before the browser's entry
            // expires (an hour and more). A peer that is there after all is found again when
            // it announces itself.
            logger.info("a peer's service did not resolve", ["service": f.name, "why": error])
            remove(Key(browse: id, name: f.name, interface: f.interfaceIndex, proto: f.proto))
        default:
            break
        }
    }

    private func remove(_ key: Key) {
        update(key.browse) { $0.sightings[key] = nil }
    }

    /// Applies `change` to the sightings of browse `id`, then reports each peer whose view
    /// changed: `peer.found` with the new view, `peer.lost` when no instance is left.
    private func update(_ id: String, _ change: (inout State) -> Void) {
        let (out, owner, type) = state.withLock { s -> ([(String, JSONValue)], ClientConnection?, String) in
            guard let browse = s.browses[id] else { return ([], nil, "") }
            change(&s)
            var views: [PeerID: JSONValue] = [:]
            for (k, v) in s.sightings where k.browse == id {
                let merged = (views[v.record.peer]?["addresses"]?.arrayValue ?? []) + v.addresses.map { JSONValue.string($0.description) }
                var o = PeerCapability.json(v.record.peer)
                o["name"] = .string(v.record.displayName)
                o["info"] = .object(v.record.info.mapValues { .string($0) })
                o["versions"] = .array(v.record.versions.map { .int(Int64($0)) })
                o["compatible"] = .bool(v.record.isCompatible)
                o["addresses"] = .array(Self.ordered(merged.compactMap(\.stringValue)).map { JSONValue.string($0) })
                views[v.record.peer] = .object(o)
            }
            let before = s.reported[id] ?? [:]
            var out: [(String, JSONValue)] = []
            for (peer, view) in views where before[peer] != view { out.append((ControlEvent.peerFound, view)) }
            for (peer, view) in before where views[peer] == nil {
                var o = PeerCapability.json(peer)
                o["name"] = view["name"] ?? .null
                out.append((ControlEvent.peerLost, .object(o)))
            }
            s.reported[id] = views
            return (out, browse.owner, browse.type)
        }
        guard let owner else { return }
        for (topic, view) in out {
            guard case .object(var o): JSONValue = view else { continue }
            o["browse_id"] = .string(id)
            o["type"] = .string(type)
            owner.send(ControlEvent.notification(topic: topic, time: Date(), data: .object(o)).encodedLine())
        }
    }

    private func send(_ id: String, _ topic: String, _ data: [String: JSONValue]) {
        guard let owner = state.withLock({ $0.browses[id]?.owner }) else { return }
        var d = data
        d["browse_id"] = .string(id)
        owner.send(ControlEvent.notification(topic: topic, time: Date(), data: .object(d)).encodedLine())
    }

    /// Addresses without repeats, IPv4 first, each group sorted (so equal views compare equal).
    static func ordered(_ list: [String]) -> [String] {
        let unique = Set(list)
        let v4: [String] = unique.filter { !$0.hasPrefix("[") }.sorted()
        let v6: [String] = unique.filter { $0.hasPrefix("[") }.sorted()
        return v4 + v6
    }

    /// An address Avahi reported, as something to dial (a link-local IPv6 address gets its
    /// interface: it means nothing without one).
    static func hostPort(_ address: String, port: UInt16, interface: String) -> HostPort? {
        let host = address.hasPrefix("fe80:") && !address.contains("%") ? "\(address)%\(interface)" : address
        return try? HostPort(host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)")
    }
}
