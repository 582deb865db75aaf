import Arguments
import Control
import Foundation
import TestSupport
import Testing
@testable import CLI

/// The central commands build the documented requests, check addresses and UUIDs themselves,
/// and stream scan and subscription events.
@Suite(.ownThreads, .serialized, .memoryHeavy) struct CentralCommandTests {
    private let parser = CommandParser(root: CommandTable.root)
    static let dev = "00:AA:01:01:00:01"

    private func request(_ args: [String]) throws -> RPCCall {
        guard case .run(let inv) = try parser.parse(args), let cmd = CommandTable.command(at: inv.path),
              case .call(let build, _) = cmd.action else { throw UsageError("not a call", commandPath: []) }
        return try build(inv.values)
    }

    @Test func requestsCarryTheirParams() throws {
        #expect(try request(["connect", Self.dev, "--keep", "--timeout", "12"])
            == RPCCall(method: "central.connect", params: ["address": .string(Self.dev), "timeout": 12.0, "keep": true], minimumReplyTimeout: 22))
        #expect(try request(["read", "00:aa:01:01:00:01", "2A19", "--offset", "2", "--adapter", "hci1"])
            == RPCCall(method: "central.read", params: ["address": .string(Self.dev), "characteristic": "00002a19-0000-1000-8000-00805f9b34fb",
                                                        "offset": 2, "adapter": "hci1"], minimumReplyTimeout: 35))
        #expect(try request(["write", Self.dev, "2a39", "0102", "--hex", "--command", "--service", "180d"]).params
            == ["address": .string(Self.dev), "characteristic": "00002a39-0000-1000-8000-00805f9b34fb", "service": "0000180d-0000-1000-8000-00805f9b34fb",
                "value_hex": "0102", "command": true])
        #expect(try request(["services", Self.dev, "--refresh"]).params == ["address": .string(Self.dev), "refresh": true])
        #expect(try request(["trust", Self.dev, "--off"]).params == ["address": .string(Self.dev), "trusted": false])
        #expect(try request(["forget", Self.dev]).method == "central.forget")
        #expect(try request(["devices", "--connected"]).params == ["connected": true])
    }

    @Test(arguments: [
        (["read", "00:AA:01", "2a19"], "'00:AA:01' for '<address>'"),
        (["read", Self.dev, "xyz"], "'xyz' for '<characteristic>'"),
        (["connect", Self.dev, "--address-type", "other"], "'other'"),
        (["scan", "--service", "12345"], "'12345'"),
        // The daemon's ranges, refused before asking it (exit 2, not 1).
        (["connect", Self.dev, "--timeout", "900"], "must be between 0.5 and 600 seconds"),
        (["pair", Self.dev, "--timeout", "0.5"], "must be between 1 and 600 seconds"),
        (["scan", "--timeout", "0.05"], "must be between 0.1 and 86400 seconds"),
    ])
    func badValuesAreUsageErrors(args: [String], words: String) {
        let run = peerlink(args)
        #expect(run.code == 2)
        #expect(run.err.contains(words), "\(run.err)")
    }

    @Test func scanPrintsDevicesUntilCount() throws {
        let daemon = try FakeDaemon { c in
            let r = try c.expect("central.scan")
            try c.reply(r, ["scan": "scan-1", "adapter": "hci0", "address": "00:AA:01:00:00:00"])
            try c.event("central.discovered", ["scan": "scan-9", "address": "00:AA:01:09:09:09"])  // another scan: skipped
            try c.event("central.discovered", ["scan": "scan-1", "address": .string(Self.dev), "rssi": -60, "name": "Kenshin Cui's Device",
                                               "uuids": ["c4fb2349-72fe-4ca2-94d6-1f3cb16331ee"],
                                               "manufacturer_data": [["id": 65535, "value_hex": "0102"]]])
            c.waitForClose()
        }
        let run = peerlink(["scan", "--service", "C4FB2349-72FE-4CA2-94D6-1F3CB16331EE", "--count", "1", "--manufacturer", "0xffff"], daemon: daemon)
        #expect(run.code == 0, "\(run.err)")
        #expect(run.out == "00:AA:01:01:00:01   -60 dBm  Kenshin Cui's Device  c4fb2349-72fe-4ca2-94d6-1f3cb16331ee  mfr 0xffff 0102\n")
        // --count without --timeout: no time limit is sent.
        #expect(daemon.requests.first?.params.values == ["services": ["c4fb2349-72fe-4ca2-94d6-1f3cb16331ee"], "manufacturer": 65535])
    }

    @Test func deviceLinesAndTableAreColumnsOfWords() {
        // A scan line: fixed widths, as devices are printed when found; SIG UUIDs short.
        #expect(CentralCommands.deviceLine(["address": "00:AA:01:01:00:02", "uuids": ["0000180d-0000-1000-8000-00805f9b34fb", "0000180f-0000-1000-8000-00805f9b34fb"],
                                            "service_data": [["uuid": "0000feaa-0000-1000-8000-00805f9b34fb", "value_hex": "00ff"]], "tx_power": 4])
            == "00:AA:01:01:00:02         -  -                     180d,180f  data feaa 00ff  tx 4 dBm")
        #expect(CentralCommands.deviceLine(["address": "00:AA:01:01:00:03", "rssi": -101, "name": "A much longer name than twenty", "connected": true, "paired": true])
            == "00:AA:01:01:00:03  -101 dBm  A much longer name than twenty  -  connected  paired")
        // A device's name is its own choice: control characters come out escaped.
        #expect(CentralCommands.deviceLine(["address": "00:AA:01:01:00:04", "name": "\u{1B}[2Jx"])
            == "00:AA:01:01:00:04         -  \"\\u001b[2Jx\"          -")
        let devices: [JSONValue] = [
            ["address": .string(Self.dev), "rssi": -60, "name": "Kenshin Cui's Device", "connected": true, "trusted": true,
             "uuids": ["c4fb2349-72fe-4ca2-94d6-1f3cb16331ee"]],
            ["address": "00:AA:01:01:00:09", "manufacturer_data": [["id": 76, "value_hex": "0215"]]],
        ]
        #expect(CentralCommands.deviceTable(devices) == """
            ADDRESS            RSSI     NAME                  STATE              SERVICES                              DATA
            00:AA:01:01:00:01  -60 dBm  Kenshin Cui's Device  connected,trusted  c4fb2349-72fe-4ca2-94d6-1f3cb16331ee
            00:AA:01:01:00:09  -        -                     -                  -                                     mfr 0x004c 0215
            """)
        #expect(CentralCommands.deviceTable([devices[0]]).hasPrefix("ADDRESS            RSSI     NAME                  STATE              SERVICES\n"))
    }

    @Test func scanEndingBeforeCountIsAnError() throws {
        let daemon = try FakeDaemon { c in
            try c.reply(try c.expect("central.scan"), ["scan": "scan-1"])
            try c.event("central.scan.ended", ["scan": "scan-1", "reason": "timeout"])
            c.waitForClose()
        }
        let run = peerlink(["scan", "--count", "2", "--timeout", "1"], daemon: daemon)
        #expect(run.code == 1)
        #expect(run.err.contains("scan ended (timeout) with 0 of 2 devices"), "\(run.err)")
        #expect(daemon.requests.first?.params.values == ["timeout": 1.0])
    }

    @Test func subscribePrintsValuesAndDisconnectsAtTheEnd() throws {
        let daemon = try FakeDaemon { c in
            try c.reply(try c.expect("central.subscribe"), ["subscription": "sub-1", "device": .string(Self.dev), "characteristic": "2a37",
                                                            "via": "acquire-notify", "mtu": 247])
            try c.event("central.notification", ["subscription": "sub-1", "seq": 1, "value": "Kenshin --1", "value_hex": "00"])
            try c.event("central.notification", ["subscription": "sub-1", "seq": 2, "value_hex": "00ff"])
            try c.event("central.notification", ["subscription": "sub-1", "seq": 3, "value": "12\n34\u{9B}2J", "value_hex": "31320a3334c29b324a"])
            try c.event("central.subscription.ended", ["subscription": "sub-1", "reason": "disconnected (remote)", "count": 3])
            let d = try c.expect("central.disconnect")
            #expect(d.params.values == ["address": .string(Self.dev)])
            try c.reply(d, ["address": .string(Self.dev), "was_connected": false])
            c.waitForClose()
        }
        let run = peerlink(["subscribe", Self.dev, "2a37", "--disconnect"], daemon: daemon)
        #expect(run.code == 0, "\(run.err)")
        #expect(run.out == "Kenshin --1\n0x00ff\n\"12\\n34\\u009b2J\"\n", "a device's line break and CSI shown escaped, one line a value")
        #expect(run.err.contains("via acquire-notify, MTU 247") && run.err.contains("subscription ended: disconnected (remote)"))
    }

    /// A subscription ended by the daemon before `--count` values: the daemon's reason once,
    /// not wrapped in words that repeat it (it read "notifications stopped (notifications
    /// stopped (…))").
    @Test func subscribeEndedBeforeItsCountSaysTheReasonOnce() throws {
        let reason = "notifications stopped (bluetoothd closed the notification socket)"
        let daemon = try FakeDaemon { c in
            try c.reply(try c.expect("central.subscribe"), ["subscription": "sub-1", "device": .string(Self.dev), "characteristic": "2a37",
                                                            "via": "acquire-notify", "mtu": 247])
            try c.event("central.notification", ["subscription": "sub-1", "seq": 1, "value": "one", "value_hex": "6f6e65"])
            try c.event("central.subscription.ended", ["subscription": "sub-1", "reason": .string(reason), "count": 1])
            c.waitForClose()
        }
        let run = peerlink(["subscribe", Self.dev, "2a37", "--count", "3"], daemon: daemon)
        #expect(run.code == 1)
        #expect(run.out == "one\n")
        #expect(run.err.hasSuffix("subscription ended: \(reason)\npeerlink: subscription ended after 1 of 3 values: \(reason)\n"), "\(run.err)")
    }
}
