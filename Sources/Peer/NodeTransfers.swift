// Linux Dispatch has no Sendable annotations; its queues are thread-safe.
@preconcurrency import Dispatch
import FoundationEssentials
import Logging
import Session
import Synchronization
import SystemKit
import TLS

/// A node's resources across its connections: numbers them for users, applies the
/// `accept_resources` policy to offers, turns the connections' transfer events into
/// `ResourceEvent`s with rates, and offers an interrupted outgoing resource again when its
/// peer's next session comes up (the receiver answers with what it has verified). Outgoing
/// transfers are kept in a journal (`outgoing.json`, written atomically) so a restarted
/// daemon offers them again too.
final class NodeTransfers: Sendable {
    /// How long an offer waits for a client's answer (policy `ask`) before it is declined
    /// with `timeout`.
    static let answerTimeout: Duration = .seconds(30)

    private struct Key: Hashable {
        let connection: UInt64
        let resource: UInt32
    }

    private struct Record {
        var transfer: ResourceTransfer
        /// Where it runs now: nil for an outgoing one waiting for its peer's next session.
        var key: Key?
        /// The file, for an outgoing one (shared by every peer it goes to); nil for one read
        /// back from the journal until its peer is back (then it is opened again, and hashed again
        /// unless `hashes` knows it unchanged).
        var file: OutgoingFile?
        /// The file's path, for an outgoing one.
        var path: String?
        /// What identified the file's content when it was hashed, when that may be trusted
        /// (`OutgoingFile.identity`): kept in the journal, so a restarted daemon takes the hash
        /// from `hashes` instead of reading the file again.
        var identity: FileIdentity?
        /// Being opened again after a restart.
        var reopening = false
        /// An offer of it is being made (the check and the binding of its id are apart).
        var offering = false
        /// A client cancelled it while its offer was being made, or with its connection
        /// ending: that offer, or that end, ends it (not parked for the next session).
        var cancelled = false
        var startedAt: ContinuousClock.Instant?
        /// A client is asked (policy `ask`).
        var asked = false
        /// The free space is being checked before a client is asked (`ask`). An end meanwhile
        /// is reported as any refused offer's is (an end without an offer before it).
        var checking = false
    }

    private struct State {
        var nextID: UInt64 = 1
        var records: [UInt64: Record] = [:]
        var byKey: [Key: UInt64] = [:]
        var connections: [UInt64: PeerConnection] = [:]
        /// Outbox copies being written or not yet offered: kept by `tidyCopies`.
        var pendingCopies: Set<String> = []
    }

    private let state = Mutex(State())
    /// Held from the snapshot to the write of the journal, so writes land in order.
    private let saving = Mutex(())
    private let inbox: Inbox?
    private let policy: ResourcePolicy
    private let isTrusted: @Sendable (PeerID) -> Bool
    private let sessionSource = Mutex<(@Sendable (PeerID) -> PeerConnection?)?>(nil)
    private let emit: @Sendable (ResourceEvent) -> Void
    private let logger: Logger
    private let journal: String?
    private let outbox: Outbox?
    /// Whether a file may be offered (the node's `mayOffer`), asked again when a transfer
    /// read back from the journal is opened again.
    private let mayOffer: @Sendable (String) -> Bool
    private let beforeReopening: (@Sendable () -> Void)?
    /// The hashes of files offered, for offering them again without reading them through.
    let hashes: FileHashes

