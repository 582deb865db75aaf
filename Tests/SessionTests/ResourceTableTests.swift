import Testing
@testable import Session

/// The resource transfer rules without sockets: two tables (the dialer's and the
/// listener's) hand each other their frames, and a lying peer's frames are refused one
/// resource at a time.
@Suite struct ResourceTableTests {
    /// A table behind a reference, so that `#expect` can call its mutating methods.
    final class Side {
        var table: ResourceTable
        init(_ role: Role) { table = ResourceTable(role: role) }
        var transfers: [UInt32: ResourceTable.Transfer] { table.transfers }
        func received(_ f: Frame) -> ResourceTable.Event? { table.received(f) }
        /// An offer that goes at once (the tests that hold offers back call `table.offer`).
        func offer(name: String, size: UInt64, sha256: [UInt8], mediaType: String) -> (id: UInt32, frame: Frame) {
            let (id, frame) = table.offer(name: name, size: size, sha256: sha256, mediaType: mediaType)
            guard let frame else { fatalError("offer \(id) was held back") }
            return (id, frame)
        }
        func accept(_ id: UInt32, from offset: UInt64) throws -> Frame { try table.accept(id, from: offset) }
        func decline(_ id: UInt32, reason: Reason) throws -> Frame { try table.decline(id, reason: reason) }
        func sending(_ id: UInt32, count: Int) -> Bool { table.sending(id, count: count) }
        func finishSending(_ id: UInt32) throws -> Frame { try table.finishSending(id) }
        func verified(_ id: UInt32) throws -> Frame { try table.verified(id) }
        func cancel(_ id: UInt32, reason: Reason) -> Frame? { table.cancel(id, reason: reason) }
        func connectionEnded() -> [ResourceTable.Transfer] { table.connectionEnded() }
    }

    static let hash = [UInt8](repeating: 0x5A, count: 32)

    /// A dialer offering `size` bytes to a listener; returns both tables and the id.
    static func offered(size: UInt64 = 10) -> (sender: Side, receiver: Side, id: UInt32) {
        let sender = Side(.dialer)
        let receiver = Side(.listener)
        let (id, frame) = sender.offer(name: "photo.png", size: size, sha256: hash, mediaType: "image/png")
        guard case .offered(let o)? = receiver.received(frame) else {
            Issue.record("the offer was not reported")
            return (sender, receiver, id)
        }
        #expect(o.name == "photo.png" && o.size == size && o.resourceID == id)
        return (sender, receiver, id)
    }

