import Arguments
import Control
import FoundationEssentials

/// `peerlink peer advertise | browse | invite | watch`: finding peers over DNS-SD, inviting
/// them, and following what the sessions do.
enum PeerDiscoveryCommands {
    /// `peer advertise TYPE [--info KEY=VALUE]... [--stop]`.
    static let advertise = CLICommand(
        ["peer", "advertise"],
        abstract: "Advertise this board's peer sessions over DNS-SD (MultipeerConnectivity's advertiser).",
        discussion: """
            Publishes _TYPE._tcp for the daemon's peer port under its display name, with a TXT record \
            holding the protocol version (pv), the peer ID (pid), the name (pn) and your --info entries. \
            TYPE follows MultipeerConnectivity's rules: 1-15 lowercase letters, digits and hyphens. The \
            advertisement stays until --stop (advertising again replaces the info). A record over 400 \
            bytes is published with a warning.
            """,
        options: [
            .value("info", valueName: "key=value", parser: .nonEmptyString, repeating: true, help: "Discovery info; pv, pid and pn are reserved."),
            .flag("stop", help: "Withdraw the advertisement instead."),
        ],
        arguments: [Positional("type", help: "The service type, e.g. cmj-stream.")],
        action: .call(request: { v throws(CLIError) in
            let type = JSONValue.string(v.string("type") ?? "")
            if v.flag("stop") { return RPCCall(method: ControlMethod.peerUnadvertise, params: ["type": type]) }
            var info: [String: JSONValue] = [:]
            for entry in v.strings("info") {
                // At the "=" scalar: a value may start with a combining mark (one Character with "=").
                let parts = entry.unicodeScalars.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                guard parts.count == 2, !parts[0].isEmpty else { throw .usage(UsageError("--info expects key=value, got \"\(entry)\"", commandPath: ["peerlink", "peer", "advertise"])) }
                info[String(parts[0])] = .string(String(parts[1]))
            }
            return RPCCall(method: ControlMethod.peerAdvertise, params: ["type": type, "info": .object(info)], minimumReplyTimeout: 15)
        }, render: { r in
            if r["advertising"] == false { return "stopped advertising \(r["type"]?.stringValue ?? "?")" }
            var lines = ["advertising \(r["service_type"]?.stringValue ?? "?") as \(Rendering.scalar(r["name"] ?? "?")) on port \(Rendering.scalar(r["port"] ?? .null)) (\(r["state"]?.stringValue ?? "?"))"]
            lines += (r["warnings"]?.arrayValue ?? []).compactMap(\.stringValue).map { "warning: \($0)" }
            return lines.joined(separator: "\n")
        }))

    /// `peer browse TYPE [--timeout S]`.
    static let browse = CLICommand(
        ["peer", "browse"],
        abstract: "Browse for peers advertising a type, printing them as they come and go.",
        discussion: """
            Lines: '+ NAME ID addresses A,B info K=V,...' (found, or changed) and '- NAME ID' (lost). \
            The ID shown is the short form: 'peer invite' and 'peer trust' need the whole one \
            (--json), which the peer's certificate is checked against. This board itself is not listed. Runs until interrupted or --timeout (exit 0); \
            when the browse fails ('! browse failed: ...': avahi-daemon refused it) it exits 1. \
            --json prints the peer.found, peer.lost and peer.browse-failed events.
            """,
        options: [
            .value("timeout", key: "browse-timeout", valueName: "seconds", parser: .seconds, help: "Stop after this many seconds."),
        ],
        arguments: [Positional("type", help: "The service type, e.g. cmj-stream.")],
        action: .custom(runBrowse))

    /// `peer invite PEER [--type TYPE] [--context TEXT] [--wait S] [--find S]`.
    static let invite = CLICommand(
        ["peer", "invite"],
        abstract: "Invite a peer found over DNS-SD; wait until the session is up.",
        discussion: """
            PEER is a peer ID or, with --type, also a display name. With --type the command browses \
            for the peer first (up to --find seconds); without it the daemon must have found the peer \
            in a browse that is running. Prints the session with the pairing code both sides show. \
            A declined, timed-out or refused invitation is an error naming the reason.
            """,
        options: [
            .value("type", valueName: "type", parser: .nonEmptyString, help: "Browse for the peer under this service type first."),
            .value("context", valueName: "text", parser: .nonEmptyString, help: "Context shown with the invitation (at most 4096 bytes)."),
            .value("wait", valueName: "seconds", parser: .seconds(in: 1...600), help: "How long the peer has to answer (default 30)."),
            .value("find", valueName: "seconds", parser: .seconds, help: "How long to look for the peer with --type (default 10)."),
        ],
        arguments: [Positional("peer", help: "A peer ID (hex or grouped), or with --type a display name.")],
        action: .custom(runInvite))

