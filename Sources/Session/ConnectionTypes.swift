/// The settings of one connection's state machine.
public struct ConnectionConfig: Sendable, Hashable {
    /// This side's peer ID.
    public var localID: PeerID
    /// This side's display name (sent in HELLO).
    public var displayName: String
    /// This side's encryption preference.
    public var encryption: EncryptionPreference
    /// The session protocol versions this side speaks.
    public var versions: [UInt16] = Wire.supportedVersions
    /// The peer the dialer meant to reach (from discovery), checked against its HELLO;
    /// nil when unknown (always for a listener).
    public var expectedPeer: PeerID?
    /// From connecting to the invitation being sent (dialer) or received (listener): HELLO,
    /// TLS and INVITE must all happen within it.
    public var handshakeTimeout: Duration = .seconds(10)
    /// The dialer waits this much longer than the timeout its INVITE asked for, so the
    /// listener's own `timeout` decline arrives first when both are alive.
    public var inviteReplyGrace: Duration = .seconds(2)
    /// PING after this long without hearing anything from the peer.
    public var pingInterval: Duration = .seconds(2)
    /// The peer is lost when this many PINGs in a row went unanswered for an interval each:
    /// silence of `pingInterval * (missedPings + 1)` (8 s with the defaults).
    public var missedPings: Int = 3
    /// After sending CLOSE, how long to wait for the peer's CLOSE or the end of the stream
    /// before closing the transport anyway.
    public var closeGrace: Duration = .seconds(1)

    /// A configuration with the default timings.
    public init(localID: PeerID, displayName: String, encryption: EncryptionPreference, expectedPeer: PeerID? = nil) {
        self.localID = localID
        self.displayName = displayName
        self.encryption = encryption
        self.expectedPeer = expectedPeer
    }

    /// The default invitation timeout a dialer asks for.
    public static let defaultInvitationTimeout: Duration = .seconds(30)
}

/// Where a connection is.
public enum ConnectionState: Sendable, Hashable {
    /// Created; `start` sends HELLO.
    case idle
    /// HELLO sent, the peer's awaited.
    case helloSent
    /// Both HELLOs exchanged, TLS being negotiated by the caller.
    case securing
    /// Frames flow (in TLS or in plain text); the invitation has not been sent (dialer) or
    /// received (listener) yet.
    case ready
    /// Dialer: INVITE sent, its reply awaited.
    case invited(Invite)
    /// Listener: INVITE received, the user's answer awaited.
    case awaitingAnswer(Invite)
    /// The session is up.
    case connected
    /// This side sent CLOSE (or got the peer's decline) and waits for the stream to end.
    case closing(Reason)
    /// Over; the transport is closed or being closed.
    case closed(Reason)
}

/// Something that happened to the connection, fed to the machine.
public enum ConnectionInput: Sendable, Hashable {
    /// The transport is up: send HELLO.
    case start
    /// A frame arrived.
    case frame(Frame)
    /// The decoder failed: the stream cannot be read any further.
    case decodeFailed(FrameError)
    /// TLS finished: the certificate's SHA-256 and the pairing code from its exporter.
    case tlsEstablished(certificateID: PeerID, pairingCode: PairingCode)
    /// TLS failed, with the library's words.
    case tlsFailed(String)
    /// TLS refused the peer's certificate because it is not the one whose SHA-256 the peer's
    /// HELLO announced (the pin): the drop is `identity-mismatch`, not `tls-failed`.
    case certificateMismatch(String)
    /// The byte stream ended or broke.
    case transportClosed
    /// Dialer: invite the peer (sent as soon as the connection is secured).
    case invite(context: [UInt8], timeout: Duration)
    /// Listener: the user accepts the invitation.
    case accept
    /// Listener: the user (or the peer table) declines, with a reason.
    case decline(Reason)
    /// Close the session.
    case close(Reason, text: String)
    /// The application consumed this many bytes of a resource or stream (its id): returns
    /// the peer's window to it (a CREDIT frame when half a window is due).
    case consumed(streamID: UInt32, bytes: Int)
    /// A resource or stream ended (or a frame named one that never existed): its
    /// flow-control entries go, so ids a peer makes up cost no memory. Bytes it consumed
    /// still count for the connection.
    case streamEnded(streamID: UInt32)
    /// Bytes of a stream that ended before the application took them (a reader that went
    /// away, a stream nobody accepted): they go back to the connection's window only (a
    /// CREDIT on stream 0 with no stream bytes when half a window is due), so streams that
    /// end unread never shrink the window the session's other traffic shares.
    case released(bytes: Int)
    /// The application cannot take more messages now (true) or can again (false). While
    /// held, arriving MESSAGE bytes are counted but not returned to the peer, so its window
    /// for messages runs out and it stops sending (back-pressure without pausing the
    /// transport: PING and PONG still flow, so liveness holds); releasing returns them all.
    case holdMessageCredit(Bool)
    /// Time has passed (the timer fired, or the caller just looks).
    case tick
}

/// What the caller must do, in order.
public enum ConnectionAction: Sendable, Hashable {
    /// Send this frame (on TLS if it is up): queue it in the connection's `SendScheduler`
    /// and write what `ConnectionMachine.nextFrame(from:)` gives (HELLO and a CLOSE before
    /// TLS may be written directly: nothing else is queued then).
    case send(Frame)
    /// Start TLS on the byte stream now, this side as client or server. Bytes the frame
    /// decoder holds past HELLO belong to TLS (`FrameDecoder.takeBufferedBytes`).
    case startTLS(asClient: Bool)
    /// Tell the application.
    case emit(ConnectionEvent)
    /// Call `handle(.tick, now:)` at this instant (replaces the previous timer).
    case armTimer(at: ContinuousClock.Instant)
    /// No timer is needed.
    case cancelTimer
    /// Close the byte stream, with this reason (for the log), once the frames already sent
    /// are flushed (in TLS: after close_notify).
    case closeTransport(Reason)
}

/// What the application hears.
public enum ConnectionEvent: Sendable, Hashable {
    /// The peer's HELLO: who it claims to be (verified by TLS only when encrypted).
    case hello(Hello)
    /// Frames now flow; `pairingCode` is nil in plain text (the peer ID is then unverified).
    case secured(peerID: PeerID, encrypted: Bool, pairingCode: PairingCode?)
    /// Listener: an invitation to answer with `accept` or `decline`.
    case invitation(Invite)
    /// The session is up (reported once per connection).
    case connected
    /// A whole reliable message.
    case message([UInt8])
    /// An unreliable datagram.
    case datagram([UInt8])
    /// Resource and stream frames, for the transfer layer above (their bytes are already
    /// counted against the window; report them `consumed` when used).
    case frame(Frame)
    /// A command that does not fit the state was ignored.
    case refused(command: String, why: String)
    /// The connection is over (reported once): the reason, what happened, and whether the
    /// peer said so (its CLOSE or its decline) or this side decided.
    case disconnected(Reason, detail: String, byPeer: Bool)
}
