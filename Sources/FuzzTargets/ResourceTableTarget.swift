import Session

/// The resource rules (`ResourceTable`) driven by a program read from the input: an honest
/// sender (the dialer) and an honest receiver (the listener) offer, accept from an offset,
/// decline, send, verify and cancel resources, their frames crossing on a wire each way (so a
/// cancel can cross data or an accept), while frames a lying peer could send are injected
/// into either side.
///
/// Properties, after every step:
/// - honest traffic never breaks a rule: no `violation` and no `busy` refusal on a resource
///   no lie touched (a sender past `maxInProgress` holds its offers back, so a receiver that
///   only heard the truth always has room for the next one);
/// - neither side has more than `maxInProgress` resources in progress each way;
/// - a frame a side rejects or ignores changes no resource but the one it names, and no
///   held-back offer;
/// - the receiver's bytes of an untouched resource are the sender's, at the offset it
///   accepted, and it hears DONE only with every byte;
/// - every frame a side builds encodes, and decodes back to itself.
enum ResourceTableTarget {
    /// Byte `p` of resource `id`: what the honest sender sends there.
    static func byte(_ id: UInt32, _ p: UInt64) -> UInt8 { UInt8(truncatingIfNeeded: p &+ UInt64(id) &* 7) }

    static func run(_ input: [UInt8]) throws(PropertyViolation) {
        var reader = ByteReader(input)
        var sender = ResourceTable(role: .dialer), receiver = ResourceTable(role: .listener)
        var toReceiver: [Frame] = [], toSender: [Frame] = []
        // Ids a lie used (or an honest frame answered a lie on): the properties skip them.
        var tainted: Set<UInt32> = []
        var steps = 0
        while !reader.isAtEnd && steps < 300 {
            steps += 1
            let op = reader.byte()
            let arg = reader.byte()
            switch op % 8 {
            case 0:
                let size = UInt64(arg) * 97 % 5_000
                let (_, frame) = sender.offer(name: "r\(arg)", size: size, sha256: [UInt8](repeating: arg, count: 32), mediaType: "a/b")
                if let frame { try send(frame, on: &toReceiver) }
            case 1:
                // The sender sends up to 8 × arg + 1 bytes of one resource it may send, and its
                // DONE after the last.
                guard let t = pick(sender.transfers.values.filter { $0.outgoing && $0.phase == .transferring }, arg) else { break }
                let id = t.offer.resourceID
                let n = min(Int(arg) * 8 + 1, Int(t.offer.size - t.position))
                if n > 0 {
                    try check(sender.sending(id, count: n), "the sender may not send \(n) bytes of resource \(id) at \(t.position)")
                    try send(.resourceData(resourceID: id, data: (0..<UInt64(n)).map { byte(id, t.position + $0) }), on: &toReceiver)
                }
                if t.position + UInt64(n) == t.offer.size, let done = try? sender.finishSending(id) { try send(done, on: &toReceiver) }
            case 2:
                // The sender cancels one of its resources, or an offer it holds back.
                let ids = sender.transfers.values.filter(\.outgoing).map(\.offer.resourceID).sorted() + sender.held.map(\.resourceID)
                guard !ids.isEmpty else { break }
                let id = ids[Int(arg) % ids.count]
                if let f = sender.cancel(id, reason: .cancelled) { try send(f, on: &toReceiver) }
                for f in sender.releaseHeld() { try send(f, on: &toReceiver) }
            case 3:
                for _ in 0..<(Int(arg % 4) + 1) {
                    guard !toReceiver.isEmpty else { break }
                    try receiverGets(toReceiver.removeFirst(), &receiver, &toSender, &tainted, honest: true)
                }
            case 4:
                // The receiver answers an offer: accepts from an offset within it, or declines.
                guard let t = pick(receiver.transfers.values.filter { !$0.outgoing && $0.phase == .offered }, arg) else { break }
                let id = t.offer.resourceID
                if arg % 5 == 0 {
                    try send(try command { () throws(ResourceTable.CommandError) in try receiver.decline(id, reason: .declined) }, on: &toSender)
                } else {
                    let offset = t.offer.size == 0 ? 0 : UInt64(reader.uint16()) % (t.offer.size + 1)
                    try send(try command { () throws(ResourceTable.CommandError) in try receiver.accept(id, from: offset) }, on: &toSender)
                }
            case 5:
                let ids = receiver.transfers.values.filter { !$0.outgoing }.map(\.offer.resourceID).sorted()
                guard !ids.isEmpty else { break }
                if let f = receiver.cancel(ids[Int(arg) % ids.count], reason: .noSpace) { try send(f, on: &toSender) }
            case 6:
                for _ in 0..<(Int(arg % 4) + 1) {
                    guard !toSender.isEmpty else { break }
                    try senderGets(toSender.removeFirst(), &sender, &toReceiver, &tainted, honest: true)
                }
            default:
                // A frame from a lying peer, into either side.
                let id = UInt32(reader.byte() % 48) + 1
                let frame: Frame = switch arg % 6 {
                case 0: .resourceOffer(ResourceOffer(resourceID: id, name: "x", size: UInt64(reader.byte()), sha256: [UInt8](repeating: 0, count: 32),
                                                     mediaType: "x/y"))
                case 1: .resourceAccept(resourceID: id, offset: UInt64(reader.byte()))
                case 2: .resourceDecline(resourceID: id, reason: Reason(rawValue: UInt16(reader.byte() % 24)))
                case 3: .resourceData(resourceID: id, data: reader.shortBlob())
                case 4: .resourceDone(resourceID: id)
                default: .resourceCancel(resourceID: id, reason: Reason(rawValue: UInt16(reader.byte() % 24)))
                }
                tainted.insert(id)
                if arg & 0x80 == 0 {
                    try injected(frame, into: &receiver) { t, f throws(PropertyViolation) in try receiverGets(f, &t, &toSender, &tainted, honest: false) }
                } else {
                    try injected(frame, into: &sender) { t, f throws(PropertyViolation) in try senderGets(f, &t, &toReceiver, &tainted, honest: false) }
                }
            }
            for (side, table) in [("sender", sender), ("receiver", receiver)] {
                let outgoing = table.transfers.values.filter(\.outgoing).count
                let incoming = table.transfers.count - outgoing
                try check(outgoing <= ResourceTable.maxInProgress && incoming <= ResourceTable.maxInProgress,
                          "the \(side) has \(outgoing) resources going out and \(incoming) coming in")
            }
        }
    }

