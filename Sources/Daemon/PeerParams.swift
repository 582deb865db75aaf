import Control
import FoundationEssentials
import Peer
import Session
import SystemKit

/// Settings, parameter checks and JSON shapes of peer sessions.
extension PeerCapability {
    /// The `peer.*` settings of the configuration file.
    static func settings(_ s: [String: String]) throws(ConfigError) -> (config: PeerNodeConfig, listens: Bool) {
        var listens = true
        func bad(_ key: String, _ why: String) -> ConfigError { ConfigError(file: "configuration", key: key, reason: why) }
        let host = ProcessInfo.processInfo.hostName.split(separator: ".").first.map(String.init) ?? "peerlink"
        let nameText = s["peer.name"] ?? String(host.utf8.prefix(Wire.maxDisplayName)) ?? "peerlink"
        let name: String
        do { name = try SessionValidation.displayName(nameText) } catch { throw bad("peer.name", error.description) }
        var c = PeerNodeConfig(displayName: name)
        if let t = s["peer.port"] {
            guard let p = UInt16(t) else { throw bad("peer.port", "expected a port from 0 (any) to 65535, got \"\(t)\"") }
            c.port = p
        }
        if let t = s["peer.listen"] {
            switch t {
            case "all": c.loopbackOnly = false
            case "loopback": c.loopbackOnly = true
            case "off": listens = false
            default: throw bad("peer.listen", "expected all, loopback or off, got \"\(t)\"")
            }
        }
        if let t = s["peer.encryption"] {
            guard let e = encryption(t) else { throw bad("peer.encryption", "expected required, optional or none, got \"\(t)\"") }
            c.encryption = e
        }
        if let t = s["peer.accept"] {
            guard let a = AcceptPolicy(rawValue: t) else { throw bad("peer.accept", "expected ask, trusted, all or none, got \"\(t)\"") }
            c.accept = a
        }
        if let t = s["peer.max_peers"] {
            guard let n = Int(t), (1...SessionTable.peerLimit).contains(n) else {
                throw bad("peer.max_peers", "expected 1 to \(SessionTable.peerLimit), got \"\(t)\"")
            }
            c.maxPeers = n
        }
        if let t = s["peer.ping_interval"] {
            guard let v = Double(t), (0.2...60).contains(v) else { throw bad("peer.ping_interval", "expected seconds from 0.2 to 60, got \"\(t)\"") }
            c.pingInterval = .milliseconds(Int64(v * 1000))
        }
        if let t = s["peer.missed_pings"] {
            guard let n = Int(t), (1...20).contains(n) else { throw bad("peer.missed_pings", "expected 1 to 20, got \"\(t)\"") }
            c.missedPings = n
        }
        if let t = s["peer.transfer_idle_timeout"] {
            guard let v = Double(t), (1...3600).contains(v) else {
                throw bad("peer.transfer_idle_timeout", "expected seconds from 1 to 3600, got \"\(t)\"")
            }
            c.transferIdleTimeout = .milliseconds(Int64(v * 1000))
        }
        if let t = s["peer.accept_resources"] {
            guard let a = ResourcePolicy(rawValue: t) else { throw bad("peer.accept_resources", "expected ask, trusted, all or none, got \"\(t)\"") }
            c.acceptResources = a
        }
        return (c, listens)
    }

    /// `peer.max_resource_bytes` and `peer.inbox_dir` (default under the state directory).
    static func inboxSettings(_ s: [String: String], stateDirectory: String) throws(ConfigError) -> (directory: String, limits: Inbox.Limits) {
        var limits = Inbox.Limits()
        if let t = s["peer.max_resource_bytes"] {
            guard let n = byteCount(t), n > 0 else {
                throw ConfigError(file: "configuration", key: "peer.max_resource_bytes", reason: "expected a size of at least 1 byte, in bytes or with K, M, G, T (powers of 1024), got \"\(t)\"")
            }
            limits.maxResourceBytes = n
        }
        let directory = s["peer.inbox_dir"] ?? AtomicFile.join(stateDirectory, "peer/inbox")
        guard directory.hasPrefix("/") else {
            throw ConfigError(file: "configuration", key: "peer.inbox_dir", reason: "expected an absolute path, got \"\(directory)\"")
        }
        return (directory, limits)
    }

