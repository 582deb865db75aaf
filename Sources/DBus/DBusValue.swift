import SystemKit

/// A D-Bus value of any type, carrying its own type.
///
/// Byte arrays (`ay`) have their own case, `.bytes`, because they are by far the most common
/// array (GATT values) and deserve a compact form; the decoder always produces `.bytes` for `ay`.
public indirect enum DBusValue: Sendable, Hashable {
    /// `y`
    case byte(UInt8)
    /// `b`
    case boolean(Bool)
    /// `n`
    case int16(Int16)
    /// `q`
    case uint16(UInt16)
    /// `i`
    case int32(Int32)
    /// `u`
    case uint32(UInt32)
    /// `x`
    case int64(Int64)
    /// `t`
    case uint64(UInt64)
    /// `d`
    case double(Double)
    /// `s` (no NUL characters)
    case string(String)
    /// `o`
    case objectPath(ObjectPath)
    /// `g`
    case signature(String)
    /// `h`: a Unix file descriptor, owned by the `UnixFD` object.
    case unixFD(UnixFD)
    /// `ay`
    case bytes([UInt8])
    /// `aX` for element signature X (any single complete type); all elements must have that type.
    case array(element: String, [DBusValue])
    /// `a{KV}`: key signature K (a basic type), value signature V.
    case dictionary(key: String, value: String, [DictEntry])
    /// `(...)`: a non-empty struct.
    case structure([DBusValue])
    /// `v`
    case variant(DBusValue)

    /// One entry of a D-Bus dictionary.
    public struct DictEntry: Sendable, Hashable {
        /// The key (a basic type).
        public var key: DBusValue
        /// The value.
        public var value: DBusValue
        /// Creates an entry.
        public init(_ key: DBusValue, _ value: DBusValue) {
            self.key = key
            self.value = value
        }
    }

    /// The value's single complete type signature.
    public var signature: String {
        switch self {
        case .byte: "y"
        case .boolean: "b"
        case .int16: "n"
        case .uint16: "q"
        case .int32: "i"
        case .uint32: "u"
        case .int64: "x"
        case .uint64: "t"
        case .double: "d"
        case .string: "s"
        case .objectPath: "o"
        case .signature: "g"
        case .unixFD: "h"
        case .bytes: "ay"
        case .array(let element, _): "a" + element
        case .dictionary(let k, let v, _): "a{" + k + v + "}"
        case .structure(let members): "(" + members.map(\.signature).joined() + ")"
        case .variant: "v"
        }
    }
}

// MARK: - Building values

extension DBusValue {
    /// An `a{sv}` dictionary (the shape of D-Bus property maps and BlueZ option maps), keys sorted.
    public static func propertyMap(_ map: [String: DBusValue]) -> DBusValue {
        .dictionary(key: "s", value: "v", map.keys.sorted().map { DictEntry(.string($0), .variant(map[$0]!)) })
    }

    /// An `as` array.
    public static func stringArray(_ strings: [String]) -> DBusValue {
        .array(element: "s", strings.map { .string($0) })
    }

    /// An `ao` array.
    public static func objectPathArray(_ paths: [ObjectPath]) -> DBusValue {
        .array(element: "o", paths.map { .objectPath($0) })
    }
}

// MARK: - Reading values

extension DBusValue {
    /// The value inside any number of variant wrappers.
    public var unwrapped: DBusValue {
        if case .variant(let inner) = self { return inner.unwrapped }
        return self
    }

    /// The string of a `s`, `o` or `g` value (through variants).
    public var string: String? {
        switch unwrapped {
        case .string(let s), .signature(let s): s
        case .objectPath(let p): p.rawValue
        default: nil
        }
    }

    /// The value of a `b` (through variants).
    public var bool: Bool? {
        if case .boolean(let b) = unwrapped { return b }
        return nil
    }

    /// Any integer type as Int64 (through variants); nil for `t` values above Int64.max.
    public var integer: Int64? {
        switch unwrapped {
        case .byte(let v): Int64(v)
        case .int16(let v): Int64(v)
        case .uint16(let v): Int64(v)
        case .int32(let v): Int64(v)
        case .uint32(let v): Int64(v)
        case .int64(let v): v
        case .uint64(let v): Int64(exactly: v)
        default: nil
        }
    }

    /// The object path of an `o` value (through variants).
    public var objectPath: ObjectPath? {
        if case .objectPath(let p) = unwrapped { return p }
        return nil
    }

    /// The bytes of an `ay` value, whichever way it was built (through variants).
    public var byteArray: [UInt8]? {
        switch unwrapped {
        case .bytes(let b): return b
        case .array("y", let items):
            var out = [UInt8]()
            out.reserveCapacity(items.count)
            for case .byte(let b) in items { out.append(b) }
            return out.count == items.count ? out : nil
        default: return nil
        }
    }

    /// The elements of an array (through variants); `ay` gives `.byte` elements.
    public var arrayElements: [DBusValue]? {
        switch unwrapped {
        case .array(_, let items): items
        case .bytes(let b): b.map { .byte($0) }
        default: nil
        }
    }

