import Arguments
import Control

/// `peerlink dnssd ...`: DNS-SD through the daemon (see docs/dnssd.md).
enum DNSSDCommands {
    /// The group's abstract.
    static let groupAbstract = "Publish, browse and resolve DNS-SD services (through avahi-daemon)."

    /// `dnssd publish NAME TYPE PORT [KEY=VALUE]... [--subtype S]... [--interface I] [--domain D]`.
    static let publish = CLICommand(
        ["dnssd", "publish"],
        abstract: "Publish a service; prints its ID.",
        discussion: """
            The daemon keeps the service published until 'peerlink dnssd unpublish ID' (it is \
            published again when avahi-daemon restarts). If the name is taken, Avahi's alternative \
            ("Name #2") is used and a note goes to standard error; --json shows the whole publication.
            """,
        options: [
            .value("subtype", valueName: "subtype", parser: .nonEmptyString, repeating: true,
                   help: "A subtype, _label or _label._sub._type._tcp."),
            .value("interface", valueName: "name", parser: .nonEmptyString, help: "Publish on this network interface only."),
            .value("domain", valueName: "domain", parser: .nonEmptyString, help: "The domain (default: local)."),
            .flag("hold", help: "Tie the publication to this command: it stays until interrupted (like avahi-publish)."),
        ],
        arguments: [
            Positional("name", help: "The instance name (1 to 63 bytes of UTF-8)."),
            Positional("type", help: "The service type, _name._tcp or _name._udp."),
            Positional("port", parser: .int(), help: "The port, 1 to 65535."),
            Positional("txt", optional: true, repeating: true, help: "TXT entries, key=value (or key alone)."),
        ],
        action: .custom(runPublish))

    /// `dnssd unpublish ID`.
    static let unpublish = CLICommand(
        ["dnssd", "unpublish"],
        abstract: "Withdraw a publication.",
        arguments: [Positional("id", parser: .nonEmptyString, help: "The ID 'dnssd publish' printed.")],
        action: .call(request: { v throws(CLIError) in
            RPCCall(method: ControlMethod.dnssdUnpublish, params: ["id": .string(v.string("id") ?? "")])
        }, render: { r in "unpublished \(r["id"]?.stringValue ?? "?") (\"\(r["name"]?.stringValue ?? "?")\")" }))

    /// `dnssd update ID [KEY=VALUE]...`.
    static let update = CLICommand(
        ["dnssd", "update"],
        abstract: "Replace a publication's TXT record (live).",
        arguments: [
            Positional("id", parser: .nonEmptyString, help: "The publication's ID."),
            Positional("txt", optional: true, repeating: true, help: "The new TXT entries, key=value."),
        ],
        action: .call(request: { v throws(CLIError) in
            RPCCall(method: ControlMethod.dnssdUpdate,
                    params: ["id": .string(v.string("id") ?? ""), "txt": .array(v.strings("txt").map(JSONValue.string))])
        }, render: { r in "updated \(r["id"]?.stringValue ?? "?"): \(Rendering.scalar(r["txt"] ?? []))" }))

    /// `dnssd list`.
    static let list = CLICommand(
        ["dnssd", "list"],
        abstract: "List the daemon's publications.",
        action: .call(request: { _ throws(CLIError) in RPCCall(method: ControlMethod.dnssdList) }, render: renderList))

    /// `dnssd browse TYPE [--resolve] [--timeout S] [--interface I] [--domain D]`.
    static let browse = CLICommand(
        ["dnssd", "browse"],
        abstract: "Browse for services of a type, printing them as they come and go.",
        discussion: """
            Lines: '+ NAME TYPE DOMAIN on IFACE/PROTO' (found), '- ...' (removed), and with --resolve \
            '= NAME TYPE host HOST address A port P txt K=V,...'. Runs until interrupted or --timeout.
            """,
        options: [
            .flag("resolve", help: "Resolve every service found."),
            .value("timeout", key: "browse-timeout", valueName: "seconds", parser: .seconds, help: "Stop after this many seconds."),
            .value("interface", valueName: "name", parser: .nonEmptyString, help: "Browse on this interface only."),
            .value("domain", valueName: "domain", parser: .nonEmptyString, help: "The domain (default: local)."),
        ],
        arguments: [Positional("type", help: "The service type (_http._tcp) or a subtype (_x._sub._http._tcp).")],
        action: .custom(runBrowse))

