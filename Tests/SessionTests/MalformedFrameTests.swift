import Testing
@testable import Session

/// A table of malformed frames: each yields one specific error naming the frame, the field
/// and its offset, the same in every chunking.
@Suite struct MalformedFrameTests {
    struct Case: Sendable, CustomStringConvertible {
        let name: String
        let bytes: [UInt8]
        let kind: FrameError.Kind
        let type: UInt8
        let fieldOffset: Int?
        var description: String { name }
    }

    static let name = Array("a".utf8)
    static func u16(_ v: UInt16) -> [UInt8] { [UInt8(v >> 8), UInt8(v & 0xFF)] }
    static func u32(_ v: UInt32) -> [UInt8] { [24, 16, 8, 0].map { UInt8(truncatingIfNeeded: v >> $0) } }
    /// A HELLO payload with each field replaceable.
    static func hello(versions: [UInt8] = [1, 0, 1], name: [UInt8] = name, encryption: UInt8 = 1, role: UInt8 = 0) -> [UInt8] {
        versions + [UInt8](repeating: 0x11, count: 32) + u16(UInt16(name.count)) + name + [encryption, role]
    }

    static let cases: [Case] = [
        Case(name: "version 2", bytes: Fixtures.header(version: 2, type: 0x04, length: 8) + [UInt8](repeating: 0, count: 8),
             kind: .badVersion(2), type: 0x04, fieldOffset: nil),
        Case(name: "unknown type", bytes: Fixtures.header(type: 0x7E, length: 0), kind: .unknownType(0x7E), type: 0x7E, fieldOffset: nil),
        Case(name: "oversize", bytes: Fixtures.header(type: 0x10, length: 0xFFFF_FFFF),
             kind: .oversize(length: 0xFFFF_FFFF, limit: 65_536), type: 0x10, fieldOffset: nil),
        Case(name: "flags", bytes: Fixtures.raw(.ping, flags: 0x0001, [UInt8](repeating: 0, count: 8)),
             kind: .unexpectedFlags(1), type: 0x04, fieldOffset: nil),
        Case(name: "stream id on PING", bytes: Fixtures.raw(.ping, stream: 5, [UInt8](repeating: 0, count: 8)),
             kind: .badStreamID(5), type: 0x04, fieldOffset: nil),
        Case(name: "no stream id on RESOURCE_DATA", bytes: Fixtures.raw(.resourceData, [1]),
             kind: .badStreamID(0), type: 0x23, fieldOffset: nil),
        Case(name: "short PING", bytes: Fixtures.raw(.ping, [0, 0, 0, 0]),
             kind: .truncated(field: "value", needed: 8, available: 4), type: 0x04, fieldOffset: 0),
        Case(name: "PING with a byte more", bytes: Fixtures.raw(.ping, [UInt8](repeating: 0, count: 9)),
             kind: .trailingBytes(count: 1), type: 0x04, fieldOffset: 8),
        Case(name: "short INVITE", bytes: Fixtures.raw(.invite, [0, 0]),
             kind: .truncated(field: "invitation id", needed: 4, available: 2), type: 0x02, fieldOffset: 0),
        Case(name: "CLOSE text cut short", bytes: Fixtures.raw(.close, u16(8) + u16(10) + [0x61, 0x62, 0x63]),
             kind: .truncated(field: "text", needed: 10, available: 3), type: 0x06, fieldOffset: 4),
        Case(name: "CLOSE text not UTF-8", bytes: Fixtures.raw(.close, u16(8) + u16(2) + [0xC3, 0x28]),
             kind: .invalidUTF8(field: "text"), type: 0x06, fieldOffset: 2),
        Case(name: "CLOSE text too long", bytes: Fixtures.raw(.close, u16(8) + u16(257) + [UInt8](repeating: 0x61, count: 257)),
             kind: .tooLong(field: "text", length: 257, limit: 256), type: 0x06, fieldOffset: 2),
        Case(name: "display name too long", bytes: Fixtures.raw(.hello, hello(name: [UInt8](repeating: 0x62, count: 64))),
             kind: .tooLong(field: "display name", length: 64, limit: 63), type: 0x01, fieldOffset: 35),
        Case(name: "display name with a control character", bytes: Fixtures.raw(.hello, hello(name: [0x61, 0x07])),
             kind: .invalidValue(field: "display name", reason: "must not contain control characters (found U+7)"), type: 0x01, fieldOffset: nil),
        Case(name: "HELLO without versions", bytes: Fixtures.raw(.hello, hello(versions: [0])),
             kind: .invalidValue(field: "version count", reason: "must be 1 to 16, got 0"), type: 0x01, fieldOffset: 0),
        Case(name: "HELLO with version 0", bytes: Fixtures.raw(.hello, hello(versions: [1, 0, 0])),
             kind: .invalidValue(field: "versions", reason: "version 0 does not exist"), type: 0x01, fieldOffset: nil),
        Case(name: "HELLO encryption 3", bytes: Fixtures.raw(.hello, hello(encryption: 3)),
             kind: .invalidValue(field: "encryption", reason: "must be 0 (none), 1 (optional) or 2 (required)"), type: 0x01, fieldOffset: 38),
        Case(name: "HELLO role 2", bytes: Fixtures.raw(.hello, hello(role: 2)),
             kind: .invalidValue(field: "role", reason: "must be 0 (dialer) or 1 (listener)"), type: 0x01, fieldOffset: 39),
        Case(name: "HELLO cut in the peer id", bytes: Fixtures.raw(.hello, [1, 0, 1] + [UInt8](repeating: 0, count: 20)),
             kind: .truncated(field: "peer id", needed: 32, available: 20), type: 0x01, fieldOffset: 3),
        Case(name: "INVITE context too long", bytes: Fixtures.raw(.invite, u32(1) + u32(4097) + [UInt8](repeating: 0, count: 4097) + u32(1000)),
             kind: .tooLong(field: "context", length: 4097, limit: 4096), type: 0x02, fieldOffset: 4),
        Case(name: "INVITE timeout 0", bytes: Fixtures.raw(.invite, u32(1) + u32(0) + u32(0)),
             kind: .invalidValue(field: "timeout", reason: "must be 1 to 600000 ms, got 0"), type: 0x02, fieldOffset: nil),
        Case(name: "MESSAGE id 0", bytes: Fixtures.raw(.message, u32(0) + [1]),
             kind: .invalidValue(field: "message id", reason: "must not be 0"), type: 0x10, fieldOffset: nil),
        Case(name: "MESSAGE without its id", bytes: Fixtures.raw(.message, [0, 1]),
             kind: .truncated(field: "message id", needed: 4, available: 2), type: 0x10, fieldOffset: 0),
        Case(name: "RESOURCE_OFFER empty name", bytes: Fixtures.raw(.resourceOffer, stream: 2,
             u16(0) + [UInt8](repeating: 0, count: 8) + Fixtures.hash + u16(1) + [0x78]),
             kind: .invalidValue(field: "name", reason: "must not be empty"), type: 0x20, fieldOffset: nil),
        Case(name: "RESOURCE_OFFER name too long", bytes: Fixtures.raw(.resourceOffer, stream: 2,
             u16(1025) + [UInt8](repeating: 0x61, count: 1025) + [UInt8](repeating: 0, count: 8) + Fixtures.hash + u16(1) + [0x78]),
             kind: .tooLong(field: "name", length: 1025, limit: 1024), type: 0x20, fieldOffset: 0),
        Case(name: "STREAM_OPEN name with a slash", bytes: Fixtures.raw(.streamOpen, stream: 2, u16(3) + Array("a/b".utf8)),
             kind: .invalidValue(field: "name", reason: "must not contain '/' or control characters"), type: 0x30, fieldOffset: nil),
        Case(name: "RESOURCE_OFFER cut in the hash", bytes: Fixtures.raw(.resourceOffer, stream: 2,
             u16(1) + [0x61] + [UInt8](repeating: 0, count: 8) + [1, 2, 3]),
             kind: .truncated(field: "sha256", needed: 32, available: 3), type: 0x20, fieldOffset: 11),
        Case(name: "RESOURCE_ACCEPT with trailing bytes", bytes: Fixtures.raw(.resourceAccept, stream: 2, [UInt8](repeating: 0, count: 10)),
             kind: .trailingBytes(count: 2), type: 0x21, fieldOffset: 8),
        Case(name: "CREDIT cut short", bytes: Fixtures.raw(.credit, stream: 2, u32(1) + [0]),
             kind: .truncated(field: "connection bytes", needed: 4, available: 1), type: 0x07, fieldOffset: 4),
        Case(name: "STREAM_OPEN name length cut", bytes: Fixtures.raw(.streamOpen, stream: 2, [0]),
             kind: .truncated(field: "name length", needed: 2, available: 1), type: 0x30, fieldOffset: 0),
    ]

