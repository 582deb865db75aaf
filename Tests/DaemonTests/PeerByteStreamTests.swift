import Control
import Foundation
import SystemKit
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Byte streams (`peer.open-stream`, `peer.accept-stream`) between two real daemons: the
/// bytes written into the socket passed to the opener come out of the one passed to the
/// reader, whole and in order; each side's client hears how the stream ended; a decline, a
/// reader that closes early and bad parameters are reported with their reason.
extension PeerCapabilityTests {
    /// The socket passed with `c`'s last reply, made blocking.
    static func passedSocket(_ c: RawClient, _ reply: JSONValue) throws -> Int32 {
        guard reply["fd"] == true, let fd = c.descriptors.popLast() else { throw TestSupportError("no socket with the reply: \(reply)") }
        try setNonBlocking(fd, false)
        return fd
    }

    /// Everything `fd` gives until its end.
    static func readToEnd(_ fd: Int32) throws -> [UInt8] {
        var all: [UInt8] = []
        while true {
            guard try SocketIO.waitReadable(fd, timeoutMilliseconds: 30_000) else { throw TestSupportError("nothing within 30 s after \(all.count) bytes") }
            let chunk = try SocketIO.receive(fd)
            if chunk.isEmpty { return all }
            all += chunk
        }
    }

    /// b opens a stream to a; a's `reader` client takes it: both sockets.
    static func openAndAccept(_ pair: ConnectedPair, _ reader: RawClient, name: String) throws -> (writer: Int32, reader: Int32, number: JSONValue) {
        let open = try pair.bClient.call("peer.open-stream", ["peer": .string(pair.aID), "name": .string(name)])
        let writer = try passedSocket(pair.bClient, open)
        let opened = try pair.aWatch.nextEvent("peer.stream-opened")["data"]
        #expect(opened?["name"] == .string(name) && opened?["peer"] == .string(pair.bID) && opened?["direction"] == "in")
        #expect(opened?["stream"] != nil && open["direction"] == "out")
        let number = try #require(opened?["stream"])
        let accepted = try reader.call("peer.accept-stream", ["stream": number])
        return (writer, try passedSocket(reader, accepted), number)
    }

