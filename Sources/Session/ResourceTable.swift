/// The resources of one connection, both ways, as a state machine without I/O: it checks
/// every RESOURCE_* frame from the peer against what was offered and accepted, and builds
/// the frames this side sends. The caller (the `Peer` module) owns the files, the hashing
/// and the sending of the bytes; it feeds each resource frame in (`received`) and acts on the
/// events, and asks for frames with the commands (`offer`, `accept`, …).
///
/// The transfer, as docs/peer-protocol.md gives it:
///
///     sender                          receiver
///     RESOURCE_OFFER id name size sha256 type  →
///                     ←  RESOURCE_ACCEPT id offset   (or RESOURCE_DECLINE id reason)
///     RESOURCE_DATA id bytes (from offset, in order)  →
///     RESOURCE_DONE id                →
///                     ←  RESOURCE_DONE id            (verified and saved)
///                     ←  RESOURCE_CANCEL id hash-mismatch (or any reason)
///
/// Either side may send RESOURCE_CANCEL until the end. A peer that breaks the rules for one
/// resource (data before an accept, more bytes than offered, DONE short of the size, an id
/// used twice, an id of the wrong side) loses that resource, with a `.violation` event and a
/// RESOURCE_CANCEL (`protocol-error`) to send; the session and its other resources go on.
/// Frames for a resource that has ended are ignored: they may have been in flight when it
/// ended (a cancel crossing data on the wire).
///
/// At most `maxInProgress` resources are in progress each way: an offer from the peer past
/// that is refused (RESOURCE_DECLINE `busy`), and this side's own offers past it are held
/// back, in order, until one of its resources ends (`releaseHeld`).
public struct ResourceTable: Sendable {
    /// One resource as the table knows it.
    public struct Transfer: Sendable, Hashable {
        /// What was offered.
        public let offer: ResourceOffer
        /// Whether this side sends it.
        public let outgoing: Bool
        /// Where it is.
        public fileprivate(set) var phase: Phase
        /// The offset the receiver asked for (0 until accepted).
        public fileprivate(set) var offset: UInt64 = 0
        /// The position of the next byte: received (incoming) or handed out to send (outgoing).
        public fileprivate(set) var position: UInt64 = 0
    }

    /// A resource's phase.
    public enum Phase: Sendable, Hashable {
        /// Offered, not yet answered.
        case offered
        /// Accepted: bytes flow from `offset`.
        case transferring
        /// The sender sent DONE: the receiver verifies, the sender waits for its answer.
        case verifying
    }

    /// What a frame from the peer means.
    public enum Event: Sendable, Hashable {
        /// The peer offers a resource: answer with `accept` or `decline`.
        case offered(ResourceOffer)
        /// The peer accepted our resource `id`: send from `offset`.
        case accepted(id: UInt32, offset: UInt64)
        /// The peer declined our resource.
        case declined(id: UInt32, reason: Reason)
        /// Bytes of an incoming resource, at `offset` in it (they follow the previous ones).
        case data(id: UInt32, offset: UInt64, bytes: [UInt8])
        /// The sender says every byte was sent: check the hash, then `verified` or `cancel`.
        case complete(id: UInt32)
        /// The peer verified and saved our resource.
        case delivered(id: UInt32)
        /// The peer cancelled a resource (either way).
        case cancelled(id: UInt32, reason: Reason)
        /// The peer broke the rules for this resource: it has ended; send `reply` (a
        /// RESOURCE_CANCEL with `protocol-error`) and drop what was received.
        case violation(id: UInt32, why: String, reply: Frame)
        /// The peer offered a resource while `maxInProgress` of its resources were in
        /// progress: send `reply` (RESOURCE_DECLINE `busy`); nothing else happens.
        case refused(id: UInt32, reply: Frame)
        /// A frame for a resource that has ended (in flight when it ended): nothing to do.
        case ignored(id: UInt32)
    }

    /// A command that does not fit the resource's state.
    public struct CommandError: Error, Sendable, Hashable, CustomStringConvertible {
        /// What is wrong.
        public let description: String
    }

