internal import CAvahi
@preconcurrency import Dispatch
import FoundationEssentials

/// A running browse: its service browser, and a resolver per service found when it resolves.
/// Touched only on the client's queue.
final class Browse {
    let id: String
    let order: Int
    let spec: BrowseSpec
    var browser: COwned?
    var resolvers: [String: COwned] = [:]

    init(id: String, order: Int, spec: BrowseSpec) {
        self.id = id
        self.order = order
        self.spec = spec
    }
}

/// A one-shot lookup (a resolve, or a listing of service types) waiting for its answer.
final class OneShot {
    let id: String
    let started: ContinuousClock.Instant
    /// A resolve whose answer goes into the resolve cache (looked up with IPv4 and IPv6 together when `allAddresses`).
    var cacheable = false
    var allAddresses = false
    var resolvedInterfaceIndex = Int32(AVAHI_IF_UNSPEC)
    var objects: [COwned] = []
    var pending = 0
    var timer: DispatchWorkItem?
    var grace: DispatchWorkItem?
    var resolved: ResolvedService?
    var failures: [String] = []
    var types: [String: ServiceTypeInfo] = [:]
    var finish: ((Result<OneShotResult, DNSSDError>) -> Void)?
    /// What to answer when the time runs out.
    var onExpire: ((OneShot) -> Result<OneShotResult, DNSSDError>)?

    init(id: String, started: ContinuousClock.Instant = .now) {
        self.id = id
        self.started = started
    }
}

/// What a one-shot lookup produced.
enum OneShotResult: Sendable {
    case resolved(ResolvedService)
    case types([ServiceTypeInfo])
}

private func protoName(_ p: AvahiProtocol) -> String { p == Int32(AVAHI_PROTO_INET6) ? "ipv6" : "ipv4" }

private func string(_ p: UnsafePointer<CChar>?) -> String { p.map { String(cString: $0) } ?? "" }

