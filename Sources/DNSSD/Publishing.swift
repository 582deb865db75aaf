internal import CAvahi
@preconcurrency import Dispatch
import FoundationEssentials

/// One publication: what was asked for, and its Avahi entry group while registered.
/// Touched only on the client's queue.
final class Publication {
    let id: String
    let order: Int
    var spec: ServiceSpec
    var name: String
    var state: PublicationState = .registering
    var error: String?
    var renames = 0
    var group: COwned?
    var republishing = false
    /// Callers waiting for the outcome of `publish`.
    var waiters: [(Result<PublicationInfo, DNSSDError>) -> Void] = []

    init(id: String, order: Int, spec: ServiceSpec, name: String) {
        self.id = id
        self.order = order
        self.spec = spec
        self.name = name
    }

    var info: PublicationInfo {
        PublicationInfo(id: id, spec: spec, name: name, state: state, error: error, renames: renames)
    }

    func answer(_ r: Result<PublicationInfo, DNSSDError>) {
        let w = waiters
        waiters = []
        for f in w { f(r) }
    }
}

/// An `AvahiStringList` built from a TXT record; freed by its owner.
func makeStringList(_ txt: TXTRecord) -> UnsafeMutablePointer<AvahiStringList>? {
    var list: UnsafeMutablePointer<AvahiStringList>?
    // avahi_string_list_add_arbitrary prepends: add the last entry first.
    for e in txt.entries.reversed() {
        list = e.withUnsafeBufferPointer { libavahi.avahi_string_list_add_arbitrary(list, $0.baseAddress, $0.count) }
    }
    return list
}

/// The entries of an `AvahiStringList`, in list order.
func readStringList(_ list: UnsafeMutablePointer<AvahiStringList>?) -> TXTRecord {
    var entries: [[UInt8]] = []
    var l = list
    while let node = l {
        let size = libavahi.avahi_string_list_get_size(node)
        if let text = libavahi.avahi_string_list_get_text(node) {
            entries.append(Array(UnsafeBufferPointer(start: text, count: size)))
        }
        l = libavahi.avahi_string_list_get_next(node)
    }
    return (try? TXTRecord(bytes: entries)) ?? TXTRecord(wireFormat: entries.flatMap { [UInt8(min($0.count, 255))] + $0.prefix(255) }) ?? TXTRecord()
}

extension DNSSDClient {
    /// Publishes `spec`. Waits up to `wait` seconds for Avahi to establish it (or to rename it
    /// after a collision and establish that); after that returns it as it stands. Fails at
    /// once when avahi-daemon is not running; on any error nothing stays published.
    public func publish(_ spec: ServiceSpec, wait: Double = 5) async throws(DNSSDError) -> PublicationInfo {
        try await onQueueAwaiting { [self] done in
            guard running, client != nil else { return done(.failure(unavailableError())) }
            let id = newID("p")
            let name = names.name(for: spec.name, type: spec.type.description, domain: spec.domain)
            let p = Publication(id: id, order: nextID, spec: spec, name: name)
            publications[id] = p
            if let e = register(p) {
                publications[id] = nil
                return done(.failure(e))
            }
            if p.state == .established { return done(.success(p.info)) }
            p.waiters.append(done)
            queue.asyncAfter(deadline: .now() + wait) { [weak self] in
                guard let p = self?.publications[id] else { return }
                p.answer(.success(p.info))
            }
        }
    }

    /// Withdraws a publication.
    public func unpublish(_ id: String) async throws(DNSSDError) -> PublicationInfo {
        try await onQueue { [self] in
            guard let p = publications.removeValue(forKey: id) else { return .failure(.notFound(kind: "publication", id: id)) }
            dropGroup(p, free: true, state: p.state)
            // A resolve of it must not be answered from the cache any more.
            resolveCache.withLock { $0.remove(name: p.name, type: p.spec.type.description, domain: p.spec.domain) }
            p.answer(.failure(.notFound(kind: "publication", id: id)))
            onEvent(.unpublished(p.info))
            return .success(p.info)
        }
    }

