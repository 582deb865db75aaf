import Session

/// The byte stream rules (`StreamTable`) driven by a program read from the input: an opener
/// (the dialer) and a receiver (the listener) open, write, finish and close streams and hand
/// each other the frames their lanes would write, while frames a lying peer could send are
/// injected into either side.
///
/// Properties, after every step:
/// - a frame a side rejects or ignores (`violation`, `refused`, `ignored`) changes no stream
///   but the one it names;
/// - the bytes the receiver got on a stream are a prefix of what the opener wrote on it, in
///   order (streams touched by an injected frame aside), and all of them once the opener
///   hears the receiver's normal close;
/// - the receiver never has more incoming streams open than its limit;
/// - every frame a side builds encodes, and decodes back to itself.
enum StreamTableTarget {
    /// One side: its stream table, its id space and its send lanes.
    struct Side {
        var table = StreamTable()
        var ids: ResourceTable
        var scheduler = SendScheduler()
        var credit = SendCredit(connection: .max / 2, stream: .max / 2)

        init(_ role: Role) { ids = ResourceTable(role: role) }

        /// A frame from the other side, its STREAM_OPEN id claimed first (as a connection does).
        mutating func receive(_ f: Frame) -> StreamTable.Event? {
            if case .streamOpen(let id, _) = f, let why = ids.claimPeerID(id) {
                return .violation(id: id, why: why, reply: .streamClose(streamID: id, reason: .protocolError))
            }
            return table.received(f)
        }

        /// What the lanes hold, in order.
        mutating func drain() -> [Frame] {
            var out: [Frame] = []
            while let f = scheduler.next(credit: &credit) { out.append(f) }
            return out
        }
    }

    /// 0, 1, …, 255, 0, 1, …: long enough for the largest write from any start below 256.
    private static let pattern: [UInt8] = (0..<(150_000 + 256)).map { UInt8(truncatingIfNeeded: $0) }

    static func run(_ input: [UInt8]) throws(PropertyViolation) {
        var reader = ByteReader(input)
        var opener = Side(.dialer), receiver = Side(.listener)
        var written: [UInt32: Written] = [:]
        var got: [UInt32: Int] = [:]  // bytes received, each checked as it arrived
        var tainted: Set<UInt32> = []
        var steps = 0
        while !reader.isAtEnd && steps < 200 {
            steps += 1
            let op = reader.byte()
            let arg = reader.byte()
            // The outgoing stream ops 1 to 3 act on (sorting the ids at every step was 5% of the time).
            var pick = UInt32(arg)
            if (1...3).contains(op % 8) {
                let outgoing = opener.table.streams.keys.sorted()
                if !outgoing.isEmpty { pick = outgoing[Int(arg) % outgoing.count] }
            }
            switch op % 8 {
            case 0:
                let id = opener.ids.reserveID()
                guard let f = try? opener.table.open(id: id, name: "s\(arg)") else { throw PropertyViolation("a valid name was refused") }
                try checkRoundTrip(f)
                written[id] = Written()
                try deliver(f, to: &receiver, &got, written, tainted)
            case 1:
                // Byte i of the write is (i + pick) mod 256, cut from one pattern: built a byte
                // at a time through a closure, up to 150 kB a step under the fuzzer's
                // instrumentation, it was most of an input's time (264 executions a second).
                // Sizes: most below one frame's payload (up to 9,139 bytes), the last 8 of the
                // argument's values from 18,412 up to 147,296 bytes (the top five cut into two
                // or three frames). Every write used to be up to 150 kB, 75 kB on average, and
                // then the top 32 values were large: the large writes were still most of the
                // bytes an input moved through every copy (the target ran about 500 inputs a
                // second); they stay within reach, at a thirty-second of the values.
                let n = arg < 248 ? Int(arg) * 37 : (Int(arg) - 247) * 18_412
                let start = Int(pick % 256)
                let bytes = Array(pattern[start..<(start + n)])
                if opener.table.write(pick, bytes) { written[pick, default: Written()].append(patternAt: start, count: n) }
            case 2:
                _ = opener.table.finish(pick)
            case 3:
                if let f = opener.table.close(pick, reason: Reason(rawValue: UInt16(arg % 24) + 1)) {
                    try checkRoundTrip(f)
                    try deliver(f, to: &receiver, &got, written, tainted)
                }
            case 4:
                _ = opener.table.refill(&opener.scheduler, limit: Int(arg % 6) + 1)
                for f in opener.drain() {
                    try checkRoundTrip(f)
                    try deliver(f, to: &receiver, &got, written, tainted)
                }
                // The receiver's application takes everything at once and confirms each end.
                for (id, s) in receiver.table.streams where s.phase == .closing {
                    guard let confirm = receiver.table.close(id, reason: .normal) else { continue }
                    let event = opener.receive(confirm)
                    if case .closed(id, .normal)? = event, !tainted.contains(id) {
                        try check(got[id, default: 0] == written[id, default: Written()].count,
                                  "stream \(id) confirmed with \(got[id, default: 0]) of \(written[id, default: Written()].count) bytes")
                    }
                }
            case 5:
                let incoming = receiver.table.streams.keys.sorted()
                guard !incoming.isEmpty else { break }
                let id = incoming[Int(arg) % incoming.count]
                if let f = receiver.table.close(id, reason: Reason(rawValue: UInt16(arg % 24) + 1)) {
                    try checkRoundTrip(f)
                    _ = opener.receive(f)
                }
            default:
                // A frame from a lying peer, into either side.
                let id = UInt32(reader.byte() % 12) + 1  // stream frames carry a non-zero id
                let frame: Frame = switch arg % 3 {
                case 0: .streamOpen(streamID: id, name: "x")
                case 1: .streamData(streamID: id, data: reader.shortBlob())
                default: .streamClose(streamID: id, reason: Reason(rawValue: UInt16(reader.byte() % 24)))
                }
                tainted.insert(id)
                if op % 8 == 6 {
                    try injected(frame, into: &receiver)
                } else {
                    try injected(frame, into: &opener)
                }
            }
            let incoming = receiver.table.streams.values.reduce(0) { $1.outgoing ? $0 : $0 + 1 }
            try check(incoming <= StreamTable.defaultMaxIncoming, "\(incoming) incoming streams open")
        }
    }

