import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// Why a DNS-SD operation failed, with the parameter at fault for bad input.
public enum DNSSDError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A value given by the caller is not valid; `param` names it ("type", "txt", ...).
    case invalid(param: String, reason: String)
    /// avahi-daemon is not running (or not reachable over the system bus).
    case unavailable(String)
    /// No publication or browse with this ID.
    case notFound(kind: String, id: String)
    /// Avahi refused an operation: its error number and text.
    case avahi(operation: String, code: Int32, message: String)
    /// Nothing within the time allowed.
    case timeout(String, seconds: Double)
    /// A resolve ended without a result.
    case resolveFailed(String)

    /// One line for people.
    public var description: String {
        switch self {
        case .invalid(let p, let r): return "\(p): \(r)"
        case .unavailable(let why): return "DNS-SD is unavailable: \(why)"
        case .notFound(let kind, let id): return "no \(kind) with ID \(id)"
        case .avahi(let op, let code, let message): return "Avahi failed to \(op): \(message) (Avahi error \(code))"
        case .timeout(let what, let s): return "\(what) within \(s) s"
        case .resolveFailed(let why): return why
        }
    }
}

/// A DNS-SD service type, `_name._tcp` or `_name._udp` (RFC 6763 section 7, RFC 6335 section 5.1).
public struct ServiceType: Sendable, Hashable, CustomStringConvertible {
    /// The service name without its underscore, e.g. "http".
    public let service: String
    /// "tcp" or "udp".
    public let transport: String

    /// Parses and checks `text`: `_name._tcp` or `_name._udp`, where name is 1 to 15 letters,
    /// digits and hyphens with at least one letter, neither starting nor ending with a hyphen,
    /// and without two hyphens in a row. Letters are kept as given (DNS-SD names compare
    /// without case).
    public init(_ text: String) throws(DNSSDError) {
        func bad(_ why: String) -> DNSSDError {
            .invalid(param: "type", reason: "\"\(text)\" is not a service type like _http._tcp: \(why)")
        }
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2 else { throw bad("expected two labels, _name._tcp or _name._udp") }
        let name = parts[0], proto = parts[1]
        guard proto == "_tcp" || proto == "_udp" else { throw bad("the second label must be _tcp or _udp") }
        guard name.hasPrefix("_") else { throw bad("the name must start with an underscore") }
        let body = name.dropFirst()
        guard (1...15).contains(body.utf8.count) else { throw bad("the name must be 1 to 15 characters after the underscore") }
        guard body.utf8.allSatisfy({ Self.isLetter($0) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D }) else {
            throw bad("the name may hold only letters, digits and hyphens")
        }
        guard body.utf8.contains(where: Self.isLetter) else { throw bad("the name must contain a letter") }
        guard !body.hasPrefix("-"), !body.hasSuffix("-") else { throw bad("the name must not start or end with a hyphen") }
        guard !body.contains("--") else { throw bad("the name must not contain two hyphens in a row") }
        service = String(body)
        transport = String(proto.dropFirst())
    }

    private static func isLetter(_ b: UInt8) -> Bool { (b >= 0x61 && b <= 0x7A) || (b >= 0x41 && b <= 0x5A) }

    /// "_http._tcp".
    public var description: String { "_\(service)._\(transport)" }
}

/// Checks for the other parts of a service.
public enum DNSSDValidation {
    /// An instance name: 1 to 63 bytes of UTF-8 without control characters (RFC 6763 section 4.1.1).
    public static func instanceName(_ name: String, param: String = "name") throws(DNSSDError) -> String {
        let bytes = name.utf8.count
        guard bytes > 0 else { throw .invalid(param: param, reason: "must not be empty") }
        guard bytes <= 63 else { throw .invalid(param: param, reason: "must be at most 63 bytes of UTF-8, got \(bytes)") }
        guard !name.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else {
            throw .invalid(param: param, reason: "must not contain control characters")
        }
        return name
    }

    /// A port from 1 to 65535.
    public static func port(_ port: Int64, param: String = "port") throws(DNSSDError) -> UInt16 {
        guard (1...65535).contains(port) else { throw .invalid(param: param, reason: "must be between 1 and 65535, got \(port)") }
        return UInt16(port)
    }