    /// `peer watch [--count N] [--timeout S]`.
    static let watch = CLICommand(
        ["peer", "watch"],
        abstract: "Print what peer sessions do: invitations, sessions, messages, reconnects.",
        discussion: """
            One line per event until interrupted, --count events or --timeout. Answer an invitation with \
            'peerlink peer accept N' or 'decline N' from another shell; compare its pairing code with the \
            one the peer shows first. --json prints the events as they come.
            """,
        options: [
            .value("count", valueName: "n", parser: .count, help: "Exit after n events."),
            .value("timeout", key: "watch-timeout", valueName: "seconds", parser: .seconds, help: "Stop after this many seconds."),
            WatchCommand.readyFile,
        ],
        action: .custom(runWatch))

    // MARK: Actions

    static func runBrowse(_ context: CommandContext) throws(CLIError) -> Int32 {
        let client = try context.connect()
        defer { client.close() }
        let r = try context.perform(RPCCall(method: ControlMethod.peerBrowse, params: ["type": .string(context.values.string("type") ?? "")]), on: client)
        context.streamingStarted()
        for peer in r["peers"]?.arrayValue ?? [] {
            context.print(context.json ? JSONValue.object(["topic": .string(ControlEvent.peerFound), "data": peer]).description : line(ControlEvent.peerFound, peer))
        }
        let events = EventReader(client: client, seconds: context.values.double("browse-timeout"))
        while let params = try events.next() {
            guard let topic = params["topic"]?.stringValue, topic == ControlEvent.peerFound || topic == ControlEvent.peerLost
                || topic == ControlEvent.peerBrowseFailed else { continue }
            context.print(context.json ? params.description : line(topic, params["data"] ?? .null))
            // The browse has stopped: nothing more will come, and it did not do its job.
            if topic == ControlEvent.peerBrowseFailed { return 1 }
        }
        return 0
    }

    static func runInvite(_ context: CommandContext) throws(CLIError) -> Int32 {
        let v = context.values
        let target = v.string("peer") ?? ""
        let client = try context.connect()
        defer { client.close() }
        var peer = target
        if let type = v.string("type") {
            peer = try find(target, type: type, seconds: v.double("find") ?? 10, client, context)
        }
        var params: [String: JSONValue] = ["peer": .string(peer)]
        if let c = v.string("context") { params["context_base64"] = .string(Data(c.utf8).base64EncodedString()) }
        let wait = v.double("wait") ?? 30
        params["timeout"] = .double(wait)
        let s = try context.perform(RPCCall(method: ControlMethod.peerInvite, params: params, minimumReplyTimeout: wait + 15), on: client)
        context.print(context.json ? s.description : PeerCommands.renderSession(s))
        return 0
    }

