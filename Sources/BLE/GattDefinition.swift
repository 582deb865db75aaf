import Control
import FoundationEssentials

/// A GATT characteristic or descriptor flag, spelled as BlueZ spells it.
public enum GattFlag: String, Sendable, Hashable, CaseIterable {
    case broadcast, read, write, notify, indicate
    case writeWithoutResponse = "write-without-response"
    case authenticatedSignedWrites = "authenticated-signed-writes"
    case extendedProperties = "extended-properties"
    case reliableWrite = "reliable-write"
    case writableAuxiliaries = "writable-auxiliaries"
    case encryptRead = "encrypt-read"
    case encryptWrite = "encrypt-write"
    case encryptNotify = "encrypt-notify"
    case encryptIndicate = "encrypt-indicate"
    case encryptAuthenticatedRead = "encrypt-authenticated-read"
    case encryptAuthenticatedWrite = "encrypt-authenticated-write"
    case encryptAuthenticatedNotify = "encrypt-authenticated-notify"
    case encryptAuthenticatedIndicate = "encrypt-authenticated-indicate"
    case secureRead = "secure-read"
    case secureWrite = "secure-write"
    case secureNotify = "secure-notify"
    case secureIndicate = "secure-indicate"
    case authorize

    /// Flags that make a characteristic readable.
    public static let readLike: Set<GattFlag> = [.read, .encryptRead, .encryptAuthenticatedRead, .secureRead]
    /// Flags that make a characteristic writable.
    public static let writeLike: Set<GattFlag> = [.write, .writeWithoutResponse, .reliableWrite, .authenticatedSignedWrites,
                                                  .encryptWrite, .encryptAuthenticatedWrite, .secureWrite]
    /// Flags that allow notifications or indications.
    public static let notifyLike: Set<GattFlag> = [.notify, .indicate, .encryptNotify, .encryptIndicate,
                                                   .encryptAuthenticatedNotify, .encryptAuthenticatedIndicate,
                                                   .secureNotify, .secureIndicate]
    /// The flags a descriptor may carry (BlueZ's GattDescriptor1).
    public static let descriptorFlags: Set<GattFlag> = [.read, .write, .encryptRead, .encryptWrite, .encryptAuthenticatedRead,
                                                        .encryptAuthenticatedWrite, .secureRead, .secureWrite, .authorize]
}

/// A GATT application: services with their characteristics and descriptors (plain data).
public struct GattApplicationDefinition: Sendable, Hashable {
    /// A name for listings.
    public var name: String
    /// The services.
    public var services: [GattServiceDefinition]
}

/// A service.
public struct GattServiceDefinition: Sendable, Hashable {
    /// Its UUID.
    public var uuid: BluetoothUUID
    /// Primary (true) or secondary.
    public var primary: Bool
    /// UUIDs of other services of the same application that this one includes.
    public var includes: [BluetoothUUID]
    /// The characteristics.
    public var characteristics: [GattCharacteristicDefinition]
}

/// A characteristic.
public struct GattCharacteristicDefinition: Sendable, Hashable {
    /// Its UUID.
    public var uuid: BluetoothUUID
    /// Its flags.
    public var flags: [GattFlag]
    /// The initial value.
    public var value: [UInt8]
    /// The longest value it may hold (writes beyond it are refused).
    public var maxLength: Int
    /// Its descriptors (a `description` in the file becomes a 0x2901 descriptor here).
    public var descriptors: [GattDescriptorDefinition]

    /// Whether it has any flag of `set`.
    public func has(_ set: Set<GattFlag>) -> Bool { flags.contains { set.contains($0) } }
}

/// A descriptor.
public struct GattDescriptorDefinition: Sendable, Hashable {
    /// Its UUID.
    public var uuid: BluetoothUUID
    /// Its flags.
    public var flags: [GattFlag]
    /// Its value.
    public var value: [UInt8]
}