    /// A browsing or publishing domain: nil or "local" mean the default (".local"); otherwise
    /// dot-separated labels of 1 to 63 letters, digits, hyphens or underscores, 253 bytes at most.
    public static func domain(_ text: String?, param: String = "domain") throws(DNSSDError) -> String? {
        guard var d = text, !d.isEmpty else { return nil }
        if d.hasSuffix(".") { d.removeLast() }
        if d.lowercased() == "local" { return nil }
        guard d.utf8.count <= 253 else { throw .invalid(param: param, reason: "must be at most 253 bytes") }
        for label in d.split(separator: ".", omittingEmptySubsequences: false) {
            guard (1...63).contains(label.utf8.count) else {
                throw .invalid(param: param, reason: "\"\(text!)\" has an empty or over-long label")
            }
            guard label.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x61 && $0 <= 0x7A) || $0 == 0x2D || $0 == 0x5F }) else {
                throw .invalid(param: param, reason: "\"\(text!)\" may hold only letters, digits, hyphens, underscores and dots")
            }
        }
        return d
    }

    /// A subtype of `type`, given bare (`_printer`) or in full (`_printer._sub._ipp._tcp`);
    /// returns the full form Avahi takes. The label is an underscore and 1 to 62 letters,
    /// digits, hyphens or underscores (RFC 6763 section 7.1 allows more; these are what
    /// every implementation handles).
    public static func subtype(_ text: String, of type: ServiceType, param: String = "subtypes") throws(DNSSDError) -> String {
        var label = Substring(text)
        if text.contains(".") {
            let suffix = "._sub.\(type)"
            guard text.lowercased().hasSuffix(suffix.lowercased()) else {
                throw .invalid(param: param, reason: "\"\(text)\" must be _label or _label._sub.\(type)")
            }
            label = text.dropLast(suffix.count)
        }
        guard label.hasPrefix("_"), (2...63).contains(label.utf8.count),
              label.dropFirst().utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x61 && $0 <= 0x7A) || $0 == 0x2D || $0 == 0x5F })
        else {
            throw .invalid(param: param, reason: "\"\(text)\": a subtype is an underscore and 1 to 62 letters, digits, hyphens or underscores, like _printer")
        }
        return "\(label)._sub.\(type)"
    }

    /// The index of the network interface called `name` (it must exist now).
    public static func interfaceIndex(_ name: String, param: String = "interface") throws(DNSSDError) -> Int32 {
        guard !name.isEmpty, name.utf8.count < 16 else { throw .invalid(param: param, reason: "\"\(name)\" is not an interface name") }
        let index = if_nametoindex(name)
        guard index > 0 else { throw .invalid(param: param, reason: "no network interface called \"\(name)\"") }
        return Int32(index)
    }

    /// The name of interface `index`, or its number as text when it has gone.
    public static func interfaceName(_ index: Int32) -> String {
        guard index >= 0 else { return "any" }
        var buf = [CChar](repeating: 0, count: Int(IF_NAMESIZE) + 1)
        guard if_indextoname(UInt32(index), &buf) != nil else { return "\(index)" }
        return String(decoding: buf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// A TXT record: entries `key=value` or `key` (a boolean attribute), checked against RFC 6763
/// section 6: a key is 1 or more printable ASCII characters other than '=' (9 or fewer is
/// recommended, not required), keys are unique without regard to case, an entry is at most
/// 255 bytes, and the whole record at most 8900 bytes.
public struct TXTRecord: Sendable, Hashable {
    /// The largest entry, in bytes (its length must fit in one byte).
    public static let maxEntryBytes = 255
    /// The largest record on the wire (each entry plus its length byte), in bytes.
    public static let maxRecordBytes = 8900

    /// The entries' bytes, in order.
    public let entries: [[UInt8]]

    /// An empty record.
    public init() { entries = [] }

    /// Parses and checks entries given as text (`"key=value"` or `"key"`).
    public init(_ strings: [String], param: String = "txt") throws(DNSSDError) {
        try self.init(bytes: strings.map { Array($0.utf8) }, param: param)
    }

    /// Checks entries given as bytes.
    public init(bytes list: [[UInt8]], param: String = "txt") throws(DNSSDError) {
        var seen = Set<String>()
        var total = 0
        for (i, entry) in list.enumerated() {
            let keyBytes = entry.prefix { $0 != UInt8(ascii: "=") }
            let shown = String(decoding: keyBytes.prefix(40), as: UTF8.self)
            guard !keyBytes.isEmpty else {
                throw .invalid(param: param, reason: "entry \(i) has an empty key (expected key=value)")
            }
            guard keyBytes.allSatisfy({ $0 >= 0x20 && $0 <= 0x7E }) else {
                throw .invalid(param: param, reason: "entry \(i): the key \"\(shown)\" must be printable ASCII")
            }
            guard entry.count <= Self.maxEntryBytes else {
                throw .invalid(param: param, reason: "entry \(i) (key \"\(shown)\") is \(entry.count) bytes; an entry may be at most \(Self.maxEntryBytes)")
            }
            let key = String(decoding: keyBytes, as: UTF8.self).lowercased()
            guard seen.insert(key).inserted else {
                throw .invalid(param: param, reason: "the key \"\(shown)\" appears twice (keys are compared without case)")
            }
            total += 1 + entry.count
        }
        guard total <= Self.maxRecordBytes else {
            throw .invalid(param: param, reason: "the record is \(total) bytes; it may be at most \(Self.maxRecordBytes)")
        }
        entries = list
    }

    /// The record as sent on the wire: each entry preceded by its length. An empty record is
    /// one zero byte (RFC 6763 section 6.1).
    public var wireFormat: [UInt8] {
        if entries.isEmpty { return [0] }
        var out: [UInt8] = []
        for e in entries {
            out.append(UInt8(e.count))
            out.append(contentsOf: e)
        }
        return out
    }

    /// Parses a record in wire format (for tests and tools); nil when a length runs past the end.
    public init?(wireFormat bytes: [UInt8]) {
        var list: [[UInt8]] = []
        var i = 0
        while i < bytes.count {
            let n = Int(bytes[i])
            guard i + 1 + n <= bytes.count else { return nil }
            if n > 0 { list.append(Array(bytes[(i + 1)..<(i + 1 + n)])) }
            i += 1 + n
        }
        entries = list
    }

    /// The entries as text (invalid UTF-8 is replaced), e.g. ["path=/", "secure"].
    public var strings: [String] { entries.map { String(decoding: $0, as: UTF8.self) } }
}