    /// The strings of an `as`/`ao` array (through variants).
    public var stringArray: [String]? {
        guard let items = arrayElements else { return nil }
        let strings = items.compactMap(\.string)
        return strings.count == items.count ? strings : nil
    }

    /// The entries of a dictionary (through variants).
    public var dictionaryEntries: [DictEntry]? {
        if case .dictionary(_, _, let entries) = unwrapped { return entries }
        return nil
    }

    /// A dictionary with string keys as a Swift dictionary, values with variants removed
    /// (the usual reading of `a{sv}`); nil when this is not such a dictionary.
    public var stringKeyedMap: [String: DBusValue]? {
        guard let entries = dictionaryEntries else { return nil }
        var out = [String: DBusValue](minimumCapacity: entries.count)
        for e in entries {
            guard let k = e.key.string else { return nil }
            out[k] = e.value.unwrapped
        }
        return out
    }
}

// MARK: - Object paths and file descriptors

/// A validated D-Bus object path.
public struct ObjectPath: Sendable, Hashable, Comparable, CustomStringConvertible, ExpressibleByStringLiteral {
    /// The path text, e.g. `/org/bluez/hci0`.
    public let rawValue: String

    /// The root path `/`.
    public static let root = ObjectPath(unchecked: "/")

    /// Creates a path, validating it (throws `BusError.invalidArgs` naming the problem).
    public init(validating rawValue: String) throws(BusError) {
        guard ObjectPath.isValid(rawValue) else {
            throw BusError(name: BusError.invalidArgs, message: "invalid object path \"\(rawValue)\": must start with '/' and consist of elements of [A-Za-z0-9_] separated by single '/'")
        }
        self.rawValue = rawValue
    }

    init(unchecked: String) { rawValue = unchecked }

    /// A literal path; a malformed literal is a programming error and traps.
    public init(stringLiteral value: String) {
        precondition(ObjectPath.isValid(value), "invalid object path literal \(value)")
        rawValue = value
    }

    /// Whether `s` is a valid object path.
    public static func isValid(_ s: String) -> Bool {
        let u = Array(s.utf8)
        guard u.first == UInt8(ascii: "/") else { return false }
        if u.count == 1 { return true }
        guard u.last != UInt8(ascii: "/") else { return false }
        var previousSlash = true
        for c in u.dropFirst() {
            if c == UInt8(ascii: "/") {
                if previousSlash { return false }
                previousSlash = true
            } else {
                let ok = (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || c == 0x5F
                if !ok { return false }
                previousSlash = false
            }
        }
        return true
    }

    /// A child path: `/a` + `b` = `/a/b`. The element is sanitised to `[A-Za-z0-9_]`.
    public func appending(_ element: String) -> ObjectPath {
        let clean = String(element.map { c -> Character in
            (c.isASCII && (c.isLetter || c.isNumber)) || c == "_" ? c : "_"
        })
        let e = clean.isEmpty ? "_" : clean
        return ObjectPath(unchecked: rawValue == "/" ? "/" + e : rawValue + "/" + e)
    }

    /// Whether this path is `ancestor` or lies below it.
    public func isDescendant(of ancestor: ObjectPath, orSelf: Bool = true) -> Bool {
        if rawValue == ancestor.rawValue { return orSelf }
        if ancestor.rawValue == "/" { return true }
        return rawValue.hasPrefix(ancestor.rawValue + "/")
    }

    /// The parent path (nil for `/`).
    public var parent: ObjectPath? {
        guard rawValue != "/" else { return nil }
        guard let idx = rawValue.lastIndex(of: "/") else { return nil }
        let p = String(rawValue[..<idx])
        return ObjectPath(unchecked: p.isEmpty ? "/" : p)
    }

    /// The last element (empty for `/`).
    public var lastElement: String {
        rawValue == "/" ? "" : String(rawValue[rawValue.index(after: rawValue.lastIndex(of: "/")!)...])
    }

    /// The path text.
    public var description: String { rawValue }

    /// Orders paths by their text.
    public static func < (a: ObjectPath, b: ObjectPath) -> Bool { a.rawValue < b.rawValue }
}

/// A Unix file descriptor carried in a D-Bus message; closed when the last reference goes.
///
/// Equality is identity: two `UnixFD` objects are equal only if they are the same object.
public final class UnixFD: Sendable, Hashable, CustomStringConvertible {
    /// The descriptor number, valid while this object lives.
    public let fd: Int32

    /// Takes ownership of `fd`: it is closed when this object is released.
    public init(taking fd: Int32) { self.fd = fd }

    /// Owns a duplicate of `fd`; the caller keeps `fd`.
    public init(duplicating fd: Int32) throws {
        self.fd = try SystemKit.duplicate(fd)
    }

    /// A duplicate of the descriptor that the caller owns and must close.
    public func duplicate() throws -> Int32 { try SystemKit.duplicate(fd) }

    deinit { closeQuietly(fd) }

    /// "fd 7".
    public var description: String { "fd \(fd)" }

    /// Identity equality.
    public static func == (a: UnixFD, b: UnixFD) -> Bool { a === b }

    /// Identity hash.
    public func hash(into h: inout Hasher) { h.combine(ObjectIdentifier(self)) }
}
