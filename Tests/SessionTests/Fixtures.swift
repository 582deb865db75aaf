import Testing
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

/// Two connection machines joined by an in-memory byte stream (frames are encoded and
/// decoded on the way), a fake TLS that succeeds when both sides have started it, and a
/// manual clock. Records every action.
struct MachineLink {
    enum Side: Hashable { case dialer, listener }

    var machines: [Side: ConnectionMachine]
    var now: ContinuousClock.Instant
    let t0: ContinuousClock.Instant
    /// Bytes on their way to each side.
    var inbox: [Side: [UInt8]] = [.dialer: [], .listener: []]
    var decoders: [Side: FrameDecoder] = [.dialer: FrameDecoder(), .listener: FrameDecoder()]
    var events: [Side: [ConnectionEvent]] = [.dialer: [], .listener: []]
    var sent: [Side: [Frame]] = [.dialer: [], .listener: []]
    var tlsStarted: [Side: Bool] = [:]
    var transportClosed: [Side: Bool] = [:]
    var timers: [Side: ContinuousClock.Instant] = [:]
    /// The certificate each side shows in the fake TLS (its own ID unless a test changes it).
    var certificate: [Side: PeerID]
    var pairing = PairingCode(exporterBytes: [0, 1, 2, 3, 4, 5, 6, 7])

    static let dialerID = Fixtures.peer(0x10)
    static let listenerID = Fixtures.peer(0x20)

    init(dialer: EncryptionPreference = .optional, listener: EncryptionPreference = .optional,
         ids: (dialer: PeerID, listener: PeerID) = (dialerID, listenerID), start: ContinuousClock.Instant = .now,
         configure: (inout ConnectionConfig, Side) -> Void = { _, _ in }) {
        var dc = ConnectionConfig(localID: ids.dialer, displayName: "dialer", encryption: dialer, expectedPeer: ids.listener)
        var lc = ConnectionConfig(localID: ids.listener, displayName: "listener", encryption: listener)
        configure(&dc, .dialer)
        configure(&lc, .listener)
        machines = [.dialer: ConnectionMachine(config: dc, role: .dialer), .listener: ConnectionMachine(config: lc, role: .listener)]
        certificate = [.dialer: ids.dialer, .listener: ids.listener]
        t0 = start
        now = t0
    }

    static func other(_ s: Side) -> Side { s == .dialer ? .listener : .dialer }

    func machine(_ s: Side) -> ConnectionMachine { machines[s] ?? ConnectionMachine(config: ConnectionConfig(localID: Self.dialerID, displayName: "x", encryption: .none), role: .dialer) }
    func state(_ s: Side) -> ConnectionState { machine(s).state }

    /// Feeds an input to one side and carries out its actions (frames go to the other side's inbox).
    @discardableResult
    mutating func feed(_ side: Side, _ input: ConnectionInput) -> [ConnectionAction] {
        guard var m = machines[side] else { return [] }
        let actions = m.handle(input, now: now)
        machines[side] = m
        for a in actions {
            switch a {
            case .send(let f):
                sent[side, default: []].append(f)
                if transportClosed[side] != true {
                    inbox[Self.other(side), default: []] += (try? FrameEncoder.encode(f)) ?? []
                }
            case .startTLS: tlsStarted[side] = true
            case .emit(let e): events[side, default: []].append(e)
            case .armTimer(let at): timers[side] = at
            case .cancelTimer: timers[side] = nil
            case .closeTransport: transportClosed[side] = true
            }
        }
        return actions
    }

    /// Sends a message or a datagram as the daemon does (`send(message:into:)` through a
    /// scheduler), and its frames that the peer's windows allow now.
    mutating func send(_ side: Side, message: [UInt8]? = nil, datagram: [UInt8]? = nil) {
        guard var m = machines[side] else { return }
        var scheduler = SendScheduler()
        let result = message.map { m.send(message: $0, into: &scheduler) } ?? datagram.map { m.send(datagram: $0, into: &scheduler) }
        precondition(result == .queued, "not queued: \(String(describing: result))")
        while let f = m.nextFrame(from: &scheduler) {
            sent[side, default: []].append(f)
            if transportClosed[side] != true { inbox[Self.other(side), default: []] += (try? FrameEncoder.encode(f)) ?? [] }
        }
        machines[side] = m
    }

    /// Delivers bytes both ways, and finishes the fake TLS, until nothing moves.
    mutating func pump() {
        var moved = true
        while moved {
            moved = false
            for side in [Side.dialer, .listener] {
                let bytes = inbox[side] ?? []
                guard !bytes.isEmpty else { continue }
                inbox[side] = []
                moved = true
                guard transportClosed[side] != true else { continue }
                decoders[side, default: FrameDecoder()].append(bytes)
                while true {
                    do {
                        guard let f = try decoders[side]?.nextFrame() else { break }
                        feed(side, .frame(f))
                    } catch {
                        feed(side, .decodeFailed(error))
                        break
                    }
                }
            }
            if tlsStarted[.dialer] == true, tlsStarted[.listener] == true, let pairing {
                tlsStarted = [:]
                moved = true
                feed(.dialer, .tlsEstablished(certificateID: certificate[.listener] ?? Self.listenerID, pairingCode: pairing))
                feed(.listener, .tlsEstablished(certificateID: certificate[.dialer] ?? Self.dialerID, pairingCode: pairing))
            }
            // A side whose transport closed ends the other's stream too.
            for side in [Side.dialer, .listener] where transportClosed[side] == true && transportClosed[Self.other(side)] != true {
                if (inbox[Self.other(side)] ?? []).isEmpty {
                    feed(Self.other(side), .transportClosed)
                    transportClosed[Self.other(side)] = true
                    moved = true
                }
            }
        }
    }

    /// Moves the clock to `t0 + offset` and ticks every side whose timer is due.
    mutating func advance(to offset: Duration) {
        now = t0 + offset
        for side in [Side.dialer, .listener] {
            if let at = timers[side], at <= now { feed(side, .tick) }
        }
        pump()
    }

    /// Starts both sides, exchanges HELLO (and TLS), invites, and accepts.
    mutating func connect(context: [UInt8] = []) {
        feed(.dialer, .start)
        feed(.listener, .start)
        feed(.dialer, .invite(context: context, timeout: .seconds(30)))
        pump()
        feed(.listener, .accept)
        pump()
    }

    /// The `disconnected` events of a side.
    func drops(_ s: Side) -> [Reason] {
        (events[s] ?? []).compactMap { if case .disconnected(let r, _, _) = $0 { r } else { nil } }
    }

    func count(_ s: Side, where match: (ConnectionEvent) -> Bool) -> Int { (events[s] ?? []).filter(match).count }
}
