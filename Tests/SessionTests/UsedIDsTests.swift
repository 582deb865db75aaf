import Testing
@testable import Session

/// `UsedIDs` against a plain set: the same answers for every id, in every insertion order,
/// and a few runs where a set kept every id.
@Suite struct UsedIDsTests {
    /// Every id of a small range inserted once in a random order (so runs start anywhere,
    /// grow both ways and take their strays), each insert followed by a look at every id
    /// around: the answers are a set's; at the end, no strays.
    @Test(arguments: [1, 2, 3, 42, 1000])
    func answersAsASetDoes(seed: UInt64) {
        var rng = SplitMix(state: seed)
        var ids = UsedIDs(), model = Set<UInt32>()
        for id in (UInt32(0)..<300).shuffled(using: &rng) {
            ids.insert(id)
            model.insert(id)
            for probe in UInt32(0)..<302 where ids.contains(probe) != model.contains(probe) {
                Issue.record("id \(probe) after inserting \(id): \(ids.contains(probe)), a set says \(model.contains(probe))")
                return
            }
            #expect(ids.strayCount < model.count)
        }
        #expect(ids.strayCount == 0, "all 300 in: one run a parity")
    }

    /// Ids counting down, far apart (a peer that picks them so): each a stray, every answer
    /// right.
    @Test func idsCountingDownAreStrays() {
        var ids = UsedIDs()
        for id in stride(from: UInt32(400_000), to: 0, by: -4) { ids.insert(id) }
        #expect(ids.strayCount == 99_999)
        #expect(ids.contains(400_000) && ids.contains(4) && !ids.contains(2) && !ids.contains(6) && !ids.contains(400_004))
    }

    /// The ids a session's two sides allocate, in order and interleaved: one run a side
    /// however many; those that end after a later one wait as strays until it ends.
    @Test func idsAllocatedInOrderStayOneRunASide() {
        var ids = UsedIDs()
        for n in UInt32(0)..<100_000 {
            ids.insert(2 * n + 1)
            if n != 500 { ids.insert(2 * n + 2) }
        }
        #expect(ids.strayCount == 99_499, "the listener's id 1002 is still in progress: the ids after it wait")
        #expect(!ids.contains(1002) && ids.contains(1000) && ids.contains(1004) && ids.contains(199_999))
        ids.insert(1002)
        #expect(ids.strayCount == 0)
        #expect(ids.strayStorage <= 64, "the strays' storage given back once they are all in the run")
        #expect(!ids.contains(0) && !ids.contains(200_001) && !ids.contains(200_002))
    }

    /// The ends of the id space: 0, 1 and the largest of each parity; the first id of each
    /// parity starts its run, the others join it or wait beside it.
    @Test func theEndsOfTheSpace() {
        var ids = UsedIDs()
        for id in [UInt32.max, UInt32.max - 1, 0, 1] {
            #expect(!ids.contains(id))
            ids.insert(id)
            #expect(ids.contains(id))
        }
        #expect(!ids.contains(2) && !ids.contains(3) && !ids.contains(UInt32.max - 2) && !ids.contains(UInt32.max - 3))
        #expect(ids.strayCount == 2, "0 and 1 wait beside the runs the largest ids started")
        ids.insert(UInt32.max - 2)
        ids.insert(UInt32.max - 3)
        #expect(ids.strayCount == 2, "each joined its run, downwards")
        #expect(ids.contains(UInt32.max - 2) && ids.contains(UInt32.max - 3) && !ids.contains(UInt32.max - 4) && !ids.contains(UInt32.max - 5))
    }

    /// A table that carried 10,000 resources one after the other remembers them in a run
    /// (a late frame for any of them is still ignored, and none may be offered again).
    @Test func aTableRemembersManyEndedResourcesInARun() throws {
        var sender = ResourceTable(role: .dialer), receiver = ResourceTable(role: .listener)
        let hash = [UInt8](repeating: 1, count: 32)
        var ids: [UInt32] = []
        for _ in 0..<10_000 {
            let (id, offer) = sender.offer(name: "f", size: 1, sha256: hash, mediaType: "x/y")
            let frame = try #require(offer)
            _ = receiver.received(frame)
            let cancel = receiver.cancel(id, reason: .cancelled)
            #expect(cancel == .resourceCancel(resourceID: id, reason: .cancelled))
            _ = sender.cancel(id, reason: .cancelled)
            ids.append(id)
        }
        #expect(receiver.ended.strayCount == 0 && sender.ended.strayCount == 0)
        #expect(receiver.received(.resourceData(resourceID: ids[5_000], data: [1])) == .ignored(id: ids[5_000]))
        guard case .violation? = receiver.received(.resourceOffer(ResourceOffer(resourceID: ids[17], name: "g", size: 1, sha256: hash, mediaType: "x/y"))) else {
            Issue.record("an id reused was taken")
            return
        }
    }
}