private func addressText(_ a: UnsafePointer<AvahiAddress>?) -> String? {
    guard let a else { return nil }
    var buf = [CChar](repeating: 0, count: Int(AVAHI_ADDRESS_STR_MAX))
    guard libavahi.avahi_address_snprint(&buf, buf.count, a) != nil else { return nil }
    return String(decoding: buf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

extension DNSSDClient {
    // MARK: Browsing

    /// Starts a browse; its results arrive as events carrying the returned ID.
    /// `registered` gets the ID before the browser starts (so events can be routed at once).
    public func browse(_ spec: BrowseSpec, registered: @escaping @Sendable (String) -> Void = { _ in }) async throws(DNSSDError) -> String {
        try await onQueue { [self] in
            guard running, client != nil else { return .failure(unavailableError()) }
            let b = Browse(id: newID("b"), order: nextID, spec: spec)
            registered(b.id)
            browses[b.id] = b
            if let e = startBrowser(b) {
                browses[b.id] = nil
                return .failure(e)
            }
            return .success(b.id)
        }
    }

    /// Stops a browse.
    public func stopBrowse(_ id: String) async throws(DNSSDError) {
        let _: Bool = try await onQueue { [self] in
            guard let b = browses.removeValue(forKey: id) else { return .failure(.notFound(kind: "browse", id: id)) }
            dropBrowser(b, free: true)
            resolveCache.withLock { $0.browseEnded(id) }
            return .success(true)
        }
    }

    /// Creates `b`'s service browser. On the queue, while running.
    func startBrowser(_ b: Browse) -> DNSSDError? {
        guard let c = client else { return unavailableError() }
        let box = CallbackBox(.browser, id: b.id, owner: self).retained()
        guard let sb = libavahi.avahi_service_browser_new(
            c.pointer, b.spec.interfaceIndex ?? Int32(AVAHI_IF_UNSPEC), Int32(AVAHI_PROTO_UNSPEC), b.spec.type, b.spec.domain,
            AvahiLookupFlags(0), { _, iface, proto, event, name, type, domain, flags, userdata in
                let box = CallbackBox.from(userdata)
                box.owner?.browserEvent(box.id, iface, proto, event, string(name), string(type), string(domain), flags)
            }, box)
        else {
            CallbackBox.release(box)
            return avahiError("browse for \(b.spec.type)")
        }
        b.browser = COwned(pointer: sb, box: box)
        return nil
    }

    /// Frees `b`'s browser and resolvers (`free` false: `avahi_client_free` does).
    func dropBrowser(_ b: Browse, free: Bool) {
        for r in b.resolvers.values {
            if free { _ = libavahi.avahi_service_resolver_free(r.pointer) }
            CallbackBox.release(r.box)
        }
        b.resolvers = [:]
        if let sb = b.browser {
            if free { _ = libavahi.avahi_service_browser_free(sb.pointer) }
            CallbackBox.release(sb.box)
            b.browser = nil
        }
    }

    private func browserEvent(_ id: String, _ iface: AvahiIfIndex, _ proto: AvahiProtocol, _ event: AvahiBrowserEvent,
                              _ name: String, _ type: String, _ domain: String, _ flags: AvahiLookupResultFlags) {
        guard let b = browses[id] else { return }
        let found = FoundService(name: name, type: type, domain: domain, interface: DNSSDValidation.interfaceName(iface),
                                 interfaceIndex: iface, proto: protoName(proto),
                                 isLocal: flags.rawValue & AVAHI_LOOKUP_RESULT_LOCAL.rawValue != 0,
                                 isCached: flags.rawValue & AVAHI_LOOKUP_RESULT_CACHED.rawValue != 0)
        let key = "\(iface)|\(proto)|\(name)|\(type)|\(domain)"
        switch event {
        case AVAHI_BROWSER_NEW:
            onEvent(.found(browseID: id, found))
            guard b.spec.resolve, b.resolvers[key] == nil, let c = client else { return }
            let box = CallbackBox(.resolver, id: id, key: key, owner: self).retained()
            // Kept open: Avahi calls again when the service changes (a new TXT, say).
            if let r = libavahi.avahi_service_resolver_new(c.pointer, iface, proto, name, type, domain, proto, AvahiLookupFlags(0),
                                                  { _, iface, proto, event, name, type, domain, host, a, port, txt, flags, userdata in
                                                      let box = CallbackBox.from(userdata)
                                                      box.owner?.browseResolverEvent(box.id, box.key, iface, proto, event, string(name), string(type),
                                                                                     string(domain), string(host), addressText(a), port,
                                                                                     readStringList(txt), flags)
                                                  }, box) {
                b.resolvers[key] = COwned(pointer: r, box: box)
            } else {
                CallbackBox.release(box)
                onEvent(.resolveFailed(browseID: id, found, error: avahiError("resolve").description))
            }
        case AVAHI_BROWSER_REMOVE:
            if let r = b.resolvers.removeValue(forKey: key) {
                _ = libavahi.avahi_service_resolver_free(r.pointer)
                CallbackBox.release(r.box)
            }
            resolveCache.withLock { $0.remove(name: name, type: type, domain: domain, interfaceIndex: iface, proto: protoName(proto)) }
            onEvent(.removed(browseID: id, found))
        case AVAHI_BROWSER_ALL_FOR_NOW:
            onEvent(.allForNow(browseID: id))
        case AVAHI_BROWSER_FAILURE:
            let e = avahiError("browse").description
            browses[id] = nil
            dropBrowser(b, free: true)
            resolveCache.withLock { $0.browseEnded(id) }
            onEvent(.browseFailed(browseID: id, error: e))
        default:
            break
        }
    }

    private func browseResolverEvent(_ id: String, _ key: String, _ iface: AvahiIfIndex, _ proto: AvahiProtocol, _ event: AvahiResolverEvent,
                                     _ name: String, _ type: String, _ domain: String, _ host: String, _ address: String?,
                                     _ port: UInt16, _ txt: TXTRecord, _ flags: AvahiLookupResultFlags) {
        guard let b = browses[id] else { return }
        if event == AVAHI_RESOLVER_FOUND {
            let r = ResolvedService(
                name: name, type: type, domain: domain, interface: DNSSDValidation.interfaceName(iface), proto: protoName(proto),
                host: host, addresses: address.map { [$0] } ?? [], port: port, txt: txt,
                isCached: flags.rawValue & AVAHI_LOOKUP_RESULT_CACHED.rawValue != 0, elapsedMilliseconds: nil, interfaceIndex: iface)
            resolveCache.withLock { $0.store(r, interfaceIndex: iface, browseID: id, now: Self.monotonicSeconds()) }
            onEvent(.resolved(browseID: id, r))
        } else {
            resolveCache.withLock { $0.remove(name: name, type: type, domain: domain, interfaceIndex: iface, proto: protoName(proto)) }
            let e = avahiError("resolve \"\(name)\"").description
            if let r = b.resolvers.removeValue(forKey: key) {
                _ = libavahi.avahi_service_resolver_free(r.pointer)
                CallbackBox.release(r.box)
            }
            let found = FoundService(name: name, type: type, domain: domain, interface: DNSSDValidation.interfaceName(iface),
                                     interfaceIndex: iface, proto: protoName(proto), isLocal: false, isCached: false)
            onEvent(.resolveFailed(browseID: id, found, error: e))
        }
    }

    // MARK: Resolving

    /// Resolves one service to its host, address, port and TXT, answering with the first
    /// address Avahi finds (from its cache when it can), or failing after `timeout` seconds.
    /// With `allAddresses`, looks up IPv4 and IPv6 addresses together and answers when both
    /// are in, or 250 ms after the first (a host without IPv6 leaves Avahi's IPv6 lookup
    /// waiting for its own timeout).
    ///
    /// Unless `fresh`, a result in the daemon's resolve cache (see `ResolveCache`) is the
    /// answer, with `fromDaemonCache` set; every answer from Avahi goes into the cache.
    public func resolve(name: String, type: String, domain: String?, interfaceIndex: Int32?, timeout: Double,
                        allAddresses: Bool = false, fresh: Bool = false) async throws(DNSSDError) -> ResolvedService {
        let started = ContinuousClock.now
        // A hit is answered here, not on the queue (which may be waiting for avahi-daemon).
        // Only while avahi-daemon is available (when it goes, it is reported away, then the cache emptied).
        if !fresh, isAvailable, let hit = resolveCache.withLock({
            $0.lookup(name: name, type: type, domain: domain, interfaceIndex: interfaceIndex, allAddresses: allAddresses,
                      now: Self.monotonicSeconds())
        }) {
            var s = hit.service
            s.fromDaemonCache = true
            s.cacheAgeMilliseconds = hit.age * 1000
            s.elapsedMilliseconds = Self.milliseconds(since: started)
            return s
        }
        let r: OneShotResult = try await onQueueAwaiting { [self] done in
            guard running, let c = client else { return done(.failure(unavailableError())) }
            let o = OneShot(id: newID("r"), started: started)
            o.cacheable = true
            o.allAddresses = allAddresses
            o.finish = done
            let families = allAddresses ? [Int32(AVAHI_PROTO_INET), Int32(AVAHI_PROTO_INET6)] : [Int32(AVAHI_PROTO_UNSPEC)]
            for aproto in families {
                let box = CallbackBox(.oneShot, id: o.id, owner: self).retained()
                guard let r = libavahi.avahi_service_resolver_new(
                    c.pointer, interfaceIndex ?? Int32(AVAHI_IF_UNSPEC), Int32(AVAHI_PROTO_UNSPEC), name, type, domain, aproto,
                    AvahiLookupFlags(0), { _, iface, proto, event, name, type, domain, host, a, port, txt, flags, userdata in
                        let box = CallbackBox.from(userdata)
                        box.owner?.oneShotResolverEvent(box.id, iface, proto, event, string(name), string(type), string(domain),
                                                        string(host), addressText(a), port, readStringList(txt), flags)
                    }, box)
                else {
                    CallbackBox.release(box)
                    finishOneShot(o, .failure(avahiError("resolve \"\(name)\"")), free: true)
                    return
                }
                o.objects.append(COwned(pointer: r, box: box))
                o.pending += 1
            }
            oneShots[o.id] = o
            o.onExpire = { o in
                o.resolved.map { .success(.resolved($0)) } ?? .failure(.timeout("\"\(name)\" (\(type)) was not resolved", seconds: timeout))
            }
            armExpiry(o, after: timeout)
        }
        guard case .resolved(let s) = r else { throw .resolveFailed("internal: unexpected answer") }
        return s
    }

    private func oneShotResolverEvent(_ id: String, _ iface: AvahiIfIndex, _ proto: AvahiProtocol, _ event: AvahiResolverEvent,
                                      _ name: String, _ type: String, _ domain: String, _ host: String, _ address: String?,
                                      _ port: UInt16, _ txt: TXTRecord, _ flags: AvahiLookupResultFlags) {
        guard let o = oneShots[id] else { return }
        o.pending -= 1
        if event == AVAHI_RESOLVER_FOUND {
            if var r = o.resolved {
                if let address, !r.addresses.contains(address) {
                    r.addresses.append(address)
                    r.addresses.sort { !$0.contains(":") && $1.contains(":") }
                }
                o.resolved = r
            } else {
                o.resolvedInterfaceIndex = iface
                o.resolved = ResolvedService(
                    name: name, type: type, domain: domain, interface: DNSSDValidation.interfaceName(iface), proto: protoName(proto),
                    host: host, addresses: address.map { [$0] } ?? [], port: port, txt: txt,
                    isCached: flags.rawValue & AVAHI_LOOKUP_RESULT_CACHED.rawValue != 0, elapsedMilliseconds: nil)
            }
        } else {
            let code = client.map { libavahi.avahi_client_errno($0.pointer) } ?? 0
            o.failures.append(Self.message(code))
        }
        if o.pending <= 0 {
            if let r = o.resolved {
                finishOneShot(o, .success(.resolved(r)), free: true)
            } else if o.failures.contains(where: { $0.lowercased().contains("timeout") }) {
                finishOneShot(o, .failure(.timeout("\"\(name)\" (\(type)) was not resolved", seconds: 5)), free: true)
            } else {
                finishOneShot(o, .failure(.resolveFailed("\"\(name)\" (\(type)) could not be resolved: \(o.failures.joined(separator: "; "))")), free: true)
            }
        } else if o.resolved != nil, o.grace == nil {
            let grace = DispatchWorkItem { [weak self] in self?.expireOneShot(id) }
            o.grace = grace
            queue.asyncAfter(deadline: .now() + .milliseconds(250), execute: grace)
        }
    }

    static func milliseconds(since start: ContinuousClock.Instant) -> Double {
        let e = ContinuousClock.now - start
        return Double(e.components.seconds) * 1000 + Double(e.components.attoseconds) / 1e15
    }

    /// Ends `o` with its `onExpire` answer after `seconds`.
    private func armExpiry(_ o: OneShot, after seconds: Double) {
        let id = o.id
        let timer = DispatchWorkItem { [weak self] in self?.expireOneShot(id) }
        o.timer = timer
        queue.asyncAfter(deadline: .now() + seconds, execute: timer)
    }

    private func expireOneShot(_ id: String) {
        guard let o = oneShots[id], let answer = o.onExpire?(o) else { return }
        finishOneShot(o, answer, free: true)
    }

    /// Ends a one-shot lookup: frees its Avahi objects (unless `avahi_client_free` does) and answers.
    func finishOneShot(_ o: OneShot, _ result: Result<OneShotResult, DNSSDError>, free: Bool) {
        oneShots[o.id] = nil
        o.timer?.cancel()
        o.grace?.cancel()
        var result = result
        if case .success(.resolved(var r)) = result {
            r.elapsedMilliseconds = Self.milliseconds(since: o.started)
            result = .success(.resolved(r))
            if o.cacheable {
                resolveCache.withLock { $0.store(r, interfaceIndex: o.resolvedInterfaceIndex, allAddresses: o.allAddresses, now: Self.monotonicSeconds()) }
            }
        }
        // Answer first: freeing a resolver is one more blocking D-Bus call to avahi-daemon.
        let f = o.finish
        o.finish = nil
        f?(result)
        for obj in o.objects {
            if free {
                if o.id.hasPrefix("t") {
                    _ = libavahi.avahi_service_type_browser_free(obj.pointer)
                } else {
                    _ = libavahi.avahi_service_resolver_free(obj.pointer)
                }
            }
            CallbackBox.release(obj.box)
        }
        o.objects = []
    }

    // MARK: Service types

    /// The service types seen on the network: waits until Avahi says it has reported what it
    /// knows for now, or `timeout` seconds.
    public func serviceTypes(domain: String?, interfaceIndex: Int32?, timeout: Double) async throws(DNSSDError) -> [ServiceTypeInfo] {
        let r: OneShotResult = try await onQueueAwaiting { [self] done in
            guard running, let c = client else { return done(.failure(unavailableError())) }
            let o = OneShot(id: newID("t"))
            o.finish = done
            let box = CallbackBox(.typeBrowser, id: o.id, owner: self).retained()
            guard let tb = libavahi.avahi_service_type_browser_new(
                c.pointer, interfaceIndex ?? Int32(AVAHI_IF_UNSPEC), Int32(AVAHI_PROTO_UNSPEC), domain, AvahiLookupFlags(0),
                { _, iface, _, event, type, domain, _, userdata in
                    let box = CallbackBox.from(userdata)
                    box.owner?.typeEvent(box.id, iface, event, string(type), string(domain))
                }, box)
            else {
                CallbackBox.release(box)
                return done(.failure(avahiError("browse for service types")))
            }
            o.objects.append(COwned(pointer: tb, box: box))
            oneShots[o.id] = o
            o.onExpire = { o in .success(.types(Self.sortedTypes(o))) }
            armExpiry(o, after: timeout)
        }
        guard case .types(let t) = r else { throw .resolveFailed("internal: unexpected answer") }
        return t
    }

    private static func sortedTypes(_ o: OneShot) -> [ServiceTypeInfo] {
        o.types.values.sorted { ($0.type, $0.domain) < ($1.type, $1.domain) }
    }

    private func typeEvent(_ id: String, _ iface: AvahiIfIndex, _ event: AvahiBrowserEvent, _ type: String, _ domain: String) {
        guard let o = oneShots[id] else { return }
        switch event {
        case AVAHI_BROWSER_NEW:
            let key = "\(type)|\(domain)"
            var info = o.types[key] ?? ServiceTypeInfo(type: type, domain: domain, interfaces: [])
            let name = DNSSDValidation.interfaceName(iface)
            if !info.interfaces.contains(name) { info.interfaces.append(name) }
            o.types[key] = info
        case AVAHI_BROWSER_ALL_FOR_NOW:
            finishOneShot(o, .success(.types(Self.sortedTypes(o))), free: true)
        case AVAHI_BROWSER_FAILURE:
            finishOneShot(o, .failure(avahiError("browse for service types")), free: true)
        default:
            break
        }
    }
}
