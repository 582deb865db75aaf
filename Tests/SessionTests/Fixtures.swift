@testable import Session

/// Values shared by the session tests.
enum Fixtures {
    /// A peer ID whose 32 bytes are all `byte`.
    static func peer(_ byte: UInt8) -> PeerID {
        guard let id = PeerID(bytes: [UInt8](repeating: byte, count: 32)) else { fatalError("32 bytes make a peer ID") }
        return id
    }

    /// A peer ID from 64 hex digits.
    static func peer(hex: String) -> PeerID {
        let chars = Array(hex.utf8)
        var bytes: [UInt8] = []
        for i in stride(from: 0, to: chars.count, by: 2) {
            bytes.append(UInt8(String(decoding: chars[i..<(i + 2)], as: UTF8.self), radix: 16) ?? 0)
        }
        guard let id = PeerID(bytes: bytes) else { fatalError("64 hex digits make a peer ID") }
        return id
    }

    static let hash = [UInt8](0..<32)

    /// One frame of every type, with non-trivial fields.
    static let everyType: [Frame] = [
        .hello(Hello(versions: [1, 2], peerID: peer(0xA5), displayName: "Kitchen Pi ☕", encryption: .optional, role: .dialer)),
        .invite(Invite(invitationID: 7, context: Array("join me".utf8), timeoutMilliseconds: 30_000)),
        .inviteReply(InviteReply(invitationID: 7, declineReason: nil)),
        .inviteReply(InviteReply(invitationID: 7, declineReason: .full)),
        .ping(0x0102_0304_0506_0708),
        .pong(0xFFFF_FFFF_FFFF_FFFF),
        .close(.protocolError, text: "bad frame"),
        .credit(streamID: 3, streamBytes: 65_536, connectionBytes: 1_048_576),
        .message(MessageFragment(messageID: 1, data: Array("hello".utf8), isFinal: false)),
        .message(MessageFragment(messageID: 1, data: Array(" world".utf8), isFinal: true)),
        .unreliable([1, 2, 3]),
        .resourceOffer(ResourceOffer(resourceID: 5, name: "photo.jpg", size: 1 << 40, sha256: hash, mediaType: "image/jpeg")),
        .resourceAccept(resourceID: 5, offset: 4096),
        .resourceDecline(resourceID: 5, reason: .declined),
        .resourceData(resourceID: 5, data: [9, 8, 7]),
        .resourceDone(resourceID: 5),
        .resourceCancel(resourceID: 5, reason: .cancelled),
        .streamOpen(streamID: 9, name: "audio"),
        .streamData(streamID: 9, data: [0xFF]),
        .streamClose(streamID: 9, reason: .normal),
    ]

    /// The bytes of `frames`, one after another.
    static func encode(_ frames: [Frame]) -> [UInt8] {
        var out: [UInt8] = []
        for f in frames {
            do { try FrameEncoder.append(f, to: &out) } catch { fatalError("fixture does not encode: \(error)") }
        }
        return out
    }

    /// A header with the given fields.
    static func header(version: UInt8 = 1, type: UInt8, flags: UInt16 = 0, stream: UInt32 = 0, length: UInt32) -> [UInt8] {
        var w = ByteWriter()
        w.u8(version)
        w.u8(type)
        w.u16(flags)
        w.u32(stream)
        w.u32(length)
        return w.bytes
    }

    /// A frame with a raw payload (its header's length is the payload's).
    static func raw(_ type: FrameType, flags: UInt16 = 0, stream: UInt32 = 0, _ payload: [UInt8]) -> [UInt8] {
        header(type: type.rawValue, flags: flags, stream: stream, length: UInt32(payload.count)) + payload
    }
}

/// A small deterministic generator (SplitMix64), so "random" splits repeat exactly.
struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