    /// `journal`: where outgoing transfers are kept across restarts (nil: in memory only);
    /// those it holds are read back now, waiting for their peers. `outbox`: where bytes
    /// passed as descriptors are copied (nil: such sends are refused); copies no transfer
    /// refers to any more are removed now and whenever a transfer ends. `hashes`: where the
    /// hashes of offered files are remembered (seeded from the journal now).
    init(inbox: Inbox?, policy: ResourcePolicy, journal: String?, outbox: Outbox?, hashes: FileHashes, logger: Logger,
         mayOffer: @escaping @Sendable (String) -> Bool = { _ in true }, beforeReopening: (@Sendable () -> Void)? = nil,
         isTrusted: @escaping @Sendable (PeerID) -> Bool, emit: @escaping @Sendable (ResourceEvent) -> Void) {
        self.inbox = inbox
        self.mayOffer = mayOffer
        self.beforeReopening = beforeReopening
        self.policy = policy
        self.journal = journal
        self.outbox = outbox
        self.hashes = hashes
        self.logger = logger
        self.isTrusted = isTrusted
        self.emit = emit
        let restored = Self.load(journal, logger)
        state.withLock { s in
            for (t, path, identity) in restored {
                s.records[t.id] = Record(transfer: t, path: path, identity: identity)
                s.nextID = max(s.nextID, t.id + 1)
            }
        }
        for (t, _, identity) in restored {
            if let identity { hashes.remember(identity, sha256: t.sha256) }
        }
        if !restored.isEmpty { logger.notice("outgoing transfers waiting for their peers", ["count": "\(restored.count)"]) }
        tidyCopies()
    }

    /// Where a peer's session is found now (the node's table, set once by the node).
    func setSessionSource(_ source: @escaping @Sendable (PeerID) -> PeerConnection?) {
        sessionSource.withLock { $0 = source }
    }

    private func session(_ peer: PeerID) -> PeerConnection? { sessionSource.withLock { $0 }?(peer) }

    /// Every transfer in progress or waiting, by number.
    var all: [ResourceTransfer] { state.withLock { s in s.records.keys.sorted().compactMap { s.records[$0]?.transfer } } }

    // MARK: Commands

    /// A path for a new outbox copy, kept from cleanup until `send` offers it or
    /// `discardCopy` gives it up.
    func reserveCopy() throws(PeerError) -> (Outbox, String) {
        guard let outbox else { throw .invalid("descriptor", "this node keeps no copies (no outbox directory): send a path") }
        let path = outbox.newPath()
        state.withLock { _ = $0.pendingCopies.insert(path) }
        return (outbox, path)
    }

    /// Gives up a reserved copy (it could not be written or offered): removed.
    func discardCopy(_ path: String) {
        state.withLock { _ = $0.pendingCopies.remove(path) }
        tidyCopies()
    }

    /// Offers `file` as `name` to each peer on its session: one transfer each.
    func send(_ file: OutgoingFile, name: String, to peers: [(PeerID, PeerConnection)]) -> [ResourceTransfer] {
        var made: [ResourceTransfer] = []
        for (peer, c) in peers {
            let id = state.withLock { s -> UInt64 in
                defer { s.nextID += 1 }
                let t = ResourceTransfer(id: s.nextID, peer: peer, outgoing: true, name: name, size: file.size,
                                         sha256: file.sha256, mediaType: file.mediaType)
                s.records[s.nextID] = Record(transfer: t, file: file, path: file.path, identity: file.identity)
                return s.nextID
            }
            save()
            offer(id, on: c)
            if let t = state.withLock({ $0.records[id]?.transfer }) { made.append(t) }
        }
        // A copy is now kept by its transfers' records (or, with none made, removed).
        if state.withLock({ $0.pendingCopies.remove(file.path) }) != nil { tidyCopies() }
        return made
    }

