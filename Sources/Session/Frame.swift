/// Whether a side wants its session encrypted (MultipeerConnectivity's three levels).
public enum EncryptionPreference: UInt8, Sendable, Hashable, CaseIterable {
    /// Never encrypt: a peer that requires encryption is refused.
    case none = 0
    /// Encrypt when the peer is willing to.
    case optional = 1
    /// Always encrypt: a peer that refuses encryption is refused.
    case required = 2

    /// What two preferences agree on: true for TLS, false for plain text, nil when they
    /// cannot agree (required against none: closed with `encryption-mismatch`). As in MC,
    /// only none+none and optional+none are plain; every other pair is encrypted.
    public static func agreement(_ a: EncryptionPreference, _ b: EncryptionPreference) -> Bool? {
        switch (a, b) {
        case (.required, .none), (.none, .required): nil
        case (.none, _), (_, .none): false
        default: true
        }
    }
}

/// Which end of the byte stream a side is.
public enum Role: UInt8, Sendable, Hashable {
    /// Opened the connection; the TLS client; sends INVITE.
    case dialer = 0
    /// Accepted the connection; the TLS server; answers INVITE.
    case listener = 1
}

/// HELLO: who a side is and what it speaks. Sent first, in plain text, by both sides.
public struct Hello: Sendable, Hashable {
    /// Session protocol versions spoken, 1 to 16 of them, none 0.
    public var versions: [UInt16]
    /// The sender's peer ID (its certificate's SHA-256), checked after TLS.
    public var peerID: PeerID
    /// The sender's display name (see `SessionValidation.displayName`).
    public var displayName: String
    /// The sender's encryption preference.
    public var encryption: EncryptionPreference
    /// The sender's role on this connection.
    public var role: Role

    /// A HELLO.
    public init(versions: [UInt16] = Wire.supportedVersions, peerID: PeerID, displayName: String, encryption: EncryptionPreference, role: Role) {
        self.versions = versions
        self.peerID = peerID
        self.displayName = displayName
        self.encryption = encryption
        self.role = role
    }
}

/// INVITE: the dialer asks the listener's user to join.
public struct Invite: Sendable, Hashable {
    /// Chosen by the dialer; the reply carries it back.
    public var invitationID: UInt32
    /// Opaque application data shown with the invitation, at most `Wire.maxContext` bytes.
    public var context: [UInt8]
    /// How long the dialer waits for an answer, in milliseconds (1 ms to 10 min).
    public var timeoutMilliseconds: UInt32

    /// An INVITE.
    public init(invitationID: UInt32, context: [UInt8] = [], timeoutMilliseconds: UInt32 = 30_000) {
        self.invitationID = invitationID
        self.context = context
        self.timeoutMilliseconds = timeoutMilliseconds
    }

    /// The longest timeout a dialer may ask for.
    public static let maxTimeoutMilliseconds: UInt32 = 600_000
}

/// INVITE_REPLY: the listener's answer.
public struct InviteReply: Sendable, Hashable {
    /// The INVITE's id.
    public var invitationID: UInt32
    /// nil: accepted; otherwise why it was declined (never `.normal`).
    public var declineReason: Reason?

    /// A reply.
    public init(invitationID: UInt32, declineReason: Reason?) {
        self.invitationID = invitationID
        self.declineReason = declineReason
    }
}

/// One fragment of a reliable message.
public struct MessageFragment: Sendable, Hashable {
    /// The message's id: 1 for the connection's first message, then one more per message.
    public var messageID: UInt32
    /// The fragment's bytes, at most `Wire.maxFragmentData`: a slice of the message being
    /// sent, or of the frame's payload received, so that neither is copied to make it.
    public var data: ArraySlice<UInt8>
    /// The message's last fragment (flag FIN).
    public var isFinal: Bool

    /// A fragment.
    public init(messageID: UInt32, data: ArraySlice<UInt8>, isFinal: Bool) {
        self.messageID = messageID
        self.data = data
        self.isFinal = isFinal
    }

    /// A fragment of `data`'s bytes.
    public init(messageID: UInt32, data: [UInt8], isFinal: Bool) {
        self.init(messageID: messageID, data: data[...], isFinal: isFinal)
    }
}

