/// Flow control, as in HTTP/2 and QUIC: a receiver lets a sender have so many bytes of
/// payload in flight per stream and per connection, and gives more (CREDIT) as its
/// application consumes what arrived. What counts is the payload length of MESSAGE,
/// RESOURCE_DATA and STREAM_DATA frames; every other frame is free. Messages use stream 0;
/// a resource or a stream uses its id.
///
/// Why both windows: the stream window stops one slow consumer (a stream nobody reads)
/// from taking all the connection's buffer; the connection window bounds the receiver's
/// memory for the whole peer whatever the number of streams.
public enum FlowWindow {
    /// Bytes a sender may send on a new stream before any CREDIT.
    public static let initialStream = 256 * 1024
    /// Bytes a sender may send on the connection (all streams together) before any CREDIT.
    public static let initialConnection = 1024 * 1024
    /// The window PeerLink gives messages (stream 0) as a receiver: the initial window and
    /// one CREDIT for the rest as the session connects (`ReceiveCredit.openMessageWindow`).
    /// With the initial 256 KiB, four 64 KiB messages were in flight and the sender waited
    /// for each CREDIT: on the host's loopback 512 KiB moved 64 KiB messages 13-16 % faster
    /// with less CPU (fewer wakeups), 1 MiB no faster again; a wider connection window alone
    /// changed nothing. The same CREDIT grows the connection's window by as much (to
    /// 1.25 MiB, what a peer may make this side hold): messages held for a slow reader
    /// (their window) and two slow incoming streams (theirs) then leave resources 256 KiB,
    /// as before.
    public static let messageWindow = 512 * 1024
    /// The largest a window may grow to by CREDIT: a grant past it is a flow-control error.
    public static let maximum = Int(Int32.max)
}

/// The peer broke flow control; the connection is closed with `flow-control`.
public struct FlowControlViolation: Error, Sendable, Hashable, CustomStringConvertible {
    /// What happened, with the numbers.
    public let detail: String
    /// The detail.
    public var description: String { detail }
}

/// The sender's view: what it may still send.
public struct SendCredit: Sendable, Hashable {
    /// Bytes the connection window allows now.
    public private(set) var connection: Int
    private var streams: [UInt32: Int] = [:]
    private let initialStream: Int

    /// Windows at their initial sizes (configurable for tests).
    public init(connection: Int = FlowWindow.initialConnection, stream: Int = FlowWindow.initialStream) {
        self.connection = connection
        initialStream = stream
    }

    /// Bytes stream `id` may send now: the smaller of its window and the connection's.
    public func available(on id: UInt32) -> Int { min(streams[id] ?? initialStream, connection) }

    /// Whether a frame with this many flow-controlled bytes may go now on `id`.
    public func allows(_ bytes: Int, on id: UInt32) -> Bool { bytes <= available(on: id) }

    /// Counts bytes sent on `id`. Call only after `allows` said yes.
    public mutating func consume(_ bytes: Int, on id: UInt32) {
        streams[id] = (streams[id] ?? initialStream) - bytes
        connection -= bytes
    }

    /// A CREDIT frame from the peer: adds to the windows; a window past
    /// `FlowWindow.maximum` is the peer's error.
    public mutating func grant(streamBytes: UInt32, connectionBytes: UInt32, on id: UInt32) throws(FlowControlViolation) {
        let s = (streams[id] ?? initialStream) + Int(streamBytes)
        let c = connection + Int(connectionBytes)
        guard s <= FlowWindow.maximum, c <= FlowWindow.maximum else {
            throw FlowControlViolation(detail: "CREDIT for stream \(id) grows a window past \(FlowWindow.maximum) bytes")
        }
        streams[id] = s
        connection = c
    }

    /// Forgets a finished stream's window.
    public mutating func remove(_ id: UInt32) { streams[id] = nil }

    /// Streams with a window of their own (diagnostics and tests: gone streams keep none),
    /// messages' (stream 0, kept for the connection's life) not counted.
    package var trackedStreamCount: Int { streams.keys.count { $0 != 0 } }
}

