import Session

/// The session state machine (`ConnectionMachine`) driven by a program read from the input:
/// frames the peer could send (well-formed ones aimed at the handshake and invitation, and
/// whatever the frame decoder makes of raw bytes), local commands, TLS outcomes and time,
/// and messages and datagrams sent as the daemon sends them (`send(message:into:)` and
/// `send(datagram:into:)` through a bounded `SendScheduler`, whose frames go out within
/// credit).
///
/// Frames are built, not only decoded, because a peer that gets past HELLO must name a
/// matching role, versions and peer ID; random bytes would almost never get there, and the
/// states after the handshake are where most rules live.
enum MachineTarget {
    static let localID = PeerID(bytes: [UInt8](repeating: 0x11, count: 32))!
    static let peerID = PeerID(bytes: [UInt8](repeating: 0xA5, count: 32))!
    static let strangerID = PeerID(bytes: [UInt8](repeating: 0x5A, count: 32))!

    /// Properties, after every step:
    /// - a closed machine stays closed with the same reason, and sends, starts and closes nothing;
    /// - the close is reported once (`disconnected`) and the transport closed at most once;
    /// - a frame this side rejects (it closes the connection for it) changes nothing but the
    ///   close: no version, encryption, pairing code or credit learnt from it, no other
    ///   event, no frame sent but CLOSE. (The peer's HELLO is kept even when rejected, on
    ///   purpose: the disconnect report names who it was.)
    /// - every frame the machine sends encodes, and decodes back to itself.
    static func run(_ input: [UInt8]) throws(PropertyViolation) {
        var reader = ByteReader(input)
        let setup = reader.byte()
        let role: Role = setup & 1 == 0 ? .dialer : .listener
        let encryptions = EncryptionPreference.allCases
        var config = ConnectionConfig(localID: localID, displayName: "fuzz", encryption: encryptions[Int(setup >> 1) % 3],
                                      expectedPeer: setup & 0x08 != 0 ? peerID : nil)
        if setup & 0x10 != 0 { config.versions = [1, 2] }
        var machine = ConnectionMachine(config: config, role: role)
        var now = ContinuousClock.now
        var disconnects = 0
        var transportCloses = 0

        // Small, so that `busy` comes up.
        var scheduler = SendScheduler(maxQueuedBytes: 200_000, maxUnreliableFrames: 4)

        var steps = 0
        while !reader.isAtEnd && steps < 256 {
            steps += 1
            let before = machine
            let op = reader.byte()
            if op >> 3 == 9 || op >> 3 == 10 {
                // A message or a datagram: refused when closed (nothing queued), and every
                // frame the scheduler then gives encodes and decodes back to itself.
                let bytes = reader.shortBlob()
                let result = op >> 3 == 9 ? machine.send(message: bytes, into: &scheduler) : machine.send(datagram: bytes, into: &scheduler)
                if case .closed = before.state {
                    guard case .refused = result else { throw PropertyViolation("a closed machine answered \(result) to a send") }
                }
                while let frame = machine.nextFrame(from: &scheduler) { try checkRoundTrip(frame) }
                continue
            }
            let input = nextInput(op, &reader, role: role, now: &now)
            let actions = machine.handle(input, now: now)

            for action in actions {
                switch action {
                case .emit(.disconnected): disconnects += 1
                case .closeTransport: transportCloses += 1
                case .send(let frame): try checkRoundTrip(frame)
                default: break
                }
            }
            try check(disconnects <= 1, "the close was reported \(disconnects) times; last input \(input)")
            try check(transportCloses <= 1, "the transport was closed \(transportCloses) times; last input \(input)")

            if case .closed = before.state {
                try check(machine.state == before.state, "a closed machine moved to \(machine.state) on \(input)")
                for action in actions {
                    switch action {
                    case .send, .startTLS, .closeTransport:
                        throw PropertyViolation("a closed machine did \(action) on \(input)")
                    default: break
                    }
                }
            }
            if case .frame(let frame) = input, rejected(actions) {
                try checkRejection(frame, before: before, after: machine, actions: actions)
            }
        }
    }

    /// True when this side decided to close on this input (a rejection, not the peer's CLOSE).
    private static func rejected(_ actions: [ConnectionAction]) -> Bool {
        actions.contains { if case .emit(.disconnected(_, _, byPeer: false)) = $0 { true } else { false } }
    }

    private static func checkRejection(_ frame: Frame, before: ConnectionMachine, after: ConnectionMachine,
                                       actions: [ConnectionAction]) throws(PropertyViolation) {
        switch after.state {
        case .closing, .closed: break
        default: throw PropertyViolation("a rejected \(frame.type) left the machine in \(after.state)")
        }
        try check(after.version == before.version, "a rejected \(frame.type) set the version to \(String(describing: after.version))")
        try check(after.encrypted == before.encrypted, "a rejected \(frame.type) set encryption to \(String(describing: after.encrypted))")
        try check(after.pairingCode == before.pairingCode, "a rejected \(frame.type) changed the pairing code")
        try check(after.sendCredit == before.sendCredit, "a rejected \(frame.type) changed the send credit")
        for action in actions {
            switch action {
            case .emit(.disconnected), .send(.close), .closeTransport, .armTimer, .cancelTimer: break
            default: throw PropertyViolation("a rejected \(frame.type) also did \(action)")
            }
        }
    }

