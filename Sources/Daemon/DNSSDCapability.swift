import Control
import DNSSD
import FoundationEssentials
import SystemKit
import Logging
import Synchronization

/// DNS-SD (Bonjour's NSNetService and more) through avahi-daemon: the `dnssd.*` methods.
///
/// Publications belong to the daemon (they stay until unpublished) unless the caller asks
/// for `"owner": "connection"`; browses always belong to the connection that started them,
/// and their results go to that connection only. The Avahi client talks to avahi-daemon on
/// the system bus by itself (not through the daemon's bus session), so `attach`/`detach`
/// have nothing to do; it follows avahi-daemon's restarts on its own.
final class DNSSDCapability: DaemonCapability {
    let name = "dnssd"
    private let state = Mutex(State())

    private struct State {
        var client: DNSSDClient?
        var context: DaemonContext?
        /// Publications owned by a connection: publication ID → client ID.
        var publicationOwners: [String: UInt64] = [:]
        /// Browses: browse ID → the connection that receives their events.
        var browseOwners: [String: ClientConnection] = [:]
        /// Browses another capability started (peer discovery): browse ID → its handler.
        var browseHandlers: [String: @Sendable (DNSSDEvent) -> Void] = [:]
    }

    /// The Avahi client, for capabilities composed with DNS-SD (peer sessions advertise and
    /// browse through it); nil before `register`.
    var client: DNSSDClient? { state.withLock { $0.client } }

    /// Starts a browse whose events go to `handler` (on the DNS-SD client's queue) rather than
    /// to a connection; returns its ID for `stopBrowse`.
    /// `registered` gets the browse's ID before its browser exists, for the caller's own
    /// bookkeeping: Avahi may answer from its cache at once, before this returns.
    func browse(_ spec: BrowseSpec, registered: @escaping @Sendable (String) -> Void = { _ in },
                handler: @escaping @Sendable (DNSSDEvent) -> Void) async throws(DNSSDError) -> String {
        guard let client else { throw .unavailable("DNS-SD is not set up") }
        // The handler is in place before the browser exists: Avahi may answer from its cache at once.
        let started = Mutex<String?>(nil)
        do {
            return try await client.browse(spec) { [weak self] id in
                started.withLock { $0 = id }
                registered(id)
                self?.state.withLock { $0.browseHandlers[id] = handler }
            }
        } catch {
            // The browser could not start: its handler goes (the caller forgets its own entry).
            if let id = started.withLock({ $0 }) { _ = state.withLock { $0.browseHandlers.removeValue(forKey: id) } }
            throw error
        }
    }

    /// Stops a browse started by `browse(_:handler:)`.
    func stopBrowse(_ id: String) async {
        _ = state.withLock { $0.browseHandlers.removeValue(forKey: id) }
        try? await client?.stopBrowse(id)
    }

    init() {}

