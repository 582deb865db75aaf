import Arguments
import Control
import Foundation
import SystemKit
import Synchronization
import Testing
@testable import CLI
#if canImport(Glibc)
import Glibc
#endif

/// `peer stream` against a fake daemon that passes a packet socket: lines out as packets,
/// packets in as lines, the end of the socket (the session's end) ending the command.
@Suite struct PeerStreamCommandTests {
    @Test func linesGoOutAndMessagesComeInUntilTheSessionEnds() throws {
        let sent = PeripheralCommandTests.Packets()
        let daemon = try FakeDaemon { c in
            let r = try c.expect("peer.message-stream")
            let (ours, theirs) = try DescriptorPassing.packetPair()
            defer { closeQuietly(ours) }
            try c.reply(r, ["stream": "peer-stream1", "short": "ABCDEFG", "fd": true, "max_message": 1000], passing: theirs)
            closeQuietly(theirs)
            var buf = [UInt8](repeating: 0, count: 1024)
            for _ in 0..<2 {
                let n = recv(ours, &buf, buf.count, 0)
                if n <= 0 { break }
                sent.m.withLock { $0.append(Array(buf[0..<n])) }
            }
            // Two messages from the peer, then the session ends (the socket's end).
            try SocketIO.sendPacket(ours, Array("hello from the peer".utf8))
            try SocketIO.sendPacket(ours, [0xC3, 0xA9])
            _ = shutdown(ours, Int32(SHUT_RDWR))
            try c.event("peer.stream-ended", ["stream": "peer-stream1", "reason": "session-ended", "message": "the session ended (normal)",
                                              "sent": 2, "received": 2, "unwritten": 0])
            c.waitForClose()
        }
        let file = "/tmp/peerlink-peer-stream-" + String(UUID().uuidString.prefix(8)) + ".txt"
        try "one\n\ntwo".write(toFile: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: file) }
        let run = peerlink(["peer", "stream", "ABCDEFG", "--keep", "--from", file], daemon: daemon)
        #expect(run.code == 0, "\(run.err)")
        #expect(sent.all == [Array("one".utf8), Array("two".utf8)], "one packet per line, the empty line skipped")
        #expect(run.out == "hello from the peer\né\n")
        #expect(run.err.contains("sent 2 messages, received 2 (the session ended (normal))"), "\(run.err)")
        #expect(daemon.requests.first?.params.values == ["peer": "ABCDEFG"])
    }
}
