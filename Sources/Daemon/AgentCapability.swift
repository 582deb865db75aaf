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
                "id": .string(r.id), "kind": .string(r.kind), "device": r.device.map { .string($0.description) } ?? .null,
                "passkey": r.passkey.map { .string(String(format: "%06u", $0)) } ?? .null, "service": r.service.map { .string($0) } ?? .null,
                "timeout_seconds": .double(answerWithin),
            ])
        }, onEvent: { topic, fields in
            ctx.publish(topic: topic, data: .object(fields.mapValues { $0.isEmpty ? .null : .string($0) }))
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
}
