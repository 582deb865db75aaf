import Testing
@testable import Session

/// The byte stream rules without sockets: an opener's table and a receiver's hand each other
/// their frames through a scheduler (what the lanes would write, in order), and a lying
/// peer's frames end one stream at a time.
@Suite struct StreamTableTests {
    /// One side: its stream table, its id space (the resource table) and its send lanes.
    final class Side {
        var streams = StreamTable()
        var ids: ResourceTable
        var scheduler = SendScheduler()
        var credit = SendCredit(connection: .max / 2, stream: .max / 2)

        init(_ role: Role) { ids = ResourceTable(role: role) }

        func open(_ name: String) throws -> (id: UInt32, frame: Frame) {
            let id = ids.reserveID()
            return (id, try streams.open(id: id, name: name))
        }
        func write(_ id: UInt32, _ bytes: [UInt8]) -> Bool { streams.write(id, bytes) }
        func finish(_ id: UInt32) -> Bool { streams.finish(id) }
        func close(_ id: UInt32, _ reason: Reason) -> Frame? { streams.close(id, reason: reason) }
        func refill(limit: Int = 4) -> [UInt32] { streams.refill(&scheduler, limit: limit) }

        /// What the lanes hold, in the order they would be written.
        func drain() -> [Frame] {
            var out: [Frame] = []
            while let f = scheduler.next(credit: &credit) { out.append(f) }
            return out
        }

        /// A frame from the other side, its STREAM_OPEN id claimed first (as the connection does).
        func received(_ f: Frame) -> StreamTable.Event? {
            if case .streamOpen(let id, _) = f, let why = ids.claimPeerID(id) {
                return .violation(id: id, why: why, reply: .streamClose(streamID: id, reason: .protocolError))
            }
            return streams.received(f)
        }
    }