    /// An honest frame from the opener: the receiver's data must follow what was written.
    private static func deliver(_ f: Frame, to receiver: inout Side, _ got: inout [UInt32: Int], _ written: [UInt32: Written],
                                _ tainted: Set<UInt32>) throws(PropertyViolation) {
        guard case .data(let id, let bytes)? = receiver.receive(f) else { return }
        let before = got[id, default: 0]
        got[id, default: 0] += bytes.count
        guard !tainted.contains(id) else { return }
        // What arrived before was checked when it arrived: only the new bytes are compared
        // (comparing the whole prefix at every frame made an input's time quadratic in its
        // bytes, and most of the target's).
        try check(written[id, default: Written()].matches(bytes, at: before),
                  "stream \(id): the receiver's bytes \(before)..<\(before + bytes.count) are not what the opener wrote there")
    }

    /// What the opener wrote on one stream, as runs cut from `pattern`, not as bytes: a stream
    /// carries up to megabytes, and holding them (twice, with what the receiver got) made every
    /// input grow, copy and fault in megabytes.
    struct Written {
        /// Run i starts at byte `offset` of the stream and at `pattern[start]`; it ends where
        /// the next one starts (the last one at `count`).
        private var runs: [(offset: Int, start: Int)] = []
        /// Bytes written.
        private(set) var count = 0

        mutating func append(patternAt start: Int, count n: Int) {
            guard n > 0 else { return }
            runs.append((count, start))
            count += n
        }

        /// Whether `bytes` are what was written at stream offsets `from ..< from + bytes.count`.
        func matches(_ bytes: [UInt8], at from: Int) -> Bool {
            guard from >= 0, from + bytes.count <= count else { return false }
            guard !bytes.isEmpty else { return true }
            // The last run starting at or before `from` (binary search: runs are in order).
            var low = 0, high = runs.count - 1
            while low < high {
                let mid = (low + high + 1) / 2
                if runs[mid].offset <= from { low = mid } else { high = mid - 1 }
            }
            var i = low, position = from, done = 0
            while done < bytes.count {
                let runEnd = i + 1 < runs.count ? runs[i + 1].offset : count
                let take = min(runEnd - position, bytes.count - done)
                let p = runs[i].start + (position - runs[i].offset)
                guard sameBytes(StreamTableTarget.pattern[p..<(p + take)], bytes[done..<(done + take)]) else { return false }
                done += take
                position += take
                i += 1
            }
            return true
        }
    }

    /// A frame from a lying peer: whatever `side` makes of it, only the stream it names may change.
    private static func injected(_ f: Frame, into side: inout Side) throws(PropertyViolation) {
        let before = side.table.streams
        let event = side.receive(f)
        switch event {
        case .violation?, .refused?, .ignored?:
            var after = side.table.streams
            var others = before
            after[f.streamID] = nil
            others[f.streamID] = nil
            try check(after == others, "\(f) changed other streams (\(String(describing: event)))")
        default:
            break
        }
        if case .violation(_, _, let reply)? = event { try checkRoundTrip(reply) }
        if case .refused(_, let reply)? = event { try checkRoundTrip(reply) }
    }
}
