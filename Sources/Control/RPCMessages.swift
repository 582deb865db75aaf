/// A call from client to server: a request when `id` is set, a notification when nil.
public struct RPCRequest: Sendable, Hashable {
    /// The request id; nil for a notification (no "id" member). A `.null` id is a request.
    public var id: JSONValue?
    /// The method name, e.g. "adapter.power".
    public var method: String
    /// The named params (an empty object when the message had none).
    public var params: RPCParams

    /// Creates a request (or a notification when `id` is nil).
    public init(id: JSONValue?, method: String, params: [String: JSONValue] = [:]) {
        self.id = id
        self.method = method
        self.params = RPCParams(params)
    }

    /// True when no reply is expected.
    public var isNotification: Bool { id == nil }

    /// The JSON object, with "params" omitted when empty.
    public var json: JSONValue {
        var members: [String: JSONValue] = ["jsonrpc": "2.0", "method": .string(method)]
        if let id { members["id"] = id }
        if !params.values.isEmpty { members["params"] = .object(params.values) }
        return .object(members)
    }

    /// The request as one line: compact JSON followed by "\n".
    public func encodedLine() -> [UInt8] { json.encodedLine() }
}

/// A reply from server to client: a result or an error for the request with `id`.
public struct RPCResponse: Sendable, Hashable {
    /// The id of the request answered; `.null` when it could not be determined.
    public var id: JSONValue
    /// The result or the error.
    public var outcome: Result<JSONValue, RPCError>

    /// Creates a success response.
    public init(id: JSONValue, result: JSONValue) {
        self.id = id
        self.outcome = .success(result)
    }

    /// Creates an error response.
    public init(id: JSONValue, error: RPCError) {
        self.id = id
        self.outcome = .failure(error)
    }

    /// The JSON object `{"jsonrpc":"2.0","id":..,"result":..}` or `{.., "error":..}`.
    public var json: JSONValue {
        switch outcome {
        case .success(let result): return ["jsonrpc": "2.0", "id": id, "result": result]
        case .failure(let error): return ["jsonrpc": "2.0", "id": id, "error": error.json]
        }
    }

    /// The response as one line: compact JSON followed by "\n".
    public func encodedLine() -> [UInt8] { json.encodedLine() }
}

/// A message from server to client that is not a reply (e.g. an `event`).
public struct RPCNotification: Sendable, Hashable {
    /// The method name, e.g. `ControlEvent.method`.
    public var method: String
    /// The params value (`.null` when the message had none).
    public var params: JSONValue

    /// Creates a notification.
    public init(method: String, params: JSONValue) {
        self.method = method
        self.params = params
    }

    /// The JSON object, with "params" omitted when null.
    public var json: JSONValue {
        var members: [String: JSONValue] = ["jsonrpc": "2.0", "method": .string(method)]
        if !params.isNull { members["params"] = params }
        return .object(members)
    }

    /// The notification as one line: compact JSON followed by "\n".
    public func encodedLine() -> [UInt8] { json.encodedLine() }
}

extension JSONValue {
    /// The compact encoding followed by "\n": one frame of the control protocol.
    public func encodedLine() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        encode(into: &out)
        out.append(0x0A)
        return out
    }
}
