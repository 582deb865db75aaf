import Testing
@testable import Session

/// encode∘decode is the identity for every frame type, at the boundaries of every field.
@Suite struct FrameRoundTripTests {
    static func roundTrip(_ frame: Frame) throws -> Frame? {
        var d = FrameDecoder()
        d.append(try FrameEncoder.encode(frame))
        let back = try d.nextFrame()
        #expect(d.bufferedByteCount == 0)
        return back
    }

    static let maxName = String(repeating: "n", count: Wire.maxName)
    /// A resource name may be anything (the receiver sanitises it): a path with a NUL and a
    /// newline, 1024 bytes.
    static let maxResourceName = "../../etc/\u{0}\n" + String(repeating: "r", count: Wire.maxResourceName - 12)
    static let boundaries: [Frame] = [
        // Empty payloads and the smallest values.
        .hello(Hello(versions: [1], peerID: Fixtures.peer(0), displayName: "x", encryption: .none, role: .listener)),
        .invite(Invite(invitationID: 0, context: [], timeoutMilliseconds: 1)),
        .inviteReply(InviteReply(invitationID: 0, declineReason: .timeout)),
        .ping(0), .pong(0),
        .close(.normal, text: ""),
        .close(Reason(rawValue: 0xFFFF), text: String(repeating: "é", count: 128)),
        .credit(streamID: 0, streamBytes: 0, connectionBytes: 0),
        .credit(streamID: 0xFFFF_FFFF, streamBytes: 0xFFFF_FFFF, connectionBytes: 0xFFFF_FFFF),
        .message(MessageFragment(messageID: 0xFFFF_FFFF, data: [], isFinal: false)),
        .unreliable([]),
        .resourceData(resourceID: 1, data: []),
        .streamData(streamID: 0xFFFF_FFFF, data: []),
        .resourceAccept(resourceID: 1, offset: 0xFFFF_FFFF_FFFF_FFFF),
        // The largest values.
        .hello(Hello(versions: Array(1...16), peerID: Fixtures.peer(0xFF), displayName: String(repeating: "é", count: 31) + "e",
                     encryption: .required, role: .dialer)),
        .invite(Invite(invitationID: 0xFFFF_FFFF, context: [UInt8](repeating: 0xC3, count: Wire.maxContext),
                       timeoutMilliseconds: Invite.maxTimeoutMilliseconds)),
        .message(MessageFragment(messageID: 3, data: [UInt8](repeating: 0x55, count: Wire.maxFragmentData), isFinal: true)),
        .unreliable([UInt8](repeating: 0xAA, count: Wire.maxPayload)),
        .resourceData(resourceID: 0xFFFF_FFFF, data: [UInt8](repeating: 1, count: Wire.maxPayload)),
        .streamData(streamID: 1, data: [UInt8](repeating: 2, count: Wire.maxPayload)),
        .resourceOffer(ResourceOffer(resourceID: 2, name: maxResourceName, size: .max, sha256: Fixtures.hash,
                                     mediaType: String(repeating: "m", count: Wire.maxMediaType))),
        .streamOpen(streamID: 2, name: maxName),
        .streamClose(streamID: 2, reason: Reason(rawValue: 999)),
    ]

    @Test(arguments: Fixtures.everyType + boundaries)
    func encodeThenDecodeIsTheIdentity(_ frame: Frame) throws {
        #expect(try Self.roundTrip(frame) == frame)
    }

    @Test func everyTypeIsCovered() {
        let covered = Set((Fixtures.everyType + Self.boundaries).map(\.type))
        #expect(covered == Set(FrameType.allCases))
    }

    @Test func theHeaderIsBigEndianAsDocumented() throws {
        let bytes = try FrameEncoder.encode(.message(MessageFragment(messageID: 0x0102_0304, data: [0xEE], isFinal: true)))
        #expect(bytes == [1, 0x10, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0, 5, 1, 2, 3, 4, 0xEE])
        let credit = try FrameEncoder.encode(.credit(streamID: 0x0A0B_0C0D, streamBytes: 0x100, connectionBytes: 0x10000))
        #expect(credit == [1, 0x07, 0, 0, 0x0A, 0x0B, 0x0C, 0x0D, 0, 0, 0, 8, 0, 0, 1, 0, 0, 1, 0, 0])
    }

    @Test func helloLayoutIsAsDocumented() throws {
        let hello = Frame.hello(Hello(versions: [1], peerID: Fixtures.peer(0x22), displayName: "Pi", encryption: .required, role: .listener))
        let bytes = try FrameEncoder.encode(hello)
        let payload = [1, 0, 1] + [UInt8](repeating: 0x22, count: 32) + [0, 2, 0x50, 0x69, 2, 1]
        #expect(bytes == [1, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, UInt8(payload.count)] + payload)
    }

    @Test func theLargestFrameIsExactlyAtTheLimit() throws {
        let bytes = try FrameEncoder.encode(.unreliable([UInt8](repeating: 0, count: Wire.maxPayload)))
        #expect(bytes.count == Wire.headerSize + Wire.maxPayload)
        #expect(Array(bytes[8..<12]) == [0, 1, 0, 0])
    }

    @Test func theIgnorableFlagIsAcceptedOnKnownTypes() throws {
        var d = FrameDecoder()
        d.append(Fixtures.raw(.ping, flags: 0x8000, [0, 0, 0, 0, 0, 0, 0, 9]))
        #expect(try d.nextFrame() == .ping(9))
    }
}
