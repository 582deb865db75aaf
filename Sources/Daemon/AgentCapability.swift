import BLE
import BlueZ
import Control
import Foundation
import Synchronization

/// The built-in pairing agent: `agent.policy`, `agent.confirm`; questions as `agent.request` events.
final class AgentCapability: DaemonCapability {
    let name = "agent"
    private let agent = Mutex<PairingAgent?>(nil)

    func register(_ ctx: DaemonContext) throws {
        var policy = AgentPolicy.justWorks
        if let text = ctx.settings["agent.policy"] {
            guard let p = AgentPolicy(text) else {
                throw ConfigError(file: "configuration", key: "agent.policy",
                                  reason: "expected just-works, confirm, passkey NNNNNN or reject, got \"\(text)\"")
            }
            policy = p
        }
        var timeout = 30.0
        if let text = ctx.settings["agent.timeout"] {
            guard let t = Double(text), (1...600).contains(t) else {
                throw ConfigError(file: "configuration", key: "agent.timeout", reason: "expected seconds from 1 to 600, got \"\(text)\"")
            }
            timeout = t
        }
        let answerWithin = timeout
        let a = PairingAgent(policy: policy, timeout: .milliseconds(Int(timeout * 1000)), logger: ctx.logger.child("agent"), onRequest: { r in
            ctx.publish(topic: "agent.request", data: [
                "id": .string(r.id), "kind": .string(Self.name(r.kind)), "device": r.device.map { .string($0.description) } ?? .null,
                "passkey": r.passkey.map { .string(String(format: "%06u", $0)) } ?? .null, "service": r.service.map { .string($0) } ?? .null,
                "timeout_seconds": .double(answerWithin),
            ])
        }, onEvent: { e in
            let (topic, data) = Self.event(e)
            ctx.publish(topic: topic, data: data)
        })
        agent.withLock { $0 = a }

        ctx.register("agent.policy") { params, _ throws(RPCError) in
            try params.rejectUnknown(allowed: ["policy"])
            guard let text = try params.optionalString("policy") else { return ["policy": .string(a.policy.description)] }
            guard let p = AgentPolicy(text) else {
                throw .invalidParams("policy", "expected just-works, confirm, passkey NNNNNN (six digits) or reject, got \"\(text)\"")
            }
            do { try await a.setPolicy(p) } catch {
                throw RPCError(code: RPCErrorCode.dbusError, message: "registering the agent with bluetoothd failed: \(error)", data: ["kind": "agent-registration"])
            }
            return ["policy": .string(p.description)]
        }
        ctx.register("agent.confirm") { params, _ throws(RPCError) in
            try params.rejectUnknown(allowed: ["id", "accept"])
            let id = try params.string("id")
            let accept = try params.bool("accept")
            guard a.answer(id, accept: accept) else {
                throw RPCError(code: RPCErrorCode.invalidState, message: "no pending pairing request \(id) (it may have been answered, canceled or timed out)",
                               data: ["kind": "unknown-request"])
            }
            return ["id": .string(id), "accepted": .bool(accept)]
        }
    }

    func attach(_ session: BusSession) async { await agent.withLock { $0 }?.attach(session.connection, bluez: session.bluez) }
    func detach() async { agent.withLock { $0 }?.detach() }

    /// A question's name in the protocol (`kind` of `agent.request`, topic `agent.<name>`).
    static func name(_ q: AgentQuestion) -> String {
        switch q {
        case .confirm: "confirm"
        case .authorize: "authorize"
        case .authorizeService: "authorize-service"
        }
    }

    /// An agent event as its topic and data; an unknown device or an empty value is null.
    static func event(_ e: AgentEvent) -> (topic: String, data: JSONValue) {
        func device(_ d: BluetoothAddress?) -> JSONValue { d.map { .string($0.description) } ?? .null }
        func passkey(_ p: UInt32) -> JSONValue { .string(String(format: "%06u", p)) }
        switch e {
        case .asked(let q, let d, let p):
            return ("agent.\(name(q))", ["device": device(d), "passkey": p.map(passkey) ?? .null])
        case .displayPinCode(let d, let pin):
            return ("agent.display", ["device": device(d), "pincode": pin.isEmpty ? .null : .string(pin)])
        case .displayPasskey(let d, let p):
            return ("agent.display", ["device": device(d), "passkey": passkey(p)])
        case .canceled:
            return ("agent.canceled", [:])
        }
    }
}
