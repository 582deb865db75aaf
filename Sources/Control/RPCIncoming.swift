/// What the server got on one line: a call, something to answer with an error, or a batch.
public enum RPCIncoming: Sendable {
    /// A valid request, or a notification when `id` is nil.
    case request(RPCRequest)
    /// A line to answer with `error` for `id`: a parse error (id `.null`) or an invalid
    /// request (its id when it could be read, else `.null`).
    case invalid(id: JSONValue, error: RPCError)
    /// A JSON array: each element classified like a single message.
    case batch([RPCIncoming])

    /// Classifies one line (without its newline).
    ///
    /// An empty array is `.invalid(invalidRequest "empty batch")`, and so is one of more than
    /// `maxBatch` elements; an array inside a
    /// batch is an invalid element, not a nested batch.
    public static func parse(line: some Collection<UInt8>) -> RPCIncoming {
        let value: JSONValue
        do {
            value = try JSONValue.parse(line)
        } catch {
            return .invalid(id: .null, error: .parseError(error.description))
        }
        if case .array(let elements) = value {
            if elements.isEmpty { return .invalid(id: .null, error: .invalidRequest("empty batch")) }
            // Each element is answered: a megabyte of `[1,1,...]` would otherwise ask for
            // half a million error objects, a reply sixty times the request.
            guard elements.count <= maxBatch else {
                return .invalid(id: .null, error: .invalidRequest("a batch of \(elements.count) requests: at most \(maxBatch) in one"))
            }
            return .batch(elements.map { classify($0, inBatch: true) })
        }
        return classify(value, inBatch: false)
    }

    /// The most requests one batch may hold.
    public static let maxBatch = 256

    /// The members a request may have.
    private static let knownMembers: Set<String> = ["jsonrpc", "method", "params", "id"]

    private static func classify(_ value: JSONValue, inBatch: Bool) -> RPCIncoming {
        guard case .object(let members) = value else {
            let what = inBatch ? "a batch element" : "a request"
            return .invalid(id: .null, error: .invalidRequest("\(what) must be an object, got \(value.typeName)"))
        }
        // The id first, so later errors can be answered to the right request.
        var id: JSONValue?
        if let rawID = members["id"] {
            switch rawID {
            case .null, .string, .int:
                id = rawID
            case .double(let d):
                guard let i = rawID.intValue else {
                    return .invalid(id: .null, error: .invalidRequest("\"id\" must be a string, an integer or null, got \(d)"))
                }
                id = .int(i)
            default:
                return .invalid(id: .null, error: .invalidRequest("\"id\" must be a string, an integer or null, got \(rawID.typeName)"))
            }
        }
        let replyID = id ?? .null
        func invalid(_ reason: String) -> RPCIncoming { .invalid(id: replyID, error: .invalidRequest(reason)) }

        guard let version = members["jsonrpc"] else { return invalid("missing \"jsonrpc\": \"2.0\"") }
        guard version == "2.0" else { return invalid("\"jsonrpc\" must be \"2.0\", got \(version)") }

        guard let methodValue = members["method"] else { return invalid("missing \"method\"") }
        guard let method = methodValue.stringValue else {
            return invalid("\"method\" must be a string, got \(methodValue.typeName)")
        }
        guard !method.isEmpty else { return invalid("\"method\" must not be empty") }
        guard !method.hasPrefix("rpc.") else {
            return invalid("method names beginning with \"rpc.\" are reserved: \(method)")
        }

        var params: [String: JSONValue] = [:]
        switch members["params"] {
        case nil, .null?:
            break
        case .object(let p)?:
            params = p
        case .array?:
            return .invalid(id: replyID, error: RPCError(
                code: RPCErrorCode.invalidParams,
                message: "invalid params: positional params are not supported; use an object",
                data: ["reason": "positional params are not supported; use an object"]))
        case let other?:
            return invalid("\"params\" must be an object, got \(other.typeName)")
        }

        for key in members.keys.sorted() where !knownMembers.contains(key) {
            return invalid("unknown member \"\(key)\"")
        }
        return .request(RPCRequest(id: id, method: method, params: params))
    }
}

/// What the client got on one line: a response to one of its requests, or a notification.
public enum RPCServerMessage: Sendable {
    /// A reply (result or error).
    case response(RPCResponse)
    /// A server-initiated message such as an `event`.
    case notification(RPCNotification)

    /// Decodes one line from the server.
    ///
    /// Throws `parseError` for bad JSON and `invalidRequest` for a malformed message; the
    /// error message says which member was wrong.
    public static func parse(line: some Collection<UInt8>) throws(RPCError) -> RPCServerMessage {
        let value: JSONValue
        do {
            value = try JSONValue.parse(line)
        } catch {
            throw .parseError(error.description)
        }
        guard case .object(let members) = value else {
            throw .invalidRequest("a server message must be an object, got \(value.typeName)")
        }
        guard let version = members["jsonrpc"], version == "2.0" else {
            throw .invalidRequest("server message lacks \"jsonrpc\": \"2.0\"")
        }
        if let methodValue = members["method"] {
            guard let method = methodValue.stringValue else {
                throw .invalidRequest("\"method\" must be a string, got \(methodValue.typeName)")
            }
            return .notification(RPCNotification(method: method, params: members["params"] ?? .null))
        }
        guard let id = members["id"] else { throw .invalidRequest("response has no \"id\"") }
        switch (members["result"], members["error"]) {
        case (let result?, nil):
            return .response(RPCResponse(id: id, result: result))
        case (nil, let error?):
            return .response(RPCResponse(id: id, error: try RPCError(json: error)))
        case (nil, nil):
            throw .invalidRequest("response has neither \"result\" nor \"error\"")
        case (_?, _?):
            throw .invalidRequest("response has both \"result\" and \"error\"")
        }
    }
}