    func register(_ context: DaemonContext) {
        let names = NameStore(path: AtomicFile.join(context.stateDirectory, "dnssd-names.json"))
        let client = DNSSDClient(logger: context.logger.child("dnssd"), names: names) { [weak self] event in
            self?.deliver(event)
        }
        state.withLock {
            $0.client = client
            $0.context = context
        }
        context.register(ControlMethod.dnssdPublish) { [unowned self] p, ctx throws(RPCError) in try await publish(p, ctx) }
        context.register(ControlMethod.dnssdUnpublish) { [unowned self] p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: ["id"])
            let id = try p.string("id")
            let info = try await rpc { try await client.unpublish(id) }
            let reply = json(info)
            // Its owner's close handler goes with it (dropped as the client's next is added).
            _ = state.withLock { $0.publicationOwners.removeValue(forKey: id) }
            return reply
        }
        context.register(ControlMethod.dnssdUpdate) { [unowned self] p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: ["id", "txt"])
            let id = try p.string("id")
            guard p["txt"] != nil else { throw RPCError.invalidParams("txt", "required") }
            let txt = try Self.txt(p)
            let info = try await rpc { try await client.updateTXT(id, txt) }
            return json(info)
        }
        context.register(ControlMethod.dnssdList) { [unowned self] p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: [])
            let list = await client.publicationList()
            var avahi: [String: JSONValue] = ["available": .bool(client.isAvailable)]
            if !client.isAvailable { avahi["reason"] = .string(client.unavailableReason) }
            return ["avahi": .object(avahi), "publications": .array(list.map { json($0) })]
        }
        context.register(ControlMethod.dnssdBrowse) { [unowned self] p, ctx throws(RPCError) in try await browse(p, ctx) }
        context.register(ControlMethod.dnssdBrowseStop) { [unowned self] p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: ["browse_id"])
            let id = try p.string("browse_id")
            try await rpc { try await client.stopBrowse(id) }
            _ = state.withLock { $0.browseOwners.removeValue(forKey: id) }
            return ["browse_id": .string(id), "stopped": true]
        }
        context.register(ControlMethod.dnssdResolve) { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: ["name", "type", "domain", "interface", "timeout", "all_addresses", "fresh"])
            let (nameText, typeText, domainText) = (try p.string("name"), try p.string("type"), try p.optionalString("domain"))
            let name = try check { try DNSSDValidation.instanceName(nameText) }
            let type = try check { try ServiceType(typeText) }
            let domain = try check { try DNSSDValidation.domain(domainText) }
            let iface = try Self.interface(p)
            let timeout = try p.optionalDouble("timeout", in: 0.1...120) ?? 5
            let all = try p.optionalBool("all_addresses") ?? false
            let fresh = try p.optionalBool("fresh") ?? false
            let r = try await rpc {
                try await client.resolve(name: name, type: type.description, domain: domain, interfaceIndex: iface?.index,
                                         timeout: timeout, allAddresses: all, fresh: fresh)
            }
            return DNSSDJSON.resolved(r)
        }
        context.register(ControlMethod.dnssdTypes) { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: ["domain", "interface", "timeout"])
            let domainText = try p.optionalString("domain")
            let domain = try check { try DNSSDValidation.domain(domainText) }
            let iface = try Self.interface(p)
            let timeout = try p.optionalDouble("timeout", in: 0.1...120) ?? 3
            let types = try await rpc {
                try await client.serviceTypes(domain: domain, interfaceIndex: iface?.index, timeout: timeout)
            }
            return ["types": .array(types.map { t in
                ["type": .string(t.type), "domain": .string(t.domain), "interfaces": .array(t.interfaces.map { .string($0) })]
            })]
        }
        client.start()
    }

    func attach(_ session: BusSession) async {}
    func detach() async {}

    func shutdown() async {
        guard let client = state.withLock({ $0.client }) else { return }
        await client.stop()
    }

    // MARK: Methods

    private func publish(_ p: RPCParams, _ ctx: RequestContext) async throws(RPCError) -> JSONValue {
        try p.rejectUnknown(allowed: ["name", "type", "port", "txt", "subtypes", "domain", "interface", "owner", "wait"])
        // Every check before anything reaches Avahi: a bad request publishes nothing.
        let (nameText, typeText, portNumber) = (try p.string("name"), try p.string("type"), try p.int("port"))
        let name = try check { try DNSSDValidation.instanceName(nameText) }
        let type = try check { try ServiceType(typeText) }
        let port = try check { try DNSSDValidation.port(portNumber) }
        let txt = try Self.txt(p)
        let subtypeTexts = try p.optionalStringArray("subtypes") ?? []
        guard subtypeTexts.count <= 16 else { throw RPCError.invalidParams("subtypes", "at most 16 subtypes") }
        var subtypes: [String] = []
        for s in subtypeTexts { subtypes.append(try check { try DNSSDValidation.subtype(s, of: type) }) }
        let domainText = try p.optionalString("domain")
        let domain = try check { try DNSSDValidation.domain(domainText) }
        let iface = try Self.interface(p)
        let owner = try p.optionalString("owner") ?? "daemon"
        guard owner == "daemon" || owner == "connection" else {
            throw RPCError.invalidParams("owner", "expected \"daemon\" or \"connection\", got \"\(owner)\"")
        }
        let wait = try p.optionalDouble("wait", in: 0...60) ?? 5
        guard let client = state.withLock({ $0.client }) else { throw RPCError.internalError("DNS-SD is not set up") }
        let spec = ServiceSpec(name: name, type: type, port: port, txt: txt, subtypes: subtypes, domain: domain,
                               interface: iface?.name, interfaceIndex: iface?.index)
        let info = try await rpc { try await client.publish(spec, wait: wait) }
        if owner == "connection" {
            state.withLock { $0.publicationOwners[info.id] = ctx.clientID }
            ctx.onConnectionClose(while: { [weak self] in self?.state.withLock { $0.publicationOwners[info.id] != nil } ?? false }) { [weak self] in
                guard let self else { return }
                Task { _ = try? await client.unpublish(info.id) }
                _ = self.state.withLock { $0.publicationOwners.removeValue(forKey: info.id) }
            }
        }
        return json(info)
    }

    private func browse(_ p: RPCParams, _ ctx: RequestContext) async throws(RPCError) -> JSONValue {
        try p.rejectUnknown(allowed: ["type", "domain", "interface", "resolve"])
        let (typeText, domainText) = (try p.string("type"), try p.optionalString("domain"))
        let type = try check { try Self.browseType(typeText) }
        let domain = try check { try DNSSDValidation.domain(domainText) }
        let iface = try Self.interface(p)
        let resolve = try p.optionalBool("resolve") ?? false
        guard let client = state.withLock({ $0.client }) else { throw RPCError.internalError("DNS-SD is not set up") }
        let spec = BrowseSpec(type: type, domain: domain, interfaceIndex: iface?.index, resolve: resolve)
        // Register the owner before the browser exists: Avahi may report from its cache at once.
        let id = try await rpc {
            try await client.browse(spec) { [weak self] id in
                self?.state.withLock { $0.browseOwners[id] = ctx.client }
            }
        }
        ctx.onConnectionClose(while: { [weak self] in self?.state.withLock { $0.browseOwners[id] != nil } ?? false }) { [weak self] in
            guard let self else { return }
            Task { try? await client.stopBrowse(id) }
            _ = self.state.withLock { $0.browseOwners.removeValue(forKey: id) }
        }
        return ["browse_id": .string(id), "type": .string(type), "resolve": .bool(resolve)]
    }

    // MARK: Events

    private func deliver(_ event: DNSSDEvent) {
        if let id = Self.browseID(of: event), let handler = state.withLock({ $0.browseHandlers[id] }) {
            return handler(event)
        }
        let context = state.withLock { $0.context }
        func publish(_ topic: String, _ data: JSONValue) { context?.publish(topic: topic, data: data) }
        func toOwner(_ id: String, _ topic: String, _ data: [String: JSONValue]) {
            guard let c = state.withLock({ $0.browseOwners[id] }) else { return }
            var d = data
            d["browse_id"] = .string(id)
            c.send(ControlEvent.notification(topic: topic, time: Date(), data: .object(d)).encodedLine())
        }
        switch event {
        case .avahiAvailable(let version):
            publish(ControlEvent.dnssdAvahiAvailable, ["version": version.map { .string($0) } ?? .null])
        case .avahiUnavailable(let reason):
            publish(ControlEvent.dnssdAvahiUnavailable, ["reason": .string(reason)])
        case .published(let info, let again):
            publish(ControlEvent.dnssdPublished, ["service": json(info), "again": .bool(again)])
        case .renamed(let info, let from):
            publish(ControlEvent.dnssdRenamed, ["service": json(info), "from": .string(from), "to": .string(info.name)])
        case .publishFailed(let info, let error):
            publish(ControlEvent.dnssdPublishFailed, ["service": json(info), "error": .string(error)])
        case .unpublished(let info):
            publish(ControlEvent.dnssdUnpublished, ["service": json(info)])
        case .found(let id, let s):
            toOwner(id, ControlEvent.dnssdFound, ["service": DNSSDJSON.found(s)])
        case .removed(let id, let s):
            toOwner(id, ControlEvent.dnssdRemoved, ["service": DNSSDJSON.found(s)])
        case .resolved(let id, let r):
            toOwner(id, ControlEvent.dnssdResolved, ["service": DNSSDJSON.resolved(r)])
        case .resolveFailed(let id, let s, let error):
            toOwner(id, ControlEvent.dnssdResolveFailed, ["service": DNSSDJSON.found(s), "error": .string(error)])
        case .allForNow(let id):
            toOwner(id, ControlEvent.dnssdAllForNow, [:])
        case .browseFailed(let id, let error):
            toOwner(id, ControlEvent.dnssdBrowseFailed, ["error": .string(error)])
            _ = state.withLock { $0.browseOwners.removeValue(forKey: id) }
        case .browseInterrupted(let id):
            toOwner(id, ControlEvent.dnssdBrowseInterrupted, ["reason": "avahi-daemon went away"])
        case .browseResumed(let id):
            toOwner(id, ControlEvent.dnssdBrowseResumed, [:])
        }
    }

    /// The browse an event belongs to, if it is a browse's.
    private static func browseID(of event: DNSSDEvent) -> String? {
        switch event {
        case .found(let id, _), .removed(let id, _), .resolved(let id, _), .resolveFailed(let id, _, _), .allForNow(let id),
             .browseFailed(let id, _), .browseInterrupted(let id), .browseResumed(let id):
            id
        default: nil
        }
    }

    private func json(_ info: PublicationInfo) -> JSONValue {
        let owned = state.withLock { $0.publicationOwners[info.id] != nil }
        return DNSSDJSON.publication(info, owner: owned ? "connection" : "daemon")
    }
}

// MARK: Errors

extension DNSSDError: RPCErrorConvertible {
    /// The JSON-RPC error for a DNS-SD error, with a machine-readable `kind`.
    var rpcError: RPCError {
        switch self {
        case .invalid(let param, let reason):
            return .invalidParams(param, reason)
        case .unavailable:
            return RPCError(code: RPCErrorCode.dnssdUnavailable, message: description, data: ["kind": "avahi-unavailable"])
        case .notFound(let kind, let id):
            return RPCError(code: RPCErrorCode.dnssdNotFound, message: description,
                            data: ["kind": "not-found", "what": .string(kind), "id": .string(id)])
        case .avahi(_, let code, let message):
            return RPCError(code: RPCErrorCode.dnssdFailed, message: description,
                            data: ["kind": "avahi-error", "avahi_error": .int(Int64(code)), "avahi_message": .string(message)])
        case .timeout(_, let seconds):
            return RPCError(code: RPCErrorCode.timeout, message: description, data: ["kind": "timeout", "seconds": .double(seconds)])
        case .resolveFailed:
            return RPCError(code: RPCErrorCode.dnssdNotResolved, message: description, data: ["kind": "not-resolved"])
        }
    }
}
