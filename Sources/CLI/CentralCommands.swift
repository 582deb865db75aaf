import Arguments
import BLE
import Control
import FoundationEssentials

extension ValueParser {
    /// A Bluetooth device address, 00:AA:01:00:00:00 (checked here: a typo is a usage error).
    static let deviceAddress = ValueParser.custom { text throws(ValueError) in
        guard let a = BluetoothAddress(text) else { throw ValueError("expected a device address like 00:AA:01:00:00:00") }
        return .string(a.description)
    }

    /// A Bluetooth UUID: 16-bit (180d), 32-bit or 128-bit with dashes.
    static let bluetoothUUID = ValueParser.custom { text throws(ValueError) in
        do { return .string(try BluetoothUUID(parsing: text).uuidString) } catch let e as BluetoothUUID.ParseError { throw ValueError(e.reason) } catch { throw ValueError("\(error)") }
    }.completing(.dynamic("uuid"))
}

/// `peerlink scan`, `connect`, `read`, `subscribe`, ...: the central role.
enum CentralCommands {
    static let adapterOption = PeripheralCommands.adapterOption
    static let address = Positional("address", parser: .deviceAddress, help: "The device address, e.g. 00:AA:01:00:00:00.")
    static let characteristic = Positional("characteristic", parser: .bluetoothUUID, help: "The characteristic UUID (16, 32 or 128 bits).")
    static let serviceOption = Option.value("service", valueName: "uuid", parser: .bluetoothUUID,
                                            help: "The service holding the characteristic (when several have it).")

    /// adapter + address params.
    static func params(_ v: ParsedValues) -> [String: JSONValue] {
        var p: [String: JSONValue] = ["address": .string(v.string("address") ?? "")]
        if let a = v.string("adapter") { p["adapter"] = .string(a) }
        if let c = v.string("characteristic") { p["characteristic"] = .string(c) }
        if let s = v.string("service") { p["service"] = .string(s) }
        return p
    }

    /// A value as UTF-8 text when it is printable, else as hex. Text a device sent with a
    /// line break or a terminal control (C1, bidi overrides) in it is quoted and escaped: one
    /// line per value, and nothing a device sends rewrites the terminal.
    static func valueText(_ r: JSONValue) -> String {
        if let s = r["value"]?.stringValue { return Rendering.text(s) }
        return "0x" + (r["value_hex"]?.stringValue ?? "")
    }

    // MARK: Scan

    static let scan = CLICommand(
        ["scan"], abstract: "Scan for LE devices and print each one found.",
        discussion: """
            Prints one line per device (with --duplicates, per advertisement): address, RSSI, name, \
            services, manufacturer and service data. Filters combine (all must match); bluetoothd \
            merges the filters of all its clients, so the daemon checks every device again. Stops \
            after --count devices, after --timeout seconds (default 10 s when --count is not given), \
            or when interrupted. With --count, running out of time first is an error (exit 1).
            """,
        options: [
            adapterOption,
            .value("service", valueName: "uuid", parser: .bluetoothUUID, repeating: true, help: "Only devices advertising this service; with several, any of them."),
            .value("name", valueName: "prefix", parser: .nonEmptyString, help: "Only devices whose name starts with this."),
            .value("name-pattern", valueName: "regex", parser: .nonEmptyString, help: "Only devices whose name matches this regular expression."),
            .value("rssi", valueName: "dBm", parser: .int(in: -127...20), help: "Only devices seen at least this strong, e.g. -70."),
            .value("manufacturer", valueName: "id", parser: .nonEmptyString, help: "Only devices with manufacturer data of this company id (decimal or 0x hex)."),
            .flag("duplicates", help: "Report every advertisement, not only the first of each device."),
            .value("count", valueName: "n", parser: .count, help: "Stop after n devices (or reports, with --duplicates)."),
            .value("timeout", key: "scan-timeout", valueName: "seconds", parser: .seconds(in: 0.1...86_400), help: "Stop after this many seconds."),
        ],
        action: .custom(runScan))

