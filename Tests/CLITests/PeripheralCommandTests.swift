import Arguments
import Control
import Foundation
import SystemKit
import Synchronization
import TestSupport
import Testing
@testable import CLI

/// The peripheral commands build the requests the protocol documents, and refuse bad input.
@Suite(.ownThreads, .memoryHeavy) struct PeripheralCommandTests {
    private let parser = CommandParser(root: CommandTable.root)

    private func request(_ args: [String]) throws -> RPCCall {
        guard case .run(let inv) = try parser.parse(args), let cmd = CommandTable.command(at: inv.path),
              case .call(let build, _) = cmd.action else { throw UsageError("not a call", commandPath: []) }
        return try build(inv.values)
    }

    @Test func gattNotifyAndSet() throws {
        #expect(try request(["gatt", "notify", "2A19", "hello"]) == RPCCall(method: "gatt.notify", params: ["uuid": "2A19", "value": "hello"]))
        #expect(try request(["gatt", "notify", "--hex", "2A19", "0a0b", "--device", "00:AA:01:01:00:01"])
            == RPCCall(method: "gatt.notify", params: ["uuid": "2A19", "value_hex": "0a0b", "device": "00:AA:01:01:00:01"]))
        #expect(try request(["gatt", "set", "--app", "app2", "2A19", "x"]) == RPCCall(method: "gatt.set", params: ["uuid": "2A19", "value": "x", "app": "app2"]))
        // Several values: one request, one notification each, in order.
        #expect(try request(["gatt", "notify", "2A19", "a", "b", "c"]) == RPCCall(method: "gatt.notify", params: ["uuid": "2A19", "values": ["a", "b", "c"]]))
        #expect(try request(["gatt", "notify", "--hex", "2A19", "01", "0203"]) == RPCCall(method: "gatt.notify", params: ["uuid": "2A19", "values_hex": ["01", "0203"]]))
        #expect(throws: UsageError.self) { try request(["gatt", "notify", "2A19"]) }
    }

    @Test func gattRegisterSendsTheFileAndNamesItOnErrors() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("pl-cli-\(UUID().uuidString.prefix(6))")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let good = dir.appendingPathComponent("app.json").path
        try #"{"services":[{"uuid":"180F"}]}"#.write(toFile: good, atomically: true, encoding: .utf8)
        let r = try request(["gatt", "register", good, "--adapter", "hci1"])
        #expect(r.method == "gatt.register" && r.params["source"] == .string(good) && r.params["adapter"] == "hci1")
        #expect(r.params["definition"]?["services"]?.arrayValue?.count == 1)
        let bad = dir.appendingPathComponent("bad.json").path
        try "{nope".write(toFile: bad, atomically: true, encoding: .utf8)
        for (path, words) in [(bad, "not valid JSON"), (dir.appendingPathComponent("missing.json").path, "cannot read")] {
            do {
                _ = try request(["gatt", "register", path])
                Issue.record("accepted \(path)")
            } catch CLIError.failure(let message, let code) {
                #expect(code == 2 && message.contains(path) && message.contains(words), "\(message)")
            }
        }
    }

    @Test func advertiseStartBuildsEveryField() throws {
        let r = try request(["advertise", "start", "--name", "Dev", "--service", "180F", "--service", "180A",
                             "--manufacturer", "0x004c=0215", "--service-data", "180F=64", "--appearance", "832",
                             "--tx-power", "--interval", "100-200", "--timeout", "30"])
        #expect(r == RPCCall(method: "advertise.start", params: [
            "name": "Dev", "services": ["180F", "180A"], "manufacturer": [["id": 76, "data_hex": "0215"]],
            "service_data": [["uuid": "180F", "data_hex": "64"]], "appearance": 832, "tx_power": true,
            "interval_ms": ["min": 100, "max": 200], "timeout": 30,
        ], minimumReplyTimeout: 15))
    }

    @Test(arguments: [
        (["advertise", "start", "--manufacturer", "76"], "--manufacturer '76': expected ID=HEX"),
        (["advertise", "start", "--manufacturer", "apple=00"], "the company id is a number"),
        (["advertise", "start", "--interval", "fast"], "--interval 'fast': expected MIN-MAX"),
    ])
    func advertiseUsageErrors(_ args: [String], _ words: String) {
        do {
            _ = try request(args)
            Issue.record("accepted \(args)")
        } catch CLIError.usage(let e) {
            #expect(e.message.contains(words), "\(e.message)")
        } catch {
            Issue.record("unexpected \(error)")
        }
    }

    @Test func agent() throws {
        #expect(try request(["agent", "policy"]) == RPCCall(method: "agent.policy"))
        #expect(try request(["agent", "policy", "passkey", "123456"]) == RPCCall(method: "agent.policy", params: ["policy": "passkey 123456"]))
        #expect(try request(["agent", "confirm", "p1", "yes"]) == RPCCall(method: "agent.confirm", params: ["id": "p1", "accept": true]))
        #expect(throws: UsageError.self) { _ = try parser.parse(["agent", "confirm", "p1", "maybe"]) }
    }

    /// A fake daemon for `gatt stream`: passes a packet socket, collects what arrives on it
    /// until the CLI closes it, then reports the end as the daemon does.
    final class Packets: Sendable {
        let m = Mutex<[[UInt8]]>([])
        var all: [[UInt8]] { m.withLock { $0 } }
    }

    static func streamDaemon(_ packets: Packets) throws -> FakeDaemon {
        try FakeDaemon { c in
            let r = try c.expect("gatt.notify-stream")
            let (ours, theirs) = try DescriptorPassing.packetPair()
            defer { closeQuietly(ours) }
            try c.reply(r, ["stream": "stream1", "uuid": "6a3e4b28-522d-4b3b-82a9-d5e2004534fc", "fd": true, "subscribers": 1], passing: theirs)
            closeQuietly(theirs)
            var buf = [UInt8](repeating: 0, count: 1024)
            var got = 0
            while true {
                let n = recv(ours, &buf, buf.count, 0)
                if n <= 0 { break }
                packets.m.withLock { $0.append(Array(buf[0..<n])) }
                got += 1
            }
            try c.event("gatt.stream.ended", ["stream": "stream1", "reason": "closed", "message": "the client closed the stream",
                                              "received": .int(Int64(got)), "sent": .int(Int64(got)), "unsent": 0, "dropped": 0])
            c.waitForClose()
        }
    }

    @Test func streamSendsEachLineAsOnePacket() throws {
        let packets = Packets()
        let daemon = try Self.streamDaemon(packets)
        let file = "/tmp/peerlink-stream-" + String(UUID().uuidString.prefix(8)) + ".txt"
        try "0102\n\n0a 0b 0c\nff".write(toFile: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: file) }
        let run = peerlink(["gatt", "stream", "6A3E4B28-522D-4B3B-82A9-D5E2004534FC", "--hex", "--from", file], daemon: daemon)
        #expect(run.code == 0, "\(run.err)")
        #expect(packets.all == [[1, 2], [10, 11, 12], [255]], "one packet per line, empty lines skipped, the last line without newline too")
        #expect(run.out == "streamed 3 values: 3 notified, 0 with no subscriber (stored only)\n")
        #expect(daemon.requests.first?.params.values == ["uuid": "6A3E4B28-522D-4B3B-82A9-D5E2004534FC"])
    }

    @Test func streamStopsAtALineThatIsNotHex() throws {
        let packets = Packets()
        let daemon = try Self.streamDaemon(packets)
        let file = "/tmp/peerlink-stream-" + String(UUID().uuidString.prefix(8)) + ".txt"
        try "01\nzz\n02\n".write(toFile: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: file) }
        let run = peerlink(["gatt", "stream", "2a37", "--hex", "--from", file], daemon: daemon)
        #expect(run.code == 1)
        #expect(run.err.contains("\(file), line 2: not hex"), "\(run.err)")
        #expect(packets.all == [[1]])
    }
}
