import Session
import SystemKit

/// Who answers invitations (config `accept`): clients are asked (`ask`), trusted peers are
/// accepted and others asked (`trusted`), everyone is accepted (`all`) or nobody (`none`).
public enum AcceptPolicy: String, Sendable, CaseIterable {
    case ask, trusted, all, none
}

/// A node's settings.
public struct PeerNodeConfig: Sendable {
    /// The name peers see (at most 63 bytes of UTF-8).
    public var displayName: String
    /// MultipeerConnectivity's encryption preference: required (default), optional, none.
    public var encryption: EncryptionPreference = .required
    /// The TCP port to listen on (0: one the kernel picks).
    public var port: UInt16 = 0
    /// Listen on loopback only (tests).
    public var loopbackOnly = false
    /// At most this many sessions at once (1 to 64).
    public var maxPeers = 8
    /// Who answers invitations.
    public var accept: AcceptPolicy = .ask
    /// Liveness: a PING after this long without hearing from the peer.
    public var pingInterval: Duration = .seconds(2)
    /// Liveness: the peer is lost after this many unanswered PINGs.
    public var missedPings = 3
    /// Whether a peer becomes trusted once a session with it is up (a board that pairs once).
    public var trustOnConnect = false
    /// Bytes of messages waiting to be sent to one peer, beyond which a send waits or fails
    /// `busy` (peer-protocol.md section 7; one larger message is taken when nothing waits).
    public var maxQueuedBytes = 8 * 1_048_576
    /// Where resources from peers are saved; nil: every offer is declined.
    public var inbox: Inbox?
    /// Who takes resources from peers (`accept_resources`).
    public var acceptResources: ResourcePolicy = .ask
    /// Where outgoing transfers are kept across restarts (nil: in memory only).
    public var transferJournal: String?
    /// Where bytes a client passes as a descriptor are copied while their transfers need
    /// them (nil: only paths can be sent).
    public var outboxDirectory: String?
    /// Whether a client may offer the file at this resolved path (the daemon keeps its own
    /// key and state from being sent; the default allows every path).
    public var mayOffer: @Sendable (String) -> Bool = { _ in true }
    /// An accepted resource of a peer's that gets no data this long while the peer could
    /// send it is ended `timeout`, its part kept for a resume (`transfer_idle_timeout`); so
    /// is one of ours held back this long, or whose verdict does not come
    /// (`ConnectionTransfers.stalledSending`).
    public var transferIdleTimeout: Duration = .seconds(60)
    /// Files changed less than this long (nanoseconds) before they are offered do not have
    /// their hashes remembered (`FileHashes.racyMargin`; tests set 0).
    public var hashRacyMargin: Int64 = FileHashes.defaultRacyMargin
    /// Runs on the thread that opens a transfer read back from the journal again, before it
    /// reads the file (a test seam: holding it holds that reading, as a large file's hash does).
    public var beforeReopening: (@Sendable () -> Void)?

    /// Settings with defaults and `displayName`.
    public init(displayName: String) { self.displayName = displayName }
}

/// A session with a peer, as reported.
public struct PeerSummary: Sendable, Hashable {
    /// The peer's ID.
    public let peer: PeerID
    /// The name it gave.
    public let displayName: String
    /// Its address.
    public let remote: SocketAddress
    /// The connection's number.
    public let connection: UInt64
    /// Whether this side dialled.
    public let role: Role
    /// Whether the session is encrypted (TLS 1.3); when not, the peer ID is only a claim.
    public let encrypted: Bool
    /// The 6-digit code both sides show (encrypted sessions).
    public let pairingCode: PairingCode?
    /// Whether the peer is in the trust store.
    public let trusted: Bool
    /// Unreliable datagrams to this peer dropped so far (their lane was full).
    public let droppedDatagrams: Int
    /// Bytes waiting to be sent to this peer (messages, datagrams, protocol frames).
    public let queuedBytes: Int
}

