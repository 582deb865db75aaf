/// Method names of the peer-session part of the control protocol (see docs/peer-sessions.md).
extension ControlMethod {
    /// This board's identity: `{}` → `{"id", "id_text", "short", "name", "port", "encryption", "accept"}`.
    public static let peerIdentity = "peer.identity"
    /// Dials a peer and invites it, waiting for the session: `{"address": "HOST:PORT", "peer"?, "context_base64"?,
    /// "timeout"?}` → Session.
    public static let peerConnect = "peer.connect"
    /// Invitations waiting for an answer: `{}` → `{"invitations": [Invitation]}`.
    public static let peerInvitations = "peer.invitations"
    /// Accepts an invitation: `{"invitation"}`.
    public static let peerAccept = "peer.accept"
    /// Declines an invitation: `{"invitation"}`.
    public static let peerDecline = "peer.decline"
    /// The sessions: `{}` → `{"sessions": [Session]}`.
    public static let peerSessions = "peer.sessions"
    /// Sends a message: `{"to": [peer] | "all", "data_base64" | "text", "reliable"?}` → `{"sent_to": [peer]}`.
    public static let peerSend = "peer.send"
    /// Ends a session: `{"peer"}`.
    public static let peerDisconnect = "peer.disconnect"
    /// Trusts a peer (its ID is pinned): `{"peer", "name"?}`.
    public static let peerTrust = "peer.trust"
    /// Forgets a trusted peer: `{"peer"}`.
    public static let peerForget = "peer.forget"
    /// The trusted peers: `{}` → `{"peers": [..]}`.
    public static let peerTrusted = "peer.trusted"
    /// Advertises sessions over DNS-SD: `{"type", "info"?: {key: value}}` → the publication.
    public static let peerAdvertise = "peer.advertise"
    /// Withdraws an advertisement: `{"type"}`.
    public static let peerUnadvertise = "peer.unadvertise"
    /// Browses for peers: `{"type"}` → `{"browse_id", "peers"}`; events `peer.found` and `peer.lost` to this connection.
    public static let peerBrowse = "peer.browse"
    /// Stops a browse: `{"browse_id"}`.
    public static let peerBrowseStop = "peer.browse-stop"
    /// Invites a peer found by a browse: `{"peer", "context_base64"? | "context"?, "timeout"?}` → Session.
    public static let peerInvite = "peer.invite"
}

extension ControlEvent {
    /// Topic: a peer invites this board (`invitation`, with the pairing code to compare).
    public static let peerInvitation = "peer.invitation"
    /// Topic: an invitation went away unanswered (the inviter gave up, the connection broke).
    public static let peerInvitationEnded = "peer.invitation-ended"
    /// Topic: a session is up.
    public static let peerConnected = "peer.connected"
    /// Topic: a connection ended (a session, or an attempt), with its reason.
    public static let peerDisconnected = "peer.disconnected"
    /// Topic: a message from a peer (`data_base64`, `reliable`).
    public static let peerMessage = "peer.message"
    /// Topic (to the browsing connection): a peer is found, or its addresses or info changed.
    public static let peerFound = "peer.found"
    /// Topic (to the browsing connection): a peer found earlier is gone from DNS-SD.
    public static let peerLost = "peer.lost"
    /// Topic (to the browsing connection): the browse failed.
    public static let peerBrowseFailed = "peer.browse-failed"
    /// Topic: a trusted peer's session was lost; it is redialled (`attempt`, `in_seconds`).
    public static let peerReconnecting = "peer.reconnecting"
    /// Topic: redialling a trusted peer stopped after `attempts`.
    public static let peerReconnectGaveUp = "peer.reconnect-gave-up"
}