    /// A frame from the sender: the honest receiver answers as the daemon does. Returns what
    /// the table made of it.
    @discardableResult
    private static func receiverGets(_ f: Frame, _ receiver: inout ResourceTable, _ toSender: inout [Frame], _ tainted: inout Set<UInt32>,
                                     honest: Bool) throws(PropertyViolation) -> ResourceTable.Event? {
        let event = receiver.received(f)
        switch event {
        case .data(let id, let offset, let bytes)? where !tainted.contains(id):
            let wrong = bytes.indices.first { bytes[$0] != byte(id, offset + UInt64($0)) }
            try check(wrong == nil, "resource \(id): the receiver's byte at \(offset + UInt64(wrong ?? 0)) is not the sender's")
        case .complete(let id)?:
            let t = receiver.transfers[id]
            try check(tainted.contains(id) || t?.position == t?.offer.size, "resource \(id) complete at \(String(describing: t?.position))")
            try send(try command { () throws(ResourceTable.CommandError) in try receiver.verified(id) }, on: &toSender)
        case .violation(let id, let why, let reply)?:
            try check(!honest || tainted.contains(id), "the honest sender broke a rule: \(why)")
            tainted.insert(id)
            try send(reply, on: &toSender)
        case .refused(let id, let reply)?:
            // Only a lie can fill the receiver: then a resource a lie touched is in progress.
            try check(!honest || tainted.contains(id) || receiver.transfers.keys.contains(where: tainted.contains),
                      "the honest sender's offer \(id) was refused busy with only its own \(receiver.transfers.count) resources in progress")
            tainted.insert(id)
            try send(reply, on: &toSender)
        default:
            break
        }
        return event
    }

    /// A frame from the receiver: the honest sender answers as the daemon does, and sends an
    /// offer it held back once one of its resources ends. Returns what the table made of it.
    @discardableResult
    private static func senderGets(_ f: Frame, _ sender: inout ResourceTable, _ toReceiver: inout [Frame], _ tainted: inout Set<UInt32>,
                                   honest: Bool) throws(PropertyViolation) -> ResourceTable.Event? {
        let event = sender.received(f)
        switch event {
        case .declined(let id, let reason)?:
            try check(!honest || tainted.contains(id) || reason != .busy, "the honest receiver refused resource \(id) busy")
        case .violation(let id, let why, let reply)?:
            try check(!honest || tainted.contains(id), "the honest receiver broke a rule: \(why)")
            tainted.insert(id)
            try send(reply, on: &toReceiver)
        default:
            break
        }
        for f in sender.releaseHeld() { try send(f, on: &toReceiver) }
        return event
    }

    /// A lie into `table`: whatever it makes of it, only the resource it names may change,
    /// and no held-back offer.
    private static func injected(_ f: Frame, into table: inout ResourceTable,
                                 _ deliver: (inout ResourceTable, Frame) throws(PropertyViolation) -> ResourceTable.Event?) throws(PropertyViolation) {
        let before = table.transfers, heldBefore = table.held
        let event = try deliver(&table, f)
        switch event {
        case .violation?, .refused?, .ignored?:
            // The named resource may end (held back or not), and an offer held back then go
            // (the first).
            let remaining = heldBefore.filter { $0.resourceID != f.streamID }
            let heldNow = table.held.filter { $0.resourceID != f.streamID }
            let released = remaining.count - heldNow.count
            try check((0...1).contains(released) && Array(remaining.dropFirst(released)) == heldNow,
                      "\(f.type) for \(f.streamID) changed the offers held back")
            var after = table.transfers, others = before
            after[f.streamID] = nil
            others[f.streamID] = nil
            for o in remaining.prefix(released) { after[o.resourceID] = nil }
            try check(after == others, "\(f.type) for \(f.streamID) changed other resources (\(String(describing: event)))")
        default:
            break
        }
    }

    /// A transfer chosen by `arg` among `candidates` (in id order), nil when there are none.
    private static func pick(_ candidates: [ResourceTable.Transfer], _ arg: UInt8) -> ResourceTable.Transfer? {
        guard !candidates.isEmpty else { return nil }
        return candidates.sorted { $0.offer.resourceID < $1.offer.resourceID }[Int(arg) % candidates.count]
    }

    /// The frame of a command the target only gives where it fits: a refusal is a violation.
    private static func command(_ body: () throws(ResourceTable.CommandError) -> Frame) throws(PropertyViolation) -> Frame {
        do { return try body() } catch { throw PropertyViolation("a command that fits was refused: \(error)") }
    }

    private static func send(_ f: Frame, on wire: inout [Frame]) throws(PropertyViolation) {
        try checkRoundTrip(f)
        wire.append(f)
    }
}