/// RESOURCE_OFFER: a file the sender offers.
public struct ResourceOffer: Sendable, Hashable {
    /// The resource id (the header's stream id; not 0).
    public var resourceID: UInt32
    /// What the sender calls it, 1 to `Wire.maxResourceName` bytes of any text: the receiver
    /// makes a file name of it (`ResourceName.sanitise`), never a path.
    public var name: String
    /// Its size in bytes.
    public var size: UInt64
    /// The SHA-256 of the whole content.
    public var sha256: [UInt8]
    /// Its media type ("application/octet-stream" when unknown), at most `Wire.maxMediaType` bytes.
    public var mediaType: String

    /// An offer.
    public init(resourceID: UInt32, name: String, size: UInt64, sha256: [UInt8], mediaType: String) {
        self.resourceID = resourceID
        self.name = name
        self.size = size
        self.sha256 = sha256
        self.mediaType = mediaType
    }
}

/// One frame, typed. `FrameEncoder` turns it into bytes and `FrameDecoder` back.
public enum Frame: Sendable, Hashable {
    /// HELLO.
    case hello(Hello)
    /// INVITE.
    case invite(Invite)
    /// INVITE_REPLY.
    case inviteReply(InviteReply)
    /// PING with a value the PONG echoes.
    case ping(UInt64)
    /// PONG echoing a PING's value.
    case pong(UInt64)
    /// CLOSE: the sender's last frame.
    case close(Reason, text: String)
    /// CREDIT: the receiver lets the sender send this many more bytes on `streamID` and on
    /// the connection.
    case credit(streamID: UInt32, streamBytes: UInt32, connectionBytes: UInt32)
    /// MESSAGE.
    case message(MessageFragment)
    /// UNRELIABLE: one datagram, at most `Wire.maxPayload` bytes.
    case unreliable([UInt8])
    /// RESOURCE_OFFER.
    case resourceOffer(ResourceOffer)
    /// RESOURCE_ACCEPT: send from `offset` (0, or where an earlier transfer stopped).
    case resourceAccept(resourceID: UInt32, offset: UInt64)
    /// RESOURCE_DECLINE.
    case resourceDecline(resourceID: UInt32, reason: Reason)
    /// RESOURCE_DATA: the next bytes of the resource, in order.
    case resourceData(resourceID: UInt32, data: [UInt8])
    /// RESOURCE_DONE: everything was sent.
    case resourceDone(resourceID: UInt32)
    /// RESOURCE_CANCEL.
    case resourceCancel(resourceID: UInt32, reason: Reason)
    /// STREAM_OPEN.
    case streamOpen(streamID: UInt32, name: String)
    /// STREAM_DATA.
    case streamData(streamID: UInt32, data: [UInt8])
    /// STREAM_CLOSE (`.normal` for the end of the stream).
    case streamClose(streamID: UInt32, reason: Reason)

    /// The frame's type.
    public var type: FrameType {
        switch self {
        case .hello: .hello
        case .invite: .invite
        case .inviteReply: .inviteReply
        case .ping: .ping
        case .pong: .pong
        case .close: .close
        case .credit: .credit
        case .message: .message
        case .unreliable: .unreliable
        case .resourceOffer: .resourceOffer
        case .resourceAccept: .resourceAccept
        case .resourceDecline: .resourceDecline
        case .resourceData: .resourceData
        case .resourceDone: .resourceDone
        case .resourceCancel: .resourceCancel
        case .streamOpen: .streamOpen
        case .streamData: .streamData
        case .streamClose: .streamClose
        }
    }

    /// The header's stream id.
    public var streamID: UInt32 {
        switch self {
        case .credit(let id, _, _): id
        case .resourceOffer(let o): o.resourceID
        case .resourceAccept(let id, _), .resourceDecline(let id, _), .resourceData(let id, _), .resourceDone(let id),
             .resourceCancel(let id, _), .streamOpen(let id, _), .streamData(let id, _), .streamClose(let id, _): id
        default: 0
        }
    }

    /// The header's flags.
    public var flags: FrameFlags {
        if case .message(let m) = self, m.isFinal { return .fin }
        return []
    }

    /// The bytes that count against the flow-control windows (0 for frames that do not).
    public var flowControlledBytes: Int {
        switch self {
        case .message(let m): 4 + m.data.count
        case .resourceData(_, let d), .streamData(_, let d): d.count
        default: 0
        }
    }
}