    /// Offers the outgoing transfer `id` on connection `c` (its first offer, or again after
    /// an interruption).
    private func offer(_ id: UInt64, on c: PeerConnection) {
        // The record is bound before the offer goes, so the peer's answer finds it.
        let (file, reopen) = state.withLock { s -> (OutgoingFile?, Bool) in
            guard let r = s.records[id], r.key == nil, !r.reopening, !r.offering else { return (nil, false) }
            if r.file == nil { s.records[id]?.reopening = true } else { s.records[id]?.offering = true }
            return (r.file, r.file == nil)
        }
        if reopen {
            // Hashing takes a while: off the connection's queue.
            return DispatchQueue.global().async { self.reopen(id, then: c) }
        }
        guard let file, let name = state.withLock({ $0.records[id]?.transfer.name }) else { return }
        let resource = c.offerResource(file, name: name) { rid in
            self.state.withLock { s in
                let key = Key(connection: c.id, resource: rid)
                s.records[id]?.key = key
                s.byKey[key] = id
                s.connections[c.id] = c
            }
        }
        let (cancelled, peer) = state.withLock { s -> (Bool, PeerID?) in
            s.records[id]?.offering = false
            return (s.records[id]?.cancelled == true, s.records[id]?.transfer.peer)
        }
        if cancelled {
            // Cancelled while the offer was made: the peer hears the cancel (its end reports
            // it), or, not offered, it ends here.
            if let resource { return c.cancelResource(resource, reason: .cancelled, detail: "cancelled by a client") }
            return endWaiting(id, reason: .cancelled, detail: "cancelled while waiting for the peer")
        }
        guard resource == nil else { return }
        // The session this was meant for ended while the file was opened (hashed, copied),
        // and the peer may be back already (its `sessionUp` found no record yet).
        if let peer, let next = session(peer), next.id != c.id { return offer(id, on: next) }
        logger.info("a resource waits for its peer's session", ["resource": "\(id)"])
    }

    /// Ends transfer `id`, waiting for its peer's session (not offered on any), with `reason`.
    private func endWaiting(_ id: UInt64, reason: Reason, detail: String) {
        guard let r = state.withLock({ s -> Record? in
            guard let r = s.records[id], r.key == nil else { return nil }
            s.records[id] = nil
            return r
        }) else { return }
        save()
        emit(.ended(r.transfer, reason: reason, detail: detail, byPeer: false))
    }

    /// Opens again the file of a transfer read back from the journal (hashed again unless
    /// `hashes` knows it unchanged since it was offered), then offers
    /// it on `c`. A file that cannot be read ends the transfer (`io-error`); one whose content
    /// changed ends it (`source-changed`) and is sent again from the start as a new transfer.
    private func reopen(_ id: UInt64, then c: PeerConnection) {
        guard let r = state.withLock({ $0.records[id] }), let path = r.path else { return }
        let t = r.transfer
        // The file the path names now is checked as a new send's would be (it may have been
        // replaced by a link since, into the daemon's own files); a copy of passed bytes is
        // ours, in the outbox.
        let ownCopy = outbox.map { FileSystem.isInside(path, $0.directory) } ?? false
        let outboxDirectory = outbox.map { FileSystem.resolved($0.directory) ?? $0.directory }
        let mayOffer = self.mayOffer
        beforeReopening?()
        let file: OutgoingFile
        do {
            file = try OutgoingFile(path: path, name: t.name, mediaType: t.mediaType, hashes: hashes, mayOffer: { opened in
                if ownCopy, let outboxDirectory { return FileSystem.isInside(opened, outboxDirectory) }
                return mayOffer(opened)
            })
        } catch {
            // (Cancelled while the file was read: that ended it.)
            guard state.withLock({ s -> Bool in
                guard s.records[id]?.reopening == true else { return false }
                s.records[id] = nil
                return true
            }) else { return }
            save()
            return emit(.ended(t, reason: .ioError, detail: "cannot read \(path) to resume: \(error)", byPeer: false))
        }
        guard file.sha256 == t.sha256, file.size == t.size else {
            guard let again = state.withLock({ s -> UInt64? in
                guard s.records[id]?.reopening == true else { return nil }
                s.records[id] = nil
                defer { s.nextID += 1 }
                let n = ResourceTransfer(id: s.nextID, peer: t.peer, outgoing: true, name: t.name, size: file.size,
                                         sha256: file.sha256, mediaType: file.mediaType)
                s.records[s.nextID] = Record(transfer: n, file: file, path: path, identity: file.identity)
                return s.nextID
            }) else { return }
            save()
            emit(.ended(t, reason: .sourceChanged,
                        detail: "\(path) changed since it was offered: it is sent again from the start as transfer \(again)", byPeer: false))
            return offer(again, on: session(t.peer) ?? c)
        }
        guard state.withLock({ s -> Bool in
            guard s.records[id]?.reopening == true else { return false }
            s.records[id]?.file = file
            s.records[id]?.identity = file.identity
            s.records[id]?.reopening = false
            return true
        }) else { return }
        // The session it was opened for may have dropped while hashing: the peer's current one.
        offer(id, on: session(t.peer) ?? c)
    }

