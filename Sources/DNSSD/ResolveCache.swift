/// The daemon's own cache of recent resolve results, so that `dnssd.resolve` of a service it
/// has just resolved is answered without a D-Bus round trip to avahi-daemon.
///
/// Fed by one-shot resolves and by the resolvers of browses with `resolve` (which Avahi
/// keeps open and calls again when the service changes). An entry is used while:
/// - a running browse watches it (its resolver gave the entry) and it is younger than
///   `watchedMaxAge`: the browse would have reported the service's removal or change;
/// - otherwise, while it is younger than `maxAge` (nothing tells the daemon when an
///   unwatched service goes away, so this bound is short).
///
/// Avahi does not give clients the records' TTLs, hence ages chosen here: `watchedMaxAge`
/// is 120 s (the TTL RFC 6762 section 10 gives records that carry a host name, SRV and A),
/// `maxAge` 10 s. Entries go when a browse reports the service removed or its resolver
/// fails, when the daemon withdraws or renames its own publication of that name, when
/// avahi-daemon goes away, or past their age. A value type touched only on the client's queue;
/// times are seconds on a monotonic clock, passed in (so tests choose them).
struct ResolveCache {
    /// How long an entry no browse watches is used, in seconds.
    var maxAge: Double = 10
    /// How long an entry a running browse watches is used, in seconds.
    var watchedMaxAge: Double = 120
    /// Entries kept at most (the oldest go first).
    var capacity: Int = 512

    struct Key: Hashable {
        let name: String
        let type: String
        let domain: String

        /// DNS names compare without case (RFC 6762 section 16); no domain is `local`.
        init(name: String, type: String, domain: String?) {
            self.name = name.lowercased()
            self.type = type.lowercased()
            var d = (domain ?? "local").lowercased()
            if d.hasSuffix(".") { d.removeLast() }
            self.domain = d.isEmpty ? "local" : d
        }
    }

    struct Entry {
        var service: ResolvedService
        var interfaceIndex: Int32
        /// Looked up with IPv4 and IPv6 together (a one-shot resolve with `all_addresses`).
        var allAddresses: Bool
        var stored: Double
        /// The browses whose resolvers report on this service.
        var watchers: Set<String>
    }

    /// A hit: the stored result and its age in seconds.
    struct Hit {
        var service: ResolvedService
        var age: Double
    }

    private(set) var entries: [Key: [Entry]] = [:]

    /// How many entries there are (all keys).
    var count: Int { entries.values.reduce(0) { $0 + $1.count } }

    private func usable(_ e: Entry, now: Double) -> Bool {
        let age = now - e.stored
        return age >= 0 && age < (e.watchers.isEmpty ? maxAge : watchedMaxAge)
    }

    /// The newest usable entry for the service, on `interfaceIndex` (nil: any interface).
    /// With `allAddresses` only an entry looked up for both families will do. Drops the
    /// entries of that service that are too old.
    mutating func lookup(name: String, type: String, domain: String?, interfaceIndex: Int32?, allAddresses: Bool,
                         now: Double) -> Hit? {
        let key = Key(name: name, type: type, domain: domain)
        guard var list = entries[key] else { return nil }
        list.removeAll { !usable($0, now: now) }
        entries[key] = list.isEmpty ? nil : list
        let candidates = list.filter { e in
            (interfaceIndex == nil || e.interfaceIndex == interfaceIndex) && (!allAddresses || e.allAddresses)
        }
        guard let best = candidates.max(by: { $0.stored < $1.stored }) else { return nil }
        var s = best.service
        s.elapsedMilliseconds = nil
        return Hit(service: s, age: now - best.stored)
    }

    /// Stores a result: from a one-shot resolve (`browseID` nil) or from the resolver of
    /// browse `browseID`. Replaces the entry for the same interface and protocol, keeping
    /// the browses that watch it.
    mutating func store(_ service: ResolvedService, interfaceIndex: Int32, allAddresses: Bool = false, browseID: String? = nil,
                        now: Double) {
        let key = Key(name: service.name, type: service.type, domain: service.domain)
        var list = entries[key] ?? []
        var watchers: Set<String> = browseID.map { [$0] } ?? []
        if let i = list.firstIndex(where: { $0.interfaceIndex == interfaceIndex && $0.service.proto == service.proto }) {
            watchers.formUnion(list[i].watchers)
            list.remove(at: i)
        }
        var s = service
        s.elapsedMilliseconds = nil
        list.append(Entry(service: s, interfaceIndex: interfaceIndex, allAddresses: allAddresses, stored: now, watchers: watchers))
        entries[key] = list
        trim()
    }

    /// The service is gone (a browse reported it removed, or resolving it failed): on
    /// `interfaceIndex` and `proto` ("ipv4"/"ipv6"), or everywhere when they are nil.
    mutating func remove(name: String, type: String, domain: String?, interfaceIndex: Int32? = nil, proto: String? = nil) {
        let key = Key(name: name, type: type, domain: domain)
        guard var list = entries[key] else { return }
        list.removeAll { e in
            (interfaceIndex == nil || e.interfaceIndex == interfaceIndex) && (proto == nil || e.service.proto == proto)
        }
        entries[key] = list.isEmpty ? nil : list
    }

    /// A browse stopped (or was interrupted): its entries are no longer watched.
    mutating func browseEnded(_ browseID: String) {
        for (key, list) in entries where list.contains(where: { $0.watchers.contains(browseID) }) {
            entries[key] = list.map { e in
                var e = e
                e.watchers.remove(browseID)
                return e
            }
        }
    }

    /// Forgets everything (avahi-daemon went away, or re-registers its host name).
    mutating func removeAll() { entries = [:] }

    private mutating func trim() {
        var n = count
        guard n > capacity else { return }
        // Oldest first, until within capacity.
        let all = entries.flatMap { k, list in list.map { (k, $0.stored, $0.interfaceIndex, $0.service.proto) } }
            .sorted { $0.1 < $1.1 }
        for (key, stored, iface, proto) in all where n > capacity {
            entries[key]?.removeAll { $0.stored == stored && $0.interfaceIndex == iface && $0.service.proto == proto }
            if entries[key]?.isEmpty == true { entries[key] = nil }
            n -= 1
        }
    }
}
