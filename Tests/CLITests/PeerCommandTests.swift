import Arguments
import Control
import Foundation
import SystemKit
import Synchronization
import Testing
import TestSupport
@testable import CLI
#if canImport(Glibc)
import Glibc
#endif

/// `peer stream` against a fake daemon that passes a packet socket: lines out as packets,
/// packets in as lines, the end of the socket (the session's end) ending the command.
@Suite(.ownThreads, .memoryHeavy) struct PeerStreamCommandTests {
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

/// `peer open-stream` and `peer accept-stream` against a fake daemon that passes a stream
/// socket: the input goes into it whole, what comes out goes to the file only once the
/// stream ended normally, and any other end exits 1 with its reason.
@Suite(.ownThreads, .memoryHeavy) struct PeerByteStreamCommandTests {
    static func stream(_ n: Int) -> [UInt8] { (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 1) } }

    @Test func openStreamWritesTheInputAndWaitsForTheReader() throws {
        let got = Mutex<[UInt8]>([])
        let daemon = try FakeDaemon { c in
            let r = try c.expect("peer.open-stream")
            let (ours, theirs) = try DescriptorPassing.streamPair()
            defer { closeQuietly(ours) }
            try c.reply(r, ["stream": 4, "short": "ABCDEFG", "name": "feed", "direction": "out", "fd": true], passing: theirs)
            closeQuietly(theirs)
            while true {
                let chunk = try SocketIO.receive(ours)
                if chunk.isEmpty { break }
                got.withLock { $0 += chunk }
            }
            // After the whole input (its socket's end), the command says it is complete.
            let finish = try c.expect("peer.finish-stream")
            #expect(finish.params["stream"] == 4)
            try c.reply(finish, ["stream": 4, "finishing": true])
            try c.event("peer.stream-closed", ["stream": 4, "reason": "normal", "by_peer": true, "bytes": .int(Int64(got.withLock { $0.count }))])
            c.waitForClose()
        }
        let file = "/tmp/peerlink-open-stream-" + String(UUID().uuidString.prefix(8))
        let bytes = Self.stream(300_000)
        try Data(bytes).write(to: URL(fileURLWithPath: file))
        defer { try? FileManager.default.removeItem(atPath: file) }
        let run = peerlink(["peer", "open-stream", "ABCDEFG", "feed", "--from", file], daemon: daemon)
        #expect(run.code == 0, "\(run.err)")
        #expect(got.withLock { $0 } == bytes)
        #expect(run.err.contains("wrote 300000 bytes; the peer's reader has them all"), "\(run.err)")
        #expect(daemon.requests.first?.params.values == ["peer": "ABCDEFG", "name": "feed", "explicit_finish": true])
        #expect(daemon.requests.map(\.method) == ["peer.open-stream", "peer.finish-stream"])
    }

    @Test(arguments: ["normal", "cancelled"])
    func acceptStreamSavesTheFileOnlyWhenTheStreamEndedNormally(_ reason: String) throws {
        let bytes = Self.stream(200_001)
        let daemon = try FakeDaemon { c in
            let r = try c.expect("peer.accept-stream")
            let (ours, theirs) = try DescriptorPassing.streamPair()
            try c.reply(r, ["stream": 7, "short": "ABCDEFG", "name": "feed", "direction": "in", "fd": true], passing: theirs)
            closeQuietly(theirs)
            try SocketIO.sendAll(ours, bytes)
            closeQuietly(ours)
            try c.event("peer.stream-closed", ["stream": 7, "reason": .string(reason), "by_peer": true, "detail": "the peer closed it"])
            c.waitForClose()
        }
        let file = "/tmp/peerlink-accept-stream-" + String(UUID().uuidString.prefix(8))
        defer { try? FileManager.default.removeItem(atPath: file) }
        let run = peerlink(["peer", "accept-stream", "7", "--to", file], daemon: daemon)
        #expect(!FileManager.default.fileExists(atPath: file + ".part"), "the part is renamed or removed")
        if reason == "normal" {
            #expect(run.code == 0, "\(run.err)")
            #expect(try Data(contentsOf: URL(fileURLWithPath: file)) == Data(bytes))
            #expect(run.err.contains("read 200001 bytes; complete"), "\(run.err)")
        } else {
            #expect(run.code == 1)
            #expect(!FileManager.default.fileExists(atPath: file), "nothing under the final name")
            #expect(run.err.contains("ended: cancelled (by the peer) the peer closed it"), "\(run.err)")
        }
    }
}