    /// Answers an offer a client was asked about.
    func answer(_ id: UInt64, accept: Bool) throws(PeerError) {
        let (key, c) = try state.withLock { s throws(PeerError) -> (Key, PeerConnection?) in
            guard let r = s.records[id], !r.transfer.outgoing, let key = r.key else { throw .notFound("resource offer", "\(id)") }
            guard r.asked, !r.transfer.started else { throw .invalid("resource", "transfer \(id) is not waiting for an answer") }
            s.records[id]?.asked = false
            return (key, s.connections[key.connection])
        }
        guard let c else { throw .notConnected("of resource \(id)") }
        if accept, let inbox { c.acceptResource(key.resource, into: inbox) } else {
            c.declineResource(key.resource, reason: .declined, detail: "declined by a client")
        }
    }

    /// Cancels transfer `id`, either way: both sides hear `cancelled`.
    func cancel(_ id: UInt64) throws(PeerError) {
        let (key, c, waiting) = try state.withLock { s throws(PeerError) -> (Key?, PeerConnection?, Record?) in
            guard let r = s.records[id] else { throw .notFound("resource transfer", "\(id)") }
            // Its offer being made: that ends it once made (`offer`).
            if r.offering {
                s.records[id]?.cancelled = true
                return (nil, nil, nil)
            }
            guard let key = r.key else {
                s.records[id] = nil
                return (nil, nil, r)
            }
            // Its connection may be ending (the cancel below then changes nothing): its
            // interruption ends it instead of parking it for the next session.
            s.records[id]?.cancelled = true
            return (key, s.connections[key.connection], nil)
        }
        if let waiting {
            save()
            emit(.ended(waiting.transfer, reason: .cancelled, detail: "cancelled while waiting for the peer", byPeer: false))
        } else if let key, let c {
            // (A DONE that comes just after this look makes the cancel as late, and harmless.)
            if c.isSaving(key.resource) { throw .invalid("transfer", "\(id) arrived whole and is being saved: too late to cancel") }
            c.cancelResource(key.resource, reason: .cancelled, detail: "cancelled by a client")
        }
    }

    /// The session with `peer` is up on `c`: outgoing transfers waiting for it are offered
    /// again.
    func sessionUp(_ peer: PeerID, _ c: PeerConnection) {
        let waiting = state.withLock { s in
            s.records.filter { $0.value.transfer.peer == peer && $0.value.transfer.outgoing && $0.value.key == nil }.keys.sorted()
        }
        for id in waiting { offer(id, on: c) }
    }

    // MARK: Events from connections