    static func runScan(_ context: CommandContext) throws(CLIError) -> Int32 {
        let v = context.values
        var p: [String: JSONValue] = [:]
        if let a = v.string("adapter") { p["adapter"] = .string(a) }
        let services = v.strings("service")
        if !services.isEmpty { p["services"] = .array(services.map { .string($0) }) }
        if let n = v.string("name") { p["name"] = .string(n) }
        if let n = v.string("name-pattern") { p["name_pattern"] = .string(n) }
        if let r = v.int("rssi") { p["rssi"] = .int(Int64(r)) }
        if let m = v.string("manufacturer") {
            guard let id = parseCompanyID(m) else {
                throw .usage(UsageError("--manufacturer '\(m)': expected a company id from 0 to 65535 (decimal or 0x hex)", commandPath: ["peerlink", "scan"]))
            }
            p["manufacturer"] = .int(Int64(id))
        }
        if v.flag("duplicates") { p["duplicates"] = true }
        let count = v.int("count")
        let seconds = v.double("scan-timeout") ?? (count == nil ? 10 : nil)
        if let seconds { p["timeout"] = .double(seconds) }
        let client = try context.connect()
        defer { client.close() }
        let r = try context.perform(RPCCall(method: ControlMethod.centralScan, params: p, minimumReplyTimeout: 15), on: client)
        let id = r["scan"]?.stringValue ?? ""
        context.streamingStarted()
        // The daemon ends the scan at its timeout; the reader waits a little longer for that event.
        let events = EventReader(client: client, seconds: seconds.map { $0 + 5 })
        var found = 0
        while count.map({ found < $0 }) ?? true {
            guard let e = try events.next() else { break }
            let data = e["data"] ?? .null
            guard data["scan"]?.stringValue == id else { continue }
            switch e["topic"]?.stringValue {
            case ControlEvent.centralDiscovered:
                found += 1
                context.print(context.json ? data.description : deviceLine(data))
            case ControlEvent.centralScanEnded:
                if let count, found < count {
                    throw .failure("scan ended (\(data["reason"]?.stringValue ?? "?")) with \(found) of \(count) devices", exitCode: 1)
                }
                return 0
            case ControlEvent.centralScanResumed:
                context.stderr.write("scan resumed on \(data["adapter"]?.stringValue ?? "?")\n")
            default:
                break
            }
        }
        if let count, found < count {
            throw .failure("timed out with \(found) of \(count) devices", exitCode: 1)
        }
        return 0
    }

    static func parseCompanyID(_ text: String) -> Int? {
        let n = text.lowercased().hasPrefix("0x") ? Int(text.dropFirst(2), radix: 16) : Int(text)
        guard let n, (0...0xFFFF).contains(n) else { return nil }
        return n
    }

    /// One scan result as aligned columns, bluetoothctl-like: address, RSSI, name and
    /// services, then what else the device advertised, in words:
    /// `00:AA:01:01:00:01  -60 dBm  Kenshin Cui's Device  c4fb2349-72fe-4ca2-94d6-1f3cb16331ee  mfr 0xffff 0102`.
    /// The widths are fixed, since a scan prints each device as it is found.
    static func deviceLine(_ d: JSONValue) -> String {
        let columns = [pad(d["address"]?.stringValue ?? "?", 17), pad(rssi(d), 8, right: true), pad(Rendering.text(d["name"]?.stringValue ?? "-"), 20),
                       services(d)]
        var line = (columns + extras(d) + flags(d)).joined(separator: "  ")
        while line.last == " " { line.removeLast() }
        return line
    }

    /// The devices BlueZ knows, as a table: ADDRESS RSSI NAME STATE SERVICES (and DATA when
    /// one advertised manufacturer or service data).
    static func deviceTable(_ devices: [JSONValue]) -> String {
        let data = devices.map { extras($0).joined(separator: "  ") }
        var header = ["ADDRESS", "RSSI", "NAME", "STATE", "SERVICES"]
        if data.contains(where: { !$0.isEmpty }) { header.append("DATA") }
        return Rendering.table(header: header, rows: zip(devices, data).map { d, data in
            let state = flags(d)
            return [d["address"]?.stringValue ?? "?", rssi(d), Rendering.text(d["name"]?.stringValue ?? "-"),
                    state.isEmpty ? "-" : state.joined(separator: ","), services(d)] + (header.count > 5 ? [data] : [])
        })
    }

    /// "-60 dBm", or "-" when BlueZ has no RSSI (a device not seen in this scan).
    private static func rssi(_ d: JSONValue) -> String {
        d["rssi"]?.intValue.map { "\($0) dBm" } ?? "-"
    }

    /// The advertised services, comma-joined; SIG UUIDs in their 16-bit form ("180d").
    private static func services(_ d: JSONValue) -> String {
        let uuids = (d["uuids"]?.arrayValue ?? []).compactMap(\.stringValue).map(shortUUID)
        return uuids.isEmpty ? "-" : uuids.joined(separator: ",")
    }