    /// Replaces a publication's TXT record (live, without withdrawing the service).
    public func updateTXT(_ id: String, _ txt: TXTRecord) async throws(DNSSDError) -> PublicationInfo {
        try await onQueue { [self] in
            guard let p = publications[id] else { return .failure(.notFound(kind: "publication", id: id)) }
            if let g = p.group {
                guard running else { return .failure(unavailableError()) }
                let list = makeStringList(txt)
                defer { libavahi.avahi_string_list_free(list) }
                let r = libavahi.avahi_entry_group_update_service_txt_strlst(
                    g.pointer, p.spec.interfaceIndex ?? Int32(AVAHI_IF_UNSPEC), Int32(AVAHI_PROTO_UNSPEC), AvahiPublishFlags(0),
                    p.name, p.spec.type.description, p.spec.domain, list)
                if r < 0 { return .failure(.avahi(operation: "update the TXT record", code: r, message: Self.message(r))) }
            }
            // Without a group (avahi-daemon away) the new record is used when it is published again.
            p.spec.txt = txt
            resolveCache.withLock { $0.remove(name: p.name, type: p.spec.type.description, domain: p.spec.domain) }
            return .success(p.info)
        }
    }

    /// Every publication, oldest first.
    public func publicationList() async -> [PublicationInfo] {
        (try? await onQueue { [self] in .success(publications.values.sorted { $0.order < $1.order }.map(\.info)) }) ?? []
    }

    /// Adds `p` to a new entry group and commits it; on failure frees the group (nothing
    /// half-published) and returns the error. On the queue, while running.
    func register(_ p: Publication) -> DNSSDError? {
        guard let c = client else { return unavailableError() }
        let box = CallbackBox(.group, id: p.id, owner: self).retained()
        guard let g = libavahi.avahi_entry_group_new(c.pointer, { g, state, userdata in
            let box = CallbackBox.from(userdata)
            box.owner?.groupChanged(box.id, g!, state)
        }, box) else {
            CallbackBox.release(box)
            return avahiError("create an entry group")
        }
        p.group = COwned(pointer: g, box: box)
        p.state = .registering
        p.error = nil
        if let e = fill(p, g) {
            dropGroup(p, free: true, state: .failed)
            return e
        }
        return nil
    }

    /// Adds the service and its subtypes to `g` under `p.name` (choosing another name while
    /// Avahi reports a local collision) and commits.
    private func fill(_ p: Publication, _ g: OpaquePointer) -> DNSSDError? {
        let list = makeStringList(p.spec.txt)
        defer { libavahi.avahi_string_list_free(list) }
        let iface = p.spec.interfaceIndex ?? Int32(AVAHI_IF_UNSPEC)
        let type = p.spec.type.description
        var r: Int32 = 0
        for _ in 0..<20 {
            r = libavahi.avahi_entry_group_add_service_strlst(g, iface, Int32(AVAHI_PROTO_UNSPEC), AvahiPublishFlags(0),
                                                     p.name, type, p.spec.domain, nil, p.spec.port, list)
            guard r == Int32(AVAHI_ERR_COLLISION) else { break }
            // Another publisher on this host holds the name: take Avahi's alternative.
            rename(p, collision: "local")
        }
        if r < 0 { return .avahi(operation: "add the service \"\(p.name)\"", code: r, message: Self.message(r)) }
        for sub in p.spec.subtypes {
            let r = libavahi.avahi_entry_group_add_service_subtype(g, iface, Int32(AVAHI_PROTO_UNSPEC), AvahiPublishFlags(0),
                                                          p.name, type, p.spec.domain, sub)
            if r < 0 { return .avahi(operation: "add the subtype \(sub)", code: r, message: Self.message(r)) }
        }
        let cr = libavahi.avahi_entry_group_commit(g)
        if cr < 0 { return .avahi(operation: "commit the service \"\(p.name)\"", code: cr, message: Self.message(cr)) }
        return nil
    }