    /// What connection `c` reports about its resources (on its queue, in order).
    func handle(_ c: PeerConnection, _ e: TransferEvent) {
        switch e {
        case .offered(let offer): offered(offer, on: c)
        case .started(let rid, _, let offset):
            update(c, rid) { r in
                r.transfer.started = true
                r.transfer.offset = offset
                r.transfer.bytes = offset
                r.startedAt = .now
                return .started(r.transfer)
            }
        case .progress(let rid, _, let bytes):
            update(c, rid) { r in
                r.transfer.bytes = bytes
                return .progress(r.transfer, bytesPerSecond: Self.rate(r))
            }
        case .delivered(let rid):
            finish(c, rid) { r in
                r.transfer.bytes = r.transfer.size
                return .sent(r.transfer)
            }
        case .received(let rid, let file):
            finish(c, rid) { r in
                r.transfer.bytes = r.transfer.size
                return .received(r.transfer, file, image: Inbox.imageHeader(of: file.path))
            }
        case .ended(let rid, _, let reason, let detail, let byPeer, let bytes):
            finish(c, rid) { r in
                r.transfer.bytes = bytes
                // The receiver found other bytes than the hash offered: a remembered hash may
                // be what was wrong (a change its file's times did not show), and kept it would
                // fail every send of the file again.
                if reason == .hashMismatch, r.transfer.outgoing, let identity = r.identity { hashes.forget(identity) }
                return .ended(r.transfer, reason: reason, detail: detail, byPeer: byPeer)
            }
        case .interrupted(let rid, let outgoing, let bytes):
            interrupted(c, rid, outgoing: outgoing, bytes: bytes)
        case .streamOpened, .streamData, .streamFinished, .streamEnded:
            break  // the node's (`PeerNode.transferEvent`)
        }
    }

    private func offered(_ offer: ResourceOffer, on c: PeerConnection) {
        guard let peer = c.snapshot.hello?.peerID else { return }
        let key = Key(connection: c.id, resource: offer.resourceID)
        // Over the quota: refused before anyone is asked. No file system call here: this
        // may run on the epoll thread (a connection's reads run inline there while it has no
        // resources, so an offer arrives in one), which must not wait for a disk. The free
        // space is checked off it: by the accept (`Inbox.receive`), or before a client is
        // asked (below).
        var refusal: InboxError?
        do throws(InboxError) { try inbox?.checkQuota(offer) } catch { refusal = error }
        let trusted = isTrusted(peer)
        let answer: Bool? = switch policy {
        case _ where refusal != nil: false
        case _ where inbox == nil: false
        case .all: true
        case .none: false
        case .trusted where trusted: true
        case .trusted, .ask: nil
        }
        let t = state.withLock { s -> ResourceTransfer in
            defer { s.nextID += 1 }
            let t = ResourceTransfer(id: s.nextID, peer: peer, outgoing: false, name: offer.name, size: offer.size,
                                     sha256: offer.sha256, mediaType: offer.mediaType)
            s.records[s.nextID] = Record(transfer: t, key: key, checking: answer == nil)
            s.byKey[key] = s.nextID
            s.connections[c.id] = c
            return t
        }
        switch answer {
        case true?: if let inbox { c.acceptResource(offer.resourceID, into: inbox) }
        case false?:
            if let refusal { return c.declineResource(offer.resourceID, reason: refusal.reason, detail: refusal.description) }
            let why = inbox == nil ? "this node takes no resources (no inbox)" : "accept_resources is \(policy.rawValue)"
            c.declineResource(offer.resourceID, reason: .declined, detail: why)
        case nil:
            DispatchQueue.global().async { [self] in ask(t, offer, from: peer, on: c) }
        }
    }

    /// Asks the clients about the peer's offer `t` once the inbox's file system has room for
    /// it (the part it may resume counted); refuses it otherwise. Nothing more if it ended
    /// meanwhile. The answer is made on the connection's queue, where its end would be
    /// reported: the offer is never reported after its end.
    private func ask(_ t: ResourceTransfer, _ offer: ResourceOffer, from peer: PeerID, on c: PeerConnection) {
        var refusal: InboxError?
        do throws(InboxError) { try inbox?.check(offer, from: peer) } catch { refusal = error }
        c.queue.async { [self, refusal] in asked(t, offer, refusal, on: c) }
    }