    /// `dnssd resolve NAME TYPE [--timeout S]`.
    static let resolve = CLICommand(
        ["dnssd", "resolve"],
        abstract: "Resolve a service to host, address, port and TXT.",
        options: [
            .value("timeout", key: "resolve-timeout", valueName: "seconds", parser: .seconds, help: "Give up after this many seconds (default 5)."),
            .value("interface", valueName: "name", parser: .nonEmptyString, help: "Resolve on this interface only."),
            .value("domain", valueName: "domain", parser: .nonEmptyString, help: "The domain (default: local)."),
            .flag("all-addresses", help: "Wait for IPv4 and IPv6 addresses (up to 250 ms more)."),
            .flag("fresh", help: "Ask avahi-daemon even if the daemon has a recent answer cached."),
        ],
        arguments: [
            Positional("name", help: "The instance name."),
            Positional("type", help: "The service type."),
        ],
        action: .call(request: resolveRequest, render: renderResolved))

    /// `dnssd types [--timeout S]`.
    static let types = CLICommand(
        ["dnssd", "types"],
        abstract: "List the service types seen on the network.",
        options: [
            .value("timeout", key: "types-timeout", valueName: "seconds", parser: .seconds, help: "Wait at most this long (default 3)."),
            .value("interface", valueName: "name", parser: .nonEmptyString, help: "Only on this interface."),
        ],
        action: .call(request: { v throws(CLIError) in
            var p: [String: JSONValue] = [:]
            var minimum: Double?
            if let t = v.double("types-timeout") {
                p["timeout"] = .double(t)
                minimum = t + 5
            }
            if let i = v.string("interface") { p["interface"] = .string(i) }
            return RPCCall(method: ControlMethod.dnssdTypes, params: p, minimumReplyTimeout: minimum)
        }, render: { r in
            let types = r["types"]?.arrayValue ?? []
            if types.isEmpty { return "No service types found." }
            return Rendering.table(header: ["TYPE", "DOMAIN"], rows: types.map { [$0["type"]?.stringValue ?? "?", $0["domain"]?.stringValue ?? ""] })
        }))

    // MARK: Actions

    static func runPublish(_ context: CommandContext) throws(CLIError) -> Int32 {
        let v = context.values
        var params: [String: JSONValue] = [
            "name": .string(v.string("name") ?? ""), "type": .string(v.string("type") ?? ""),
            "port": .int(Int64(v.int("port") ?? 0)), "txt": .array(v.strings("txt").map(JSONValue.string)),
        ]
        let subtypes = v.strings("subtype")
        if !subtypes.isEmpty { params["subtypes"] = .array(subtypes.map(JSONValue.string)) }
        if let i = v.string("interface") { params["interface"] = .string(i) }
        if let d = v.string("domain") { params["domain"] = .string(d) }
        let hold = v.flag("hold")
        if hold { params["owner"] = "connection" }
        let client = try context.connect()
        defer { client.close() }
        let r = try context.perform(RPCCall(method: ControlMethod.dnssdPublish, params: params, minimumReplyTimeout: 15), on: client)
        if context.json {
            context.print(r.description)
        } else {
            report(r, requested: v.string("name") ?? "", context)
        }
        guard hold else { return 0 }
        // The daemon withdraws the service when this connection closes: wait for the end.
        context.streamingStarted()
        while true {
            do {
                _ = try client.nextNotification(timeout: nil)
            } catch .closed {
                throw .failure("peerlinkd closed the connection; the publication is withdrawn", exitCode: 1)
            } catch {
                throw .connection(error, during: nil)
            }
        }
    }

    /// The ID on standard output; notes on standard error.
    private static func report(_ r: JSONValue, requested: String, _ context: CommandContext) {
        context.print(r["id"]?.stringValue ?? "?")
        let name = r["name"]?.stringValue ?? ""
        if name != requested {
            context.stderr.write("peerlink: note: the name was taken; published as \"\(name)\"\n")
        }
        if r["state"]?.stringValue != "established" {
            context.stderr.write("peerlink: note: not established yet (state \(r["state"]?.stringValue ?? "?"))\n")
        }
    }

    static func runBrowse(_ context: CommandContext) throws(CLIError) -> Int32 {
        let v = context.values
        var params: [String: JSONValue] = ["type": .string(v.string("type") ?? ""), "resolve": .bool(v.flag("resolve"))]
        if let i = v.string("interface") { params["interface"] = .string(i) }
        if let d = v.string("domain") { params["domain"] = .string(d) }
        let client = try context.connect()
        defer { client.close() }
        _ = try context.perform(RPCCall(method: ControlMethod.dnssdBrowse, params: params), on: client)
        context.streamingStarted()
        let events = EventReader(client: client, seconds: v.double("browse-timeout"))
        while let params = try events.next() {
            guard let topic = params["topic"]?.stringValue, topic.hasPrefix("dnssd.") else { continue }
            if context.json {
                context.print(params.description)
            } else if let line = browseLine(topic, params["data"] ?? .null) {
                context.print(line)
            }
        }
        return 0
    }

