import Control
import DNSSD
import FoundationEssentials

/// Parameter checks and JSON shapes for the `dnssd.*` methods.
extension DNSSDCapability {
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
                // Scalars, not Characters: "=" followed by a combining mark is one Character.
                if key.unicodeScalars.contains("=") { throw .invalidParams("txt", "the key \"\(key)\" must not contain '='") }
                switch members[key]! {
                case .string(let s): entries.append("\(key)=\(s)")
                case .bool(true): entries.append(key)
                default: throw .invalidParams("txt", "the value of \"\(key)\" must be a string (or true for a key alone)")
                }
            }
        } else {
            throw .invalidParams("txt", "expected an array of \"key=value\" strings or an object, got \(v.typeName)")
        }
        return try check { try TXTRecord(entries) }
    }

    /// `interface`: a network interface name that exists now.
    static func interface(_ p: RPCParams) throws(RPCError) -> (name: String, index: Int32)? {
        guard let name = try p.optionalString("interface") else { return nil }
        let index = try check { try DNSSDValidation.interfaceIndex(name) }
        return (name, index)
    }

    /// A type to browse: `_name._tcp`/`_udp`, or a subtype of one (`_printer._sub._http._tcp`).
    static func browseType(_ text: String) throws(DNSSDError) -> String {
        if let range = text.firstRange(of: "._sub.") {
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