    /// Resources in progress each way, at most (docs/peer-protocol.md, section 2): each one the
    /// peer sends holds a part file open and may hold its window of the connection's, so a
    /// peer offering without end would run this side out of descriptors. Every receiver takes
    /// at least this many at once; a sender keeps its offers past it back.
    public static let maxInProgress = 16

    /// The resources in progress, by id (this side's held-back offers are not among them: the
    /// peer has not heard of those).
    public private(set) var transfers: [UInt32: Transfer] = [:]
    /// This side's offers not sent yet (`maxInProgress` of its resources were in progress), in order.
    public private(set) var held: [ResourceOffer] = []
    /// Entries of `transfers` each way.
    private var outgoingCount = 0, incomingCount = 0
    /// Ids that have ended: a late frame for one is ignored, a new offer reusing one is
    /// refused (kept as runs: a few bytes however many resources a session carries).
    private(set) var ended = UsedIDs()
    private let role: Role
    private var nextID: UInt32

    /// The table of a connection this side dialled or accepted: ids this side allocates are
    /// odd for the dialer and even for the listener, so the two sides never collide.
    public init(role: Role) {
        self.role = role
        nextID = role == .dialer ? 1 : 2
    }

    // MARK: Commands

    /// Offers a resource; returns its id and the RESOURCE_OFFER to send, or no frame when
    /// `maxInProgress` of this side's resources are in progress: the offer is held back, and
    /// `releaseHeld` gives it once one of them ends.
    public mutating func offer(name: String, size: UInt64, sha256: [UInt8], mediaType: String) -> (id: UInt32, frame: Frame?) {
        let id = allocateID()
        let offer = ResourceOffer(resourceID: id, name: name, size: size, sha256: sha256, mediaType: mediaType)
        guard held.isEmpty, outgoingCount < Self.maxInProgress else {
            held.append(offer)
            return (id, nil)
        }
        start(offer)
        return (id, .resourceOffer(offer))
    }

    /// The held-back offers there is room for now, in order: their RESOURCE_OFFERs to send.
    public mutating func releaseHeld() -> [Frame] {
        var frames: [Frame] = []
        while !held.isEmpty, outgoingCount < Self.maxInProgress {
            let offer = held.removeFirst()
            start(offer)
            frames.append(.resourceOffer(offer))
        }
        return frames
    }

    /// Whether `id` is one of this side's offers held back (the peer has not heard of it).
    public func isHeld(_ id: UInt32) -> Bool { held.contains { $0.resourceID == id } }

    private mutating func start(_ offer: ResourceOffer) {
        transfers[offer.resourceID] = Transfer(offer: offer, outgoing: true, phase: .offered)
        outgoingCount += 1
    }

    /// An id of this side's for a stream (resources and streams share one id space): no
    /// resource frame may use it from now on.
    public mutating func reserveID() -> UInt32 {
        let id = allocateID()
        ended.insert(id)
        return id
    }

    /// Takes id `id` the peer chose for a stream (a STREAM_OPEN): nil when it may use it (no
    /// resource frame may use it from now on), else why not (wrong parity, used before).
    public mutating func claimPeerID(_ id: UInt32) -> String? {
        if let why = peerIDProblem(id) { return why }
        ended.insert(id)
        return nil
    }

    private mutating func allocateID() -> UInt32 {
        let id = nextID
        // 2^31 ids on one connection: wrap within the side's parity.
        nextID = nextID >= UInt32.max - 1 ? (role == .dialer ? 1 : 2) : nextID + 2
        return id
    }

    /// Why the peer may not use `id` for something new: it has this side's parity, or was
    /// used before; nil when it may.
    private func peerIDProblem(_ id: UInt32) -> String? {
        // The peer's ids have the other parity: odd ones are the dialer's.
        let peerIsDialer = role == .listener
        guard (id % 2 == 1) == peerIsDialer else {
            return "id \(id) belongs to this side (the \(peerIsDialer ? "dialer" : "listener") uses \(peerIsDialer ? "odd" : "even") ids)"
        }
        if transfers[id] != nil || ended.contains(id) { return "id \(id) reused" }
        return nil
    }

