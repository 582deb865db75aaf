/// A frame's 12-byte header.
public struct FrameHeader: Sendable, Hashable {
    /// The version byte (`Wire.frameVersion`).
    public var version: UInt8
    /// The type byte (possibly a type this side does not know).
    public var type: UInt8
    /// The flag bits.
    public var flags: UInt16
    /// The stream id.
    public var streamID: UInt32
    /// The payload's length.
    public var length: UInt32

    /// Reads a header from exactly 12 bytes (no checks beyond the size).
    init(_ b: ArraySlice<UInt8>) {
        let i = b.startIndex
        func be(_ at: Int, _ n: Int) -> UInt32 { b[(i + at)..<(i + at + n)].reduce(0) { $0 << 8 | UInt32($1) } }
        version = b[i]
        type = b[i + 1]
        flags = UInt16(be(2, 2))
        streamID = be(4, 4)
        length = be(8, 4)
    }

    /// Checks everything the header alone can show: version, length, and for known types
    /// the flags and the stream id. Returns nil for an unknown type the receiver may skip.
    func check() throws(FrameError) -> FrameType? {
        guard version == Wire.frameVersion else { throw FrameError(.badVersion(version)) }
        guard length <= Wire.maxPayload else { throw FrameError(.oversize(length: Int(length), limit: Wire.maxPayload), frameType: type) }
        guard let known = FrameType(rawValue: type) else {
            if FrameFlags(rawValue: flags).contains(.ignorable) { return nil }
            throw FrameError(.unknownType(type), frameType: type)
        }
        let extra = flags & ~(known.definedFlags.rawValue | FrameFlags.ignorable.rawValue)
        guard extra == 0 else { throw FrameError(.unexpectedFlags(extra), frameType: type) }
        switch known.streamRule {
        case .zero: guard streamID == 0 else { throw FrameError(.badStreamID(streamID), frameType: type) }
        case .nonZero: guard streamID != 0 else { throw FrameError(.badStreamID(streamID), frameType: type) }
        case .any: break
        }
        return known
    }
}

/// Turns frames into bytes. Every bound the decoder checks is checked here too, so what
/// this side sends, the peer can read.
public enum FrameEncoder {
    /// The frame's bytes: header and payload.
    public static func encode(_ frame: Frame) throws(FrameError) -> [UInt8] {
        var out: [UInt8] = []
        try append(frame, to: &out)
        return out
    }

    /// Appends the frame's bytes to `out` (left as it was when this throws).
    public static func append(_ frame: Frame, to out: inout [UInt8]) throws(FrameError) {
        out.append(contentsOf: try appendAllButData(frame, to: &out))
    }

    /// Appends the frame's bytes to `out` except a bulk frame's data (MESSAGE, UNRELIABLE,
    /// RESOURCE_DATA, STREAM_DATA), which it returns: the frame's last bytes, for a writer to
    /// take from where they are (TLS encrypts them from the message itself) instead of
    /// copying them after the header first. Other frames are appended whole (the rest is
    /// empty). `out` is left as it was when this throws.
    public static func appendAllButData(_ frame: Frame, to out: inout [UInt8]) throws(FrameError) -> ArraySlice<UInt8> {
        do throws(FrameError) {
            switch frame {
            case .unreliable(let d), .resourceData(_, let d), .streamData(_, let d):
                try FrameRules.check(frame)
                appendHeader(frame, length: d.count, to: &out)
                return d[...]
            case .message(let m):
                // A fragment's data comes after its message id.
                try FrameRules.check(frame)
                appendHeader(frame, length: 4 + m.data.count, to: &out)
                out.append(UInt8(truncatingIfNeeded: m.messageID >> 24))
                out.append(UInt8(truncatingIfNeeded: m.messageID >> 16))
                out.append(UInt8(truncatingIfNeeded: m.messageID >> 8))
                out.append(UInt8(truncatingIfNeeded: m.messageID))
                return m.data
            default:
                let payload = try encodePayload(frame)
                guard payload.count <= Wire.maxPayload else {
                    throw FrameError(.oversize(length: payload.count, limit: Wire.maxPayload))
                }
                appendHeader(frame, length: payload.count, to: &out)
                out.append(contentsOf: payload)
                return []
            }
        } catch {
            var e = error
            e.frameType = frame.type.rawValue
            throw e
        }
    }

    private static func appendHeader(_ frame: Frame, length: Int, to out: inout [UInt8]) {
        var header = ByteWriter()
        header.u8(Wire.frameVersion)
        header.u8(frame.type.rawValue)
        header.u16(frame.flags.rawValue)
        header.u32(frame.streamID)
        header.u32(UInt32(length))
        out.append(contentsOf: header.bytes)
    }

