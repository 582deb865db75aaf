import BLE
import BlueZ
import Control
import FoundationEssentials

/// Settings, parameter checks and JSON shapes of the pairing agent.
extension AgentCapability {
    /// The `agent.policy` and `agent.timeout` settings of the configuration file (defaults: just-works, 30 s).
    static func settings(_ s: [String: String]) throws(ConfigError) -> (policy: AgentPolicy, timeout: Double) {
        var policy = AgentPolicy.justWorks
        if let text = s["agent.policy"] {
            guard let p = AgentPolicy(text) else {
                throw ConfigError(file: "configuration", key: "agent.policy",
                                  reason: "expected just-works, confirm, passkey NNNNNN or reject, got \"\(text)\"")
            }
            policy = p
        }
        var timeout = 30.0
        if let text = s["agent.timeout"] {
            guard let t = Double(text), (1...600).contains(t) else {
                throw ConfigError(file: "configuration", key: "agent.timeout", reason: "expected seconds from 1 to 600, got \"\(text)\"")
            }
            timeout = t
        }
        return (policy, timeout)
    }

    /// `agent.policy`'s new policy, or nil when the caller only asks for the current one.
    static func policy(_ p: RPCParams) throws(RPCError) -> AgentPolicy? {
        try p.rejectUnknown(allowed: ["policy"])
        guard let text = try p.optionalString("policy") else { return nil }
        guard let policy = AgentPolicy(text) else {
            throw .invalidParams("policy", "expected just-works, confirm, passkey NNNNNN (six digits) or reject, got \"\(text)\"")
        }
        return policy
    }

    /// An `agent.request` event: a question that waits `answerWithin` seconds for `agent.confirm`.
    static func json(_ r: AgentRequest, answerWithin: Double) -> JSONValue {
        [
            "id": .string(r.id), "kind": .string(name(r.kind)), "device": BLEJSON.address(r.device),
            "passkey": r.passkey.map { .string(String($0, zeroPaddedTo: 6)) } ?? .null, "service": r.service.map { .string($0) } ?? .null,
            "timeout_seconds": .double(answerWithin),
        ]
    }

    /// A question's name in the protocol (`kind` of `agent.request`, topic `agent.<name>`).
    static func name(_ q: AgentQuestion) -> String {
        switch q {
        case .confirm: "confirm"
        case .authorize: "authorize"
        case .authorizeService: "authorize-service"
        }
    }

    /// The topic of a question bluetoothd asked the agent.
    static func topic(_ q: AgentQuestion) -> String {
        switch q {
        case .confirm: ControlEvent.agentConfirm
        case .authorize: ControlEvent.agentAuthorize
        case .authorizeService: ControlEvent.agentAuthorizeService
        }
    }

    /// An agent event as its topic and data; an unknown device or an empty value is null.
    static func event(_ e: AgentEvent) -> (topic: String, data: JSONValue) {
        func device(_ d: BluetoothAddress?) -> JSONValue { d.map { .string($0.description) } ?? .null }
        func passkey(_ p: UInt32) -> JSONValue { .string(String(p, zeroPaddedTo: 6)) }
        switch e {
        case .asked(let q, let d, let p):
            return (topic(q), ["device": device(d), "passkey": p.map(passkey) ?? .null])
        case .displayPinCode(let d, let pin):
            return (ControlEvent.agentDisplay, ["device": device(d), "pincode": pin.isEmpty ? .null : .string(pin)])
        case .displayPasskey(let d, let p):
            return (ControlEvent.agentDisplay, ["device": device(d), "passkey": passkey(p)])
        case .canceled:
            return (ControlEvent.agentCanceled, [:])
        }
    }
}

/// bluetoothd did not take the agent with its new policy (the policy stays as it was).
struct AgentRegistrationError: Error, RPCErrorConvertible {
    /// What registering failed with.
    let underlying: any Error

    var rpcError: RPCError {
        RPCError(code: RPCErrorCode.dbusError, message: "registering the agent with bluetoothd failed: \(underlying)", data: ["kind": "agent-registration"])
    }
}

/// An `agent.confirm` for a question that is not (or no longer) waiting.
struct UnknownPairingRequest: Error, RPCErrorConvertible {
    /// The id the client gave.
    let id: String

    var rpcError: RPCError {
        RPCError(code: RPCErrorCode.invalidState, message: "no pending pairing request \(id) (it may have been answered, canceled or timed out)",
                 data: ["kind": "unknown-request"])
    }
}
