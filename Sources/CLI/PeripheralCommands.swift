import BLE
import Arguments
import Control
import FoundationEssentials
import SystemKit
#if canImport(Glibc)
import Glibc
#endif

/// `peerlink gatt ...`, `advertise ...` and `agent ...`: the peripheral role.
enum PeripheralCommands {
    static let adapterOption = Option.value("adapter", valueName: "hciN|address", parser: .adapter,
                                            help: "The adapter to use (default: the daemon's default adapter).")
    static let hexFlag = Option.flag("hex", help: "VALUE is hex bytes (e.g. 0a0b or \"0a 0b\"), not UTF-8 text.")
    static let appOption = Option.value("app", valueName: "id", parser: .nonEmptyString,
                                        help: "The application holding the characteristic (default: the first that has it).")

    /// UUID and VALUE, for the commands that set a characteristic's value.
    static let characteristicArguments = [Positional("uuid", parser: .localUUID, help: "The characteristic UUID."),
                                          Positional("value", help: "The value (UTF-8 text, or hex with --hex).")]

    /// The params of those commands: uuid, the value (UTF-8, or hex with --hex) and --app.
    static func characteristicParams(_ v: ParsedValues) -> [String: JSONValue] {
        let text = v.string("value") ?? ""
        var p: [String: JSONValue] = v.flag("hex") ? ["value_hex": .string(text)] : ["value": .string(text)]
        p["uuid"] = .string(v.string("uuid") ?? "")
        if let a = v.string("app") { p["app"] = .string(a) }
        return p
    }

    static let register = CLICommand(
        ["gatt", "register"], abstract: "Register a GATT application from a definition file.",
        discussion: "The file is JSON (format in the README). It is checked completely first: an error names the file, the place inside it and the reason, and nothing is registered.",
        options: [adapterOption],
        arguments: [Positional("file", parser: .path, help: "The definition file (JSON).")],
        action: .call(request: { v throws(CLIError) in
            let path = v.string("file")!
            let read: [UInt8]?
            do { read = try AtomicFile.readIfPresent(path, maximumSize: ControlDefaults.maxLineBytes) } catch {
                throw CLIError.failure("cannot read \(path): \(error)", exitCode: 2)
            }
            guard let bytes = read else { throw CLIError.failure("cannot read \(path): no such file", exitCode: 2) }
            let doc: JSONValue
            do { doc = try JSONValue.parse(bytes) } catch {
                throw CLIError.failure("\(path): not valid JSON: \(error)", exitCode: 2)
            }
            var p: [String: JSONValue] = ["definition": doc, "source": .string(path)]
            if let a = v.string("adapter") { p["adapter"] = .string(a) }
            return RPCCall(method: ControlMethod.gattRegister, params: p, minimumReplyTimeout: 20)
        }, render: { r in
            let services = r["services"]?.arrayValue?.count ?? 0
            return "\(r["id"]?.stringValue ?? "?") registered (\(services) service\(services == 1 ? "" : "s")) on \(r["address"]?.stringValue ?? "?")"
        }))

    static let unregister = CLICommand(
        ["gatt", "unregister"], abstract: "Unregister a GATT application.",
        arguments: [Positional("id", parser: .nonEmptyString, help: "The application id (from 'gatt register' or 'gatt list').")],
        action: .call(request: { v throws(CLIError) in RPCCall(method: ControlMethod.gattUnregister, params: ["id": .string(v.string("id")!)]) },
                      render: { r in "\(r["id"]?.stringValue ?? "?") unregistered" }))

    static let list = CLICommand(
        ["gatt", "list"], abstract: "List the registered GATT applications and their characteristics.",
        action: .call(request: { _ throws(CLIError) in RPCCall(method: ControlMethod.gattList) }, render: { r in
            let apps = r["applications"]?.arrayValue ?? []
            if apps.isEmpty { return "No applications." }
            var lines: [String] = []
            for a in apps {
                lines.append("\(a["id"]?.stringValue ?? "?")  \(a["name"]?.stringValue ?? "")  \(a["registered"]?.boolValue == true ? "registered on \(a["address"]?.stringValue ?? "?")" : "not registered")")
                for s in a["services"]?.arrayValue ?? [] {
                    lines.append("  service \(s["uuid"]?.stringValue ?? "?")\(s["primary"]?.boolValue == false ? " (secondary)" : "")")
                    for c in s["characteristics"]?.arrayValue ?? [] {
                        let flags = (c["flags"]?.arrayValue ?? []).compactMap(\.stringValue).joined(separator: ",")
                        let value = c["value"]?.stringValue.map { "\"\($0)\"" } ?? "0x" + (c["value_hex"]?.stringValue ?? "")
                        lines.append("    char \(c["uuid"]?.stringValue ?? "?") [\(flags)] = \(value)  subscribers=\(c["subscribers"]?.intValue ?? 0)")
                    }
                }
            }
            return lines.joined(separator: "\n")
        }))