    /// Moves `p` to Avahi's alternative name ("Name #2"), remembers it and reports it.
    /// `collision` says where the name was taken ("local": by another client of the same
    /// avahi-daemon, when adding; "network": by another host, while probing), for the log.
    private func rename(_ p: Publication, collision: String) {
        let old = p.name
        guard let alt = libavahi.avahi_alternative_service_name(old) else { return }
        p.name = String(cString: alt)
        libavahi.avahi_free(alt)
        p.renames += 1
        if let e = names.record(requested: p.spec.name, type: p.spec.type.description, domain: p.spec.domain, chosen: p.name) {
            // Published under it all the same; only a restart would go back to the old name.
            logger.warning("cannot save the chosen service name", ["path": names.path ?? "-", "dnssd.name": p.name, "error": e])
        }
        logger.notice("service name collision; renamed",
                      ["dnssd.id": p.id, "dnssd.old": old, "dnssd.name": p.name, "dnssd.collision": collision])
        onEvent(.renamed(p.info, from: old))
    }

    /// An entry group's state changed. On the queue (inside an Avahi call).
    private func groupChanged(_ id: String, _ g: OpaquePointer, _ state: AvahiEntryGroupState) {
        guard let p = publications[id], p.group?.pointer == g || p.group == nil else { return }
        switch state {
        case AVAHI_ENTRY_GROUP_ESTABLISHED:
            p.state = .established
            logger.info("service published", ["dnssd.id": p.id, "dnssd.name": p.name, "dnssd.type": p.spec.type.description])
            onEvent(.published(p.info, again: p.republishing))
            p.republishing = false
            p.answer(.success(p.info))
        case AVAHI_ENTRY_GROUP_COLLISION:
            // Someone on the network has the name: pick the alternative and publish again.
            rename(p, collision: "network")
            _ = libavahi.avahi_entry_group_reset(g)
            if let e = fill(p, g) {
                // Freed, as when a first publication fails (docs/dnssd.md): a publication that
                // keeps its group is skipped when avahi-daemon comes back (`restoreAll`), and
                // this one would never be tried again. After this callback returns: Avahi is
                // inside a call on this group now.
                p.state = .failed
                p.error = e.description
                let failedGroup = UInt(bitPattern: g)  // (compared, never used, on the queue)
                queue.async { [weak self] in
                    guard let self, let p = self.publications[id], let now = p.group, UInt(bitPattern: now.pointer) == failedGroup else { return }
                    self.dropGroup(p, free: true, state: .failed)
                }
                onEvent(.publishFailed(p.info, error: e.description))
                p.answer(.failure(e))
            }
        case AVAHI_ENTRY_GROUP_FAILURE:
            let code = libavahi.avahi_client_errno(libavahi.avahi_entry_group_get_client(g))
            p.state = .failed
            p.error = Self.message(code)
            logger.warning("publication failed", ["dnssd.id": p.id, "error": p.error ?? ""])
            onEvent(.publishFailed(p.info, error: p.error ?? ""))
            p.answer(.failure(.avahi(operation: "publish \"\(p.name)\"", code: code, message: Self.message(code))))
        case AVAHI_ENTRY_GROUP_REGISTERING, AVAHI_ENTRY_GROUP_UNCOMMITED:
            if p.state != .failed { p.state = .registering }
        default:
            break
        }
    }

    /// Forgets `p`'s entry group, freeing it when `free` (false: `avahi_client_free` does).
    func dropGroup(_ p: Publication, free: Bool, state: PublicationState) {
        if let g = p.group {
            if free { _ = libavahi.avahi_entry_group_free(g.pointer) }
            CallbackBox.release(g.box)
            p.group = nil
        }
        p.state = state
    }
}