    static func bytes(_ n: Int) -> [UInt8] { (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) } }

    @Test func aStreamCarriesEveryByteInOrderAndEndsWithTheReceiversConfirmation() throws {
        let opener = Side(.dialer), receiver = Side(.listener)
        let (id, open) = try opener.open("camera")
        #expect(id == 1)
        #expect(receiver.received(open) == .opened(id: 1, name: "camera"))
        let content = Self.bytes(3 * Wire.maxPayload + 100)
        #expect(opener.write(id, Array(content[..<100_000])) && opener.write(id, Array(content[100_000...])))
        #expect(opener.streams.pendingBytes(id) == content.count)
        #expect(opener.finish(id))
        #expect(!opener.write(id, [1]), "nothing after the end")
        // Four frames at most wait in the lanes: the rest stays pending until they go.
        #expect(opener.refill(limit: 2).isEmpty)
        #expect(opener.scheduler.queuedFrames(on: id) == 2)
        var got: [UInt8] = []
        var finished = false
        for _ in 0..<10 {
            for f in opener.drain() {
                if case .streamData(_, let d) = f { #expect(d.count <= Wire.maxPayload) }
                switch receiver.received(f) {
                case .data(id, let d)?: got += d
                case .finished(id)?: finished = true
                case let other: Issue.record("unexpected \(String(describing: other))")
                }
            }
            if finished { break }
            _ = opener.refill(limit: 2)
        }
        #expect(got == content && finished)
        #expect(opener.streams.streams[id]?.phase == .closing && opener.streams.streams[id]?.bytes == UInt64(content.count))
        // The receiver's application has every byte: its close is the confirmation.
        let confirm = try #require(receiver.close(id, .normal))
        #expect(opener.received(confirm) == .closed(id: id, reason: .normal))
        #expect(opener.streams.isEmpty && receiver.streams.isEmpty)
        #expect(opener.received(.streamData(streamID: id, data: [1])) == .ignored(id: id), "late frames are ignored")
    }

    @Test func refillSaysWhichWritersMayGiveMore() throws {
        let opener = Side(.dialer)
        let (a, _) = try opener.open("a")
        let (b, _) = try opener.open("b")
        #expect(b == 3, "the dialer's ids are odd")
        #expect(opener.write(a, Self.bytes(10)) && opener.write(b, Self.bytes(5 * Wire.maxPayload)))
        _ = opener.drain()
        #expect(opener.refill(limit: 4) == [a], "b has a frame still pending")
        _ = opener.drain()
        #expect(opener.refill(limit: 4) == [b])
        #expect(opener.refill(limit: 4).isEmpty, "nothing was pending")
        // A finished stream with nothing pending gets its close at the next refill.
        #expect(opener.finish(a))
        _ = opener.refill()
        #expect(opener.drain().contains(.streamClose(streamID: a, reason: .normal)))
    }

    @Test func aDeclineEndsTheStreamAndDataInFlightIsIgnored() throws {
        let opener = Side(.listener), receiver = Side(.dialer)
        let (id, open) = try opener.open("x")
        #expect(id == 2, "the listener's ids are even")
        _ = receiver.received(open)
        let decline = try #require(receiver.close(id, .declined))
        #expect(receiver.received(.streamData(streamID: id, data: [1, 2])) == .ignored(id: id))
        #expect(opener.received(decline) == .closed(id: id, reason: .declined))
        #expect(!opener.write(id, [1]) && opener.close(id, .cancelled) == nil)
    }

    @Test func theOpenerCancelsAtAnyTime() throws {
        let opener = Side(.dialer), receiver = Side(.listener)
        let (id, open) = try opener.open("x")
        _ = receiver.received(open)
        #expect(opener.write(id, Self.bytes(1000)))
        let cancel = try #require(opener.close(id, .cancelled))
        #expect(opener.streams.pendingBytes(id) == 0, "pending bytes dropped")
        #expect(receiver.received(cancel) == .closed(id: id, reason: .cancelled))
    }

    @Test func aThirdIncomingStreamIsTurnedAwayBusy() throws {
        let opener = Side(.dialer), receiver = Side(.listener)
        var opened: [StreamTable.Event?] = []
        for name in ["1", "2", "3"] { opened.append(receiver.received(try opener.open(name).frame)) }
        #expect(opened[0] == .opened(id: 1, name: "1") && opened[1] == .opened(id: 3, name: "2"))
        #expect(opened[2] == .refused(id: 5, reply: .streamClose(streamID: 5, reason: .busy)))
        #expect(receiver.received(.streamData(streamID: 5, data: [1])) == .ignored(id: 5))
        // One ends: another may come.
        _ = receiver.close(1, .cancelled)
        #expect(receiver.received(try opener.open("4").frame) == .opened(id: 7, name: "4"))
    }

    /// A peer that breaks the rules loses that stream (answered `protocol-error`); the others go on.
    @Test func liesEndOneStream() throws {
        let opener = Side(.dialer), receiver = Side(.listener)
        let (id, open) = try opener.open("x")
        _ = receiver.received(open)
        func isViolation(_ e: StreamTable.Event?, _ id: UInt32, _ text: String) -> Bool {
            guard case .violation(id, let why, .streamClose(id, .protocolError))? = e else { return false }
            return why.contains(text)
        }
        // Data on a stream the receiver of it sends.
        #expect(isViolation(opener.received(.streamData(streamID: id, data: [1])), id, "which this side sends"))
        #expect(opener.streams.streams[id] == nil)
        // A close of a stream never opened; an id of the wrong parity; an id used before.
        #expect(isViolation(receiver.received(.streamClose(streamID: 9, reason: .normal)), 9, "never opened"))
        #expect(isViolation(receiver.received(.streamOpen(streamID: 4, name: "y")), 4, "belongs to this side"))
        #expect(isViolation(receiver.received(.streamOpen(streamID: id, name: "y")), id, "reused"))
        // Data after the opener's normal close.
        let (other, open2) = try opener.open("z")
        _ = receiver.received(open2)
        #expect(receiver.received(.streamClose(streamID: other, reason: .normal)) == .finished(id: other))
        #expect(isViolation(receiver.received(.streamData(streamID: other, data: [1])), other, "after its STREAM_CLOSE"))
        // A confirmation before the opener's end: no stream arrives before it was all sent.
        let (third, open3) = try opener.open("w")
        _ = receiver.received(open3)
        #expect(isViolation(opener.received(.streamClose(streamID: third, reason: .normal)), third, "before its last byte"))
    }

    @Test func streamsAndResourcesShareOneIdSpace() throws {
        let opener = Side(.dialer)
        let (id, _) = try opener.open("x")
        // A resource offer from the peer reusing a stream's id: refused. Our next resource
        // takes the next odd id.
        var peerSide = ResourceTable(role: .listener)
        _ = peerSide.claimPeerID(id)
        guard case .violation(id, let why, _)? = peerSide.received(.resourceOffer(ResourceOffer(resourceID: id, name: "f", size: 1, sha256: [UInt8](repeating: 0, count: 32), mediaType: "a/b"))) else {
            Issue.record("a stream's id reused for a resource must be refused")
            return
        }
        #expect(why.contains("reused"))
        #expect(opener.ids.offer(name: "f", size: 1, sha256: [UInt8](repeating: 0, count: 32), mediaType: "a/b").id == id + 2)
    }

    @Test func badNamesAreRefusedBeforeAnythingIsSent() {
        var t = StreamTable()
        for name in ["", "a/b", "tab\there", String(repeating: "x", count: 1) + "\u{7F}"] {
            #expect(throws: StreamTable.CommandError.self) { try t.open(id: 1, name: name) }
        }
        #expect(t.isEmpty)
    }

    @Test func theConnectionsEndReportsEveryStream() throws {
        let opener = Side(.dialer), receiver = Side(.listener)
        let (a, o1) = try opener.open("a")
        let (b, o2) = try opener.open("b")
        _ = receiver.received(o1)
        _ = receiver.received(o2)
        #expect(opener.streams.connectionEnded().map(\.id) == [a, b])
        #expect(receiver.streams.connectionEnded().map(\.outgoing) == [false, false])
        #expect(opener.streams.isEmpty && opener.received(.streamClose(streamID: a, reason: .normal)) == .ignored(id: a))
    }
}