    /// Accepts the peer's resource from `offset` (0, or what an earlier transfer verified).
    public mutating func accept(_ id: UInt32, from offset: UInt64) throws(CommandError) -> Frame {
        let t = try incoming(id, in: .offered, "accept")
        guard offset <= t.offer.size else {
            throw CommandError(description: "offset \(offset) is past the end of resource \(id) (\(t.offer.size) bytes)")
        }
        transfers[id]?.phase = .transferring
        transfers[id]?.offset = offset
        transfers[id]?.position = offset
        return .resourceAccept(resourceID: id, offset: offset)
    }

    /// Declines the peer's offer.
    public mutating func decline(_ id: UInt32, reason: Reason) throws(CommandError) -> Frame {
        _ = try incoming(id, in: .offered, "decline")
        end(id)
        return .resourceDecline(resourceID: id, reason: reason)
    }

    /// Counts `count` bytes of our resource as handed to the sender; false when that would
    /// pass the offered size (the file grew: cancel with `source-changed`).
    public mutating func sending(_ id: UInt32, count: Int) -> Bool {
        guard let t = transfers[id], t.outgoing, t.phase == .transferring, t.position + UInt64(count) <= t.offer.size else { return false }
        transfers[id]?.position += UInt64(count)
        return true
    }

    /// Every byte of our resource was handed out: the RESOURCE_DONE to send after them.
    public mutating func finishSending(_ id: UInt32) throws(CommandError) -> Frame {
        guard let t = transfers[id], t.outgoing, t.phase == .transferring else {
            throw CommandError(description: "resource \(id) is not being sent")
        }
        guard t.position == t.offer.size else {
            throw CommandError(description: "resource \(id): \(t.position) of \(t.offer.size) bytes sent")
        }
        transfers[id]?.phase = .verifying
        return .resourceDone(resourceID: id)
    }

    /// The peer's resource was verified and saved: the RESOURCE_DONE that tells its sender.
    public mutating func verified(_ id: UInt32) throws(CommandError) -> Frame {
        _ = try incoming(id, in: .verifying, "confirm")
        end(id)
        return .resourceDone(resourceID: id)
    }

    /// Ends a resource from this side (the user cancelled, the hash did not match, the disk
    /// filled): the RESOURCE_CANCEL to send, or nil when it had already ended or was held
    /// back (`isHeld`: it ends without a word, since the peer never heard of it).
    public mutating func cancel(_ id: UInt32, reason: Reason) -> Frame? {
        if isHeld(id) {
            end(id)
            return nil
        }
        guard transfers[id] != nil else { return nil }
        end(id)
        return .resourceCancel(resourceID: id, reason: reason)
    }

    /// The connection ended: every resource in progress, for the caller to report (and, for
    /// incoming ones, keep for resuming).
    public mutating func connectionEnded() -> [Transfer] {
        for offer in held {
            start(offer)
        }
        held = []
        let all = transfers.keys.sorted().compactMap { transfers[$0] }
        for t in all { end(t.offer.resourceID) }
        return all
    }

    private func incoming(_ id: UInt32, in phase: Phase, _ what: String) throws(CommandError) -> Transfer {
        guard let t = transfers[id], !t.outgoing else { throw CommandError(description: "no incoming resource \(id) to \(what)") }
        guard t.phase == phase else { throw CommandError(description: "resource \(id) cannot be \(what)ed now (\(t.phase))") }
        return t
    }

    /// Ends resource `id`, in progress or held back.
    private mutating func end(_ id: UInt32) {
        if let t = transfers.removeValue(forKey: id) {
            if t.outgoing { outgoingCount -= 1 } else { incomingCount -= 1 }
        } else if let i = held.firstIndex(where: { $0.resourceID == id }) {
            held.remove(at: i)
        }
        ended.insert(id)
    }

    // MARK: Frames from the peer

