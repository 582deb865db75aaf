import Session

/// A byte stream with a peer (MultipeerConnectivity's `startStream`): one way, from the side
/// that opened it to the other, on the session's connection of the moment it was opened (it
/// ends with that connection). Its methods go straight to the connection, from any thread.
public struct PeerStreamRef: Sendable, Hashable {
    /// The other side.
    public let peer: PeerID
    /// The stream's id on its connection.
    public let id: UInt32
    /// The connection it runs on.
    public let connection: PeerConnection

    public static func == (a: Self, b: Self) -> Bool { a.connection.id == b.connection.id && a.id == b.id }
    public func hash(into h: inout Hasher) {
        h.combine(connection.id)
        h.combine(id)
    }

    /// Gives an outgoing stream its next bytes: `done(true)` once they are queued (give more
    /// then), `done(false)` when the stream ended first (`PeerConnection.writeStream`).
    public func write(_ chunks: [[UInt8]], done: @escaping @Sendable (Bool) -> Void) {
        connection.writeStream(id, chunks, done: done)
    }

    /// Ends an outgoing stream normally, after the bytes given so far.
    public func finish() { connection.finishStream(id) }

    /// Ends the stream from this side: `.normal` answers the opener's `finished` once every
    /// byte is taken; another reason (`declined`, `cancelled`, `timeout`) stops it at once.
    public func close(reason: Reason, detail: String) { connection.closeStream(id, reason: reason, detail: detail) }

    /// The application took `bytes` of an incoming stream: the peer may send that many more.
    public func consumed(_ bytes: Int) { connection.consumedStream(id, bytes: bytes) }
}

/// What happens to byte streams, in order per stream.
public enum StreamEvent: Sendable {
    /// A peer opened a stream to this side, named `name` (untrusted text): take its bytes
    /// (`consumed`) or `close` it (`declined`).
    case opened(PeerStreamRef, name: String)
    /// Bytes of an incoming stream, in order: say when they are taken (`consumed`); until
    /// then the peer's window (256 KiB) bounds what arrives.
    case data(PeerStreamRef, [UInt8])
    /// The opener sent every byte: once all are taken, `close(reason: .normal)`.
    case finished(PeerStreamRef)
    /// The stream ended, either way: the reason both sides see (`.normal` for an outgoing
    /// stream: the receiver took every byte), what happened, whether the peer ended it, and
    /// the bytes it moved.
    case ended(PeerStreamRef, outgoing: Bool, reason: Reason, detail: String, byPeer: Bool, bytes: UInt64)
}

/// Byte streams: the node opens them on a session and reports the connections' stream events.
extension PeerNode {
    /// Opens a byte stream to `peer` named `name` (at most 255 bytes, no '/' or control
    /// characters): bytes may be written at once; the peer may decline it (`ended`). `bind`
    /// gets the stream before any of its events can be reported (it runs under the
    /// connection's lock: it must not call into the stream).
    public func openStream(to peer: PeerID, name: String, bind: (PeerStreamRef) -> Void = { _ in }) throws(PeerError) -> PeerStreamRef {
        guard let c = try sessionConnections([peer]).first?.1,
              let id = try c.openStream(name: name, bind: { bind(PeerStreamRef(peer: peer, id: $0, connection: c)) }) else {
            throw .notConnected(peer.shortText)
        }
        return PeerStreamRef(peer: peer, id: id, connection: c)
    }

    /// A connection's transfer event: streams' are reported here, resources' go to the
    /// transfers.
    func transferEvent(_ c: PeerConnection, _ e: TransferEvent) {
        let ref = { (id: UInt32) -> PeerStreamRef? in
            c.snapshot.hello.map { PeerStreamRef(peer: $0.peerID, id: id, connection: c) }
        }
        switch e {
        case .streamOpened(let id, let name):
            if let r = ref(id) { onEvent(.stream(.opened(r, name: name))) }
        case .streamData(let id, let bytes):
            if let r = ref(id) { onEvent(.stream(.data(r, bytes))) }
        case .streamFinished(let id):
            if let r = ref(id) { onEvent(.stream(.finished(r))) }
        case .streamEnded(let id, let outgoing, let reason, let detail, let byPeer, let bytes):
            if let r = ref(id) { onEvent(.stream(.ended(r, outgoing: outgoing, reason: reason, detail: detail, byPeer: byPeer, bytes: bytes))) }
        default:
            transfers.handle(c, e)
        }
    }
}
