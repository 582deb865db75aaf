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
    /// Sends a message: `{"to": [peer] | "all", "data_base64" | "text", "reliable"?, "wait"?}` → `{"sent_to": [peer]}`.
    public static let peerSend = "peer.send"
    /// A data stream of messages with one peer: `{"peer"}` → `{"stream", "peer", "fd": true,
    /// "max_message"}` and a packet socket passed with the reply (each packet one message,
    /// both ways; the peer's messages go there instead of `peer.message` events).
    public static let peerMessageStream = "peer.message-stream"
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
    /// Offers a file to peers: `{"path", "name"?, "media_type"?, "to": [peer] | "all", "image"?}` →
    /// `{"transfers": [Transfer]}` (one a peer); events `peer.resource-*` follow.
    public static let peerSendResource = "peer.send-resource"
    /// Cancels a transfer, either way: `{"transfer"}`.
    public static let peerCancel = "peer.cancel"
    /// Takes a peer's offered resource (`accept_resources = ask`): `{"transfer"}`.
    public static let peerAcceptResource = "peer.accept-resource"
    /// Declines a peer's offered resource: `{"transfer"}`.
    public static let peerDeclineResource = "peer.decline-resource"
    /// Transfers in progress or waiting: `{}` → `{"transfers": [Transfer]}`.
    public static let peerTransfers = "peer.transfers"
    /// What arrived: `{}` → `{"directory", "files": [{"name", "path", "size", "media_type"?, "width"?, "height"?}]}`.
    public static let peerInbox = "peer.inbox"
    /// Opens a byte stream to a peer (MultipeerConnectivity's `startStream`): `{"peer", "name"}` →
    /// `{"stream", "peer", "name", "direction": "out", "fd": true}` and a Unix stream socket
    /// passed with the reply, to write; closing it ends the stream normally (with
    /// `"explicit_finish": true`, only together with `peer.finish-stream`).
    public static let peerOpenStream = "peer.open-stream"
    /// Takes a peer's byte stream (`peer.stream-opened`): `{"stream"}` → the stream and a Unix
    /// stream socket passed with the reply, to read until its end.
    public static let peerAcceptStream = "peer.accept-stream"
    /// Declines a peer's byte stream: `{"stream"}`.
    public static let peerDeclineStream = "peer.decline-stream"
    /// Stops a byte stream, either way (`cancelled` on both sides): `{"stream"}`.
    public static let peerCloseStream = "peer.close-stream"
    /// Says a stream opened with `explicit_finish` is complete: `{"stream"}`; it ends normally
    /// once its socket's end is read too.
    public static let peerFinishStream = "peer.finish-stream"
    /// Byte streams open or waiting to be accepted: `{}` → `{"streams": [Stream]}`.
    public static let peerStreams = "peer.streams"
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
    /// Topic: a peer offers a resource and a client must answer (`peer.accept-resource`).
    public static let peerResourceOffered = "peer.resource-offered"
    /// Topic: a transfer's bytes started to flow (`offset` not 0: resumed).
    public static let peerResourceStarted = "peer.resource-started"
    /// Topic: a transfer's progress (`bytes`, `size`, `bytes_per_second`, `seconds_left`),
    /// about four times a second.
    public static let peerResourceProgress = "peer.resource-progress"
    /// Topic: our resource arrived at the peer, verified.
    public static let peerResourceSent = "peer.resource-sent"
    /// Topic: a peer's resource is saved in the inbox (`path`, `sha256`, and for an image
    /// `width` and `height`).
    public static let peerResourceReceived = "peer.resource-received"
    /// Topic: a transfer ended without arriving (`reason`, `detail`, `by_peer`).
    public static let peerResourceEnded = "peer.resource-ended"
    /// Topic: the session ended mid-transfer; it resumes when the peer is back.
    public static let peerResourceInterrupted = "peer.resource-interrupted"
    /// To the connection that opened it: a message stream ended (`stream`, `reason`,
    /// `message`, counts `sent`, `received`, `unwritten`).
    public static let peerStreamEnded = "peer.stream-ended"
    /// Topic: a peer opened a byte stream to this board (`stream`, `name`): take it with
    /// `peer.accept-stream` within 30 s, or it is declined (`timeout`).
    public static let peerStreamOpened = "peer.stream-opened"
    /// To the stream's client (to every subscriber before one took it): a byte stream ended
    /// (`reason`: `normal` when every byte reached the reading client; `detail`, `by_peer`,
    /// `bytes`).
    public static let peerStreamClosed = "peer.stream-closed"
}
