import Control
import DNSSD
import Foundation

/// Parameter checks and JSON shapes for the `dnssd.*` methods.
extension DNSSDCapability {
    /// Runs a DNS-SD check, turning its error into the JSON-RPC error naming the param.
    static func check<T>(_ body: () throws(DNSSDError) -> T) throws(RPCError) -> T {
        do {
            return try body()
        } catch {
            throw rpcError(error)
        }
    }

    /// Runs a DNS-SD operation, turning its error into a JSON-RPC error.
    static func rpc<T: Sendable>(_ body: () async throws(DNSSDError) -> T) async throws(RPCError) -> T {
        do {
            return try await body()
        } catch {
            throw rpcError(error)
        }
    }

    /// The JSON-RPC error for a DNS-SD error, with a machine-readable `kind`.
    static func rpcError(_ error: DNSSDError) -> RPCError {
        switch error {
        case .invalid(let param, let reason):
            return .invalidParams(param, reason)
        case .unavailable:
            return RPCError(code: RPCErrorCode.dnssdUnavailable, message: error.description, data: ["kind": "avahi-unavailable"])
        case .notFound(let kind, let id):
            return RPCError(code: RPCErrorCode.dnssdNotFound, message: error.description,
                            data: ["kind": "not-found", "what": .string(kind), "id": .string(id)])
        case .avahi(_, let code, let message):
            return RPCError(code: RPCErrorCode.dnssdFailed, message: error.description,
                            data: ["kind": "avahi-error", "avahi_error": .int(Int64(code)), "avahi_message": .string(message)])
        case .timeout(_, let seconds):
            return RPCError(code: RPCErrorCode.timeout, message: error.description, data: ["kind": "timeout", "seconds": .double(seconds)])
        case .resolveFailed:
            return RPCError(code: RPCErrorCode.dnssdNotResolved, message: error.description, data: ["kind": "not-resolved"])
        }
    }

    /// `txt`: an array of "key=value" strings (order kept), or an object of strings (and
    /// `true` for a key without a value), sorted by key.
    static func txt(_ p: RPCParams) throws(RPCError) -> TXTRecord {
        guard let v = p["txt"] else { return TXTRecord() }
        var entries: [String] = []
        if let array = v.arrayValue {
            for (i, e) in array.enumerated() {
                guard let s = e.stringValue else { throw .invalidParams("txt", "entry \(i) must be a string \"key=value\", got \(e.typeName)") }
                entries.append(s)
            }
        } else if case .object(let members) = v {
            for key in members.keys.sorted() {
                if key.contains("=") { throw .invalidParams("txt", "the key \"\(key)\" must not contain '='") }
                switch members[key]! {
                case .string(let s): entries.append("\(key)=\(s)")
                case .bool(true): entries.append(key)
                default: throw .invalidParams("txt", "the value of \"\(key)\" must be a string (or true for a key alone)")
                }
            }
        } else {
            throw .invalidParams("txt", "expected an array of \"key=value\" strings or an object, got \(v.typeName)")
        }
        return try check { () throws(DNSSDError) in try TXTRecord(entries) }
    }

    /// `interface`: a network interface name that exists now.
    static func interface(_ p: RPCParams) throws(RPCError) -> (name: String, index: Int32)? {
        guard let name = try p.optionalString("interface") else { return nil }
        let index = try check { () throws(DNSSDError) in try DNSSDValidation.interfaceIndex(name) }
        return (name, index)
    }

    /// A type to browse: `_name._tcp`/`_udp`, or a subtype of one (`_printer._sub._http._tcp`).
    static func browseType(_ text: String) throws(DNSSDError) -> String {
        if let range = text.range(of: "._sub.") {
            let base = try ServiceType(String(text[range.upperBound...]))
            return try DNSSDValidation.subtype(text, of: base, param: "type")
        }
        return try ServiceType(text).description
    }
}

/// The JSON shapes of DNS-SD results and events (see docs/dnssd.md).
enum DNSSDJSON {
    static func txt(_ t: TXTRecord) -> JSONValue { .array(t.strings.map { .string($0) }) }

    static func publication(_ i: PublicationInfo, owner: String) -> JSONValue {
        var o: [String: JSONValue] = [
            "id": .string(i.id), "name": .string(i.name), "requested_name": .string(i.spec.name),
            "type": .string(i.spec.type.description), "port": .int(Int64(i.spec.port)), "txt": txt(i.spec.txt),
            "subtypes": .array(i.spec.subtypes.map { .string($0) }), "domain": .string(i.spec.domain ?? "local"),
            "interface": i.spec.interface.map { .string($0) } ?? .null, "state": .string(i.state.rawValue),
            "renames": .int(Int64(i.renames)), "owner": .string(owner),
        ]
        if let e = i.error { o["error"] = .string(e) }
        return .object(o)
    }

    static func found(_ s: FoundService) -> JSONValue {
        [
            "name": .string(s.name), "type": .string(s.type), "domain": .string(s.domain), "interface": .string(s.interface),
            "protocol": .string(s.proto), "local": .bool(s.isLocal), "cached": .bool(s.isCached),
        ]
    }

    static func resolved(_ r: ResolvedService) -> JSONValue {
        var o: [String: JSONValue] = [
            "name": .string(r.name), "type": .string(r.type), "domain": .string(r.domain), "interface": .string(r.interface),
            "protocol": .string(r.proto), "host": .string(r.host), "addresses": .array(r.addresses.map { .string($0) }),
            "port": .int(Int64(r.port)), "txt": txt(r.txt), "cached": .bool(r.isCached),
        ]
        if let ms = r.elapsedMilliseconds {
            o["elapsed_ms"] = .double((ms * 1000).rounded() / 1000)
            // Only one-shot resolves say where the answer came from (browse events are always Avahi's).
            o["daemon_cache"] = .bool(r.fromDaemonCache)
        }
        if let age = r.cacheAgeMilliseconds { o["age_ms"] = .double(age.rounded()) }
        return .object(o)
    }
}
