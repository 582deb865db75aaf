/// JSON-RPC 2.0 error codes: the standard ones and PeerLink's (-32000 to -32099).
public enum RPCErrorCode {
    /// The line was not valid JSON.
    public static let parseError = -32700
    /// The JSON was not a valid request object.
    public static let invalidRequest = -32600
    /// No such method.
    public static let methodNotFound = -32601
    /// The params were missing, of the wrong type or out of range.
    public static let invalidParams = -32602
    /// A bug or unexpected failure inside the daemon.
    public static let internalError = -32603

    /// A line exceeded the size limit; the connection is closed after this error.
    public static let requestTooLarge = -32000
    /// BlueZ is not running or not reachable over D-Bus.
    public static let bluetoothUnavailable = -32001
    /// No adapter matches the name or address given (or there is none at all).
    public static let adapterNotFound = -32002
    /// The adapter is blocked (rfkill) and cannot be powered.
    public static let adapterBlocked = -32003
    /// The operation did not finish within its timeout.
    public static let timeout = -32004
    /// D-Bus or BlueZ returned an error not covered by a more specific code.
    public static let dbusError = -32005
    /// The resource is busy with another operation.
    public static let busy = -32006
    /// The operation is not supported here (hardware, BlueZ version or build).
    public static let notSupported = -32007
    /// The operation is not valid in the current state.
    public static let invalidState = -32008
    /// A device, characteristic, scan or subscription that is not there.
    public static let notFound = -32009

    /// avahi-daemon is not running or not reachable (DNS-SD requests fail at once).
    public static let dnssdUnavailable = -32010
    /// No DNS-SD publication or browse with that ID.
    public static let dnssdNotFound = -32011
    /// Avahi refused a DNS-SD operation.
    public static let dnssdFailed = -32012
    /// A service could not be resolved.
    public static let dnssdNotResolved = -32013
    /// A peer session could not be made, or ended: `data.reason` names why (`declined`,
    /// `timeout`, `full`, `encryption-mismatch`, `identity-mismatch`, ...).
    public static let peerRefused = -32014

    /// A short name for a known code ("adapter not found"), or nil.
    public static func name(of code: Int) -> String? {
        switch code {
        case parseError: return "parse error"
        case invalidRequest: return "invalid request"
        case methodNotFound: return "method not found"
        case invalidParams: return "invalid params"
        case internalError: return "internal error"
        case requestTooLarge: return "request too large"
        case bluetoothUnavailable: return "bluetooth unavailable"
        case adapterNotFound: return "adapter not found"
        case adapterBlocked: return "adapter blocked"
        case timeout: return "timeout"
        case dbusError: return "D-Bus error"
        case busy: return "busy"
        case notSupported: return "not supported"
        case invalidState: return "invalid state"
        case peerRefused: return "peer refused"
        case notFound: return "not found"
        case dnssdUnavailable: return "DNS-SD unavailable"
        case dnssdNotFound: return "DNS-SD ID not found"
        case dnssdFailed: return "Avahi error"
        case dnssdNotResolved: return "not resolved"
        default: return nil
        }
    }
}

/// A JSON-RPC error object: thrown by method handlers, sent in responses, decoded by clients.
public struct RPCError: Error, Sendable, Hashable, CustomStringConvertible {
    /// One of `RPCErrorCode`'s values (or another integer from a newer daemon).
    public var code: Int
    /// A one-line human-readable message naming what was wrong.
    public var message: String
    /// Structured detail for programs, e.g. `{"param": "timeout", "reason": "..."}`.
    public var data: JSONValue?

    /// Creates an error.
    public init(code: Int, message: String, data: JSONValue? = nil) {
        self.code = code
        self.message = message
        self.data = data
    }

    /// The line was not JSON; `reason` is the parser's description.
    public static func parseError(_ reason: String) -> RPCError {
        RPCError(code: RPCErrorCode.parseError, message: "parse error: \(reason)")
    }

    /// The message was JSON but not a valid request; `reason` names the member at fault.
    public static func invalidRequest(_ reason: String) -> RPCError {
        RPCError(code: RPCErrorCode.invalidRequest, message: "invalid request: \(reason)")
    }

    /// "method not found: foo.bar", data `{"method": "foo.bar"}`.
    public static func methodNotFound(_ method: String) -> RPCError {
        RPCError(code: RPCErrorCode.methodNotFound, message: "method not found: \(method)", data: ["method": .string(method)])
    }

    /// "invalid params: <param>: <reason>", data `{"param": .., "reason": ..}`.
    public static func invalidParams(_ param: String, _ reason: String) -> RPCError {
        RPCError(code: RPCErrorCode.invalidParams, message: "invalid params: \(param): \(reason)",
                 data: ["param": .string(param), "reason": .string(reason)])
    }

    /// An unexpected failure inside the daemon.
    public static func internalError(_ reason: String) -> RPCError {
        RPCError(code: RPCErrorCode.internalError, message: "internal error: \(reason)")
    }

    /// The error object: `{"code": .., "message": .., "data": ..}` (data omitted when nil).
    public var json: JSONValue {
        var members: [String: JSONValue] = ["code": .int(Int64(code)), "message": .string(message)]
        if let data { members["data"] = data }
        return .object(members)
    }

    /// Decodes an error object received in a response.
    ///
    /// Throws an `invalidRequest` error describing the shape problem when `json` is not
    /// an object with an integer `code` and a string `message`.
    public init(json: JSONValue) throws(RPCError) {
        guard case .object(let members) = json else {
            throw .invalidRequest("\"error\" must be an object, got \(json.typeName)")
        }
        guard let codeValue = members["code"] else { throw .invalidRequest("\"error\" has no \"code\"") }
        guard let code = codeValue.intValue, let intCode = Int(exactly: code) else {
            throw .invalidRequest("\"error.code\" must be an integer, got \(codeValue)")
        }
        guard let messageValue = members["message"] else { throw .invalidRequest("\"error\" has no \"message\"") }
        guard let message = messageValue.stringValue else {
            throw .invalidRequest("\"error.message\" must be a string, got \(messageValue.typeName)")
        }
        self.init(code: intCode, message: message, data: members["data"])
    }

    /// "<message> (code <code>)".
    public var description: String { "\(message) (code \(code))" }
}
