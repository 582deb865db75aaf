/// What another peer's DNS-SD TXT record says about it, checked: the reverse of
/// `SessionValidation.discoveryInfo`. A record from the network is untrusted input, so every
/// rule is checked again here and a record that breaks one is rejected with the reason (the
/// browser skips that service and says why, rather than listing a peer it cannot reach).
public struct DiscoveredRecord: Sendable, Hashable {
    /// The session protocol versions the peer speaks (`pv`).
    public let versions: [UInt16]
    /// The peer's ID (`pid`): only a claim until TLS proves it on connecting.
    public let peer: PeerID
    /// Its display name (`pn`).
    public let displayName: String
    /// The application's discovery info: the other entries (a key alone has the value "").
    public let info: [String: String]

    /// Whether this side can talk to the peer (a version in common).
    public var isCompatible: Bool { versions.contains { Wire.supportedVersions.contains($0) } }

    /// Parses TXT entries (each "key=value" or "key", as bytes).
    public init(entries: [[UInt8]]) throws(ValidationError) {
        func bad(_ why: String) -> ValidationError { ValidationError(param: "discovery record", reason: why) }
        var fields: [String: String] = [:]
        for (i, entry) in entries.enumerated() {
            guard entry.count <= SessionValidation.maxTXTEntry else { throw bad("entry \(i) is \(entry.count) bytes; at most 255") }
            let key = entry.prefix { $0 != UInt8(ascii: "=") }
            guard !key.isEmpty, key.allSatisfy({ $0 >= 0x20 && $0 <= 0x7E }) else {
                throw bad("entry \(i) has an empty or non-ASCII key")
            }
            // A key alone reads as key="" and is published as "key=": that must fit an entry
            // too, or a record this side accepts is one it could not publish (only a lone
            // 255-byte key breaks it).
            guard key.count < SessionValidation.maxTXTEntry else {
                throw bad("entry \(i) is a key of \(key.count) bytes without a value; as key= it would be over 255 bytes")
            }
            let value = entry.count > key.count ? Array(entry[(key.count + 1)...]) : []
            guard let text = String(validating: value, as: UTF8.self) else {
                throw bad("the value of \"\(String(decoding: key, as: UTF8.self))\" is not UTF-8")
            }
            let name = String(decoding: key, as: UTF8.self)
            let folded = name.lowercased()
            if fields.keys.contains(where: { $0.lowercased() == folded }) { throw bad("the key \"\(name)\" appears twice") }
            fields[SessionValidation.reservedKeys.contains(folded) ? folded : name] = text
        }
        guard let pv = fields.removeValue(forKey: "pv") else { throw bad("no \"pv\" (protocol versions): not a PeerLink peer") }
        let versions = pv.split(separator: ",").compactMap { UInt16($0) }
        guard !versions.isEmpty, versions.count == pv.split(separator: ",", omittingEmptySubsequences: false).count,
              versions.count <= 16, !versions.contains(0) else {
            throw bad("\"pv\" must be versions 1 to 65535 separated by commas, got \"\(pv.prefix(40))\"")
        }
        guard let pid = fields.removeValue(forKey: "pid") else { throw bad("no \"pid\" (peer ID)") }
        do { peer = try PeerID(parsing: pid) } catch { throw bad("\"pid\": \(error)") }
        guard let pn = fields.removeValue(forKey: "pn") else { throw bad("no \"pn\" (display name)") }
        do { displayName = try SessionValidation.displayName(pn, param: "pn") } catch { throw bad("\(error)") }
        self.versions = versions
        info = fields
    }
}