    private func asked(_ t: ResourceTransfer, _ offer: ResourceOffer, _ refusal: InboxError?, on c: PeerConnection) {
        let live = state.withLock { s -> Bool in
            guard s.records[t.id]?.checking == true else { return false }
            s.records[t.id]?.checking = false
            s.records[t.id]?.asked = refusal == nil
            return true
        }
        guard live else { return }
        if let refusal { return c.declineResource(offer.resourceID, reason: refusal.reason, detail: refusal.description) }
        emit(.offered(t))
        DispatchQueue.global().asyncAfter(deadline: .now() + Self.answerTimeout.dispatchInterval) { [weak self] in
            self?.unanswered(t.id, c, offer.resourceID)
        }
    }

    private func unanswered(_ id: UInt64, _ c: PeerConnection, _ rid: UInt32) {
        let still = state.withLock { s -> Bool in
            guard let r = s.records[id], r.asked else { return false }
            s.records[id]?.asked = false
            return true
        }
        if still { c.declineResource(rid, reason: .timeout, detail: "no client answered within \(Self.answerTimeout)") }
    }

    private func update(_ c: PeerConnection, _ rid: UInt32, _ body: (inout Record) -> ResourceEvent) {
        let e = state.withLock { s -> ResourceEvent? in
            guard let id = s.byKey[Key(connection: c.id, resource: rid)], var r = s.records[id] else { return nil }
            let e = body(&r)
            s.records[id] = r
            return e
        }
        if let e { emit(e) }
    }

    private func finish(_ c: PeerConnection, _ rid: UInt32, _ body: (inout Record) -> ResourceEvent) {
        let (e, outgoing) = state.withLock { s -> (ResourceEvent?, Bool) in
            guard let id = s.byKey.removeValue(forKey: Key(connection: c.id, resource: rid)), var r = s.records.removeValue(forKey: id) else {
                return (nil, false)
            }
            forgetConnection(c.id, &s)
            return (body(&r), r.transfer.outgoing)
        }
        if outgoing { save() }
        if let e { emit(e) }
    }

    private func interrupted(_ c: PeerConnection, _ rid: UInt32, outgoing: Bool, bytes: UInt64) {
        let (t, again, cancelled) = state.withLock { s -> (ResourceTransfer?, PeerID?, Bool) in
            guard let id = s.byKey.removeValue(forKey: Key(connection: c.id, resource: rid)), var r = s.records[id] else { return (nil, nil, false) }
            defer { forgetConnection(c.id, &s) }
            r.transfer.bytes = bytes
            r.transfer.started = false
            r.transfer.offset = 0
            r.startedAt = nil
            // (An incoming one keeps its part for a resume, cancelled or not: interrupted.)
            guard outgoing, !r.cancelled else {
                s.records[id] = nil
                return (r.transfer, nil, outgoing)
            }
            r.key = nil
            s.records[id] = r
            return (r.transfer, r.transfer.peer, false)
        }
        guard let t else { return }
        if cancelled {
            save()
            return emit(.ended(t, reason: .cancelled, detail: "cancelled by a client as its session ended", byPeer: false))
        }
        emit(.interrupted(t))
        // The peer's next session may be up already (it came back before this was reported).
        if let peer = again, let next = session(peer), next.id != c.id { offer(t.id, on: next) }
    }

    // MARK: The journal

    /// Writes the outgoing transfers to the journal (atomically). A failure is logged: the
    /// transfers go on, only a restart would forget them.
    private func save() {
        if let journal { saving.withLock { _ in write(journal) } }
        tidyCopies()
    }

    /// Removes the outbox copies that no transfer (outgoing, waiting or running) refers to
    /// and that are not being written or offered.
    private func tidyCopies() {
        guard let outbox else { return }
        let keep = state.withLock { s in s.pendingCopies.union(s.records.values.compactMap { $0.transfer.outgoing ? $0.path : nil }) }
        let removed = outbox.removeAll(except: keep)
        if removed > 0 { logger.debug("removed outbox copies no transfer needs", ["count": "\(removed)"]) }
    }

