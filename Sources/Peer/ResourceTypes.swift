import Session

/// Who takes resources from peers (config `accept_resources`): clients are asked (`ask`),
/// trusted peers' are taken and others asked (`trusted`), everyone's (`all`) or nobody's
/// (`none`). The same words as invitations' `AcceptPolicy`.
public typealias ResourcePolicy = AcceptPolicy

/// A resource being sent to or received from one peer, as the node reports it.
public struct ResourceTransfer: Sendable, Hashable {
    /// The node's number for it (`peer.cancel`, `peer.accept-resource` name it); a resource
    /// sent to three peers is three transfers. It stays the same when an interrupted
    /// transfer is offered again on the next session.
    public let id: UInt64
    /// The other side.
    public let peer: PeerID
    /// Whether this side sends it.
    public let outgoing: Bool
    /// The name offered (a peer's is untrusted text: the inbox uses a sanitised one).
    public let name: String
    /// Its size in bytes.
    public let size: UInt64
    /// Its SHA-256.
    public let sha256: [UInt8]
    /// Its media type as offered.
    public let mediaType: String
    /// Bytes moved so far (from the start of the resource, what a resume skipped included).
    public internal(set) var bytes: UInt64 = 0
    /// Where this session's bytes started (non-zero: resumed).
    public internal(set) var offset: UInt64 = 0
    /// Whether bytes flow (false: offered, or waiting for the peer to come back).
    public internal(set) var started = false
}

/// What happens to resources, in order per peer.
public enum ResourceEvent: Sendable {
    /// A peer offers a resource and a client must answer (`accept_resources = ask`, or
    /// `trusted` and the peer is not).
    case offered(ResourceTransfer)
    /// Bytes started to flow (from `offset`: a resume when it is not 0).
    case started(ResourceTransfer)
    /// Progress, about four times a second: bytes and the rate in bytes a second since it
    /// started.
    case progress(ResourceTransfer, bytesPerSecond: Double)
    /// Our resource arrived whole at the peer, which verified and saved it.
    case sent(ResourceTransfer)
    /// A peer's resource is saved in the inbox, verified; `image` when it is a PNG or JPEG.
    case received(ResourceTransfer, ReceivedFile, image: ImageHeader?)
    /// The transfer ended without arriving (declined, cancelled by either side, a lie, a
    /// full disk, a changed source): the reason both sides see.
    case ended(ResourceTransfer, reason: Reason, detail: String, byPeer: Bool)
    /// The session ended mid-way: an outgoing transfer is offered again when the peer is
    /// back (trusted peers come back by themselves); the receiver keeps what it verified.
    case interrupted(ResourceTransfer)
}

/// Where the bytes of a resource this side offers come from.
public enum ResourceSource: Sendable {
    /// A file the node opens by its absolute path.
    case path(String)
    /// A descriptor a client passed (the node owns it from now on and closes it): a pipe, a
    /// socket or an open file; `path`, when the client gave one, is where the file is (read
    /// there when this node may open it, and the name offered when none is given); `size`,
    /// when the client knows it, is checked against what the descriptor gives.
    case descriptor(Int32, path: String?, size: UInt64? = nil)
}