    /// "mfr 0xffff 0102", "data 180d 00", "tx 4 dBm".
    private static func extras(_ d: JSONValue) -> [String] {
        var words: [String] = []
        for m in d["manufacturer_data"]?.arrayValue ?? [] {
            words.append("mfr 0x" + String(m["id"]?.intValue ?? 0, radix: 16, zeroPaddedTo: 4) + " " + (m["value_hex"]?.stringValue ?? ""))
        }
        for s in d["service_data"]?.arrayValue ?? [] {
            words.append("data \(shortUUID(s["uuid"]?.stringValue ?? "?")) \(s["value_hex"]?.stringValue ?? "")")
        }
        if let t = d["tx_power"]?.intValue { words.append("tx \(t) dBm") }
        return words
    }

    /// connected, paired, trusted, keep: the states that are true.
    private static func flags(_ d: JSONValue) -> [String] {
        ["connected", "paired", "trusted", "keep"].filter { d[$0]?.boolValue == true }
    }

    /// "0000180d-0000-1000-8000-00805f9b34fb" as "180d"; other UUIDs as they are.
    static func shortUUID(_ text: String) -> String {
        guard let uuid = try? BluetoothUUID(parsing: text), let short = uuid.uuid16 else { return text }
        return String(short, radix: 16, zeroPaddedTo: 4)
    }

    private static func pad(_ text: String, _ width: Int, right: Bool = false) -> String {
        let fill = String(repeating: " ", count: max(0, width - text.count))
        return right ? fill + text : text + fill
    }

    // MARK: Connections

    static let connect = CLICommand(
        ["connect"], abstract: "Connect to a device and discover its services.",
        discussion: """
            Waits until the device is connected and its services are resolved (default 30 s). \
            Discovery is paused meanwhile and transient failures (le-connection-abort-by-local, \
            InProgress) are retried. An address BlueZ has not seen is connected with ConnectDevice. \
            --keep reconnects whenever the link drops, until 'peerlink disconnect'.
            """,
        options: [
            adapterOption,
            .value("timeout", key: "connect-timeout", valueName: "seconds", parser: .seconds(in: 0.5...600), help: "Give up after this many seconds (default 30)."),
            .flag("keep", help: "Keep the device connected: reconnect with backoff when the link drops."),
            .value("address-type", valueName: "public|random", parser: .choice(["public", "random"]), help: "For an address BlueZ has not seen (default public)."),
        ],
        arguments: [address],
        action: .call(request: { v throws(CLIError) in
            var p = params(v)
            let t = v.double("connect-timeout") ?? 30
            p["timeout"] = .double(t)
            if v.flag("keep") { p["keep"] = true }
            if let at = v.string("address-type") { p["address_type"] = .string(at) }
            return RPCCall(method: ControlMethod.centralConnect, params: p, minimumReplyTimeout: t + 10)
        }, render: { r in
            let d = r["device"] ?? .null
            return "connected to \(d["address"]?.stringValue ?? "?")\(d["name"]?.stringValue.map { " (\(Rendering.text($0)))" } ?? "") on \(r["adapter"]?.stringValue ?? "?")\(r["keep"]?.boolValue == true ? ", kept connected" : "")"
        }))

    static let disconnect = CLICommand(
        ["disconnect"], abstract: "Disconnect a device (and stop keeping it connected).",
        options: [adapterOption], arguments: [address],
        action: .call(request: { v throws(CLIError) in RPCCall(method: ControlMethod.centralDisconnect, params: params(v)) }, render: { r in
            r["was_connected"]?.boolValue == true ? "disconnected \(r["address"]?.stringValue ?? "?")" : "\(r["address"]?.stringValue ?? "?") was not connected"
        }))

    static let devices = CLICommand(
        ["devices"], abstract: "List the devices BlueZ knows on the adapter.",
        options: [adapterOption, .flag("connected", help: "Only connected devices.")],
        action: .call(request: { v throws(CLIError) in
            var p: [String: JSONValue] = [:]
            if let a = v.string("adapter") { p["adapter"] = .string(a) }
            if v.flag("connected") { p["connected"] = true }
            return RPCCall(method: ControlMethod.centralDevices, params: p)
        }, render: { r in
            let list = r["devices"]?.arrayValue ?? []
            return list.isEmpty ? "No devices." : deviceTable(list)
        }))