/// `peer send-file`: the file is opened by the CLI and passed with the request, its path
/// along (the daemon reads it there when it can, else copies the descriptor's bytes); `-` is
/// standard input and needs a name; a file the CLI cannot open is its own error.
@Suite(.ownThreads, .memoryHeavy) struct PeerSendFileCommandTests {
    @Test func theFileGoesAsADescriptorWithItsPath() throws {
        let file = "/tmp/peerlink-send-file-" + String(UUID().uuidString.prefix(8)) + ".bin"
        try Data("the file's bytes".utf8).write(to: URL(fileURLWithPath: file))
        defer { try? FileManager.default.removeItem(atPath: file) }
        let passed = Mutex<[UInt8]?>(nil)
        let daemon = try FakeDaemon { c in
            let r = try c.expect("peer.send-resource")
            if let fd = c.descriptors.first {
                var buf = [UInt8](repeating: 0, count: 100)
                let n = read(fd, &buf, buf.count)
                passed.withLock { $0 = Array(buf[0..<max(n, 0)]) }
                for d in c.descriptors { closeQuietly(d) }
            }
            try c.reply(r, ["transfers": [], "copied": false])
            c.waitForClose()
        }
        let run = peerlink(["peer", "send-file", file, "--detach"], daemon: daemon)
        #expect(run.code == 0, "\(run.err)")
        let params = daemon.requests.first?.params
        #expect(params?["path"]?.stringValue == file)
        #expect(params?["descriptor"] == true)
        #expect(passed.withLock { $0 } == Array("the file's bytes".utf8), "the descriptor passed is the file's")
    }

    /// Interrupted while the transfers run (Ctrl-C, or `timeout`'s SIGTERM), the command
    /// exits 130 or 143, as a shell reports a command the signal killed: a script must not
    /// take a file not yet sent for one sent (it exited 0). The real binary, as a child.
    @Test(arguments: [SIGINT, SIGTERM])
    func anInterruptedSendIsNotASuccess(signal: Int32) throws {
        let file = "/tmp/peerlink-send-file-" + String(UUID().uuidString.prefix(8)) + ".bin"
        try Data("the file's bytes".utf8).write(to: URL(fileURLWithPath: file))
        defer { try? FileManager.default.removeItem(atPath: file) }
        let daemon = try FakeDaemon { c in
            try c.reply(try c.expect("events.subscribe"), ["topics": ["peer.resource"]])
            let r = try c.expect("peer.send-resource")
            for d in c.descriptors { closeQuietly(d) }
            try c.reply(r, ["transfers": [["transfer": 1, "peer": "a1", "short": "A1", "name": "x.bin", "size": 16, "direction": "out"]], "copied": false])
            c.waitForClose()
        }
        var out: [Int32] = [-1, -1]
        #expect(pipe(&out) == 0)
        defer { closeQuietly(out[0]) }
        let peerlink = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent().path + "/peerlink"
        let child = try ChildProcess(peerlink, ["--socket", daemon.path, "--json", "peer", "send-file", file], stdout: out[1])
        closeQuietly(out[1])
        // The reply printed: the command waits for the transfers' events now.
        var seen: [UInt8] = []
        var byte: UInt8 = 0
        while !seen.contains(UInt8(ascii: "\n")), read(out[0], &byte, 1) == 1 { seen.append(byte) }
        #expect(String(decoding: seen, as: UTF8.self).contains("\"transfers\""))
        kill(child.pid, signal)
        let status = try #require(child.wait(timeout: 10))
        #expect(status & 0x7f == 0, "it exited by itself (the handler ran), not killed by the signal")
        #expect(ChildProcess.exitCode(status) == 128 + signal)
    }

    /// The progress board: on a terminal it shows at once (a receiver that asks its user
    /// may take its time), and a line wider than the terminal is cut (a wrapped line broke
    /// the redraw, which moves up one line a row); elsewhere a start is printed as it comes.
    @Test func theProgressBoardShowsTheWaitAndFitsTheTerminal() {
        let sent: [JSONValue] = [["transfer": 1, "name": "big.iso", "short": "X5JQO7H", "size": 1_073_741_824]]
        var live = ProgressBoard(sent, live: true, columns: 70)
        let first = live.render()
        #expect(first.count == 1 && first[0].hasSuffix("1 big.iso to X5JQO7H: offered, waiting for the peer to accept"), "\(first)")
        live.update(1, ["bytes": 483_183_820, "bytes_per_second": 11_744_051.2, "seconds_left": 48])
        let drawn = live.render()
        #expect(drawn.count == 1)
        let text = drawn[0].replacingOccurrences(of: "\u{1B}[1A", with: "").replacingOccurrences(of: "\u{1B}[2K", with: "")
        #expect(text.count <= 69 && text.hasSuffix("…"), "\(text)")
        var plain = ProgressBoard(sent, live: false)
        #expect(plain.render().isEmpty)
        plain.update(1, ["bytes": 0])
        #expect(plain.render() == ["1 big.iso to X5JQO7H [....................] 0% 0 B/1.0 GiB"])
    }

    @Test func standardInputNeedsANameAndAMissingFileIsSaidPlainly() throws {
        let stdin = peerlink(["peer", "send-file", "-"])
        #expect(stdin.code == 2)
        #expect(stdin.err.contains("--name is required when the file is '-'"), "\(stdin.err)")
        let missing = peerlink(["peer", "send-file", "/nonexistent/photo.png"])
        #expect(missing.code == 1)
        #expect(missing.err.contains("cannot open /nonexistent/photo.png: No such file or directory"), "\(missing.err)")
    }
}