    static func encodePayload(_ frame: Frame) throws(FrameError) -> [UInt8] {
        try FrameRules.check(frame)
        var w = ByteWriter()
        switch frame {
        case .hello(let h):
            w.u8(UInt8(h.versions.count))
            for v in h.versions { w.u16(v) }
            try w.fixed(h.peerID.bytes, "peer id", count: PeerID.byteCount)
            try w.string(h.displayName, "display name", limit: Wire.maxDisplayName)
            w.u8(h.encryption.rawValue)
            w.u8(h.role.rawValue)
        case .invite(let i):
            w.u32(i.invitationID)
            try w.blob(i.context, "context", limit: Wire.maxContext)
            w.u32(i.timeoutMilliseconds)
        case .inviteReply(let r):
            w.u32(r.invitationID)
            w.u16(r.declineReason?.rawValue ?? 0)
        case .ping(let v), .pong(let v):
            w.u64(v)
        case .close(let reason, let text):
            w.u16(reason.rawValue)
            try w.string(text, "text", limit: Wire.maxCloseText)
        case .credit(_, let s, let c):
            w.u32(s)
            w.u32(c)
        case .message(let m):
            w.u32(m.messageID)
            w.raw(m.data)
        case .unreliable(let d), .resourceData(_, let d), .streamData(_, let d):
            w.raw(d)
        case .resourceOffer(let o):
            try w.string(o.name, "name", limit: Wire.maxResourceName)
            w.u64(o.size)
            try w.fixed(o.sha256, "sha256", count: 32)
            try w.string(o.mediaType, "media type", limit: Wire.maxMediaType)
        case .resourceAccept(_, let offset):
            w.u64(offset)
        case .resourceDecline(_, let r), .resourceCancel(_, let r), .streamClose(_, let r):
            w.u16(r.rawValue)
        case .resourceDone:
            break
        case .streamOpen(_, let name):
            try w.string(name, "name", limit: Wire.maxName)
        }
        return w.bytes
    }
}

/// Reads a known frame's payload.
enum FrameParser {
    /// The typed frame from a checked header and its whole payload.
    static func parse(_ type: FrameType, flags: UInt16, streamID id: UInt32, payload: ArraySlice<UInt8>) throws(FrameError) -> Frame {
        var r = ByteReader(payload)
        let frame: Frame
        switch type {
        case .hello:
            let count = Int(try r.u8("version count"))
            guard (1...Wire.maxVersions).contains(count) else {
                throw FrameError(.invalidValue(field: "version count", reason: "must be 1 to \(Wire.maxVersions), got \(count)"), fieldOffset: 0)
            }
            var versions: [UInt16] = []
            for _ in 0..<count { versions.append(try r.u16("versions")) }
            let idOffset = r.offset
            guard let peerID = PeerID(bytes: try r.fixed(PeerID.byteCount, "peer id")) else {
                throw FrameError(.truncated(field: "peer id", needed: 32, available: 0), fieldOffset: idOffset)
            }
            let name = try r.string("display name", limit: Wire.maxDisplayName)
            let encOffset = r.offset
            guard let enc = EncryptionPreference(rawValue: try r.u8("encryption")) else {
                throw FrameError(.invalidValue(field: "encryption", reason: "must be 0 (none), 1 (optional) or 2 (required)"), fieldOffset: encOffset)
            }
            let roleOffset = r.offset
            guard let role = Role(rawValue: try r.u8("role")) else {
                throw FrameError(.invalidValue(field: "role", reason: "must be 0 (dialer) or 1 (listener)"), fieldOffset: roleOffset)
            }
            frame = .hello(Hello(versions: versions, peerID: peerID, displayName: name, encryption: enc, role: role))
        case .invite:
            let invitationID = try r.u32("invitation id")
            let context = try r.blob("context", limit: Wire.maxContext)
            frame = .invite(Invite(invitationID: invitationID, context: context, timeoutMilliseconds: try r.u32("timeout")))
        case .inviteReply:
            let invitationID = try r.u32("invitation id")
            let code = try r.u16("reason")
            frame = .inviteReply(InviteReply(invitationID: invitationID, declineReason: code == 0 ? nil : Reason(rawValue: code)))
        case .ping: frame = .ping(try r.u64("value"))
        case .pong: frame = .pong(try r.u64("value"))
        case .close:
            let reason = Reason(rawValue: try r.u16("reason"))
            frame = .close(reason, text: try r.string("text", limit: Wire.maxCloseText))
        case .credit:
            let s = try r.u32("stream bytes")
            frame = .credit(streamID: id, streamBytes: s, connectionBytes: try r.u32("connection bytes"))
        case .message:
            let messageID = try r.u32("message id")
            // A slice of the payload, not a copy: the assembler copies it once, into the
            // message (or takes it whole when the payload was gathered apart).
            frame = .message(MessageFragment(messageID: messageID, data: r.restSlice(), isFinal: flags & FrameFlags.fin.rawValue != 0))
        case .unreliable: frame = .unreliable(r.rest())
        case .resourceOffer:
            let name = try r.string("name", limit: Wire.maxResourceName)
            let size = try r.u64("size")
            let hash = try r.fixed(32, "sha256")
            let media = try r.string("media type", limit: Wire.maxMediaType)
            frame = .resourceOffer(ResourceOffer(resourceID: id, name: name, size: size, sha256: hash, mediaType: media))
        case .resourceAccept: frame = .resourceAccept(resourceID: id, offset: try r.u64("offset"))
        case .resourceDecline: frame = .resourceDecline(resourceID: id, reason: Reason(rawValue: try r.u16("reason")))
        case .resourceData: frame = .resourceData(resourceID: id, data: r.rest())
        case .resourceDone: frame = .resourceDone(resourceID: id)
        case .resourceCancel: frame = .resourceCancel(resourceID: id, reason: Reason(rawValue: try r.u16("reason")))
        case .streamOpen: frame = .streamOpen(streamID: id, name: try r.string("name", limit: Wire.maxName))
        case .streamData: frame = .streamData(streamID: id, data: r.rest())
        case .streamClose: frame = .streamClose(streamID: id, reason: Reason(rawValue: try r.u16("reason")))
        }
        try r.finish()
        // Value rules (a version 0, an empty name) name their field but no offset.
        try FrameRules.check(frame)
        return frame
    }
}