    /// A valid PING first, so every error is at frame 1, stream offset 20.
    static let prefix = Fixtures.encode([.ping(1)])

    @Test(arguments: cases)
    func eachMalformedFrameHasItsError(_ c: Case) {
        let expected = FrameError(c.kind, frameType: c.type, frameIndex: 1, streamOffset: 20, fieldOffset: c.fieldOffset)
        let bytes = Self.prefix + c.bytes
        let whole = FrameDecoderTests.run([bytes])
        #expect(whole.frames == [.ping(1)])
        #expect(whole.error == expected)
        for size in [1, 3, 7] {
            #expect(FrameDecoderTests.run(FrameDecoderTests.chunks(bytes, size: size)) == whole, "chunk size \(size)")
        }
    }

    @Test func errorsSayWhatAndWhere() {
        let e = FrameError(.tooLong(field: "context", length: 4097, limit: 4096), frameType: 0x02, frameIndex: 3, streamOffset: 120, fieldOffset: 4)
        #expect(e.description == "frame 3 (INVITE at stream offset 120): field \"context\" at payload offset 4: context is 4097 long, at most 4096")
        let u = FrameError(.unknownType(0x7E), frameType: 0x7E, frameIndex: 0, streamOffset: 0)
        #expect(u.description == "frame 0 (type 0x7e at stream offset 0): unknown frame type 0x7e without the ignorable flag")
        #expect(u.field == "type")
    }

