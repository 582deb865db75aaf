/// The frame layer's constants: the header, the frame types, the flags and the limits.
/// Everything here is on the wire; docs/peer-protocol.md is the same list in prose, and a
/// number changed here is a protocol change.
public enum Wire {
    /// The header's version byte. It names the header's layout, not the session protocol
    /// (negotiated in HELLO): it stays 1 for as long as the 12-byte header does.
    public static let frameVersion: UInt8 = 1
    /// The header: version u8, type u8, flags u16, stream id u32, payload length u32.
    public static let headerSize = 12
    /// The largest payload of any frame. A larger length is a protocol error, seen in the
    /// header before the payload is buffered, so one frame never costs more than this.
    public static let maxPayload = 65_536
    /// The session protocol versions this implementation speaks, in HELLO.
    public static let supportedVersions: [UInt16] = [1]
    /// At most this many versions in one HELLO.
    public static let maxVersions = 16
    /// The largest message (the sum of its MESSAGE fragments' data).
    public static let maxMessage = 16 * 1_048_576
    /// The largest invitation context.
    public static let maxContext = 4096
    /// A display name in UTF-8 bytes (as a DNS-SD instance label: 63).
    public static let maxDisplayName = 63
    /// CLOSE's text in UTF-8 bytes.
    public static let maxCloseText = 256
    /// A stream's name in UTF-8 bytes.
    public static let maxName = 255
    /// A resource's name in UTF-8 bytes. Longer than a file name: it is what the sender
    /// calls the resource (it may be a path on the sender's system); the receiver makes a
    /// file name of it (`ResourceName.sanitise`).
    public static let maxResourceName = 1024
    /// A resource's media type in UTF-8 bytes.
    public static let maxMediaType = 127
    /// A message fragment's data: the payload less the message id.
    public static let maxFragmentData = maxPayload - 4
}

/// A frame's type byte.
public enum FrameType: UInt8, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// The first frame each side sends, in plain text.
    case hello = 0x01
    /// The dialer asks the listener to join a session.
    case invite = 0x02
    /// The listener's answer.
    case inviteReply = 0x03
    /// Liveness probe.
    case ping = 0x04
    /// Answer to a PING.
    case pong = 0x05
    /// The last frame a side sends, with its reason.
    case close = 0x06
    /// Flow-control window grant.
    case credit = 0x07
    /// A fragment of a reliable message.
    case message = 0x10
    /// A droppable datagram.
    case unreliable = 0x11
    /// A file offered to the peer.
    case resourceOffer = 0x20
    /// The peer wants the resource, from an offset.
    case resourceAccept = 0x21
    /// The peer does not want the resource.
    case resourceDecline = 0x22
    /// A piece of a resource.
    case resourceData = 0x23
    /// The sender has sent the whole resource.
    case resourceDone = 0x24
    /// Either side abandons the resource.
    case resourceCancel = 0x25
    /// A named byte stream is opened.
    case streamOpen = 0x30
    /// Bytes of a stream.
    case streamData = 0x31
    /// A stream ends (either side).
    case streamClose = 0x32

    /// The name used in docs and errors, e.g. "INVITE_REPLY".
    public var description: String {
        switch self {
        case .hello: "HELLO"
        case .invite: "INVITE"
        case .inviteReply: "INVITE_REPLY"
        case .ping: "PING"
        case .pong: "PONG"
        case .close: "CLOSE"
        case .credit: "CREDIT"
        case .message: "MESSAGE"
        case .unreliable: "UNRELIABLE"
        case .resourceOffer: "RESOURCE_OFFER"
        case .resourceAccept: "RESOURCE_ACCEPT"
        case .resourceDecline: "RESOURCE_DECLINE"
        case .resourceData: "RESOURCE_DATA"
        case .resourceDone: "RESOURCE_DONE"
        case .resourceCancel: "RESOURCE_CANCEL"
        case .streamOpen: "STREAM_OPEN"
        case .streamData: "STREAM_DATA"
        case .streamClose: "STREAM_CLOSE"
        }
    }

    /// Which stream ids the type may carry in its header.
    enum StreamRule {
        /// Stream id 0: the frame is about the connection.
        case zero
        /// A resource or stream id, not 0.
        case nonZero
        /// Any id: CREDIT grants for stream 0 (messages) or another.
        case any
    }

    var streamRule: StreamRule {
        switch self {
        case .hello, .invite, .inviteReply, .ping, .pong, .close, .message, .unreliable: .zero
        case .credit: .any
        case .resourceOffer, .resourceAccept, .resourceDecline, .resourceData, .resourceDone, .resourceCancel,
             .streamOpen, .streamData, .streamClose: .nonZero
        }
    }

    /// The flag bits this type defines (besides `FrameFlags.ignorable`, allowed on every type).
    var definedFlags: FrameFlags { self == .message ? .fin : [] }

    /// Whether the frame's payload bytes count against the flow-control windows.
    public var isFlowControlled: Bool { self == .message || self == .resourceData || self == .streamData }
}