    static let services = CLICommand(
        ["services"], abstract: "Show a connected device's GATT services, characteristics and descriptors.",
        discussion: "--refresh drops BlueZ's cached attributes first (disconnect, remove, connect, discover again); refused for a paired device, whose bond would be lost.",
        options: [adapterOption, .flag("refresh", help: "Discover again instead of using BlueZ's cache.")],
        arguments: [address],
        action: .call(request: { v throws(CLIError) in
            var p = params(v)
            if v.flag("refresh") { p["refresh"] = true }
            return RPCCall(method: ControlMethod.centralServices, params: p, minimumReplyTimeout: 45)
        }, render: { r in
            var lines: [String] = []
            for s in r["services"]?.arrayValue ?? [] {
                lines.append("service \(s["uuid"]?.stringValue ?? "?")\(handle(s))\(s["primary"]?.boolValue == false ? " (secondary)" : "")")
                for c in s["characteristics"]?.arrayValue ?? [] {
                    let flags = (c["flags"]?.arrayValue ?? []).compactMap(\.stringValue).joined(separator: ",")
                    lines.append("  char \(c["uuid"]?.stringValue ?? "?")\(handle(c)) [\(flags)]")
                    for d in c["descriptors"]?.arrayValue ?? [] {
                        lines.append("    desc \(d["uuid"]?.stringValue ?? "?")\(handle(d))")
                    }
                }
            }
            return lines.isEmpty ? "No services." : lines.joined(separator: "\n")
        }))

    static func handle(_ o: JSONValue) -> String {
        o["handle"]?.intValue.map { " handle 0x" + String($0, radix: 16, zeroPaddedTo: 4) } ?? ""
    }

    // MARK: Reads and writes

    static let read = CLICommand(
        ["read"], abstract: "Read a characteristic of a connected device.",
        discussion: "Prints the value as UTF-8 text when it is printable, else as 0x-prefixed hex (--json gives both).",
        options: [adapterOption, serviceOption, .value("offset", valueName: "n", parser: .int(in: 0...512), help: "Read from this offset.")],
        arguments: [address, characteristic],
        action: .call(request: { v throws(CLIError) in
            var p = params(v)
            if let o = v.int("offset") { p["offset"] = .int(Int64(o)) }
            return RPCCall(method: ControlMethod.centralRead, params: p, minimumReplyTimeout: 35)
        }, render: valueText))

    static let write = CLICommand(
        ["write"], abstract: "Write a characteristic of a connected device.",
        discussion: "A write request (the default) is acknowledged; BlueZ splits a long value into prepared writes, in order. --command writes without response (at most MTU-3 bytes).",
        options: [adapterOption, serviceOption, PeripheralCommands.hexFlag,
                  .flag("command", help: "Write without response."),
                  .value("offset", valueName: "n", parser: .int(in: 0...511), help: "Write at this offset.")],
        arguments: [address, characteristic, Positional("value", help: "The value (UTF-8 text, or hex with --hex).")],
        action: .call(request: { v throws(CLIError) in
            var p = params(v)
            let text = v.string("value") ?? ""
            if v.flag("hex") { p["value_hex"] = .string(text) } else { p["value"] = .string(text) }
            if v.flag("command") { p["command"] = true }
            if let o = v.int("offset") { p["offset"] = .int(Int64(o)) }
            return RPCCall(method: ControlMethod.centralWrite, params: p, minimumReplyTimeout: 35)
        }, render: { r in "wrote \(r["length"]?.intValue ?? 0) bytes to \(r["characteristic"]?.stringValue ?? "?") (\(r["type"]?.stringValue ?? "?"))" }))

    // MARK: Subscriptions

    static let subscribe = CLICommand(
        ["subscribe"], abstract: "Subscribe to a characteristic and print each value as it arrives.",
        discussion: """
            Notifications come over an AcquireNotify socket (the fast path) or, with --indicate or \
            when BlueZ refuses, through StartNotify. One line per value (UTF-8 when printable, else \
            0x hex), in order. Ends after --count values, after --timeout seconds, or when the \
            notifications stop (the device disconnects or unsubscribes us); --disconnect then \
            disconnects the device. With --count, ending early is an error (exit 1).
            """,
        options: [
            adapterOption, serviceOption,
            .flag("indicate", help: "Use indications (StartNotify) instead of the notification socket."),
            .value("count", valueName: "n", parser: .count, help: "Stop after n values."),
            .value("timeout", key: "subscribe-timeout", valueName: "seconds", parser: .seconds, help: "Stop after this many seconds."),
            .flag("disconnect", help: "Disconnect the device when done."),
        ],
        arguments: [address, characteristic],
        action: .custom(runSubscribe))