/// A definition-file error: which file, where inside it, and why.
public struct GattDefinitionError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The file (or "definition" when it did not come from a file).
    public var source: String
    /// The path inside the document, e.g. `services[0].characteristics[1].flags[2]` (empty: the whole document).
    public var path: String
    /// What is wrong.
    public var reason: String

    /// "app.json: services[0].characteristics[1].flags[2]: unknown flag "notfy" (did you mean "notify"?)".
    public var description: String { path.isEmpty ? "\(source): \(reason)" : "\(source): \(path): \(reason)" }
}

/// The largest attribute value ATT allows.
public let gattMaximumValueLength = 512

extension GattApplicationDefinition {
    /// Parses and validates a definition document (JSON; the format is in the README).
    /// The first error found is thrown, naming `source` and the path inside the document.
    public static func parse(_ json: JSONValue, source: String) throws(GattDefinitionError) -> GattApplicationDefinition {
        let r = Reader(source: source)
        let root = try r.object(json, "", keys: ["name", "services"])
        let name = try r.optionalString(root["name"], "name") ?? (source.split(separator: "/").last.map(String.init) ?? source)
        guard let servicesJSON = root["services"] else { throw r.error("", "missing \"services\"") }
        let servicesArray = try r.array(servicesJSON, "services")
        guard !servicesArray.isEmpty else { throw r.error("services", "an application needs at least one service") }
        var services: [GattServiceDefinition] = []
        var seenServices: [BluetoothUUID: String] = [:]
        for (i, sj) in servicesArray.enumerated() {
            let p = "services[\(i)]"
            let s = try r.object(sj, p, keys: ["uuid", "primary", "includes", "characteristics"])
            let uuid = try r.uuid(s["uuid"], "\(p).uuid")
            if let other = seenServices[uuid] { throw r.error("\(p).uuid", "duplicate service UUID \(uuid) (also at \(other))") }
            seenServices[uuid] = p
            let primary = try r.optionalBool(s["primary"], "\(p).primary") ?? true
            let includes = try r.optionalArray(s["includes"], "\(p).includes").enumerated().map { (j, v) throws(GattDefinitionError) in
                try r.uuid(v, "\(p).includes[\(j)]")
            }
            let charsJSON = try r.optionalArray(s["characteristics"], "\(p).characteristics")
            var chars: [GattCharacteristicDefinition] = []
            var seenChars: [BluetoothUUID: String] = [:]
            for (j, cj) in charsJSON.enumerated() {
                let cp = "\(p).characteristics[\(j)]"
                let c = try r.characteristic(cj, cp)
                if let other = seenChars[c.uuid] { throw r.error("\(cp).uuid", "duplicate characteristic UUID \(c.uuid) in this service (also at \(other))") }
                seenChars[c.uuid] = cp
                chars.append(c)
            }
            services.append(GattServiceDefinition(uuid: uuid, primary: primary, includes: includes, characteristics: chars))
        }
        for (i, s) in services.enumerated() {
            for (j, inc) in s.includes.enumerated() {
                guard seenServices[inc] != nil, inc != s.uuid else {
                    throw r.error("services[\(i)].includes[\(j)]", inc == s.uuid ? "a service cannot include itself"
                                  : "includes \(inc), which is not a service of this application")
                }
            }
        }
        return GattApplicationDefinition(name: name, services: services)
    }
}

/// Reads JSON values, throwing errors that name the path.
private struct Reader {
    let source: String

    func error(_ path: String, _ reason: String) -> GattDefinitionError {
        GattDefinitionError(source: source, path: path, reason: reason)
    }

    func object(_ v: JSONValue, _ path: String, keys: Set<String>) throws(GattDefinitionError) -> [String: JSONValue] {
        guard case .object(let o) = v else { throw error(path, "expected an object, got \(v.typeName)") }
        for k in o.keys.sorted() where !keys.contains(k) {
            let hint = keys.min { distance($0, k) < distance($1, k) }.flatMap { distance($0, k) <= 2 ? " (did you mean \"\($0)\"?)" : nil } ?? ""
            throw error(path.isEmpty ? k : "\(path).\(k)", "unknown key \"\(k)\"\(hint); known keys: \(keys.sorted().joined(separator: ", "))")
        }
        return o
    }