    @Test func aWholeTransferEndsWithTheReceiversConfirmation() throws {
        let (sender, receiver, id) = Self.offered(size: 10)
        #expect(id == 1)
        #expect(sender.received(try receiver.accept(id, from: 0)) == .accepted(id: id, offset: 0))
        var seen: [ResourceTable.Event?] = []
        for chunk in [[UInt8](0..<4), [4, 5, 6], [7, 8, 9]] {
            #expect(sender.sending(id, count: chunk.count))
            seen.append(receiver.received(.resourceData(resourceID: id, data: chunk)))
        }
        #expect(seen == [.data(id: id, offset: 0, bytes: [0, 1, 2, 3]), .data(id: id, offset: 4, bytes: [4, 5, 6]),
                         .data(id: id, offset: 7, bytes: [7, 8, 9])])
        #expect(!sender.sending(id, count: 1), "a byte past the offered size is refused")
        #expect(receiver.received(try sender.finishSending(id)) == .complete(id: id))
        #expect(sender.received(try receiver.verified(id)) == .delivered(id: id))
        #expect(sender.transfers.isEmpty && receiver.transfers.isEmpty)
    }

    @Test func aResumedTransferStartsAtTheAcceptedOffset() throws {
        let (sender, receiver, id) = Self.offered(size: 100)
        #expect(sender.received(try receiver.accept(id, from: 60)) == .accepted(id: id, offset: 60))
        #expect(sender.sending(id, count: 40))
        #expect(receiver.received(.resourceData(resourceID: id, data: [UInt8](repeating: 1, count: 40)))
                == .data(id: id, offset: 60, bytes: [UInt8](repeating: 1, count: 40)))
        #expect(receiver.received(try sender.finishSending(id)) == .complete(id: id))
        // An offset past the end is refused, as a command and from the peer.
        let (s2, r2, id2) = Self.offered(size: 5)
        #expect(throws: ResourceTable.CommandError.self) { try r2.accept(id2, from: 6) }
        guard case .violation(id2, _, .resourceCancel(id2, .protocolError))? = s2.received(.resourceAccept(resourceID: id2, offset: 6)) else {
            Issue.record("an accept past the end must be a violation")
            return
        }
    }

    @Test func emptyResourcesNeedNoData() throws {
        let (sender, receiver, id) = Self.offered(size: 0)
        #expect(sender.received(try receiver.accept(id, from: 0)) == .accepted(id: id, offset: 0))
        #expect(receiver.received(try sender.finishSending(id)) == .complete(id: id))
    }

    @Test func declineAndCancelFromEitherSideReachTheOther() throws {
        let (sender, receiver, id) = Self.offered()
        #expect(sender.received(try receiver.decline(id, reason: .tooLarge)) == .declined(id: id, reason: .tooLarge))
        #expect(sender.transfers.isEmpty && receiver.transfers.isEmpty)

        let (s2, r2, id2) = Self.offered()
        _ = s2.received(try r2.accept(id2, from: 0))
        #expect(r2.received(try #require(s2.cancel(id2, reason: .cancelled))) == .cancelled(id: id2, reason: .cancelled))
        #expect(s2.cancel(id2, reason: .cancelled) == nil, "a second cancel sends nothing")

        let (s3, r3, id3) = Self.offered()
        _ = s3.received(try r3.accept(id3, from: 0))
        #expect(s3.received(try #require(r3.cancel(id3, reason: .noSpace))) == .cancelled(id: id3, reason: .noSpace))
    }

    @Test func framesInFlightWhenAResourceEndedAreIgnored() throws {
        let (sender, receiver, id) = Self.offered()
        _ = sender.received(try receiver.accept(id, from: 0))
        _ = receiver.cancel(id, reason: .cancelled)
        // The sender had already sent data and DONE.
        #expect(receiver.received(.resourceData(resourceID: id, data: [1, 2])) == .ignored(id: id))
        #expect(receiver.received(.resourceDone(resourceID: id)) == .ignored(id: id))
        #expect(receiver.received(.resourceCancel(resourceID: id, reason: .cancelled)) == .ignored(id: id))
    }

    struct Lie: Sendable, CustomStringConvertible {
        let description: String
        /// From an accepted 10-byte transfer (id 1), the peer's frames; the last must be refused.
        let frames: [Frame]
        let why: String
    }

    static let lies: [Lie] = [
        Lie(description: "more bytes than offered", frames: [.resourceData(resourceID: 1, data: [UInt8](repeating: 0, count: 11))],
            why: "resource 1 got more bytes than offered (10)"),
        Lie(description: "more bytes across frames", frames: [.resourceData(resourceID: 1, data: [UInt8](repeating: 0, count: 6)),
                                                              .resourceData(resourceID: 1, data: [UInt8](repeating: 0, count: 5))],
            why: "resource 1 got more bytes than offered (10)"),
        Lie(description: "DONE short of the size", frames: [.resourceData(resourceID: 1, data: [1]), .resourceDone(resourceID: 1)],
            why: "RESOURCE_DONE for resource 1 after 1 of 10 bytes"),
        Lie(description: "data after DONE", frames: [.resourceData(resourceID: 1, data: [UInt8](repeating: 0, count: 10)),
                                                     .resourceDone(resourceID: 1), .resourceData(resourceID: 1, data: [1])],
            why: "RESOURCE_DATA for resource 1 after its RESOURCE_DONE"),
        Lie(description: "an id in progress offered again",
            frames: [.resourceOffer(ResourceOffer(resourceID: 1, name: "x", size: 1, sha256: hash, mediaType: "a/b"))],
            why: "resource id 1 reused"),
        Lie(description: "accepting its own offer", frames: [.resourceAccept(resourceID: 1, offset: 0)],
            why: "RESOURCE_ACCEPT for resource 1 from the wrong side"),
    ]

    @Test("a lying peer loses that resource, and only that one", arguments: lies)
    func aLieEndsOnlyItsResource(_ lie: Lie) throws {
        let receiver = Side(.listener)
        for id: UInt32 in [1, 3] {
            _ = receiver.received(.resourceOffer(ResourceOffer(resourceID: id, name: "f\(id)", size: 10, sha256: Self.hash, mediaType: "a/b")))
            _ = try receiver.accept(id, from: 0)
        }
        var last: ResourceTable.Event?
        for f in lie.frames { last = receiver.received(f) }
        #expect(last == .violation(id: 1, why: lie.why, reply: .resourceCancel(resourceID: 1, reason: .protocolError)))
        #expect(receiver.transfers[1] == nil)
        // The other resource goes on.
        #expect(receiver.received(.resourceData(resourceID: 3, data: [7])) == .data(id: 3, offset: 0, bytes: [7]))
        #expect(receiver.transfers[3]?.position == 1)
    }

    @Test func dataBeforeAcceptIdsOfTheWrongSideAndMadeUpIdsAreRefused() {
        let receiver = Side(.listener)
        _ = receiver.received(.resourceOffer(ResourceOffer(resourceID: 1, name: "f", size: 10, sha256: Self.hash, mediaType: "a/b")))
        guard case .violation(1, "RESOURCE_DATA for resource 1 before it was accepted", _)? = receiver.received(.resourceData(resourceID: 1, data: [1])) else {
            Issue.record("data before accept must be refused")
            return
        }
        // The listener's peer (the dialer) uses odd ids.
        guard case .violation(2, let why, _)? = receiver.received(.resourceOffer(ResourceOffer(resourceID: 2, name: "f", size: 1, sha256: Self.hash, mediaType: "a/b"))) else {
            Issue.record("an even id from the dialer must be refused")
            return
        }
        #expect(why.contains("belongs to this side"))
        // An id that ended cannot be offered again.
        guard case .violation(1, "resource id 1 reused", _)? = receiver.received(.resourceOffer(ResourceOffer(resourceID: 1, name: "f", size: 1, sha256: Self.hash, mediaType: "a/b"))) else {
            Issue.record("a reused id must be refused")
            return
        }
        guard case .violation(9, "RESOURCE_DATA for resource 9, which was never offered", _)? = receiver.received(.resourceData(resourceID: 9, data: [])) else {
            Issue.record("data for an id never offered must be refused")
            return
        }
        #expect(receiver.received(.message(MessageFragment(messageID: 1, data: [], isFinal: true))) == nil, "not a resource frame")
    }

    @Test func commandsOutOfOrderAreRefused() throws {
        let (sender, receiver, id) = Self.offered(size: 4)
        #expect(throws: ResourceTable.CommandError.self) { try receiver.verified(id) }
        #expect(throws: ResourceTable.CommandError.self) { try sender.finishSending(id) }
        _ = sender.received(try receiver.accept(id, from: 0))
        #expect(throws: ResourceTable.CommandError.self) { try receiver.accept(id, from: 0) }
        #expect(sender.sending(id, count: 3))
        #expect(throws: ResourceTable.CommandError.self) { try sender.finishSending(id) }
        #expect(throws: ResourceTable.CommandError.self) { try receiver.decline(99, reason: .declined) }
    }

    @Test func eachSideAllocatesItsOwnParityAndTheConnectionsEndListsWhatWasInProgress() throws {
        let dialer = Side(.dialer)
        let listener = Side(.listener)
        let a = dialer.offer(name: "a", size: 1, sha256: Self.hash, mediaType: "a/b").id
        let b = dialer.offer(name: "b", size: 1, sha256: Self.hash, mediaType: "a/b").id
        let c = listener.offer(name: "c", size: 1, sha256: Self.hash, mediaType: "a/b").id
        #expect([a, b, c] == [1, 3, 2])
        #expect(dialer.connectionEnded().map(\.offer.name) == ["a", "b"])
        #expect(dialer.transfers.isEmpty)
    }

    // MARK: At most `maxInProgress` each way

    /// The receiver refuses a 17th resource in progress with `busy` and nothing changes; once
    /// one ends, the next offer is taken.
    @Test func aReceiverRefusesAnOfferPastItsLimitAndTakesTheNextOnceOneEnds() throws {
        let receiver = Side(.listener)
        let n = ResourceTable.maxInProgress
        for i in 0..<n {
            let id = UInt32(2 * i + 1)
            let offer = ResourceOffer(resourceID: id, name: "f\(i)", size: 1, sha256: Self.hash, mediaType: "a/b")
            guard case .offered? = receiver.received(.resourceOffer(offer)) else { Issue.record("offer \(id) not taken"); return }
        }
        let before = receiver.transfers
        let past = ResourceOffer(resourceID: UInt32(2 * n + 1), name: "past", size: 1, sha256: Self.hash, mediaType: "a/b")
        #expect(receiver.received(.resourceOffer(past)) == .refused(id: past.resourceID, reply: .resourceDecline(resourceID: past.resourceID, reason: .busy)))
        #expect(receiver.transfers == before, "a refused offer changes nothing")
        #expect(receiver.received(.resourceCancel(resourceID: past.resourceID, reason: .cancelled)) == .ignored(id: past.resourceID),
                "a late frame for the refused id is ignored")
        // One ends (declined here): room for one more.
        _ = try receiver.decline(1, reason: .declined)
        let next = ResourceOffer(resourceID: UInt32(2 * n + 3), name: "next", size: 1, sha256: Self.hash, mediaType: "a/b")
        #expect(receiver.received(.resourceOffer(next)) == .offered(next))
        #expect(receiver.transfers.count == n)
    }

    /// A sender past the limit holds its offers back, in order, and lets one go each time one
    /// of its resources ends, however it ends; a held one cancelled goes without a word, one
    /// the peer answers (guessing its id) ends as a lie; the receiver never refuses one.
    @Test func aSenderHoldsOffersPastTheLimitAndReleasesThemInOrder() throws {
        let (sender, receiver) = (Side(.dialer), Side(.listener))
        let n = ResourceTable.maxInProgress
        var ids: [UInt32] = []
        func offer(_ i: Int) -> ResourceOffer { ResourceOffer(resourceID: ids[i], name: "f\(i)", size: 1, sha256: Self.hash, mediaType: "a/b") }
        /// The one offer released now: it reaches the receiver, which takes it.
        func releasesOne(_ i: Int) {
            let released = sender.table.releaseHeld()
            #expect(released == [.resourceOffer(offer(i))], "offer \(i) released")
            for f in released { #expect(receiver.received(f) == .offered(offer(i))) }
        }
        for i in 0..<(n + 5) {
            let (id, frame) = sender.table.offer(name: "f\(i)", size: 1, sha256: Self.hash, mediaType: "a/b")
            ids.append(id)
            #expect((frame == nil) == (i >= n), "offer \(i)")
            if let frame { #expect(receiver.received(frame) == .offered(offer(i))) }
        }
        #expect(sender.table.held.map(\.resourceID) == Array(ids[n...]))
        #expect(sender.table.releaseHeld().isEmpty, "no room yet")
        // A frame from the peer for a held id (it guessed it): a lie, which ends that one.
        let lie = sender.received(.resourceAccept(resourceID: ids[n + 4], offset: 0))
        #expect(lie == .violation(id: ids[n + 4], why: "RESOURCE_ACCEPT for resource \(ids[n + 4]), which was not offered yet",
                                  reply: .resourceCancel(resourceID: ids[n + 4], reason: .protocolError)))
        #expect(!sender.table.isHeld(ids[n + 4]))
        // Cancelling a held one: nothing to send, the rest stay held in order.
        #expect(sender.table.isHeld(ids[n + 1]))
        #expect(sender.cancel(ids[n + 1], reason: .cancelled) == nil)
        #expect(sender.table.held.map(\.resourceID) == [ids[n], ids[n + 2], ids[n + 3]])
        // Declined, cancelled by the receiver, delivered: each lets the next one go.
        #expect(sender.received(try receiver.decline(ids[0], reason: .declined)) == .declined(id: ids[0], reason: .declined))
        releasesOne(n)
        #expect(sender.received(try #require(receiver.cancel(ids[1], reason: .cancelled))) == .cancelled(id: ids[1], reason: .cancelled))
        releasesOne(n + 2)
        #expect(sender.received(try receiver.accept(ids[3], from: 0)) == .accepted(id: ids[3], offset: 0))
        #expect(sender.sending(ids[3], count: 1))
        #expect(receiver.received(.resourceData(resourceID: ids[3], data: [7])) == .data(id: ids[3], offset: 0, bytes: [7]))
        #expect(receiver.received(try sender.finishSending(ids[3])) == .complete(id: ids[3]))
        #expect(sender.received(try receiver.verified(ids[3])) == .delivered(id: ids[3]))
        releasesOne(n + 3)
        // Cancelled by the sender: nothing left to release.
        #expect(receiver.received(try #require(sender.cancel(ids[2], reason: .cancelled))) == .cancelled(id: ids[2], reason: .cancelled))
        #expect(sender.table.releaseHeld().isEmpty && sender.table.held.isEmpty)
        #expect(sender.transfers.count == n - 1 && Set(sender.transfers.keys) == Set(receiver.transfers.keys),
                "both count the same resources in progress")
    }

    /// A RESOURCE_OFFER from the peer with the id of an offer held back (this side's parity:
    /// a lie) ends that offer, as any frame naming it does, so the connection (which forgets
    /// the resource on a violation) and the table agree (found by the resource-table fuzzer).
    @Test func anOfferNamingAHeldOneEndsIt() {
        let sender = Side(.dialer)
        let n = ResourceTable.maxInProgress
        var ids: [UInt32] = []
        for i in 0...n { ids.append(sender.table.offer(name: "f\(i)", size: 1, sha256: Self.hash, mediaType: "a/b").id) }
        let lie = ResourceOffer(resourceID: ids[n], name: "x", size: 1, sha256: Self.hash, mediaType: "a/b")
        guard case .violation(let id, _, let reply)? = sender.received(.resourceOffer(lie)) else {
            Issue.record("the lie was not refused")
            return
        }
        #expect(id == ids[n] && reply == .resourceCancel(resourceID: ids[n], reason: .protocolError))
        #expect(sender.table.held.isEmpty && sender.transfers.count == n)
        #expect(sender.received(.resourceDecline(resourceID: ids[0], reason: .declined)) == .declined(id: ids[0], reason: .declined))
        #expect(sender.table.releaseHeld().isEmpty, "the ended offer never goes")
    }

    /// The connection ends with offers held back: they are reported with the rest (to be
    /// offered again on the next connection), and nothing is held any more.
    @Test func heldOffersEndWithTheConnection() {
        let sender = Side(.dialer)
        let n = ResourceTable.maxInProgress
        for i in 0..<(n + 2) { _ = sender.table.offer(name: "f\(i)", size: 1, sha256: Self.hash, mediaType: "a/b") }
        let ended = sender.connectionEnded()
        #expect(ended.count == n + 2 && ended.allSatisfy { $0.outgoing && $0.phase == .offered })
        #expect(sender.table.held.isEmpty && sender.transfers.isEmpty)
        #expect(sender.table.releaseHeld().isEmpty)
    }
}
