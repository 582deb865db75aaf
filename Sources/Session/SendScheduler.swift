/// A first-in first-out queue on an array, dropping taken items in batches so the work
/// stays linear.
struct FIFO<Element: Sendable>: Sendable {
    private var items: [Element] = []
    private var head = 0

    var isEmpty: Bool { head == items.count }
    var count: Int { items.count - head }
    var first: Element? { isEmpty ? nil : items[head] }

    mutating func append(_ e: Element) { items.append(e) }

    mutating func removeFirst() -> Element? {
        guard !isEmpty else { return nil }
        let e = items[head]
        head += 1
        if head == items.count {
            items.removeAll(keepingCapacity: true)
            head = 0
        } else if head >= 64 && head >= items.count / 2 {
            items.removeSubrange(0..<head)
            head = 0
        }
        return e
    }
}

/// Which queue a frame waits in. Lanes are served in this order.
public enum SendLane: Int, Sendable, Hashable, CaseIterable {
    /// Protocol frames (PING, PONG, CREDIT, CLOSE, INVITE..., offers, cancels, opens).
    case control
    /// UNRELIABLE datagrams: bounded, the newest dropped when full.
    case unreliable
    /// MESSAGE fragments, in order.
    case reliable
    /// RESOURCE_DATA and STREAM_DATA, and the RESOURCE_DONE / STREAM_CLOSE that must follow
    /// their data; served round-robin across streams.
    case bulk

    /// The lane of a frame.
    public static func of(_ frame: Frame) -> SendLane {
        switch frame {
        case .unreliable: .unreliable
        case .message: .reliable
        case .resourceData, .streamData, .resourceDone: .bulk
        // A normal end follows the stream's data; any other reason abandons it at once.
        case .streamClose(_, let reason): reason == .normal ? .bulk : .control
        default: .control
        }
    }
}

/// The send queues of one peer connection, pure. The transport takes one frame at a time
/// when it can write (`next`), so a frame that is queued waits for at most the one frame
/// being written plus the frames of higher lanes: a control frame or a message never waits
/// behind more than one bulk frame, however much bulk data is queued.
///
/// Memory: queued frames' bytes are bounded by `maxQueuedBytes`; beyond it `enqueue`
/// answers `.busy` (the caller tells its application, or waits). A batch bigger than the
/// limit is taken when nothing else is queued, so a 16 MiB message can always be sent.
/// Control frames are bounded by count (`maxControlFrames`), not bytes.
///
/// Messages: `ConnectionMachine` numbers a message when it cuts it into fragments, so a
/// message refused here would leave a gap in the ids; `ConnectionMachine.send(message:into:)`
/// asks `canAccept` before numbering.
public struct SendScheduler: Sendable {
    /// The answer to `enqueue`.
    public enum EnqueueResult: Sendable, Hashable {
        /// Queued.
        case queued
        /// An UNRELIABLE datagram was dropped: its lane was full (counted in `droppedUnreliable`).
        case dropped
        /// Over the memory limit: nothing was queued.
        case busy
    }

    /// Queued bytes (frames' payloads plus headers) above which `enqueue` answers `.busy`.
    public let maxQueuedBytes: Int
    /// At most this many UNRELIABLE frames wait; a newer one is dropped.
    public let maxUnreliableFrames: Int
    /// At most this many control frames wait (a peer that floods PINGs while this side
    /// cannot write is closed with `busy` by the caller).
    public let maxControlFrames: Int

    /// Bytes queued in every lane.
    public private(set) var queuedBytes = 0
    /// UNRELIABLE frames dropped because their lane was full.
    public private(set) var droppedUnreliable = 0

    private var control = FIFO<Frame>()
    private var unreliable = FIFO<Frame>()
    private var reliable = FIFO<Frame>()
    private var bulk: [UInt32: FIFO<Frame>] = [:]
    /// Bulk streams in round-robin order; the first is served next.
    private var bulkOrder: [UInt32] = []

    /// A scheduler: 8 MiB of queued data, 32 datagrams, 1024 control frames by default.
    public init(maxQueuedBytes: Int = 8 * 1_048_576, maxUnreliableFrames: Int = 32, maxControlFrames: Int = 1024) {
        self.maxQueuedBytes = maxQueuedBytes
        self.maxUnreliableFrames = maxUnreliableFrames
        self.maxControlFrames = maxControlFrames
    }

    /// Frames waiting in a lane.
    public func count(_ lane: SendLane) -> Int {
        switch lane {
        case .control: control.count
        case .unreliable: unreliable.count
        case .reliable: reliable.count
        case .bulk: bulk.values.reduce(0) { $0 + $1.count }
        }
    }

    /// Bulk frames waiting for stream `id` (a resource's chunks and its RESOURCE_DONE).
    public func queuedFrames(on id: UInt32) -> Int { bulk[id]?.count ?? 0 }

    /// The flow-controlled bytes of the next bulk frame for stream `id` (what the peer's
    /// window must allow for it to go), or nil when none waits.
    public func nextBulkBytes(on id: UInt32) -> Int? { bulk[id]?.first?.flowControlledBytes }