    func array(_ v: JSONValue, _ path: String) throws(GattDefinitionError) -> [JSONValue] {
        guard case .array(let a) = v else { throw error(path, "expected an array, got \(v.typeName)") }
        return a
    }

    func optionalArray(_ v: JSONValue?, _ path: String) throws(GattDefinitionError) -> [JSONValue] {
        guard let v, !v.isNull else { return [] }
        return try array(v, path)
    }

    func optionalString(_ v: JSONValue?, _ path: String) throws(GattDefinitionError) -> String? {
        guard let v, !v.isNull else { return nil }
        guard case .string(let s) = v else { throw error(path, "expected a string, got \(v.typeName)") }
        return s
    }

    func optionalBool(_ v: JSONValue?, _ path: String) throws(GattDefinitionError) -> Bool? {
        guard let v, !v.isNull else { return nil }
        guard case .bool(let b) = v else { throw error(path, "expected true or false, got \(v.typeName)") }
        return b
    }

    func uuid(_ v: JSONValue?, _ path: String) throws(GattDefinitionError) -> BluetoothUUID {
        guard let v else { throw error(path, "missing UUID") }
        guard case .string(let s) = v else { throw error(path, "expected a UUID string, got \(v.typeName)") }
        do {
            return try BluetoothUUID(parsing: s)
        } catch {
            throw self.error(path, error.description)
        }
    }

    func flags(_ v: JSONValue?, _ path: String, allowed: Set<GattFlag>) throws(GattDefinitionError) -> [GattFlag] {
        guard let v else { throw error(path, "missing \"flags\"") }
        let items = try array(v, path)
        guard !items.isEmpty else { throw error(path, "at least one flag is needed") }
        var out: [GattFlag] = []
        for (i, item) in items.enumerated() {
            guard case .string(let s) = item else { throw error("\(path)[\(i)]", "expected a flag name, got \(item.typeName)") }
            guard let f = GattFlag(rawValue: s) else {
                let names = GattFlag.allCases.map(\.rawValue)
                let near = names.min { distance($0, s) < distance($1, s) }!
                let hint = distance(near, s) <= 3 ? " (did you mean \"\(near)\"?)" : ""
                throw error("\(path)[\(i)]", "unknown flag \"\(s)\"\(hint)")
            }
            guard allowed.contains(f) else { throw error("\(path)[\(i)]", "flag \"\(s)\" is not allowed here") }
            guard !out.contains(f) else { throw error("\(path)[\(i)]", "flag \"\(s)\" given twice") }
            out.append(f)
        }
        return out
    }

    /// `value` (UTF-8 text), `value_hex` or `value_base64`: at most one.
    func value(_ o: [String: JSONValue], _ path: String) throws(GattDefinitionError) -> [UInt8] {
        let given = ["value", "value_hex", "value_base64"].filter { o[$0] != nil && o[$0] != .null }
        guard given.count <= 1 else { throw error(path, "give one of \(given.joined(separator: ", ")), not several") }
        guard let key = given.first else { return [] }
        let text = try optionalString(o[key], "\(path).\(key)")!
        switch key {
        case "value":
            return Array(text.utf8)
        case "value_hex":
            guard let b = parseHex(text) else { throw error("\(path).value_hex", "not hex: expected pairs of 0-9a-f, optionally separated by spaces or colons") }
            return b
        default:
            guard let d = Data(base64Encoded: text) else { throw error("\(path).value_base64", "not valid base64") }
            return Array(d)
        }
    }