    static let set = CLICommand(
        ["gatt", "set"], abstract: "Set a characteristic's value (what the next read returns); no notification.",
        options: [hexFlag, appOption],
        arguments: characteristicArguments,
        action: .call(request: { v throws(CLIError) in
            RPCCall(method: ControlMethod.gattSet, params: characteristicParams(v))
        }, render: { r in "\(r["uuid"]?.stringValue ?? "?") = \(r["value"]?.stringValue.map { "\"\($0)\"" } ?? "0x" + (r["value_hex"]?.stringValue ?? ""))" }))

    static let notify = CLICommand(
        ["gatt", "notify"], abstract: "Set a characteristic's value and notify (or indicate) it to subscribed centrals.",
        discussion: "A value longer than one notification carries (ATT MTU - 3) is an error, never cut. Several values are sent in order, one notification each, in one request (every value is checked before the first is sent). --device sends to one central only (needs BlueZ 5.69+).",
        options: [hexFlag, appOption, .value("device", valueName: "address", parser: .nonEmptyString, help: "Notify only this central.")],
        arguments: [Positional("uuid", parser: .localUUID, help: "The characteristic UUID."),
                    Positional("value", repeating: true, help: "The value (UTF-8 text, or hex with --hex); several: one notification each, in order.")],
        action: .call(request: { v throws(CLIError) in
            var p = characteristicParams(v)
            let values = v.strings("value")
            if values.count > 1 {
                p["value"] = nil
                p["value_hex"] = nil
                p[v.flag("hex") ? "values_hex" : "values"] = .array(values.map { .string($0) })
            }
            if let d = v.string("device") { p["device"] = .string(d) }
            return RPCCall(method: ControlMethod.gattNotify, params: p)
        }, render: { r in
            let count = r["count"]?.intValue ?? 1
            return "notified \(count == 1 ? "" : "\(count) values, ")\(r["length"]?.intValue ?? 0) bytes to \(r["subscribers"]?.intValue ?? 0) subscriber(s)"
        }))

    static let stream = CLICommand(
        ["gatt", "stream"], abstract: "Notify each line of standard input (or a file) as one value, through a data stream.",
        discussion: """
            Opens a notification stream (gatt.notify-stream): each line read is one value (UTF-8 \
            text without its newline, or hex with --hex), notified in order with no request per \
            value; empty lines are skipped. While bluetoothd cannot take more, writing waits \
            (nothing is dropped). With no subscriber a value becomes the stored value and is \
            counted as unsent. At the end of input the stream closes and the counts are printed. \
            A value too long for one notification ends the stream (exit 1, with how much fits); a \
            line that is not hex with --hex stops reading (exit 1, naming the line).
            """,
        options: [hexFlag, appOption,
                  .value("device", valueName: "address", parser: .nonEmptyString, help: "Notify only this central."),
                  .value("from", valueName: "file", parser: .path, help: "Read the values from this file instead of standard input.")],
        arguments: [Positional("uuid", parser: .localUUID, help: "The characteristic UUID.")],
        action: .custom(runStream))

    /// The input of a streaming command: `--from FILE` opened for reading, or standard input
    /// (descriptor 0, also for "-"); with the name to use in messages. `gatt stream` and
    /// `peer stream` read their values or messages through it.
    static func openInput(_ path: String?) throws(CLIError) -> (fd: Int32, source: String) {
        guard let path, path != "-" else { return (0, "standard input") }
        do {
            return (try syscall("open", context: path) { open(path, O_RDONLY | O_CLOEXEC) }, path)
        } catch {
            throw .failure("cannot open \(path): \((error as? SystemError)?.reason ?? "\(error)")", exitCode: 1)
        }
    }

    static func runStream(_ context: CommandContext) throws(CLIError) -> Int32 {
        let v = context.values
        let hex = v.flag("hex")
        let (input, source) = try openInput(v.string("from"))
        defer { if input != 0 { closeQuietly(input) } }
        var p: [String: JSONValue] = ["uuid": .string(v.string("uuid") ?? "")]
        if let a = v.string("app") { p["app"] = .string(a) }
        if let d = v.string("device") { p["device"] = .string(d) }
        let client = try context.connect()
        defer { client.close() }
        let r = try context.perform(RPCCall(method: ControlMethod.gattNotifyStream, params: p), on: client)
        guard let fd = client.takeDescriptor() else {
            throw .failure("the daemon answered without passing the stream's socket", exitCode: 1)
        }
        let streamID = r["stream"]?.stringValue ?? ""
        if !context.json {
            context.stderr.write("streaming to \(r["uuid"]?.stringValue ?? "?") (\(r["subscribers"]?.intValue ?? 0) subscriber(s))\n")
        }
        context.streamingStarted()
        // Lines in, packets out; a packet the daemon no longer reads (the stream ended) is EPIPE.
        var framer = LineFramer(maxLineBytes: 65_536)
        var lineNumber = 0
        var written = 0
        var inputError: String?
        reading: while true {
            let chunk: [UInt8]
            do {
                chunk = try SocketIO.receive(input, maxBytes: 65_536)
            } catch {
                inputError = "reading \(source): \((error as? SystemError)?.reason ?? "\(error)")"
                break
            }
            let n = chunk.count
            if n == 0 {
                framer.append([0x0A])  // a last line without its newline
            } else {
                framer.append(chunk[...])
            }
            while true {
                let line: [UInt8]?
                do { line = try framer.nextLine() } catch {
                    inputError = "\(source), line \(lineNumber + 1): longer than 65536 bytes"
                    break reading
                }
                guard let line else { break }
                lineNumber += 1
                if line.isEmpty { continue }
                var value = line
                if hex {
                    guard let b = parseHex(String(decoding: line, as: UTF8.self)) else {
                        inputError = "\(source), line \(lineNumber): not hex: expected pairs of 0-9a-f"
                        break reading
                    }
                    value = b
                }
                // The daemon ended the stream (EPIPE): its event says why.
                do { try SocketIO.sendPacket(fd, value) } catch { break reading }
                written += 1
            }
            if n == 0 { break }
        }
        closeQuietly(fd)
        // The daemon reports the end with its counts.
        let events = EventReader(client: client, seconds: 30)
        var ended: JSONValue?
        while ended == nil {
            guard let e = try events.next() else { break }
            if e["topic"]?.stringValue == ControlEvent.gattStreamEnded, e["data"]?["stream"]?.stringValue == streamID { ended = e["data"] }
        }
        guard let ended else { throw .failure("no end-of-stream report from the daemon within 30 s (\(written) values written)", exitCode: 1) }
        let sent = ended["sent"]?.intValue ?? 0, unsent = ended["unsent"]?.intValue ?? 0
        context.print(context.json ? ended.description : "streamed \(ended["received"]?.intValue ?? 0) values: \(sent) notified, \(unsent) with no subscriber (stored only)")
        if let inputError { throw .failure("\(inputError); the values before it were streamed", exitCode: 1) }
        if ended["reason"]?.stringValue != "closed" {
            throw .failure("the stream ended: \(ended["message"]?.stringValue ?? "?") (\(sent) notified)", exitCode: 1)
        }
        return 0
    }

    static let advertiseStart = CLICommand(
        ["advertise", "start"], abstract: "Start an LE advertisement.",
        discussion: "The payload is checked against the controller first (MaxAdvLen, MaxScnRspLen, free instances); the local name goes in the scan response. An error says how many bytes are needed and how many fit.",
        options: [
            adapterOption,
            .value("name", valueName: "name", parser: .nonEmptyString, help: "Local name."),
            .value("service", valueName: "uuid", parser: .localUUID, repeating: true, help: "A service UUID."),
            .value("manufacturer", valueName: "id=hex", parser: .nonEmptyString, repeating: true, help: "Manufacturer data, company id (decimal or 0x) = hex bytes."),
            .value("service-data", valueName: "uuid=hex", parser: .nonEmptyString, repeating: true, help: "Service data."),
            .value("appearance", valueName: "n", parser: .int(in: 0...65535), help: "GAP appearance value."),
            .flag("tx-power", help: "Include the TX power level."),
            .value("interval", valueName: "min-max", parser: .nonEmptyString, help: "Advertising interval range in ms, e.g. 100-200."),
            .value("timeout", key: "adv-timeout", valueName: "seconds", parser: .int(in: 1...65535), help: "Stop after this many seconds."),
        ],
        action: .call(request: { v throws(CLIError) in
            var p: [String: JSONValue] = [:]
            if let a = v.string("adapter") { p["adapter"] = .string(a) }
            if let n = v.string("name") { p["name"] = .string(n) }
            let services = v.strings("service")
            if !services.isEmpty { p["services"] = .array(services.map { .string($0) }) }
            func pairs(_ key: String, _ what: String) throws(CLIError) -> [(String, String)] {
                var out: [(String, String)] = []
                for item in v.strings(key) {
                    let parts = item.unicodeScalars.split(separator: "=", maxSplits: 1).map(String.init)
                    guard parts.count == 2 else {
                        throw CLIError.usage(UsageError("--\(key) '\(item)': expected \(what)=HEX", commandPath: ["peerlink", "advertise", "start"]))
                    }
                    out.append((parts[0], parts[1]))
                }
                return out
            }
            let m = try pairs("manufacturer", "ID")
            if !m.isEmpty {
                var items: [JSONValue] = []
                for (id, hex) in m {
                    let n = id.hasPrefix("0x") ? Int(id.dropFirst(2), radix: 16) : Int(id)
                    guard let n else { throw CLIError.usage(UsageError("--manufacturer '\(id)': the company id is a number (decimal or 0x…)", commandPath: ["peerlink", "advertise", "start"])) }
                    items.append(["id": .int(Int64(n)), "data_hex": .string(hex)])
                }
                p["manufacturer"] = .array(items)
            }
            let sd = try pairs("service-data", "UUID")
            if !sd.isEmpty { p["service_data"] = .array(sd.map { ["uuid": .string($0.0), "data_hex": .string($0.1)] }) }
            if let a = v.int("appearance") { p["appearance"] = .int(Int64(a)) }
            if v.flag("tx-power") { p["tx_power"] = true }
            if let i = v.string("interval") {
                let parts = i.split(separator: "-").compactMap { Int($0) }
                guard parts.count == 2 else { throw CLIError.usage(UsageError("--interval '\(i)': expected MIN-MAX in ms, e.g. 100-200", commandPath: ["peerlink", "advertise", "start"])) }
                p["interval_ms"] = ["min": .int(Int64(parts[0])), "max": .int(Int64(parts[1]))]
            }
            if let t = v.int("adv-timeout") { p["timeout"] = .int(Int64(t)) }
            return RPCCall(method: ControlMethod.advertiseStart, params: p, minimumReplyTimeout: 15)
        }, render: { r in
            "\(r["id"]?.stringValue ?? "?") advertising on \(r["address"]?.stringValue ?? "?") (\(r["advertising_bytes"]?.intValue ?? 0) bytes of advertising data, \(r["scan_response_bytes"]?.intValue ?? 0) of scan response)"
        }))

    static let advertiseStop = CLICommand(
        ["advertise", "stop"], abstract: "Stop an advertisement (all when no id is given).",
        arguments: [Positional("id", parser: .nonEmptyString, optional: true, help: "The advertisement id.")],
        action: .call(request: { v throws(CLIError) in
            RPCCall(method: ControlMethod.advertiseStop, params: v.string("id").map { ["id": .string($0)] } ?? [:])
        }, render: { r in
            let ids = (r["stopped"]?.arrayValue ?? []).compactMap(\.stringValue)
            return ids.isEmpty ? "No advertisements." : "stopped " + ids.joined(separator: ", ")
        }))

    static let advertiseList = CLICommand(
        ["advertise", "list"], abstract: "List the daemon's advertisements.",
        action: .call(request: { _ throws(CLIError) in RPCCall(method: ControlMethod.advertiseList) }, render: { r in
            let ads = r["advertisements"]?.arrayValue ?? []
            if ads.isEmpty { return "No advertisements." }
            return Rendering.table(header: ["ID", "ACTIVE", "ADDRESS", "NAME", "SERVICES"], rows: ads.map { a in
                [a["id"]?.stringValue ?? "?", a["active"]?.boolValue == true ? "yes" : "no", a["address"]?.stringValue ?? "-",
                 a["name"]?.stringValue ?? "", (a["services"]?.arrayValue ?? []).compactMap(\.stringValue).joined(separator: ",")]
            })
        }))

    static let agentPolicy = CLICommand(
        ["agent", "policy"], abstract: "Show or set the pairing policy: just-works, confirm, passkey NNNNNN, reject.",
        discussion: "With 'confirm', each pairing request is an agent.request event (see 'peerlink watch --topic agent'), answered with 'peerlink agent confirm ID yes|no'; unanswered requests are refused.",
        arguments: [Positional("policy", parser: .nonEmptyString, optional: true, repeating: true, help: "The new policy (omit to show it).")],
        action: .call(request: { v throws(CLIError) in
            let words = v.strings("policy")
            return RPCCall(method: ControlMethod.agentPolicy, params: words.isEmpty ? [:] : ["policy": .string(words.joined(separator: " "))])
        }, render: { r in "pairing policy: \(r["policy"]?.stringValue ?? "?")" }))

    static let agentConfirm = CLICommand(
        ["agent", "confirm"], abstract: "Answer a pairing request (policy 'confirm').",
        arguments: [Positional("id", parser: .nonEmptyString, help: "The request id from the agent.request event."),
                    Positional("answer", parser: .choice(["yes", "no"]), help: "yes to accept, no to refuse.")],
        action: .call(request: { v throws(CLIError) in
            RPCCall(method: ControlMethod.agentConfirm, params: ["id": .string(v.string("id")!), "accept": .bool(v.string("answer") == "yes")])
        }, render: { r in "\(r["id"]?.stringValue ?? "?") \(r["accepted"]?.boolValue == true ? "accepted" : "refused")" }))
}
