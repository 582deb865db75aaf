import Arguments
import Control
import FoundationEssentials

/// `peerlink peer ...`: peer sessions through the daemon (see docs/peer-sessions.md).
enum PeerCommands {
    /// The group's abstract.
    static let groupAbstract = "Peer sessions: identity, invitations, messages (MultipeerConnectivity for Linux)."

    /// `peer identity`.
    static let identity = CLICommand(
        ["peer", "identity"],
        abstract: "Show this board's peer ID, name and port.",
        discussion: """
            The peer ID is the SHA-256 of the daemon's certificate (made on first start in the \
            state directory). Read the grouped form aloud to check a peer: each group ends with a \
            check character.
            """,
        action: .call(request: { _ throws(CLIError) in RPCCall(method: ControlMethod.peerIdentity) }, render: { r in
            """
            name \(r["name"]?.stringValue ?? "?")
            id \(r["peer_text"]?.stringValue ?? "?")
            port \(Rendering.scalar(r["port"] ?? .null)) encryption \(r["encryption"]?.stringValue ?? "?") accept \(r["accept"]?.stringValue ?? "?")
            """
        }))

    /// `peer connect HOST:PORT [--peer ID] [--context TEXT] [--wait S]`.
    static let connect = CLICommand(
        ["peer", "connect"],
        abstract: "Dial a peer and invite it; wait until the session is up.",
        discussion: """
            Prints the session with the 6-digit pairing code both sides show: compare it with the \
            peer's before you trust it. A declined, timed-out or refused invitation is an error \
            naming the reason. IPv6: [ADDRESS]:PORT.
            """,
        options: [
            .value("peer", valueName: "id", parser: .nonEmptyString, help: "The peer ID it must have (from discovery or earlier)."),
            .value("context", valueName: "text", parser: .nonEmptyString, help: "Context shown with the invitation (at most 4096 bytes)."),
            .value("wait", valueName: "seconds", parser: .seconds(in: 1...600), help: "How long the peer has to answer (default 30)."),
        ],
        arguments: [Positional("address", help: "HOST:PORT (the port 'peer identity' shows on the peer).")],
        action: .call(request: { v throws(CLIError) in
            var params: [String: JSONValue] = ["address": .string(v.string("address") ?? "")]
            if let p = v.string("peer") { params["peer"] = .string(p) }
            if let c = v.string("context") { params["context_base64"] = .string(Data(c.utf8).base64EncodedString()) }
            let wait = v.double("wait") ?? 30
            params["timeout"] = .double(wait)
            return RPCCall(method: ControlMethod.peerConnect, params: params, minimumReplyTimeout: wait + 15)
        }, render: renderSession))

    /// `peer invitations`.
    static let invitations = CLICommand(
        ["peer", "invitations"],
        abstract: "List invitations waiting for an answer.",
        action: .call(request: { _ throws(CLIError) in RPCCall(method: ControlMethod.peerInvitations) }, render: { r in
            let list = r["invitations"]?.arrayValue ?? []
            if list.isEmpty { return "no invitations" }
            return list.map { i in
                // The context is the peer's text: escaped, after the pairing code.
                let context = i["context_base64"]?.stringValue.flatMap { Data(base64Encoded: $0) }.map { String(decoding: $0, as: UTF8.self) } ?? ""
                return "\(Rendering.scalar(i["invitation"] ?? .null)) from \(Rendering.text(i["name"]?.stringValue ?? "?")) (\(i["short"]?.stringValue ?? "?")) "
                    + "code \(i["pairing_code"]?.stringValue ?? "none")\(context.isEmpty ? "" : " context \(Rendering.quoted(context))")"
            }.joined(separator: "\n")
        }))

    /// `peer accept N` and `peer decline N`.
    static let accept = answer("accept", ControlMethod.peerAccept, "Accept an invitation (its number from 'peer invitations' or the event).")
    static let decline = answer("decline", ControlMethod.peerDecline, "Decline an invitation.")

    private static func answer(_ verb: String, _ method: String, _ abstract: String) -> CLICommand {
        CLICommand(
            ["peer", verb],
            abstract: abstract,
            arguments: [Positional("invitation", parser: .int(in: 1...Int.max), help: "The invitation's number.")],
            action: .call(request: { v throws(CLIError) in
                RPCCall(method: method, params: ["invitation": .int(Int64(v.int("invitation") ?? 0))])
            }, render: { r in "\(verb == "accept" ? "accepted" : "declined") invitation \(Rendering.scalar(r["invitation"] ?? .null))" }))
    }