    @Test func theEncoderRefusesWhatTheDecoderWould() {
        func fails(_ f: Frame, _ kind: FrameError.Kind, at offset: Int? = nil) {
            #expect(throws: FrameError(kind, frameType: f.type.rawValue, fieldOffset: offset)) { try FrameEncoder.encode(f) }
        }
        fails(.invite(Invite(invitationID: 1, context: [UInt8](repeating: 0, count: 4097))),
              .tooLong(field: "context", length: 4097, limit: 4096), at: 4)
        fails(.unreliable([UInt8](repeating: 0, count: 65_537)), .tooLong(field: "data", length: 65_537, limit: 65_536))
        fails(.message(MessageFragment(messageID: 1, data: [UInt8](repeating: 0, count: 65_533), isFinal: true)),
              .tooLong(field: "data", length: 65_533, limit: 65_532))
        fails(.streamData(streamID: 0, data: []), .badStreamID(0))
        fails(.inviteReply(InviteReply(invitationID: 1, declineReason: .normal)), .invalidValue(field: "reason", reason: "a decline needs a reason other than 0"))
        fails(.hello(Hello(peerID: Fixtures.peer(1), displayName: "", encryption: .none, role: .dialer)),
              .invalidValue(field: "display name", reason: "must not be empty"))
        fails(.close(.normal, text: String(repeating: "é", count: 129)), .tooLong(field: "text", length: 258, limit: 256), at: 2)
    }
}
