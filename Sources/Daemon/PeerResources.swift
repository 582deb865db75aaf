import Control
import FoundationEssentials
import TLS
import Peer
import Session
import SystemKit

/// Resources over peer sessions (MultipeerConnectivity's `sendResource`): the methods
/// `peer.send-resource`, `peer.cancel`, `peer.accept-resource`, `peer.decline-resource`,
/// `peer.transfers` and `peer.inbox`, and the `peer.resource-*` events.
extension PeerCapability {
    func registerResources(_ context: DaemonContext, node: PeerNode, inbox: Inbox?, inboxProblem: String?) {
        context.register(ControlMethod.peerSendResource) { p, request throws(RPCError) in
            try p.rejectUnknown(allowed: ["path", "descriptor", "size", "name", "media_type", "to", "image"])
            // A descriptor passed with the request's line (SCM_RIGHTS); one it does not take is
            // closed once it is answered.
            var passed: Int32?
            if try p.optionalBool("descriptor") == true {
                guard let fd = request.takeDescriptor() else {
                    throw .invalidParams("descriptor", "no descriptor came with the request: pass one (SCM_RIGHTS) with the request line's bytes")
                }
                passed = fd
            }
            var handedOver = false
            defer { if let passed, !handedOver { closeQuietly(passed) } }
            let path = try p.optionalString("path")
            if let path, !path.hasPrefix("/") {
                throw .invalidParams("path", "expected an absolute path (the daemon's working directory is not yours), got \"\(path)\"")
            }
            guard passed != nil || path != nil else {
                throw .invalidParams("path", "missing: give the file's absolute path, or \"descriptor\": true with a descriptor passed with the request")
            }
            let size = try p.optionalInt("size", in: 0...Int64.max).map { UInt64($0) }
            if size != nil, passed == nil {
                throw .invalidParams("size", "only with \"descriptor\": true (the size of what the descriptor gives)")
            }
            let name = try p.optionalString("name")
            if passed != nil, path == nil, name == nil {
                throw .invalidParams("name", "required when the bytes come from a descriptor without a path")
            }
            let mediaType = try p.optionalString("media_type")
            if let mediaType {
                let printable = mediaType.unicodeScalars.allSatisfy { $0.value > 0x20 && $0.value < 0x7f }
                guard printable, mediaType.contains("/"), mediaType.utf8.count <= Wire.maxMediaType else {
                    throw .invalidParams("media_type", "expected a media type like image/png (printable ASCII, at most \(Wire.maxMediaType) bytes), got \"\(mediaType)\"")
                }
            }
            let peers = try Self.peers(p, "to", among: node.knownPeers)
            let imagesOnly = try p.optionalBool("image") ?? false
            let source: ResourceSource = passed.map { .descriptor($0, path: path, size: size) } ?? .path(path ?? "")
            handedOver = true  // the node closes a passed descriptor now
            let sent = try await rpc {
                do {
                    return try await node.sendResource(source, name: name, mediaType: mediaType, to: peers, imagesOnly: imagesOnly)
                } catch let e as PeerError {
                    throw e
                } catch {
                    throw PeerError.invalid("path", "\(error)")
                }
            }
            return ["transfers": .array(sent.transfers.map { Self.json($0) }), "copied": .bool(sent.copied)]
        }
        context.register(ControlMethod.peerCancel) { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: ["transfer"])
            let id = try p.int("transfer", in: 1...Int64.max)
            try await rpc { try node.cancel(resource: UInt64(id)) }
            return ["transfer": .int(id), "cancelled": true]
        }
        for (method, accept) in [(ControlMethod.peerAcceptResource, true), (ControlMethod.peerDeclineResource, false)] {
            context.register(method) { p, _ throws(RPCError) in
                try p.rejectUnknown(allowed: ["transfer"])
                let id = try p.int("transfer", in: 1...Int64.max)
                try await rpc { try node.answer(resource: UInt64(id), accept: accept) }
                return ["transfer": .int(id), "accepted": .bool(accept)]
            }
        }
        context.register(ControlMethod.peerTransfers) { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: [])
            return ["transfers": .array(node.resourceTransfers.map { Self.json($0) })]
        }
        context.register(ControlMethod.peerInbox) { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: [])
            guard let inbox else {
                throw RPCError(code: RPCErrorCode.invalidState, message: "no inbox: \(inboxProblem ?? "none configured") (offers from peers are declined until the daemon restarts with one)",
                               data: ["kind": "no-inbox"])
            }
            let names: [String]
            do throws(InboxError) { names = try inbox.files() } catch { throw .internalError(error.description) }
            return ["directory": .string(inbox.directory), "files": .array(names.sorted().map { Self.inboxEntry(inbox, $0) })]
        }
    }

    /// `to`: `"all"` (or absent: every session) or a list of peer IDs.
    static func peers(_ p: RPCParams, _ key: String, among known: @autoclosure () -> Set<PeerID>) throws(RPCError) -> [PeerID] {
        var peers: [PeerID] = []
        if case .string(let s)? = p[key] {
            guard s == "all" else { throw .invalidParams(key, "expected \"all\" or a list of peer IDs, got \"\(s)\"") }
        } else if let list = try p.optionalStringArray(key) {
            let known = known()
            for t in list { peers.append(try Self.peerID(t, key, among: known)) }
            guard !peers.isEmpty else { throw .invalidParams(key, "the list is empty") }
        }
        return peers
    }

    private static func inboxEntry(_ inbox: Inbox, _ name: String) -> JSONValue {
        let path = AtomicFile.join(inbox.directory, name)
        var o: [String: JSONValue] = ["name": .string(name), "path": .string(path)]
        // One open for the size and the image header: the file is read by name once.
        guard let file = try? RegularFile.openForReading(path) else { return .object(o) }
        if let st = try? file.status() { o["size"] = .int(Int64(clamping: st.size)) }
        if let image = Inbox.imageHeader(of: file) { o.merge(json(image)) { $1 } }
        return .object(o)
    }

    static func json(_ image: ImageHeader) -> [String: JSONValue] {
        ["media_type": .string(image.format.mediaType), "width": .int(Int64(image.width)), "height": .int(Int64(image.height))]
    }

    static func json(_ t: ResourceTransfer) -> JSONValue {
        var o = json(t.peer)
        o["transfer"] = .int(Int64(t.id))
        o["direction"] = .string(t.outgoing ? "out" : "in")
        o["name"] = .string(t.name)
        // Sizes come from peers: any u64 (an offer past Int64 is declined, and reported).
        o["size"] = .int(Int64(clamping: t.size))
        o["sha256"] = .string(Fingerprint.hexString(t.sha256))
        o["media_type"] = .string(t.mediaType)
        o["bytes"] = .int(Int64(clamping: t.bytes))
        o["offset"] = .int(Int64(clamping: t.offset))
        o["started"] = .bool(t.started)
        return .object(o)
    }

    /// The event for a resource's news, with its topic.
    static func event(_ e: ResourceEvent) -> (topic: String, data: JSONValue) {
        func with(_ t: ResourceTransfer, _ extra: [String: JSONValue]) -> JSONValue {
            guard case .object(var o) = json(t) else { return .null }
            o.merge(extra) { $1 }
            return .object(o)
        }
        switch e {
        case .offered(let t): return (ControlEvent.peerResourceOffered, json(t))
        case .started(let t): return (ControlEvent.peerResourceStarted, json(t))
        case .progress(let t, let rate):
            let left = rate > 0 ? Double(t.size - min(t.bytes, t.size)) / rate : nil
            return (ControlEvent.peerResourceProgress, with(t, ["bytes_per_second": .double(rate.rounded()),
                                                                 "seconds_left": left.map { .double(($0 * 10).rounded() / 10) } ?? .null]))
        case .sent(let t): return (ControlEvent.peerResourceSent, json(t))
        case .received(let t, let file, let image):
            var extra: [String: JSONValue] = ["path": .string(file.path), "saved_as": .string(file.name)]
            if let image { extra.merge(json(image)) { $1 } }
            return (ControlEvent.peerResourceReceived, with(t, extra))
        case .ended(let t, let reason, let detail, let byPeer):
            return (ControlEvent.peerResourceEnded, with(t, ["reason": .string(reason.description), "detail": .string(detail), "by_peer": .bool(byPeer)]))
        case .interrupted(let t): return (ControlEvent.peerResourceInterrupted, json(t))
        }
    }
}