    /// `1234`, `64K`, `100M`, `4G`, `1T` (powers of 1024).
    static func byteCount(_ text: String) -> UInt64? {
        let units: [Character: UInt64] = ["K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40]
        guard let last = text.last else { return nil }
        let (digits, scale) = units[last].map { (String(text.dropLast()), $0) } ?? (text, 1)
        guard let n = UInt64(digits) else { return nil }
        let (v, overflow) = n.multipliedReportingOverflow(by: scale)
        return overflow ? nil : v
    }

    static func encryption(_ text: String) -> EncryptionPreference? {
        switch text {
        case "required": .required
        case "optional": .optional
        case "none": EncryptionPreference.none
        default: nil
        }
    }

    static func name(_ e: EncryptionPreference) -> String {
        switch e {
        case .required: "required"
        case .optional: "optional"
        case .none: "none"
        }
    }

    /// A peer ID parameter: 64 hex digits, or the grouped text form (`peer.identity`'s `id_text`).
    /// Runs a change of the trust store: one that cannot be saved (a full or read-only state
    /// directory) is an internal error naming the file and the reason; nothing changed.
    static func saving<T>(_ body: () throws(TrustStoreError) -> T) throws(RPCError) -> T {
        do { return try body() } catch {
            throw RPCError(code: RPCErrorCode.internalError, message: "\(error)", data: ["path": .string(error.path)])
        }
    }

    /// `peerID(_:_:)` of parameter `key`.
    static func peer(_ p: RPCParams, _ key: String) throws(RPCError) -> PeerID {
        try peerID(try p.string(key), key)
    }

    /// `peerID(_:_:among:)` of parameter `key`.
    static func peer(_ p: RPCParams, _ key: String, among known: @autoclosure () -> Set<PeerID>) throws(RPCError) -> PeerID {
        try peerID(try p.string(key), key, among: known())
    }

    /// A whole peer ID: 64 hex digits, or the grouped form `peer.identity` shows. Where the
    /// ID is what a peer is checked against (`peer.trust`, a dial's expected peer): 35 bits of
    /// a short form can be matched by a certificate made for the purpose.
    static func peerID(_ text: String, _ key: String) throws(RPCError) -> PeerID {
        do throws(PeerID.ParseError) {
            return try wholePeerID(text)
        } catch {
            throw .invalidParams(key, "expected a whole peer ID (64 hex digits, or the grouped form peer.identity shows; here the ID is what the peer is checked against, so a part of it is not taken): \(error)")
        }
    }

    private static func wholePeerID(_ text: String) throws(PeerID.ParseError) -> PeerID {
        if let id = PeerID(hex: text) { return id }
        return try PeerID(parsing: text)
    }

    /// A peer ID (`peerID(_:_:)`) or, for people reading lists that show the short form, the
    /// start of either form (at least the 7 characters of the short form, dashes aside) when
    /// exactly one of `known` (the peers in session, trusted or inviting) has an ID that
    /// starts so.
    static func peerID(_ text: String, _ key: String, among known: @autoclosure () -> Set<PeerID>) throws(RPCError) -> PeerID {
        let parseError: String
        do throws(PeerID.ParseError) {
            return try wholePeerID(text)
        } catch {
            parseError = "\(error)"
        }
        let start = text.uppercased().filter { $0 != "-" }
        guard start.count >= 7, start.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber) }) else {
            throw .invalidParams(key, "expected a peer ID (64 hex digits, or the grouped form peer.identity shows, or at least its first 7 characters): \(parseError)")
        }
        let matches = known().filter { id in id.text.filter { $0 != "-" }.hasPrefix(start) || id.hex.uppercased().hasPrefix(start) }
        switch matches.count {
        case 1: return matches.first!
        case 0: throw .invalidParams(key, "no peer in session, trusted or inviting has an ID starting with \(text) (a whole ID is 64 hex digits or the grouped form)")
        default:
            throw .invalidParams(key, "\(text) starts the IDs of \(matches.count) peers (\(matches.map(\.shortText).sorted().joined(separator: ", "))): give more of it")
        }
    }

    /// Opaque bytes given as `<key>_base64` (or `text` as UTF-8 for messages).
    static func bytes(_ p: RPCParams, base64 key: String, text: String? = nil) throws(RPCError) -> [UInt8]? {
        if let t = try p.optionalString(key) {
            guard let d = Data(base64Encoded: t) else { throw .invalidParams(key, "not valid base64") }
            return Array(d)
        }
        if let text, let t = try p.optionalString(text) { return Array(t.utf8) }
        return nil
    }

    /// An invitation's context: `context_base64` (or, where given, plain `context` text), at
    /// most `Wire.maxContext` bytes; the error names the parameter given.
    static func context(_ p: RPCParams, text: String? = nil) throws(RPCError) -> [UInt8] {
        guard let bytes = try bytes(p, base64: "context_base64", text: text) else { return [] }
        guard bytes.count <= Wire.maxContext else {
            let key = try p.optionalString("context_base64") == nil ? text ?? "context_base64" : "context_base64"
            throw .invalidParams(key, "at most \(Wire.maxContext) bytes, got \(bytes.count)")
        }
        return bytes
    }

    // MARK: JSON

    static func json(_ id: PeerID) -> [String: JSONValue] {
        ["peer": .string(id.hex), "peer_text": .string(id.text), "short": .string(id.shortText)]
    }

    static func json(_ s: PeerSummary) -> JSONValue {
        var o = json(s.peer)
        o["name"] = .string(s.displayName)
        o["address"] = .string(s.remote.description)
        o["connection"] = .int(Int64(s.connection))
        o["dialled"] = .bool(s.role == .dialer)
        o["encrypted"] = .bool(s.encrypted)
        o["pairing_code"] = s.pairingCode.map { .string($0.text) } ?? .null
        o["trusted"] = .bool(s.trusted)
        o["dropped_datagrams"] = .int(Int64(s.droppedDatagrams))
        o["queued_bytes"] = .int(Int64(s.queuedBytes))
        return .object(o)
    }

    static func json(_ i: PeerInvitation) -> JSONValue {
        var o = json(i.peer)
        o["invitation"] = .int(Int64(i.id))
        o["name"] = .string(i.displayName)
        o["context_base64"] = .string(Data(i.context).base64EncodedString())
        o["pairing_code"] = i.pairingCode.map { .string($0.text) } ?? .null
        o["encrypted"] = .bool(i.encrypted)
        o["trusted"] = .bool(i.trusted)
        o["timeout_seconds"] = .double(Double(i.timeout.components.seconds))
        return .object(o)
    }

    static func json(_ d: PeerDisconnect) -> JSONValue {
        var o: [String: JSONValue] = d.peer.map { json($0) } ?? ["peer": .null]
        o["name"] = d.displayName.map { .string($0) } ?? .null
        o["address"] = .string(d.remote.description)
        o["connection"] = .int(Int64(d.connection))
        o["reason"] = .string(d.reason.description)
        o["detail"] = .string(d.detail)
        o["by_peer"] = .bool(d.byPeer)
        o["was_connected"] = .bool(d.wasConnected)
        return .object(o)
    }
}