/// The receiver's view: what the peer may still send, and when to give it more.
///
/// The receiver grants more as the application consumes: once half a window has been
/// consumed since the last grant, one CREDIT returns it (stream and connection bytes
/// together), so a steady flow costs one small frame per half window.
public struct ReceiveCredit: Sendable, Hashable {
    /// Bytes the peer may still send on the connection.
    public private(set) var connection: Int
    private var streams: [UInt32: Int] = [:]
    private var pendingStream: [UInt32: Int] = [:]
    private var pendingConnection = 0
    private let streamWindow: Int
    /// The connection's window: its initial size, and as much again as messages got
    /// (`openMessageWindow`).
    private var connectionWindow: Int
    /// Stream 0's window once `openMessageWindow` has granted the rest of it.
    private let messageWindow: Int
    private var messageWindowOpen = false

    /// Windows at their initial sizes, and the one messages get once the session connects
    /// (configurable for tests).
    public init(connection: Int = FlowWindow.initialConnection, stream: Int = FlowWindow.initialStream,
                messages: Int = FlowWindow.messageWindow) {
        self.connection = connection
        connectionWindow = connection
        streamWindow = stream
        messageWindow = max(messages, stream)
    }

    /// Once, as the session connects: the CREDIT that grows stream 0's window from the
    /// initial one to `messages`, and the connection's by as much (nil when they are the
    /// same). Counted here before it is sent, so the bytes it allows are never taken for a
    /// violation.
    public mutating func openMessageWindow() -> Frame? {
        guard !messageWindowOpen else { return nil }
        messageWindowOpen = true
        let extra = messageWindow - streamWindow
        guard extra > 0 else { return nil }
        streams[0] = remaining(on: 0) + extra
        connection += extra
        connectionWindow += extra
        return .credit(streamID: 0, streamBytes: UInt32(extra), connectionBytes: UInt32(extra))
    }

    /// The window of stream `id`, whose half consumed is given back at once.
    private func window(of id: UInt32) -> Int { id == 0 && messageWindowOpen ? messageWindow : streamWindow }

    /// Bytes the peer may still send on `id`.
    public func remaining(on id: UInt32) -> Int { streams[id] ?? streamWindow }

    /// A flow-controlled frame arrived: counts it, or throws when the peer sent more than it
    /// was granted.
    public mutating func received(_ bytes: Int, on id: UInt32) throws(FlowControlViolation) {
        let s = remaining(on: id)
        guard bytes <= s else {
            throw FlowControlViolation(detail: "\(bytes) bytes on stream \(id), whose window had \(s) left")
        }
        guard bytes <= connection else {
            throw FlowControlViolation(detail: "\(bytes) bytes on stream \(id), the connection's window had \(connection) left")
        }
        streams[id] = s - bytes
        connection -= bytes
    }

    /// The application consumed bytes of `id`: returns the CREDIT frame to send, if one is due.
    public mutating func consumed(_ bytes: Int, on id: UInt32) -> Frame? {
        pendingStream[id, default: 0] += bytes
        pendingConnection += bytes
        let s = pendingStream[id] ?? 0
        guard s >= window(of: id) / 2 || pendingConnection >= connectionWindow / 2 else { return nil }
        pendingStream[id] = nil
        let c = pendingConnection
        pendingConnection = 0
        streams[id] = remaining(on: id) + s
        connection += c
        return .credit(streamID: id, streamBytes: UInt32(clamping: s), connectionBytes: UInt32(clamping: c))
    }

    /// Bytes of an ended stream that were never consumed: returned to the connection's window
    /// alone (the stream is gone); a CREDIT on stream 0 with no stream bytes, when due.
    public mutating func released(_ bytes: Int) -> Frame? {
        pendingConnection += bytes
        guard pendingConnection >= connectionWindow / 2 else { return nil }
        let c = pendingConnection
        pendingConnection = 0
        connection += c
        return .credit(streamID: 0, streamBytes: 0, connectionBytes: UInt32(clamping: c))
    }

    /// Forgets a finished stream (bytes it consumed still count for the connection).
    public mutating func remove(_ id: UInt32) {
        streams[id] = nil
        pendingStream[id] = nil
    }

    /// Streams with an entry of their own (diagnostics and tests: gone streams keep none),
    /// messages' (stream 0, kept for the connection's life) not counted.
    package var trackedStreamCount: Int { Set(streams.keys).union(pendingStream.keys).count { $0 != 0 } }
}