    static func resolveRequest(_ v: ParsedValues) throws(CLIError) -> RPCCall {
        var p: [String: JSONValue] = ["name": .string(v.string("name") ?? ""), "type": .string(v.string("type") ?? "")]
        var minimum: Double?
        if let t = v.double("resolve-timeout") {
            p["timeout"] = .double(t)
            minimum = t + 5
        }
        if let i = v.string("interface") { p["interface"] = .string(i) }
        if let d = v.string("domain") { p["domain"] = .string(d) }
        if v.flag("all-addresses") { p["all_addresses"] = true }
        if v.flag("fresh") { p["fresh"] = true }
        return RPCCall(method: ControlMethod.dnssdResolve, params: p, minimumReplyTimeout: minimum)
    }

    // MARK: Rendering

    /// One line per browse event, avahi-browse style; nil for events not worth a line.
    static func browseLine(_ topic: String, _ data: JSONValue) -> String? {
        let s = data["service"] ?? .null
        let name = s["name"]?.stringValue ?? "?", type = s["type"]?.stringValue ?? "?", domain = s["domain"]?.stringValue ?? "?"
        let place = "on \(s["interface"]?.stringValue ?? "?")/\(s["protocol"]?.stringValue ?? "?")"
        switch topic {
        case ControlEvent.dnssdFound: return "+ \(Rendering.scalar(.string(name))) \(type) \(domain) \(place)"
        case ControlEvent.dnssdRemoved: return "- \(Rendering.scalar(.string(name))) \(type) \(domain) \(place)"
        case ControlEvent.dnssdResolved: return "= " + resolvedLine(s)
        case ControlEvent.dnssdResolveFailed: return "! \(Rendering.scalar(.string(name))) \(type) not resolved: \(data["error"]?.stringValue ?? "?")"
        case ControlEvent.dnssdBrowseFailed: return "! browse failed: \(data["error"]?.stringValue ?? "?")"
        case ControlEvent.dnssdBrowseInterrupted: return "! avahi-daemon went away; waiting for it"
        case ControlEvent.dnssdBrowseResumed: return "! avahi-daemon is back; browsing again"
        default: return nil
        }
    }

    static func resolvedLine(_ s: JSONValue) -> String {
        let addresses = (s["addresses"]?.arrayValue ?? []).compactMap(\.stringValue).joined(separator: ",")
        return "\(Rendering.scalar(s["name"] ?? "?")) \(s["type"]?.stringValue ?? "?") host \(Rendering.scalar(s["host"] ?? "?")) "
            + "address \(addresses.isEmpty ? "-" : addresses) port \(s["port"]?.intValue.map(String.init) ?? "?") "
            + "txt \(Rendering.scalar(s["txt"] ?? []))"
    }

    static func renderResolved(_ r: JSONValue) -> String {
        let addresses = (r["addresses"]?.arrayValue ?? []).compactMap(\.stringValue)
        var lines = [
            "name: \(Rendering.text(r["name"]?.stringValue ?? "?"))", "type: \(r["type"]?.stringValue ?? "?")",
            "host: \(Rendering.text(r["host"]?.stringValue ?? "?"))", "addresses: \(addresses.joined(separator: " "))",
            "port: \(r["port"]?.intValue.map(String.init) ?? "?")",
        ]
        for t in (r["txt"]?.arrayValue ?? []).compactMap(\.stringValue) { lines.append("txt: \(Rendering.text(t))") }
        return lines.joined(separator: "\n")
    }

    /// A table `ID NAME TYPE PORT STATE TXT`, or "No publications.".
    static func renderList(_ r: JSONValue) -> String {
        var out: [String] = []
        if r["avahi"]?["available"]?.boolValue == false {
            out.append("avahi-daemon: unavailable (\(r["avahi"]?["reason"]?.stringValue ?? "?"))")
        }
        let pubs = r["publications"]?.arrayValue ?? []
        if pubs.isEmpty {
            out.append("No publications.")
        } else {
            out.append(Rendering.table(header: ["ID", "NAME", "TYPE", "PORT", "STATE", "TXT"], rows: pubs.map { p in
                [
                    p["id"]?.stringValue ?? "?", p["name"]?.stringValue ?? "?", p["type"]?.stringValue ?? "?",
                    p["port"]?.intValue.map(String.init) ?? "?", p["state"]?.stringValue ?? "?",
                    (p["txt"]?.arrayValue ?? []).compactMap(\.stringValue).joined(separator: " "),
                ]
            }))
        }
        return out.joined(separator: "\n")
    }
}
