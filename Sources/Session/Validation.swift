/// A value given by a user or an application that breaks a rule: which parameter, and the
/// rule it breaks, in words a user can act on.
public struct ValidationError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The parameter at fault ("service type", "discovery info", "display name").
    public let param: String
    /// The rule it breaks, with the value where that helps.
    public let reason: String

    /// An error.
    public init(param: String, reason: String) {
        self.param = param
        self.reason = reason
    }

    /// "param: reason".
    public var description: String { "\(param): \(reason)" }
}

/// The discovery info a session advertises, checked, as the TXT entries to publish.
public struct DiscoveryRecord: Sendable, Hashable {
    /// "key=value" entries: the reserved ones first (pv, pid, pn), then the user's sorted by key.
    public let entries: [String]
    /// Problems that do not stop publishing (a record over 400 bytes).
    public let warnings: [String]
    /// The record's size on the wire: each entry and its length byte.
    public var wireSize: Int { entries.reduce(0) { $0 + 1 + $1.utf8.count } }
}

/// The checks the daemon makes on what users give it for peer sessions.
public enum SessionValidation {
    /// The longest service type (as MultipeerConnectivity's: a DNS-SD service name).
    public static let maxServiceType = 15
    /// The longest TXT entry, "key=value", in bytes.
    public static let maxTXTEntry = 255
    /// Above this many bytes the record is still published, with a warning: a larger one may
    /// not fit one mDNS packet with its other records (MC's documented limit is 400).
    public static let txtWarningSize = 400
    /// Keys the daemon sets itself: protocol version, peer ID, display name.
    public static let reservedKeys: Set<String> = ["pv", "pid", "pn"]

    /// A MultipeerConnectivity service type: 1 to 15 lowercase ASCII letters, digits and
    /// hyphens, with a letter, and no hyphen first, last or next to another.
    public static func serviceType(_ text: String, param: String = "service type") throws(ValidationError) -> String {
        func bad(_ why: String) -> ValidationError { ValidationError(param: param, reason: "\"\(text)\" \(why)") }
        let bytes = Array(text.utf8)
        guard !bytes.isEmpty else { throw ValidationError(param: param, reason: "must not be empty") }
        guard bytes.count <= maxServiceType else { throw bad("is \(bytes.count) characters long; at most \(maxServiceType)") }
        func isLower(_ b: UInt8) -> Bool { b >= 0x61 && b <= 0x7A }
        func isDigit(_ b: UInt8) -> Bool { b >= 0x30 && b <= 0x39 }
        if let i = bytes.firstIndex(where: { !isLower($0) && !isDigit($0) && $0 != 0x2D }) {
            let isUpper = bytes[i] >= 0x41 && bytes[i] <= 0x5A
            throw bad("has \"\(Character(UnicodeScalar(bytes[i])))\" at position \(i + 1): only lowercase letters a-z, digits and hyphens are allowed\(isUpper ? " (no capitals)" : "")")
        }
        guard bytes.contains(where: isLower) else { throw bad("must contain at least one letter") }
        guard bytes.first != 0x2D else { throw bad("must not start with a hyphen") }
        guard bytes.last != 0x2D else { throw bad("must not end with a hyphen") }
        guard !text.contains("--") else { throw bad("must not contain two hyphens in a row") }
        return text
    }

    /// A display name: 1 to 63 bytes of UTF-8 without control characters (it becomes a
    /// DNS-SD instance name, whose label is 63 bytes at most).
    public static func displayName(_ name: String, param: String = "display name") throws(ValidationError) -> String {
        let count = name.utf8.count
        guard count > 0 else { throw ValidationError(param: param, reason: "must not be empty") }
        guard count <= Wire.maxDisplayName else {
            throw ValidationError(param: param, reason: "is \(count) bytes of UTF-8; at most \(Wire.maxDisplayName)")
        }
        if let c = name.unicodeScalars.first(where: { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) }) {
            throw ValidationError(param: param, reason: "must not contain control characters (found U+\(String(c.value, radix: 16, uppercase: true)))")
        }
        return name
    }

    /// Checks the user's discovery info and builds the whole TXT record: `pv` (the
    /// protocol versions, comma-separated), `pid` (the peer ID's text form) and `pn` (the
    /// display name), then the user's entries sorted by key.
    ///
    /// Each entry "key=value" is at most 255 bytes; a key is non-empty printable ASCII
    /// without '=' and is not one of the reserved keys (in any case); keys differ without
    /// regard to case (DNS-SD compares them so). A record over 400 bytes is a warning.
    public static func discoveryInfo(
        _ info: [String: String], peerID: PeerID, displayName name: String,
        versions: [UInt16] = Wire.supportedVersions, param: String = "discovery info"
    ) throws(ValidationError) -> DiscoveryRecord {
        _ = try displayName(name)
        var seen: [String: String] = [:]
        var user: [String] = []
        for key in info.keys.sorted() {
            let value = info[key] ?? ""
            guard !key.isEmpty else { throw ValidationError(param: param, reason: "a key is empty") }
            guard key.utf8.allSatisfy({ $0 >= 0x20 && $0 <= 0x7E && $0 != 0x3D }) else {
                throw ValidationError(param: param, reason: "the key \"\(key)\" must be printable ASCII without '='")
            }
            let folded = key.lowercased()
            guard !reservedKeys.contains(folded) else {
                throw ValidationError(param: param, reason: "the key \"\(key)\" is reserved (pv, pid and pn are set by the daemon)")
            }
            if let other = seen[folded] {
                throw ValidationError(param: param, reason: "the keys \"\(other)\" and \"\(key)\" differ only in case")
            }
            seen[folded] = key
            let entry = "\(key)=\(value)"
            guard entry.utf8.count <= maxTXTEntry else {
                throw ValidationError(param: param, reason: "the entry for \"\(key)\" is \(entry.utf8.count) bytes as key=value; at most \(maxTXTEntry)")
            }
            user.append(entry)
        }
        let reserved = [
            "pv=" + versions.map(String.init).joined(separator: ","),
            "pid=" + peerID.text,
            "pn=" + name,
        ]
        let all = reserved + user
        let size = all.reduce(0) { $0 + 1 + $1.utf8.count }
        let warnings = size > txtWarningSize
            ? ["the discovery record is \(size) bytes (with pv, pid and pn); above \(txtWarningSize) it may not fit one mDNS packet"]
            : []
        return DiscoveryRecord(entries: all, warnings: warnings)
    }
}
