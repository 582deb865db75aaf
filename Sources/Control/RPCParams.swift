/// The named params of a request, with typed accessors for method handlers.
///
/// Every accessor throws `RPCError.invalidParams` naming the key, so a handler can be
/// written as a list of `try params.x("key")` lines. For the `optional*` accessors a
/// missing key and an explicit `null` both mean "not given".
public struct RPCParams: Sendable, Hashable {
    /// The raw members.
    public var values: [String: JSONValue]

    /// Wraps `values`.
    public init(_ values: [String: JSONValue] = [:]) {
        self.values = values
    }

    /// The raw value for `key`, nil when absent or null.
    public subscript(key: String) -> JSONValue? {
        guard let v = values[key], !v.isNull else { return nil }
        return v
    }

    private func required(_ key: String) throws(RPCError) -> JSONValue {
        guard let v = self[key] else { throw .invalidParams(key, "required") }
        return v
    }

    private static func wrongType(_ key: String, _ expected: String, _ got: JSONValue) -> RPCError {
        .invalidParams(key, "expected \(expected), got \(got.typeName)")
    }

    // MARK: - Strings

    /// The string `key`; throws when absent or not a string.
    public func string(_ key: String) throws(RPCError) -> String {
        try asString(key, try required(key))
    }

    /// The string `key`, or nil when absent or null.
    public func optionalString(_ key: String) throws(RPCError) -> String? {
        guard let v = self[key] else { return nil }
        return try asString(key, v)
    }

    private func asString(_ key: String, _ v: JSONValue) throws(RPCError) -> String {
        guard let s = v.stringValue else { throw Self.wrongType(key, "a string", v) }
        return s
    }

    // MARK: - Booleans

    /// The boolean `key`; throws when absent or not a boolean.
    public func bool(_ key: String) throws(RPCError) -> Bool {
        try asBool(key, try required(key))
    }

    /// The boolean `key`, or nil when absent or null.
    public func optionalBool(_ key: String) throws(RPCError) -> Bool? {
        guard let v = self[key] else { return nil }
        return try asBool(key, v)
    }

    private func asBool(_ key: String, _ v: JSONValue) throws(RPCError) -> Bool {
        guard let b = v.boolValue else { throw Self.wrongType(key, "a boolean", v) }
        return b
    }

    // MARK: - Integers

    /// The integer `key` (an integral number), optionally within `range`.
    public func int(_ key: String, in range: ClosedRange<Int64>? = nil) throws(RPCError) -> Int64 {
        try asInt(key, try required(key), range)
    }

    /// The integer `key`, or nil when absent or null.
    public func optionalInt(_ key: String, in range: ClosedRange<Int64>? = nil) throws(RPCError) -> Int64? {
        guard let v = self[key] else { return nil }
        return try asInt(key, v, range)
    }

    private func asInt(_ key: String, _ v: JSONValue, _ range: ClosedRange<Int64>?) throws(RPCError) -> Int64 {
        guard let i = v.intValue else {
            if case .double = v { throw .invalidParams(key, "expected an integer, got \(v)") }
            throw Self.wrongType(key, "an integer", v)
        }
        if let range, !range.contains(i) {
            throw .invalidParams(key, "must be between \(range.lowerBound) and \(range.upperBound), got \(i)")
        }
        return i
    }

    // MARK: - Doubles

    /// The number `key` as a `Double` (integers accepted), or nil when absent or null.
    public func optionalDouble(_ key: String, in range: ClosedRange<Double>? = nil) throws(RPCError) -> Double? {
        guard let v = self[key] else { return nil }
        guard let d = v.doubleValue else { throw Self.wrongType(key, "a number", v) }
        if let range, !range.contains(d) {
            throw .invalidParams(key, "must be between \(range.lowerBound) and \(range.upperBound), got \(v)")
        }
        return d
    }

    // MARK: - Arrays

    /// The array of strings `key`, or nil when absent or null.
    public func optionalStringArray(_ key: String) throws(RPCError) -> [String]? {
        guard let v = self[key] else { return nil }
        guard let elements = v.arrayValue else { throw Self.wrongType(key, "an array of strings", v) }
        var strings: [String] = []
        strings.reserveCapacity(elements.count)
        for (i, element) in elements.enumerated() {
            guard let s = element.stringValue else {
                throw .invalidParams(key, "expected an array of strings, got \(element.typeName) at index \(i)")
            }
            strings.append(s)
        }
        return strings
    }

    // MARK: - Unknown keys

    /// Throws for the first key (in sorted order) not in `allowed`: "invalid params: frobnicate: unknown parameter".
    public func rejectUnknown(allowed: Set<String>) throws(RPCError) {
        for key in values.keys.sorted() where !allowed.contains(key) {
            throw .invalidParams(key, "unknown parameter")
        }
    }
}