    /// Browses for `type` on `client` until a peer with ID (whole: the ID found is the one
    /// the dial checks the peer's certificate against, and a short form's 35 bits can be
    /// matched by a certificate made for the purpose) or display name `target` is found. A name is a
    /// label anyone may take (the host name by default: several "raspberrypi"): once one
    /// peer of that name is found, the browse goes on a moment (`nameGrace`) for another,
    /// and two are an error listing both, not an invitation to whichever answered first.
    private static func find(_ target: String, type: String, seconds: Double, _ client: ControlClient, _ context: CommandContext) throws(CLIError) -> String {
        let r = try context.perform(RPCCall(method: ControlMethod.peerBrowse, params: ["type": .string(type)]), on: client)
        let wanted = target.filter { $0 != "-" && $0 != " " }.uppercased()
        var named: [String: String] = [:]  // ID → short form, of the peers called `target`
        func byID(_ p: JSONValue) -> String? {
            guard let id = p["peer"]?.stringValue else { return nil }
            let text = (p["peer_text"]?.stringValue ?? "").filter { $0 != "-" }.uppercased()
            return id.uppercased() == wanted || (!text.isEmpty && text == wanted) ? id : nil
        }
        func note(_ p: JSONValue) {
            if p["name"]?.stringValue == target, let id = p["peer"]?.stringValue { named[id] = p["short"]?.stringValue ?? id }
        }
        func chosen() throws(CLIError) -> String? {
            guard named.count > 1 else { return named.keys.first }
            throw .failure("more than one peer is called \"\(target)\" (\(named.values.sorted().joined(separator: ", "))); name it by its ID", exitCode: 1)
        }
        for p in r["peers"]?.arrayValue ?? [] {
            if let id = byID(p) { return id }
            note(p)
        }
        let start = ContinuousClock.now
        let events = EventReader(client: client, seconds: seconds)
        while named.isEmpty, let params = try events.next() {
            guard params["topic"]?.stringValue == ControlEvent.peerFound, let d = params["data"] else { continue }
            if let id = byID(d) { return id }
            note(d)
        }
        if !named.isEmpty {
            let left = seconds - Double((ContinuousClock.now - start).components.seconds)
            let more = EventReader(client: client, seconds: max(0.1, min(Self.nameGrace, left)))
            while let params = try more.next() {
                if params["topic"]?.stringValue == ControlEvent.peerFound, let d = params["data"] { note(d) }
            }
        }
        if let id = try chosen() { return id }
        throw .failure("no peer \"\(target)\" advertising \(type) was found within \(PeerlinkCLI.formatSeconds(seconds)) s", exitCode: 1)
    }

    /// How long a browse goes on, once a peer of the name asked for is found, for another
    /// of the same name.
    static let nameGrace = 1.0

    static func runWatch(_ context: CommandContext) throws(CLIError) -> Int32 {
        try WatchCommand.printEvents(context, topics: ["peer"], count: context.values.int("count"),
                                     seconds: context.values.double("watch-timeout")) { e in
            line(e["topic"]?.stringValue ?? "?", e["data"] ?? .null)
        }
    }

    // MARK: Rendering

    /// One line for a peer event.
    static func line(_ topic: String, _ d: JSONValue) -> String {
        let who = "\(Rendering.scalar(d["name"] ?? "?")) \(d["short"]?.stringValue ?? "?")"
        switch topic {
        case ControlEvent.peerFound:
            let addresses = (d["addresses"]?.arrayValue ?? []).compactMap(\.stringValue).joined(separator: ",")
            let info = (d["info"]?.objectValue ?? [:]).sorted { $0.key < $1.key }
                .map { "\(Rendering.text($0.key))=\(Rendering.text($0.value.stringValue ?? ""))" }.joined(separator: ",")
            return "+ \(who) addresses \(addresses.isEmpty ? "-" : addresses)\(info.isEmpty ? "" : " info \(info)")\(d["compatible"] == false ? " (no common protocol version)" : "")"
        case ControlEvent.peerLost: return "- \(who)"
        case ControlEvent.peerBrowseFailed: return "! browse failed: \(d["error"]?.stringValue ?? "?")"
        case ControlEvent.peerInvitation:
            return "invitation \(Rendering.scalar(d["invitation"] ?? .null)) from \(who) pairing code \(d["pairing_code"]?.stringValue ?? "none (not encrypted)")"
                + context(d)
        case ControlEvent.peerInvitationEnded: return "invitation \(Rendering.scalar(d["connection"] ?? .null)) from \(who) ended: \(d["reason"]?.stringValue ?? "?")"
        case ControlEvent.peerConnected: return "connected " + PeerCommands.renderSession(d)
        case ControlEvent.peerDisconnected:
            return "disconnected \(who): \(d["reason"]?.stringValue ?? "?")\(d["by_peer"] == true ? " (by the peer)" : "") \(Rendering.text(d["detail"]?.stringValue ?? ""))"
        case ControlEvent.peerMessage:
            let bytes = d["data_base64"]?.stringValue.flatMap { Data(base64Encoded: $0) } ?? Data()
            let text = String(data: bytes, encoding: .utf8).flatMap { t in t.unicodeScalars.allSatisfy { $0.value >= 0x20 || $0 == "\n" || $0 == "\t" } ? t : nil }
            return "message from \(d["short"]?.stringValue ?? "?")\(d["reliable"] == false ? " (unreliable)" : ""): " + (text.map { Rendering.scalar(.string($0)) } ?? "\(bytes.count) bytes")
        case ControlEvent.peerReconnecting: return "reconnecting \(d["short"]?.stringValue ?? "?") attempt \(Rendering.scalar(d["attempt"] ?? .null)) in \(Rendering.scalar(d["in_seconds"] ?? .null)) s"
        case ControlEvent.peerResourceOffered, ControlEvent.peerResourceStarted, ControlEvent.peerResourceSent, ControlEvent.peerResourceReceived,
             ControlEvent.peerResourceEnded, ControlEvent.peerResourceInterrupted, ControlEvent.peerResourceProgress:
            return resourceLine(topic, d)
        case ControlEvent.peerStreamOpened:
            return "stream \(Rendering.scalar(d["stream"] ?? .null)) \(Rendering.scalar(d["name"] ?? "?")) opened by \(d["short"]?.stringValue ?? "?"): "
                + "peerlink peer accept-stream \(Rendering.scalar(d["stream"] ?? .null))"
        case ControlEvent.peerStreamClosed:
            return "stream \(Rendering.scalar(d["stream"] ?? .null)) \(Rendering.scalar(d["name"] ?? "?")) \(d["direction"]?.stringValue == "in" ? "from" : "to") "
                + "\(d["short"]?.stringValue ?? "?") ended: \(d["reason"]?.stringValue ?? "?")\(d["by_peer"] == true ? " (by the peer)" : "") after \(Rendering.scalar(d["bytes"] ?? 0)) bytes"
        case ControlEvent.peerReconnectGaveUp: return "gave up reconnecting \(d["short"]?.stringValue ?? "?") after \(Rendering.scalar(d["attempts"] ?? .null)) attempts"
        default: return "\(topic) \(Rendering.eventData(d))"
        }
    }