/// The header's flag bits.
public struct FrameFlags: OptionSet, Sendable, Hashable {
    /// The bits.
    public let rawValue: UInt16
    /// A flag set from its bits.
    public init(rawValue: UInt16) { self.rawValue = rawValue }
    /// MESSAGE: this fragment is the message's last.
    public static let fin = FrameFlags(rawValue: 0x0001)
    /// A receiver that does not know the frame's type skips it instead of failing. Lets a
    /// later version add optional frames without a new version number.
    public static let ignorable = FrameFlags(rawValue: 0x8000)
}

/// Why something was refused, declined or closed: a u16 on the wire (CLOSE, INVITE_REPLY,
/// RESOURCE_DECLINE, RESOURCE_CANCEL, STREAM_CLOSE) and in every drop reported locally.
/// Unknown numbers from a newer peer are kept as they are.
public struct Reason: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
    /// The number on the wire.
    public let rawValue: UInt16
    /// A reason from its number.
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    /// Normal end: the user closed the session or the stream ended.
    public static let normal = Reason(rawValue: 0)
    /// The user (or the application) declined the invitation.
    public static let declined = Reason(rawValue: 1)
    /// Nobody answered in time (an invitation, a handshake).
    public static let timeout = Reason(rawValue: 2)
    /// The peer table is full.
    public static let full = Reason(rawValue: 3)
    /// The side is busy (queued bytes over its limit, another invitation being answered).
    public static let busy = Reason(rawValue: 4)
    /// A second connection to the same peer lost the tie-break.
    public static let duplicate = Reason(rawValue: 5)
    /// One side requires encryption and the other refuses it.
    public static let encryptionMismatch = Reason(rawValue: 6)
    /// No session protocol version in common.
    public static let versionMismatch = Reason(rawValue: 7)
    /// A frame that is malformed or not allowed where it came.
    public static let protocolError = Reason(rawValue: 8)
    /// The peer sent more than its window allowed.
    public static let flowControl = Reason(rawValue: 9)
    /// Liveness: nothing heard for too long (never sent; the peer is gone).
    public static let lost = Reason(rawValue: 10)
    /// The certificate does not match the peer ID in HELLO.
    public static let identityMismatch = Reason(rawValue: 11)
    /// The TLS handshake failed.
    public static let tlsFailed = Reason(rawValue: 12)
    /// The peer is this side itself (its own peer ID came back).
    public static let selfConnection = Reason(rawValue: 13)
    /// The byte stream ended without a CLOSE (never sent).
    public static let transportClosed = Reason(rawValue: 14)
    /// A message over the message limit.
    public static let messageTooLarge = Reason(rawValue: 15)
    /// The daemon is stopping.
    public static let shuttingDown = Reason(rawValue: 16)
    /// The user cancelled (a resource, a stream, an invitation).
    public static let cancelled = Reason(rawValue: 17)
    /// The same session was replaced by a newer connection from the peer.
    public static let replaced = Reason(rawValue: 18)
    /// A resource's bytes do not have the offered SHA-256.
    public static let hashMismatch = Reason(rawValue: 19)
    /// A resource is larger than the receiver accepts (its quota).
    public static let tooLarge = Reason(rawValue: 20)
    /// The receiver has no room for the resource (checked before accepting, or it ran out).
    public static let noSpace = Reason(rawValue: 21)
    /// Reading or writing the resource's file failed on this side.
    public static let ioError = Reason(rawValue: 22)
    /// The sender's file changed (its hash differs from what was offered before).
    public static let sourceChanged = Reason(rawValue: 23)

    /// Every reason this version defines, by name.
    public static let known: [Reason] = [
        .normal, .declined, .timeout, .full, .busy, .duplicate, .encryptionMismatch, .versionMismatch,
        .protocolError, .flowControl, .lost, .identityMismatch, .tlsFailed, .selfConnection,
        .transportClosed, .messageTooLarge, .shuttingDown, .cancelled, .replaced,
        .hashMismatch, .tooLarge, .noSpace, .ioError, .sourceChanged,
    ]

    /// The name used in events and docs, e.g. "encryption-mismatch"; "reason-N" for unknown numbers.
    public var name: String {
        switch rawValue {
        case 0: "normal"
        case 1: "declined"
        case 2: "timeout"
        case 3: "full"
        case 4: "busy"
        case 5: "duplicate"
        case 6: "encryption-mismatch"
        case 7: "version-mismatch"
        case 8: "protocol-error"
        case 9: "flow-control"
        case 10: "lost"
        case 11: "identity-mismatch"
        case 12: "tls-failed"
        case 13: "self-connection"
        case 14: "transport-closed"
        case 15: "message-too-large"
        case 16: "shutting-down"
        case 17: "cancelled"
        case 18: "replaced"
        case 19: "hash-mismatch"
        case 20: "too-large"
        case 21: "no-space"
        case 22: "io-error"
        case 23: "source-changed"
        default: "reason-\(rawValue)"
        }
    }

    /// The name.
    public var description: String { name }
}