    private func write(_ journal: String) {
        let list = state.withLock { s in
            s.records.keys.sorted().compactMap { id -> JournalEntry? in
                guard let r = s.records[id], r.transfer.outgoing, let path = r.path else { return nil }
                let t = r.transfer
                return JournalEntry(id: t.id, peer: t.peer.hex, path: path, name: t.name, media_type: t.mediaType,
                                    size: t.size, sha256: Fingerprint.hexString(t.sha256), file: r.identity)
            }
        }
        do {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            let data = try encoder.encode(Journal(transfers: list.map { JournalSlot(entry: $0) }))
            try AtomicFile.write(Array(data), to: journal, mode: 0o600)
        } catch {
            logger.error("cannot save the outgoing transfers", ["path": journal, "error": "\(error)"])
        }
    }

    /// The journal's transfers; an unreadable journal is logged and set aside (renamed
    /// `.bad`), never a reason not to start.
    private static func load(_ journal: String?, _ logger: Logger) -> [(ResourceTransfer, String, FileIdentity?)] {
        guard let journal else { return [] }
        let bytes: [UInt8]
        do {
            guard let b = try AtomicFile.readIfPresent(journal, maximumSize: 16 << 20) else { return [] }
            bytes = b
        } catch {
            logger.error("cannot read the outgoing transfers", ["path": journal, "error": "\(error)"])
            return []
        }
        var out: [(ResourceTransfer, String, FileIdentity?)] = []
        guard let list = try? JSONDecoder().decode(Journal.self, from: Data(bytes)).transfers else {
            logger.error("the outgoing transfers file is not valid; set aside", ["path": journal])
            _ = try? FileSystem.moveWithoutReplacing(journal, to: journal + ".bad")
            return []
        }
        for (i, slot) in list.enumerated() {
            guard let e = slot.entry, e.id > 0, let peer = PeerID(hex: e.peer),
                  let sha = Fingerprint.parse(e.sha256), sha.count == Fingerprint.length else {
                logger.error("an outgoing transfer in the file is not valid; skipped", ["path": journal, "index": "\(i)"])
                continue
            }
            // An identity of another size is not this content's: not trusted.
            let identity = e.file?.size == e.size ? e.file : nil
            out.append((ResourceTransfer(id: e.id, peer: peer, outgoing: true, name: e.name, size: e.size, sha256: sha, mediaType: e.media_type),
                        e.path, identity))
        }
        return out
    }

    private func forgetConnection(_ id: UInt64, _ s: inout State) {
        if !s.byKey.keys.contains(where: { $0.connection == id }) { s.connections[id] = nil }
    }

    private static func rate(_ r: Record) -> Double {
        guard let at = r.startedAt else { return 0 }
        let elapsed = at.duration(to: .now)
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        // Saturating: a progress report may overtake its `started` on another thread.
        return seconds > 0 && r.transfer.bytes >= r.transfer.offset ? Double(r.transfer.bytes - r.transfer.offset) / seconds : 0
    }

}

/// The journal file: `{"transfers": [{"id", "peer", "path", "name", "media_type", "size", "sha256", "file"}]}`
/// (`file`, optional: the `FileIdentity` the hash belongs to).
private struct Journal: Codable {
    var transfers: [JournalSlot]
}

/// One outgoing transfer in the journal (keys as in the file).
private struct JournalEntry: Codable {
    var id: UInt64
    var peer: String
    var path: String
    var name: String
    var media_type: String
    var size: UInt64
    var sha256: String
    var file: FileIdentity?
}

/// An entry that does not decode is nil, skipped alone rather than failing the whole file.
private struct JournalSlot: Codable {
    var entry: JournalEntry?
    init(entry: JournalEntry) { self.entry = entry }
    init(from decoder: any Decoder) throws { entry = try? JournalEntry(from: decoder) }
    func encode(to encoder: any Encoder) throws { try entry.encode(to: encoder) }
}
