import BlueZ
import Foundation
import Synchronization
import SystemKit
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `Channel.packetWriter` (a central's stream subscriber): the daemon never blocks on a slow client.
@Suite(.ownThreads, .memoryHeavy) struct PacketWriterTests {
    final class Ends: Sendable {
        let reasons = Mutex<[String]>([])
    }

    /// A reader that does not keep up: what the socket cannot take waits, in order, up to the
    /// bound; beyond it values are dropped and counted; once read, every kept value arrives.
    @Test func fullSocketQueuesInOrderAndDropsBeyondTheBound() throws {
        let (ours, theirs) = try DescriptorPassing.packetPair()
        defer { closeQuietly(theirs) }
        let w = Channel.packetWriter(fd: ours, label: "test", maxQueued: 100) { _ in }
        defer { w.close() }
        let total = 2000
        let packets = (0..<total).map { i in [UInt8(i >> 8), UInt8(i & 0xff)] + [UInt8](repeating: 0xAB, count: 1000) }
        for p in packets { w.send(p) }
        let dropped = Int(w.counts.refused)
        #expect(dropped > 0 && dropped < total, "2 MB cannot fit the socket and 100 queued packets")
        var got: [[UInt8]] = []
        var buf = [UInt8](repeating: 0, count: 2048)
        while got.count < total - dropped {
            guard try SocketIO.waitReadable(theirs, timeoutMilliseconds: 5000) else { break }
            let n = recv(theirs, &buf, buf.count, 0)
            if n <= 0 { break }
            got.append(Array(buf[0..<n]))
        }
        #expect(got.count == total - dropped, "every value not dropped arrives once there is room")
        let seqs = got.map { Int($0[0]) << 8 | Int($0[1]) }
        #expect(seqs == Array(0..<seqs.count), "in order, and the dropped ones are the newest")
        #expect(w.counts.written == UInt64(got.count))
    }

    /// The client closing its end is reported once; sending afterwards does nothing.
    @Test func theClientClosingItsEndIsReportedOnce() async throws {
        let (ours, theirs) = try DescriptorPassing.packetPair()
        let ends = Ends()
        let w = Channel.packetWriter(fd: ours, label: "test") { why in ends.reasons.withLock { $0.append(why) } }
        w.send([1, 2, 3])
        closeQuietly(theirs)
        let deadline = ContinuousClock.now + .seconds(5)
        while ends.reasons.withLock({ $0.isEmpty }), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        w.send([4])
        #expect(!w.close(), "already closed by the end")
        #expect(ends.reasons.withLock { $0 } == ["the client closed its socket"])
    }
}
