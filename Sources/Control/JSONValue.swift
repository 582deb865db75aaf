/// A JSON document: the value type every control-protocol message is built from.
///
/// Objects are unordered dictionaries; `encoded()` writes their keys sorted so output
/// is deterministic. Integers that fit `Int64` are kept exact as `.int`; every other
/// number is a `.double`.
public enum JSONValue: Sendable, Hashable {
    /// `null`.
    case null
    /// `true` or `false`.
    case bool(Bool)
    /// A number written without fraction or exponent that fits `Int64`.
    case int(Int64)
    /// Any other number.
    case double(Double)
    /// A string.
    case string(String)
    /// An array.
    case array([JSONValue])
    /// An object; duplicate keys in parsed input keep the last value.
    case object([String: JSONValue])
}

extension JSONValue {
    /// The member `key` when this is an object that has it, else nil.
    public subscript(key: String) -> JSONValue? {
        if case .object(let members) = self { return members[key] }
        return nil
    }

    /// The string, when this is `.string`.
    public var stringValue: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    /// The boolean, when this is `.bool`.
    public var boolValue: Bool? {
        if case .bool(let b) = self { return b }
        return nil
    }

    /// The integer, when this is `.int` or an integral `.double` within `Int64`'s range.
    public var intValue: Int64? {
        switch self {
        case .int(let i):
            return i
        case .double(let d):
            // 2^63 is exactly representable; anything at or beyond it does not fit.
            guard d.rounded(.towardZero) == d, d >= -9_223_372_036_854_775_808.0, d < 9_223_372_036_854_775_808.0 else {
                return nil
            }
            return Int64(d)
        default:
            return nil
        }
    }

    /// The number as a `Double`, when this is `.double` or `.int`.
    public var doubleValue: Double? {
        switch self {
        case .double(let d): return d
        case .int(let i): return Double(i)
        default: return nil
        }
    }

    /// The elements, when this is `.array`.
    public var arrayValue: [JSONValue]? {
        if case .array(let a) = self { return a }
        return nil
    }

    /// The members, when this is `.object`.
    public var objectValue: [String: JSONValue]? {
        if case .object(let o) = self { return o }
        return nil
    }

    /// True when this is `.null`.
    public var isNull: Bool {
        if case .null = self { return true }
        return false
    }

    /// The JSON type name used in error messages: "null", "boolean", "number", "string", "array" or "object".
    public var typeName: String {
        switch self {
        case .null: return "null"
        case .bool: return "boolean"
        case .int, .double: return "number"
        case .string: return "string"
        case .array: return "array"
        case .object: return "object"
        }
    }
}

extension JSONValue: CustomStringConvertible {
    /// The compact encoding (see `encoded()`) as a string.
    public var description: String { String(decoding: encoded(), as: UTF8.self) }
}

extension JSONValue: ExpressibleByStringLiteral {
    /// Creates `.string(value)`.
    public init(stringLiteral value: String) { self = .string(value) }
}

extension JSONValue: ExpressibleByIntegerLiteral {
    /// Creates `.int(value)`.
    public init(integerLiteral value: Int64) { self = .int(value) }
}

extension JSONValue: ExpressibleByFloatLiteral {
    /// Creates `.double(value)`.
    public init(floatLiteral value: Double) { self = .double(value) }
}

extension JSONValue: ExpressibleByBooleanLiteral {
    /// Creates `.bool(value)`.
    public init(booleanLiteral value: Bool) { self = .bool(value) }
}

extension JSONValue: ExpressibleByArrayLiteral {
    /// Creates `.array(elements)`.
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
}

extension JSONValue: ExpressibleByDictionaryLiteral {
    /// Creates `.object`; a repeated key keeps its last value.
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        var members: [String: JSONValue] = [:]
        members.reserveCapacity(elements.count)
        for (key, value) in elements { members[key] = value }
        self = .object(members)
    }
}

extension JSONValue: ExpressibleByNilLiteral {
    /// Creates `.null`.
    public init(nilLiteral: ()) { self = .null }
}