/// An invitation waiting for an answer.
public struct PeerInvitation: Sendable, Hashable {
    /// The connection it came on (the answer names it).
    public let id: UInt64
    /// Who invites.
    public let peer: PeerID
    /// The name it gave.
    public let displayName: String
    /// Its context (opaque, untrusted).
    public let context: [UInt8]
    /// The pairing code (encrypted sessions).
    public let pairingCode: PairingCode?
    /// Whether the connection is encrypted.
    public let encrypted: Bool
    /// Whether the peer is trusted.
    public let trusted: Bool
    /// How long the inviter waits.
    public let timeout: Duration
}

/// A connection that ended.
public struct PeerDisconnect: Sendable, Hashable {
    /// The connection's number.
    public let connection: UInt64
    /// The peer, when it said who it is.
    public let peer: PeerID?
    /// Its name, when it said.
    public let displayName: String?
    /// Its address.
    public let remote: SocketAddress
    /// Why.
    public let reason: Reason
    /// What happened, in words.
    public let detail: String
    /// Whether the peer ended it (its CLOSE or its decline).
    public let byPeer: Bool
    /// Whether a session was up on it.
    public let wasConnected: Bool
    /// Whether the peer had shown it is `peer` (TLS with that ID's certificate, or its HELLO
    /// taken in plain text) before it ended: a reason said before then could come from
    /// anyone at that address.
    public var verified = false
}

/// What a node reports, in order per peer.
public enum PeerEvent: Sendable {
    /// A peer invites this side (policy `ask`, or `trusted` and not trusted).
    case invitation(PeerInvitation)
    /// An invitation went away unanswered (the inviter gave up, the connection broke).
    case invitationEnded(PeerDisconnect)
    /// A session is up.
    case connected(PeerSummary)
    /// A connection ended (a session, or an attempt).
    case disconnected(PeerDisconnect)
    /// Reliable messages from a peer, in order: as many as arrived together (at least one).
    case messages(from: PeerID, [[UInt8]])
    /// An unreliable message (a datagram) from a peer.
    case datagram(from: PeerID, bytes: [UInt8])
    /// A trusted peer's session was lost: it is redialled after `after` (attempt from 1).
    case reconnecting(PeerID, attempt: Int, after: Duration)
    /// Redialling a trusted peer stopped after `attempts` failed (it comes back when it
    /// dials, or is dialled).
    case reconnectGaveUp(PeerID, attempts: Int)
    /// Something happened to a resource being sent or received.
    case resource(ResourceEvent)
    /// Something happened to a byte stream.
    case stream(StreamEvent)
}

/// Why a node command failed.
public enum PeerError: Error, Sendable, CustomStringConvertible {
    /// A parameter is wrong: which one, and why.
    case invalid(String, String)
    /// No such thing (what, which).
    case notFound(String, String)
    /// No session with that peer.
    case notConnected(String)
    /// The session table is full.
    case full(Int)
    /// The address could not be reached (where, why).
    case unreachable(String, String)
    /// The peer, or this side, ended the attempt.
    case refused(PeerDisconnect)
    /// The queue for this peer is over its bound and the caller asked not to wait (the
    /// peer, and how many of the peers asked for got the message before it).
    case busy(String, sentTo: Int)
    /// The node was stopped: it makes no more connections.
    case stopped

    /// A sentence for users.
    public var description: String {
        switch self {
        case .invalid(let what, let why): "\(what): \(why)"
        case .notFound(let what, let id): "no \(what) \(id)"
        case .notConnected(let p): "no session with peer \(p)"
        case .full(let n): "the session table is full (\(n) peers)"
        case .unreachable(let target, let why): "cannot reach \(target): \(why)"
        case .refused(let d): "\(d.byPeer ? "the peer" : "this side") ended the connection: \(d.reason) (\(d.detail))"
        case .busy(let p, let n):
            "busy: the queue for peer \(p) is full (the peer is not taking messages as fast as they are sent)"
                + (n > 0 ? "; sent to \(n) peer(s) before it" : "")
        case .stopped: "peer sessions are stopped"
        }
    }
}