extension PeerError: RPCErrorConvertible {
    /// The JSON-RPC error for a peer-session error, with a machine-readable `kind`.
    var rpcError: RPCError {
        switch self {
        case .invalid(let what, let why): .invalidParams(what, why)
        case .notFound(let what, let id):
            RPCError(code: RPCErrorCode.notFound, message: description, data: ["kind": "not-found", "what": .string(what), "id": .string(id)])
        case .notConnected(let p):
            RPCError(code: RPCErrorCode.invalidState, message: description, data: ["kind": "not-connected", "peer": .string(p)])
        case .full(let n):
            RPCError(code: RPCErrorCode.busy, message: description, data: ["kind": "full", "max_peers": .int(Int64(n))])
        case .unreachable(let target, let why):
            RPCError(code: RPCErrorCode.peerRefused, message: description,
                     data: ["kind": "unreachable", "reason": "unreachable", "address": .string(target), "detail": .string(why)])
        case .refused(let d):
            RPCError(code: RPCErrorCode.peerRefused, message: description,
                     data: ["kind": "refused", "reason": .string(d.reason.description), "detail": .string(d.detail), "by_peer": .bool(d.byPeer)])
        case .busy(let p, let n):
            RPCError(code: RPCErrorCode.busy, message: description, data: ["kind": "busy", "peer": .string(p), "sent_to": .int(Int64(n))])
        case .stopped:
            RPCError(code: RPCErrorCode.invalidState, message: description, data: ["kind": "stopped"])
        }
    }
}