    @Test func aByteStreamGoesFromOneClientsSocketToTheOthers() async throws {
        let pair = try await ConnectedPair(a: "reader", b: "writer")
        defer { pair.stop() }
        let aClient = try RawClient(pair.a.socketPath)
        let (writer, reader, number) = try Self.openAndAccept(pair, aClient, name: "photo-feed")
        let listed = try pair.a.call("peer.streams")["streams"]?.arrayValue ?? []
        #expect(listed.count == 1 && listed.first?["accepted"] == true && listed.first?["stream"] == number)
        var x: UInt64 = 0x2545_F491_4F6C_DD1D
        let bytes: [UInt8] = (0..<(3 * 1_048_576 + 5)).map { _ in
            x ^= x << 13; x ^= x >> 7; x ^= x << 17
            return UInt8(truncatingIfNeeded: x)
        }
        async let got = onThread { try Self.readToEnd(reader) }
        let wrote = await onThread { () -> String? in
            defer { closeQuietly(writer) }  // the end of the stream
            do { try SocketIO.sendAll(writer, bytes) } catch { return "\(error)" }
            return nil
        }
        if let wrote {
            // The daemon closed the writer's socket: the stream ended early; say why.
            let why = try? pair.bClient.nextEvent("peer.stream-closed")["data"]
            let log = pair.a.log.suffix(4000)
            Issue.record("writing failed (\(wrote)); the stream ended: \(String(describing: why)); a's exit: \(pair.a.stop()); a's log: \(log)")
            return
        }
        let received = try await got
        #expect(received.count == bytes.count && received == bytes,
                "every byte, once, in order: got \(received.count) of \(bytes.count); a's log: \(pair.a.log.suffix(3000))")
        closeQuietly(reader)
        let aClosed = try aClient.nextEvent("peer.stream-closed")["data"]
        let bClosed = try pair.bClient.nextEvent("peer.stream-closed")["data"]
        #expect(aClosed?["reason"] == "normal" && aClosed?["bytes"] == .int(Int64(bytes.count)))
        #expect(bClosed?["reason"] == "normal" && bClosed?["by_peer"] == true && bClosed?["bytes"] == .int(Int64(bytes.count)), "\(String(describing: bClosed))")
        #expect(try pair.a.call("peer.streams")["streams"]?.arrayValue?.isEmpty == true)
        #expect(try pair.b.call("peer.streams")["streams"]?.arrayValue?.isEmpty == true)
    }

    @Test func aDeclinedStreamAndAReaderThatLeavesAreReportedToTheWriter() async throws {
        let pair = try await ConnectedPair(a: "reader", b: "writer")
        defer { pair.stop() }
        // Declined before anyone took it.
        let open = try pair.bClient.call("peer.open-stream", ["peer": .string(pair.aID), "name": "unwanted"])
        let writer = try Self.passedSocket(pair.bClient, open)
        defer { closeQuietly(writer) }
        let number = try #require(try pair.aWatch.nextEvent("peer.stream-opened")["data"]?["stream"])
        #expect(try pair.a.call("peer.decline-stream", ["stream": number])["declined"] == true)
        let declined = try pair.bClient.nextEvent("peer.stream-closed")["data"]
        #expect(declined?["reason"] == "declined" && declined?["by_peer"] == true)
        #expect(try pair.aWatch.nextEvent("peer.stream-closed")["data"]?["reason"] == "declined", "published: nobody had taken it")

        // Taken, then the reader closes its socket: the writer hears 'cancelled' from the peer.
        let aClient = try RawClient(pair.a.socketPath)
        let (writer2, reader2, _) = try Self.openAndAccept(pair, aClient, name: "left")
        defer { closeQuietly(writer2) }
        try SocketIO.sendAll(writer2, [1, 2, 3])
        closeQuietly(reader2)
        let left = try pair.bClient.nextEvent("peer.stream-closed")["data"]
        #expect(left?["reason"] == "cancelled" && left?["by_peer"] == true, "\(String(describing: left))")
        #expect(try aClient.nextEvent("peer.stream-closed")["data"]?["reason"] == "cancelled")
    }

    /// `explicit_finish` (what `peerlink peer open-stream` uses): the socket's end alone is not
    /// a normal end. A writer that goes the way a killed one does (socket and control
    /// connection closed, no `peer.finish-stream`) is `cancelled` for the reader, not `normal`;
    /// `peer.finish-stream` sent before the socket's end still waits for every byte.
    @Test func aStreamOpenedWithExplicitFinishEndsNormallyOnlyWhenFinished() async throws {
        let pair = try await ConnectedPair(a: "reader", b: "writer")
        defer { pair.stop() }
        let aClient = try RawClient(pair.a.socketPath)
        let bytes: [UInt8] = (0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }

        // Finished first, then the socket's end: normal, every byte.
        let open = try pair.bClient.call("peer.open-stream", ["peer": .string(pair.aID), "name": "finished", "explicit_finish": true])
        let writer = try Self.passedSocket(pair.bClient, open)
        let number = try #require(try pair.aWatch.nextEvent("peer.stream-opened")["data"]?["stream"])
        let reader = try Self.passedSocket(aClient, try aClient.call("peer.accept-stream", ["stream": number]))
        async let got = onThread { try Self.readToEnd(reader) }
        try await onThread { try SocketIO.sendAll(writer, bytes) }
        #expect(try pair.bClient.call("peer.finish-stream", ["stream": open["stream"] ?? .null])["finishing"] == true)
        closeQuietly(writer)
        #expect(try await got == bytes)
        closeQuietly(reader)
        #expect(try aClient.nextEvent("peer.stream-closed")["data"]?["reason"] == "normal")
        #expect(try pair.bClient.nextEvent("peer.stream-closed")["data"]?["reason"] == "normal")

        // Gone without finishing, as a client killed by a signal: the reader hears cancelled.
        let killed = try RawClient(pair.b.socketPath)
        let open2 = try killed.call("peer.open-stream", ["peer": .string(pair.aID), "name": "killed", "explicit_finish": true])
        let writer2 = try Self.passedSocket(killed, open2)
        let number2 = try #require(try pair.aWatch.nextEvent("peer.stream-opened")["data"]?["stream"])
        let reader2 = try Self.passedSocket(aClient, try aClient.call("peer.accept-stream", ["stream": number2]))
        defer { closeQuietly(reader2) }
        try SocketIO.sendAll(writer2, Array(bytes.prefix(1000)))
        closeQuietly(writer2)
        var first: [UInt8] = []
        while first.count < 1000, try SocketIO.waitReadable(reader2, timeoutMilliseconds: 30_000) {
            let chunk = try SocketIO.receive(reader2)
            if chunk.isEmpty { break }
            first += chunk
        }
        #expect(first == Array(bytes.prefix(1000)))
        // The socket's end alone does not end it: a second later it is still open. (Without
        // explicit_finish it would have ended normally by now.)
        #expect(throws: (any Error).self, "no stream-closed before the writer's connection ends") {
            try aClient.nextEvent("peer.stream-closed", timeout: 1)
        }
        _ = shutdown(killed.fd, Int32(SHUT_RDWR))  // its control connection ends too (closed at deinit)
        let cut = try aClient.nextEvent("peer.stream-closed")["data"]
        #expect(cut?["reason"] == "cancelled" && cut?["by_peer"] == true, "\(String(describing: cut))")
        #expect(try Self.readToEnd(reader2).isEmpty, "the reader's socket ends, nothing more")

        // Only a stream opened here with explicit_finish can be finished.
        let plain = try pair.bClient.call("peer.open-stream", ["peer": .string(pair.aID), "name": "plain"])
        let writer3 = try Self.passedSocket(pair.bClient, plain)
        defer { closeQuietly(writer3) }
        let refused = try pair.bClient.request("peer.finish-stream", ["stream": plain["stream"] ?? .null])
        #expect(refused["error"]?["code"] == .int(Int64(RPCErrorCode.invalidParams)), "\(refused)")
        let missing = try pair.bClient.request("peer.finish-stream", ["stream": 9999])
        #expect(missing["error"]?["data"]?["kind"] == "not-found")
    }

    @Test func byteStreamParametersAreChecked() async throws {
        let pair = try await ConnectedPair(a: "reader", b: "writer")
        defer { pair.stop() }
        let badName = try pair.bClient.request("peer.open-stream", ["peer": .string(pair.aID), "name": "a/b"])
        #expect(badName["error"]?["code"] == .int(Int64(RPCErrorCode.invalidParams)) && badName["error"]?["message"]?.stringValue?.contains("name") == true, "\(badName)")
        #expect(pair.bClient.descriptors.isEmpty, "no socket passed with an error")
        let missing = try RawClient(pair.a.socketPath).request("peer.accept-stream", ["stream": 99])
        #expect(missing["error"]?["data"]?["kind"] == "not-found")
        let unknownPeer = try pair.bClient.request("peer.open-stream", ["peer": .string(String(repeating: "ab", count: 32)), "name": "x"])
        #expect(unknownPeer["error"]?["data"]?["kind"] == "not-connected")
        // One's own stream cannot be accepted.
        let open = try pair.bClient.call("peer.open-stream", ["peer": .string(pair.aID), "name": "mine"])
        closeQuietly(try Self.passedSocket(pair.bClient, open))
        let own = try RawClient(pair.b.socketPath).request("peer.accept-stream", ["stream": open["stream"] ?? .null])
        #expect(own["error"] != nil, "\(own)")
    }
}