    /// `peer sessions`.
    static let sessions = CLICommand(
        ["peer", "sessions"],
        abstract: "List the sessions that are up.",
        action: .call(request: { _ throws(CLIError) in RPCCall(method: ControlMethod.peerSessions) }, render: { r in
            let list = r["sessions"]?.arrayValue ?? []
            return list.isEmpty ? "no sessions" : list.map(renderSession).joined(separator: "\n")
        }))

    /// `peer send TEXT [--to ID]... [--unreliable] [--no-wait]`.
    static let send = CLICommand(
        ["peer", "send"],
        abstract: "Send a message to peers (all sessions unless --to).",
        options: [
            .value("to", valueName: "id", parser: .nonEmptyString, repeating: true, help: "A peer; default: every session."),
            .flag("unreliable", help: "Send it unreliably (never waits; dropped when the peer's datagram queue is full)."),
            .flag("no-wait", help: "Fail (busy) instead of waiting when a peer's queue is full."),
        ],
        arguments: [Positional("text", help: "The message (UTF-8).")],
        action: .call(request: { v throws(CLIError) in
            let to = v.strings("to")
            return RPCCall(method: ControlMethod.peerSend, params: [
                "to": to.isEmpty ? "all" : .array(to.map(JSONValue.string)),
                "text": .string(v.string("text") ?? ""), "reliable": .bool(!v.flag("unreliable")), "wait": .bool(!v.flag("no-wait")),
            ])
        }, render: { r in "sent \(Rendering.scalar(r["bytes"] ?? .null)) bytes to \(r["sent_to"]?.arrayValue?.count ?? 0) peer(s)" }))

    /// `peer disconnect ID`, `peer trust ID`, `peer forget ID`.
    static let disconnect = onePeer("disconnect", ControlMethod.peerDisconnect, "End the session with a peer.", done: "disconnected")
    static let trust = onePeer("trust", ControlMethod.peerTrust, "Trust a peer: remember its ID (pinned) across restarts.", done: "trusted",
                               help: "The whole peer ID: 64 hex digits or the grouped form ('peer trusted', 'peer sessions --json'), since it is what the peer is checked against.")
    static let forget = onePeer("forget", ControlMethod.peerForget, "Forget a trusted peer.", done: "forgot")

    private static func onePeer(_ verb: String, _ method: String, _ abstract: String, done: String,
                                help: String = "The peer ID: 64 hex digits, the grouped form, or its start as lists show it (7 characters or more).") -> CLICommand {
        .naming(["peer", verb], method, abstract: abstract, Positional("peer", help: help)) { r in
            "\(done) \(r["short"]?.stringValue ?? "?")"
        }
    }

    /// One trusted peer: its ID and name, and what a restart does (resumed: taken back, and
    /// dialled where this board last reached it).
    static func trustedLine(_ p: JSONValue) -> String {
        let address = p["address"]?.stringValue
        let restart = p["resume"]?.boolValue == true ? (address.map { "; resumed after a restart, dialled at \($0)" } ?? "; resumed after a restart")
            : (address.map { "; last reached at \($0)" } ?? "")
        return "\(p["peer_text"]?.stringValue ?? "?") \(Rendering.text(p["name"]?.stringValue ?? ""))\(restart)"
    }

    /// `peer trusted`.
    static let trusted = CLICommand(
        ["peer", "trusted"],
        abstract: "List the trusted peers.",
        action: .call(request: { _ throws(CLIError) in RPCCall(method: ControlMethod.peerTrusted) }, render: { r in
            let list = r["peers"]?.arrayValue ?? []
            return list.isEmpty ? "no trusted peers" : list.map(trustedLine).joined(separator: "\n")
        }))

    static func renderSession(_ s: JSONValue) -> String {
        let enc = s["encrypted"] == true ? "TLS 1.3, pairing code \(s["pairing_code"]?.stringValue ?? "?")" : "NOT ENCRYPTED (the peer ID is unverified)"
        return "\(Rendering.text(s["name"]?.stringValue ?? "?")) \(s["short"]?.stringValue ?? "?") at \(s["address"]?.stringValue ?? "?"): \(enc)"
    }
}