    // MARK: The program

    /// The next input: one opcode byte, then its operands. Every opcode advances the clock a
    /// little, so deadlines come due in long programs even without explicit ticks.
    private static func nextInput(_ op: UInt8, _ r: inout ByteReader, role: Role, now: inout ContinuousClock.Instant) -> ConnectionInput {
        let input = builtInput(op, &r, role: role, now: &now)
        // A built frame the wire could not carry (a bound broken) is not something a peer
        // can send: it goes through the encoder and decoder, and is dropped if they refuse it.
        guard case .frame(let frame) = input else { return input }
        guard let bytes = try? FrameEncoder.encode(frame) else { return .tick }
        return decodedFrame(bytes)
    }

    private static func builtInput(_ op: UInt8, _ r: inout ByteReader, role: Role, now: inout ContinuousClock.Instant) -> ConnectionInput {
        now += .milliseconds(Int(op & 0x07) * 50)
        switch op >> 3 {
        case 0: return .start
        case 1:
            // The peer's HELLO: usually the other role and a version in common.
            let bits = r.byte()
            let id = bits & 0x03 == 0 ? strangerID : (bits & 0x03 == 1 ? localID : peerID)
            let versions: [UInt16] = bits & 0x04 != 0 ? [UInt16(r.byte())] : [1]
            let peerRole: Role = bits & 0x08 != 0 ? role : (role == .dialer ? .listener : .dialer)
            let encryption = EncryptionPreference.allCases[Int(bits >> 4) % 3]
            return .frame(.hello(Hello(versions: versions, peerID: id, displayName: "peer", encryption: encryption, role: peerRole)))
        case 2: return decodedFrame(r.shortBlob())
        case 3:
            let bits = r.byte()
            let code = PairingCode(exporterBytes: Array((r.bytes(8) + [UInt8](repeating: 0, count: 8)).prefix(8)))!
            return .tlsEstablished(certificateID: bits & 1 == 0 ? peerID : strangerID, pairingCode: code)
        case 4: return .tlsFailed("handshake failure")
        case 5: return .transportClosed
        case 6: return .invite(context: r.shortBlob(), timeout: .milliseconds(Int(r.uint16()) * 16))
        case 7: return .accept
        case 8: return .decline(Reason(rawValue: UInt16(r.byte())))
        case 11: return .close(Reason(rawValue: UInt16(r.byte())), text: String(decoding: r.shortBlob(), as: UTF8.self))
        case 12: return .consumed(streamID: UInt32(r.byte() & 3), bytes: Int(r.uint32() >> 8))
        case 13:
            now += .milliseconds(Int(r.uint16()) * 4)
            return .tick
        case 14: return .frame(r.byte() & 1 == 0 ? .ping(r.uint64()) : .pong(r.uint64()))
        case 15:
            let id = UInt32(r.byte() & 3)
            let ms = UInt32(r.uint16()) * 16
            return .frame(.invite(Invite(invitationID: id, context: r.shortBlob(), timeoutMilliseconds: ms)))
        case 16:
            let id = UInt32(r.byte() & 3)
            let reason = r.byte()
            return .frame(.inviteReply(InviteReply(invitationID: id, declineReason: reason == 0 ? nil : Reason(rawValue: UInt16(reason)))))
        case 17:
            let bits = r.byte()
            let data = bits & 0x80 != 0 ? [UInt8](repeating: 0xEE, count: min(Int(r.uint16()) * 2, Wire.maxFragmentData)) : r.shortBlob()
            return .frame(.message(MessageFragment(messageID: UInt32(bits & 0x07), data: data, isFinal: bits & 0x08 != 0)))
        case 18:
            return .frame(.credit(streamID: UInt32(r.byte() & 3), streamBytes: r.uint32(), connectionBytes: r.uint32()))
        case 19: return .frame(.close(Reason(rawValue: UInt16(r.byte())), text: "bye"))
        case 20: return .frame(.unreliable(r.shortBlob()))
        case 21:
            let stream = UInt32(r.byte() & 3) + 1
            return .frame(r.byte() & 1 == 0 ? .streamData(streamID: stream, data: r.shortBlob())
                                            : .resourceData(resourceID: stream, data: r.shortBlob()))
        default: return .tick
        }
    }

    /// The first frame the decoder reads from `bytes`, or its error, as the connection would
    /// feed them; too few bytes for a frame give a tick (nothing arrived).
    private static func decodedFrame(_ bytes: [UInt8]) -> ConnectionInput {
        var decoder = FrameDecoder()
        decoder.append(bytes)
        switch Result(catching: { () throws(FrameError) in try decoder.nextFrame() }) {
        case .success(let frame?): return .frame(frame)
        case .success(nil): return .tick
        case .failure(let error): return .decodeFailed(error)
        }
    }
}
