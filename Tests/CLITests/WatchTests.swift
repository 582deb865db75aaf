import Control
import Foundation
import TestSupport
import Testing
@testable import CLI

/// `peerlink watch` against a fake daemon.
@Suite(.ownThreads, .serialized, .memoryHeavy) struct WatchTests {
    private func adapter(powered: Bool) -> JSONValue {
        var a = Samples.hci0.objectValue!
        a["powered"] = .bool(powered)
        a["power_state"] = powered ? "on" : "off"
        return .object(a)
    }

    @Test func printsEventsUntilCount() throws {
        let daemon = try FakeDaemon { c in
            try c.reply(try c.expect("events.subscribe"), [:])
            try c.event("adapter.powered", ["adapter": adapter(powered: false), "powered": false])
            try c.sendRaw(#"{"jsonrpc":"2.0","method":"something.else","params":{}}"# + "\n")
            try c.event("adapter.changed", ["adapter": adapter(powered: true), "changed": ["powered", "power_state"]],
                        time: "2026-11-29T18:00:01.000Z")
            try? c.event("bluez.unavailable", [:])  // the CLI may be gone: it had its count
            c.waitForClose()
        }
        let run = peerlink(["watch", "--topic", "adapter", "--count", "2"], daemon: daemon)
        #expect(run.code == 0)
        #expect(run.err == "")
        #expect(run.out == """
            2026-11-29T18:00:00.123Z adapter.powered hci0 powered=false
            2026-11-29T18:00:01.000Z adapter.changed hci0 changed=powered,power_state powered=true power_state=on

            """)
        #expect(daemon.requests.first?.params.values == ["topics": ["adapter"]])
    }

    @Test func jsonPrintsEachEventsParams() throws {
        let data: JSONValue = ["adapter": Samples.hci0]
        let daemon = try FakeDaemon { c in
            let r = try c.expect("events.subscribe")
            try c.event("adapter.added", data)  // may arrive before the reply
            try c.reply(r, [:])
            try c.event("bluez.available", [:])
            c.waitForClose()
        }
        let run = peerlink(["--json", "watch", "--count", "2"], daemon: daemon)
        #expect(run.code == 0)
        let lines = run.out.split(separator: "\n").map(String.init)
        #expect(lines.count == 2)
        #expect(try JSONValue.parse(lines[0]) == ["topic": "adapter.added", "time": "2026-11-29T18:00:00.123Z", "data": data])
        #expect(try JSONValue.parse(lines[1])["topic"] == "bluez.available")
        #expect(daemon.requests.first?.params.values == [:])
    }

    @Test func timeoutWithoutCountExitsZero() throws {
        let daemon = try FakeDaemon { c in
            try c.reply(try c.expect("events.subscribe"), [:])
            try c.event("bluez.available", [:])
            c.waitForClose()
        }
        let run = peerlink(["watch", "--timeout", "0.3"], daemon: daemon)
        #expect(run.code == 0)
        #expect(run.out == "2026-11-29T18:00:00.123Z bluez.available\n")
    }

    @Test func timeoutBeforeCountExitsOne() throws {
        let daemon = try FakeDaemon { c in
            try c.reply(try c.expect("events.subscribe"), [:])
            try c.event("bluez.available", [:])
            c.waitForClose()
        }
        let run = peerlink(["watch", "--count", "3", "--timeout", "0.3"], daemon: daemon)
        #expect(run.code == 1)
        #expect(run.out == "2026-11-29T18:00:00.123Z bluez.available\n")
        #expect(run.err == "peerlink: timed out after 0.3 s with 1 of 3 events\n")
    }

    @Test func daemonClosingTheConnectionExitsThree() throws {
        let daemon = try FakeDaemon { c in
            try c.reply(try c.expect("events.subscribe"), [:])
            try c.event("bluez.unavailable", [:])
        }
        let run = peerlink(["watch"], daemon: daemon)
        #expect(run.code == 3)
        #expect(run.out == "2026-11-29T18:00:00.123Z bluez.unavailable\n")
        #expect(run.err == "peerlink: peerlinkd closed the connection\n")
    }

    @Test func subscribeErrorExitsOne() throws {
        let daemon = try FakeDaemon { c in
            try c.reply(try c.expect("events.subscribe"), error: .invalidParams("topics", "unknown topic 'x'"))
        }
        let run = peerlink(["watch", "--topic", "x"], daemon: daemon)
        #expect(run.code == 1)
        #expect(run.err.hasPrefix("peerlink: error: invalid params: topics: unknown topic 'x'\n"))
    }

    /// --ready-file appears once the daemon answered the subscription, not before: a script
    /// that waits for it then acts misses none of the events its action causes.
    @Test(arguments: [["watch", "--count", "1"], ["peer", "watch", "--count", "1"]])
    func readyFileAppearsOnceSubscribed(_ command: [String]) throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("pl-watch-\(UUID().uuidString.prefix(6))")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let ready = dir.appendingPathComponent("ready").path
        // One left by an earlier run: removed before the subscription.
        try Data().write(to: URL(fileURLWithPath: ready))
        let daemon = try FakeDaemon { c in
            let r = try c.expect("events.subscribe")
            let early = FileManager.default.fileExists(atPath: ready)
            try c.reply(r, [:])
            // The CLI creates the file after reading the reply; wait for it (bounded), then
            // send the event a script would cause.
            var waited = 0
            while !FileManager.default.fileExists(atPath: ready), waited < 1000 {
                usleep(10_000)
                waited += 1
            }
            let late = FileManager.default.fileExists(atPath: ready)
            try c.event(early ? "ready.too-early" : late ? "peer.session" : "ready.missing", [:])
            c.waitForClose()
        }
        let run = peerlink(["--json"] + command + ["--ready-file", ready], daemon: daemon)
        #expect(run.code == 0, "\(run.err)")
        #expect(try JSONValue.parse(run.out.trimmingCharacters(in: .newlines))["topic"] == "peer.session")
        #expect((try? FileManager.default.attributesOfItem(atPath: ready)[.size] as? Int) == 0)
    }

    @Test func readyFileThatCannotBeMadeFailsNamingIt() throws {
        let daemon = try FakeDaemon { c in
            try c.reply(try c.expect("events.subscribe"), [:])
            c.waitForClose()
        }
        let run = peerlink(["watch", "--ready-file", "/nonexistent-dir/ready"], daemon: daemon)
        #expect(run.code == 1)
        #expect(run.err.hasPrefix("peerlink: cannot create the ready file /nonexistent-dir/ready: "))
    }

    @Test func readyFileIsNotMadeWhenTheSubscriptionFails() throws {
        let ready = FileManager.default.temporaryDirectory.appendingPathComponent("pl-ready-\(UUID().uuidString.prefix(6))").path
        let daemon = try FakeDaemon { c in
            try c.reply(try c.expect("events.subscribe"), error: .invalidParams("topics", "unknown topic 'x'"))
        }
        let run = peerlink(["watch", "--topic", "x", "--ready-file", ready], daemon: daemon)
        #expect(run.code == 1)
        #expect(!FileManager.default.fileExists(atPath: ready))
    }

    @Test func eventRendering() {
        #expect(WatchCommand.line(for: ["topic": "x.y", "time": "T", "data": ["name": "a b", "n": 3, "o": ["k": [1], "e": "x=y"]]])
            == #"T x.y n=3 name="a b" o.e="x=y" o.k=1"#)
        // No JSON document in human output: lists of objects, empty lists, data that is not an object.
        #expect(WatchCommand.line(for: ["topic": "central.discovered", "time": "T",
                                        "data": ["device": ["address": "00:AA:01:00:00:01"], "manufacturer_data": [["id": 76, "value_hex": "02"]],
                                                 "uuids": [], "txt": ["a=1", "b c"]]])
            == #"T central.discovered 00:AA:01:00:00:01 manufacturer_data=(id=76 value_hex=02) txt=a=1,"b c" uuids=-"#)
        #expect(WatchCommand.line(for: ["topic": "x", "time": "T", "data": [1, "two"]]) == "T x 1,two")
        #expect(WatchCommand.line(for: ["topic": "x", "time": "T"]) == "T x")
        // A space or "=" followed by a combining mark still quotes the word.
        #expect(WatchCommand.line(for: ["topic": "x", "time": "T", "data": ["a": "b \u{301}c", "l": ["k=\u{301}v"]]])
            == "T x a=\"b \u{301}c\" l=k=\u{301}v")
        #expect(Rendering.duration(seconds: 42.9) == "42s")
        #expect(Rendering.duration(seconds: 90_061) == "1d 1h")
    }
}