    static func runSubscribe(_ context: CommandContext) throws(CLIError) -> Int32 {
        let v = context.values
        var p = params(v)
        if v.flag("indicate") { p["indicate"] = true }
        let count = v.int("count")
        let client = try context.connect()
        defer { client.close() }
        let r = try context.perform(RPCCall(method: ControlMethod.centralSubscribe, params: p, minimumReplyTimeout: 20), on: client)
        let id = r["subscription"]?.stringValue ?? ""
        if !context.json {
            context.stderr.write("subscribed to \(r["characteristic"]?.stringValue ?? "?") of \(r["device"]?.stringValue ?? "?") via \(r["via"]?.stringValue ?? "?")\(r["mtu"]?.intValue.map { ", MTU \($0)" } ?? "")\n")
        }
        context.streamingStarted()
        let events = EventReader(client: client, seconds: v.double("subscribe-timeout"))
        var got = 0
        var ended: String?
        while count.map({ got < $0 }) ?? true {
            guard let e = try events.next() else { break }
            let data = e["data"] ?? .null
            guard data["subscription"]?.stringValue == id else { continue }
            if e["topic"]?.stringValue == ControlEvent.centralNotification {
                got += 1
                context.print(context.json ? data.description : valueText(data))
            } else if e["topic"]?.stringValue == ControlEvent.centralSubscriptionEnded {
                ended = data["reason"]?.stringValue ?? "ended"
                context.stderr.write("subscription ended: \(ended!)\n")
                break
            }
        }
        if v.flag("disconnect") {
            var dp: [String: JSONValue] = ["address": p["address"]!]
            if let a = p["adapter"] { dp["adapter"] = a }
            _ = try? context.perform(RPCCall(method: ControlMethod.centralDisconnect, params: dp), on: client)
        } else if ended == nil {
            _ = try? context.perform(RPCCall(method: ControlMethod.centralUnsubscribe, params: ["subscription": .string(id)]), on: client)
        }
        if let count, got < count {
            // The daemon's reason says what stopped it ("disconnected (remote)", "notifications
            // stopped (…)"): given as is, not wrapped in words of ours that repeat it.
            throw .failure(ended.map { "subscription ended after \(got) of \(count) values: \($0)" } ?? "timed out after \(got) of \(count) values", exitCode: 1)
        }
        return 0
    }

    // MARK: Pairing

    static let pair = CLICommand(
        ["pair"], abstract: "Pair with a device (the daemon's agent answers per its policy).",
        options: [adapterOption, .value("timeout", key: "pair-timeout", valueName: "seconds", parser: .seconds(in: 1...600), help: "Give up after this many seconds (default 60).")],
        arguments: [address],
        action: .call(request: { v throws(CLIError) in
            var p = params(v)
            let t = v.double("pair-timeout") ?? 60
            p["timeout"] = .double(t)
            return RPCCall(method: ControlMethod.centralPair, params: p, minimumReplyTimeout: t + 10)
        }, render: { r in
            "\(r["already_paired"]?.boolValue == true ? "already paired with" : "paired with") \(r["device"]?["address"]?.stringValue ?? "?")"
        }))

    static let trust = CLICommand(
        ["trust"], abstract: "Trust a device (it may connect and use services without asking).",
        options: [adapterOption, .flag("off", help: "Remove the trust instead.")],
        arguments: [address],
        action: .call(request: { v throws(CLIError) in
            var p = params(v)
            p["trusted"] = .bool(!v.flag("off"))
            return RPCCall(method: ControlMethod.centralTrust, params: p)
        }, render: { r in
            "\(r["device"]?["address"]?.stringValue ?? "?") \(r["device"]?["trusted"]?.boolValue == true ? "trusted" : "not trusted")"
        }))

    static let forget = CLICommand(
        ["forget"], abstract: "Remove a device from BlueZ: its bond, cache and keep-connected mode.",
        options: [adapterOption], arguments: [address],
        action: .call(request: { v throws(CLIError) in RPCCall(method: ControlMethod.centralForget, params: params(v)) },
                      render: { r in "forgot \(r["address"]?.stringValue ?? "?")" }))
}
