import BLE
import BlueZ
import Control
import Foundation

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
            "id": .string(r.id), "kind": .string(r.kind), "device": BLEJSON.address(r.device),
            "passkey": r.passkey.map { .string(String(format: "%06u", $0)) } ?? .null, "service": r.service.map { .string($0) } ?? .null,
            "timeout_seconds": .double(answerWithin),
        ]
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