    /// One line for a `peer.resource-*` event.
    static func resourceLine(_ topic: String, _ d: JSONValue) -> String {
        let way = d["direction"]?.stringValue == "in" ? "from" : "to"
        let what = "transfer \(Rendering.scalar(d["transfer"] ?? .null)) \(Rendering.scalar(d["name"] ?? "?")) \(way) \(d["short"]?.stringValue ?? "?")"
        let size = PeerTransferCommands.bytes(d["size"]?.intValue ?? 0)
        switch topic {
        case ControlEvent.peerResourceOffered: return "offered \(what) (\(size), \(d["media_type"]?.stringValue ?? "?")): peerlink peer accept-resource \(Rendering.scalar(d["transfer"] ?? .null))"
        case ControlEvent.peerResourceStarted:
            let offset = d["offset"]?.intValue ?? 0
            return "started \(what) (\(size))" + (offset > 0 ? " resuming at \(PeerTransferCommands.bytes(offset))" : "")
        case ControlEvent.peerResourceProgress: return "progress \(what) \(PeerTransferCommands.percent(d))"
        case ControlEvent.peerResourceSent: return "sent \(what), verified by the peer"
        case ControlEvent.peerResourceReceived:
            let image = d["width"] != nil ? " \(d["media_type"]?.stringValue ?? "image") \(Rendering.scalar(d["width"] ?? .null))x\(Rendering.scalar(d["height"] ?? .null))" : ""
            return "received \(what) (\(size)\(image)) saved as \(Rendering.scalar(d["path"] ?? "?")) sha256 \(d["sha256"]?.stringValue ?? "?")"
        case ControlEvent.peerResourceEnded:
            return "failed \(what): \(d["reason"]?.stringValue ?? "?")\(d["by_peer"] == true ? " (by the peer)" : "") \(Rendering.text(d["detail"]?.stringValue ?? ""))"
        default: return "interrupted \(what) at \(PeerTransferCommands.bytes(d["bytes"]?.intValue ?? 0)); resumes when the peer is back"
        }
    }

    private static func context(_ d: JSONValue) -> String {
        guard let b = d["context_base64"]?.stringValue.flatMap({ Data(base64Encoded: $0) }), !b.isEmpty else { return "" }
        return " context " + (String(data: b, encoding: .utf8).map { Rendering.scalar(.string($0)) } ?? "\(b.count) bytes")
    }
}