    /// What a RESOURCE_* frame from the peer means. Other frames are not the table's: nil.
    public mutating func received(_ frame: Frame) -> Event? {
        switch frame {
        case .resourceOffer(let o): return offered(o)
        case .resourceAccept(let id, let offset):
            guard let t = live(id, outgoing: true, frame) else { return late(id, frame) }
            guard t.phase == .offered else { return violation(id, "RESOURCE_ACCEPT for resource \(id) that was already answered") }
            guard offset <= t.offer.size else {
                return violation(id, "RESOURCE_ACCEPT offset \(offset) is past the end of resource \(id) (\(t.offer.size) bytes)")
            }
            transfers[id]?.phase = .transferring
            transfers[id]?.offset = offset
            transfers[id]?.position = offset
            return .accepted(id: id, offset: offset)
        case .resourceDecline(let id, let reason):
            guard let t = live(id, outgoing: true, frame) else { return late(id, frame) }
            guard t.phase == .offered else { return violation(id, "RESOURCE_DECLINE for resource \(id) that was already accepted") }
            end(id)
            return .declined(id: id, reason: reason)
        case .resourceData(let id, let bytes):
            guard let t = live(id, outgoing: false, frame) else { return late(id, frame) }
            guard t.phase == .transferring else {
                return violation(id, "RESOURCE_DATA for resource \(id) \(t.phase == .offered ? "before it was accepted" : "after its RESOURCE_DONE")")
            }
            guard UInt64(bytes.count) <= t.offer.size - t.position else {
                return violation(id, "resource \(id) got more bytes than offered (\(t.offer.size))")
            }
            transfers[id]?.position += UInt64(bytes.count)
            return .data(id: id, offset: t.position, bytes: bytes)
        case .resourceDone(let id):
            guard let t = transfers[id] else { return late(id, frame) }
            if t.outgoing {
                guard t.phase == .verifying else { return violation(id, "RESOURCE_DONE for resource \(id) before it was all sent") }
                end(id)
                return .delivered(id: id)
            }
            guard t.phase == .transferring, t.position == t.offer.size else {
                return violation(id, "RESOURCE_DONE for resource \(id) after \(t.position) of \(t.offer.size) bytes")
            }
            transfers[id]?.phase = .verifying
            return .complete(id: id)
        case .resourceCancel(let id, let reason):
            guard transfers[id] != nil else { return late(id, frame) }
            end(id)
            return .cancelled(id: id, reason: reason)
        default:
            return nil
        }
    }

    private mutating func offered(_ o: ResourceOffer) -> Event {
        let id = o.resourceID
        // An id in progress: that resource is lost as well. One that has ended (a resource's
        // or a stream's), or of this side's parity: refused.
        if let why = peerIDProblem(id) { return violation(id, "resource \(why)", known: transfers[id] != nil || isHeld(id)) }
        guard incomingCount < Self.maxInProgress else {
            // Remembered like any id used (a late frame for it is ignored).
            ended.insert(id)
            return .refused(id: id, reply: .resourceDecline(resourceID: id, reason: .busy))
        }
        transfers[id] = Transfer(offer: o, outgoing: false, phase: .offered)
        incomingCount += 1
        return .offered(o)
    }

    /// The resource `id` in progress in the given direction, or nil.
    private func live(_ id: UInt32, outgoing: Bool, _ frame: Frame) -> Transfer? {
        guard let t = transfers[id], t.outgoing == outgoing else { return nil }
        return t
    }

    /// A frame for no resource in progress in its direction: late when the id has ended (or
    /// is ours and still running the other way), else the peer made it up.
    private mutating func late(_ id: UInt32, _ frame: Frame) -> Event {
        if ended.contains(id) { return .ignored(id: id) }
        // An answer to an offer not sent yet: the peer guessed its id. Like any lie about a
        // resource, it ends that one (the caller forgets it; held, it must not go later).
        if isHeld(id) { return violation(id, "\(frame.type) for resource \(id), which was not offered yet") }
        if transfers[id] != nil { return violation(id, "\(frame.type) for resource \(id) from the wrong side") }
        return violation(id, "\(frame.type) for resource \(id), which was never offered", known: false)
    }

    /// Ends resource `id` (when `known`: an id the peer made up is not remembered, so a
    /// flood of them costs no memory) and says what to send back.
    private mutating func violation(_ id: UInt32, _ why: String, known: Bool = true) -> Event {
        if known { end(id) }
        return .violation(id: id, why: why, reply: .resourceCancel(resourceID: id, reason: .protocolError))
    }
}
