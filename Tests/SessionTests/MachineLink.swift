import Testing
@testable import Session

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
         configure: (inout ConnectionConfig, Side) -> Void = { _, _ in }) {
        var dc = ConnectionConfig(localID: Self.dialerID, displayName: "dialer", encryption: dialer, expectedPeer: Self.listenerID)
        var lc = ConnectionConfig(localID: Self.listenerID, displayName: "listener", encryption: listener)
        configure(&dc, .dialer)
        configure(&lc, .listener)
        machines = [.dialer: ConnectionMachine(config: dc, role: .dialer), .listener: ConnectionMachine(config: lc, role: .listener)]
        certificate = [.dialer: Self.dialerID, .listener: Self.listenerID]
        t0 = ContinuousClock.now
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