    func characteristic(_ v: JSONValue, _ p: String) throws(GattDefinitionError) -> GattCharacteristicDefinition {
        let c = try object(v, p, keys: ["uuid", "flags", "value", "value_hex", "value_base64", "max_length", "description", "descriptors"])
        let uuid = try self.uuid(c["uuid"], "\(p).uuid")
        let flags = try self.flags(c["flags"], "\(p).flags", allowed: Set(GattFlag.allCases))
        var maxLength = gattMaximumValueLength
        if let m = c["max_length"], !m.isNull {
            guard let n = m.intValue, (1...Int64(gattMaximumValueLength)).contains(n) else {
                throw error("\(p).max_length", "expected a whole number from 1 to \(gattMaximumValueLength), got \(m)")
            }
            maxLength = Int(n)
        }
        let value = try self.value(c, p)
        guard value.count <= maxLength else {
            throw error(p, "the value is \(value.count) bytes, over max_length \(maxLength)")
        }
        var descriptors: [GattDescriptorDefinition] = []
        if let d = try optionalString(c["description"], "\(p).description") {
            guard d.utf8.count <= gattMaximumValueLength else { throw error("\(p).description", "longer than \(gattMaximumValueLength) bytes") }
            descriptors.append(GattDescriptorDefinition(uuid: BluetoothUUID(uuid16: 0x2901), flags: [.read], value: Array(d.utf8)))
        }
        for (k, dj) in try optionalArray(c["descriptors"], "\(p).descriptors").enumerated() {
            let dp = "\(p).descriptors[\(k)]"
            let d = try object(dj, dp, keys: ["uuid", "flags", "value", "value_hex", "value_base64"])
            let du = try self.uuid(d["uuid"], "\(dp).uuid")
            if du == BluetoothUUID(uuid16: 0x2902) {
                throw error("\(dp).uuid", "0x2902 (Client Characteristic Configuration) is managed by BlueZ; use the notify/indicate flags")
            }
            if descriptors.contains(where: { $0.uuid == du }) {
                throw error("\(dp).uuid", "duplicate descriptor UUID \(du) in this characteristic")
            }
            let dv = try self.value(d, dp)
            guard dv.count <= gattMaximumValueLength else { throw error(dp, "the value is \(dv.count) bytes, over \(gattMaximumValueLength)") }
            descriptors.append(GattDescriptorDefinition(uuid: du, flags: try self.flags(d["flags"], "\(dp).flags", allowed: GattFlag.descriptorFlags), value: dv))
        }
        return GattCharacteristicDefinition(uuid: uuid, flags: flags, value: value, maxLength: maxLength, descriptors: descriptors)
    }
}

/// Parses hex bytes, allowing spaces and colons between pairs ("0a0b", "0a 0b", "0A:0B").
public func parseHex(_ text: String) -> [UInt8]? {
    let digits = text.utf8.filter { $0 != 0x20 && $0 != 0x3A }
    guard digits.count % 2 == 0 else { return nil }
    var out: [UInt8] = []
    out.reserveCapacity(digits.count / 2)
    var i = digits.startIndex
    while i < digits.endIndex {
        guard let hi = hexNibble(digits[i]), let lo = hexNibble(digits[i + 1]) else { return nil }
        out.append(hi << 4 | lo)
        i += 2
    }
    return out
}

/// Bytes as lowercase hex, two digits each ("0a0b"); the inverse of `parseHex`.
public func hexString(_ bytes: [UInt8]) -> String {
    let digits: [UInt8] = Array("0123456789abcdef".utf8)
    return String(unsafeUninitializedCapacity: bytes.count * 2) { out in
        var i = 0
        for b in bytes {
            out[i] = digits[Int(b >> 4)]
            out[i + 1] = digits[Int(b & 0x0F)]
            i += 2
        }
        return i
    }
}

/// The value of one ASCII hex digit, or nil.
func hexNibble(_ c: UInt8) -> UInt8? {
    switch c {
    case 0x30...0x39: c - 0x30
    case 0x41...0x46: c - 0x41 + 10
    case 0x61...0x66: c - 0x61 + 10
    default: nil
    }
}

/// Edit distance, for "did you mean" hints.
private func distance(_ a: String, _ b: String) -> Int {
    let a = Array(a), b = Array(b)
    if a.isEmpty { return b.count }
    var prev = Array(0...b.count)
    for i in 1...a.count {
        var cur = [i] + Array(repeating: 0, count: b.count)
        for j in 1...max(b.count, 1) where j <= b.count {
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
        }
        prev = cur
    }
    return prev[b.count]
}