/// The rules on field values that go beyond sizes, shared by the encoder and the decoder.
enum FrameRules {
    static func check(_ frame: Frame) throws(FrameError) {
        func bad(_ field: String, _ why: String) -> FrameError { FrameError(.invalidValue(field: field, reason: why)) }
        switch frame {
        case .hello(let h):
            guard (1...Wire.maxVersions).contains(h.versions.count) else {
                throw bad("version count", "must be 1 to \(Wire.maxVersions), got \(h.versions.count)")
            }
            guard !h.versions.contains(0) else { throw bad("versions", "version 0 does not exist") }
            do { _ = try SessionValidation.displayName(h.displayName) } catch { throw bad("display name", error.reason) }
        case .invite(let i):
            guard (1...Invite.maxTimeoutMilliseconds).contains(i.timeoutMilliseconds) else {
                throw bad("timeout", "must be 1 to \(Invite.maxTimeoutMilliseconds) ms, got \(i.timeoutMilliseconds)")
            }
        case .inviteReply(let r):
            if r.declineReason == .normal { throw bad("reason", "a decline needs a reason other than 0") }
        case .message(let m):
            guard m.messageID != 0 else { throw bad("message id", "must not be 0") }
            guard m.data.count <= Wire.maxFragmentData else {
                throw FrameError(.tooLong(field: "data", length: m.data.count, limit: Wire.maxFragmentData))
            }
        case .unreliable(let d), .resourceData(_, let d), .streamData(_, let d):
            guard d.count <= Wire.maxPayload else { throw FrameError(.tooLong(field: "data", length: d.count, limit: Wire.maxPayload)) }
        case .resourceOffer(let o):
            // Any text: a peer's name is never used as a path (the receiver sanitises it).
            guard !o.name.isEmpty else { throw bad("name", "must not be empty") }
            guard !o.mediaType.isEmpty else { throw bad("media type", "must not be empty") }
        case .streamOpen(_, let name):
            try checkName(name)
        case .resourceAccept(let id, _), .resourceDecline(let id, _), .resourceDone(let id), .resourceCancel(let id, _),
             .streamClose(let id, _):
            guard id != 0 else { throw FrameError(.badStreamID(id)) }
        case .ping, .pong, .close, .credit:
            break
        }
        if frame.type.streamRule == .nonZero && frame.streamID == 0 { throw FrameError(.badStreamID(0)) }
    }

    /// A stream's name: not empty, no '/', no control characters (it is shown to users and
    /// may name a socket).
    static func checkName(_ name: String) throws(FrameError) {
        guard !name.isEmpty else { throw FrameError(.invalidValue(field: "name", reason: "must not be empty")) }
        guard !name.unicodeScalars.contains(where: { $0 == "/" || $0.value < 0x20 || $0.value == 0x7F }) else {
            throw FrameError(.invalidValue(field: "name", reason: "must not contain '/' or control characters"))
        }
    }
}