    /// Whether a data batch of `bytes` (a message's size) would be taken now.
    public func canAccept(byteCount bytes: Int) -> Bool {
        queuedBytes == 0 || queuedBytes + bytes <= maxQueuedBytes
    }

    /// Queues one frame.
    public mutating func enqueue(_ frame: Frame) -> EnqueueResult { enqueue([frame]) }

    /// Queues frames all together or not at all (a message's fragments). UNRELIABLE frames
    /// are queued one by one (`enqueue(_:)`).
    ///
    /// The byte bound applies to data that waits for credit (messages, bulk). Datagrams are
    /// bounded by their lane's count instead: they must never wait for reliable data to
    /// drain, so a full queue of messages still takes one (or drops it when its lane is full).
    public mutating func enqueue(_ frames: [Frame]) -> EnqueueResult {
        let lanes = frames.map(SendLane.of)
        let controls = lanes.filter { $0 == .control }.count
        // Only data counts against the bound: a bulk frame without payload (RESOURCE_DONE, a
        // normal STREAM_CLOSE) ends what its data began and is always taken, so a full queue
        // never drops an end nor turns it into a `busy` close.
        let dataSize = frames.reduce(0) { $0 + ($1.type.isFlowControlled ? Self.size($1) : 0) }
        if controls > 0 && control.count + controls > maxControlFrames { return .busy }
        if frames.contains(where: { $0.type.isFlowControlled }) && !canAccept(byteCount: dataSize) { return .busy }
        for frame in frames {
            switch SendLane.of(frame) {
            case .control: control.append(frame)
            case .unreliable:
                guard unreliable.count < maxUnreliableFrames else {
                    droppedUnreliable += 1
                    return .dropped
                }
                unreliable.append(frame)
            case .reliable: reliable.append(frame)
            case .bulk:
                let id = frame.streamID
                if bulk[id] == nil { bulkOrder.append(id) }
                bulk[id, default: FIFO()].append(frame)
            }
            queuedBytes += Self.size(frame)
        }
        return .queued
    }

    /// The next frame to write, or nil when nothing may go: the first lane (in order) whose
    /// head fits the flow-control credit. A flow-controlled frame taken is counted in `credit`.
    public mutating func next(credit: inout SendCredit) -> Frame? {
        if let f = control.removeFirst() ?? unreliable.removeFirst() { return taken(f) }
        if let head = reliable.first, Self.fits(head, credit) {
            _ = reliable.removeFirst()
            return taken(head, &credit)
        }
        // Round-robin: the first stream in order whose head may go; it moves to the back.
        for (i, id) in bulkOrder.enumerated() {
            guard let head = bulk[id]?.first, Self.fits(head, credit) else { continue }
            _ = bulk[id]?.removeFirst()
            bulkOrder.remove(at: i)
            if bulk[id]?.isEmpty == true { bulk[id] = nil } else { bulkOrder.append(id) }
            return taken(head, &credit)
        }
        return nil
    }

    /// Drops everything queued for a stream (cancelled or closed by the peer); returns the
    /// frames dropped.
    public mutating func removeStream(_ id: UInt32) -> Int {
        guard var q = bulk.removeValue(forKey: id) else { return 0 }
        bulkOrder.removeAll { $0 == id }
        var n = 0
        while let f = q.removeFirst() {
            queuedBytes -= Self.size(f)
            n += 1
        }
        return n
    }

    private static func fits(_ f: Frame, _ credit: SendCredit) -> Bool {
        credit.allows(f.flowControlledBytes, on: f.streamID)
    }

    private mutating func taken(_ f: Frame) -> Frame {
        queuedBytes -= Self.size(f)
        return f
    }

    private mutating func taken(_ f: Frame, _ credit: inout SendCredit) -> Frame {
        if f.type.isFlowControlled { credit.consume(f.flowControlledBytes, on: f.streamID) }
        return taken(f)
    }

    /// What a reliable message of `count` bytes costs in the queue: the sum of `size` over
    /// its fragments (`MessageFragmenter.fragments(of:)`), each a header, a message id and
    /// up to `Wire.maxFragmentData` bytes. Room is asked for this, never the bare size: a
    /// message within a few headers of the bound would pass a check on its size and then be
    /// refused by `enqueue`.
    public static func cost(ofMessage count: Int) -> Int {
        let fragments = max(1, (count + Wire.maxFragmentData - 1) / Wire.maxFragmentData)
        return count + fragments * (Wire.headerSize + 4)
    }

    /// A frame's cost in the queue: its header and its payload (approximately, for the
    /// fields' own overhead: close enough for a memory bound).
    static func size(_ f: Frame) -> Int {
        switch f {
        case .message(let m): Wire.headerSize + 4 + m.data.count
        case .unreliable(let d), .resourceData(_, let d), .streamData(_, let d): Wire.headerSize + d.count
        case .invite(let i): Wire.headerSize + 12 + i.context.count
        default: Wire.headerSize + 64
        }
    }
}
