import BLE
import BlueZ
import Control
import FoundationEssentials
import Synchronization

/// The built-in pairing agent: `agent.policy`, `agent.confirm`; questions as `agent.request`
/// events. Settings, parameters and shapes are in `AgentParams.swift`.
final class AgentCapability: DaemonCapability {
    let name = "agent"
    private let agent = Mutex<PairingAgent?>(nil)

    func register(_ ctx: DaemonContext) throws {
        let (policy, timeout) = try Self.settings(ctx.settings)
        let answerWithin = timeout
        let a = PairingAgent(policy: policy, timeout: .milliseconds(Int(timeout * 1000)), logger: ctx.logger.child("agent"), onRequest: { r in
            ctx.publish(topic: ControlEvent.agentRequest, data: Self.json(r, answerWithin: answerWithin))
        }, onEvent: { e in
            let (topic, data) = Self.event(e)
            ctx.publish(topic: topic, data: data)
        })
        agent.withLock { $0 = a }

        ctx.register(ControlMethod.agentPolicy) { params, _ throws(RPCError) in
            guard let p = try Self.policy(params) else { return ["policy": .string(a.policy.description)] }
            try await rpc {
                do { try await a.setPolicy(p) } catch { throw AgentRegistrationError(underlying: error) }
            }
            return ["policy": .string(p.description)]
        }
        ctx.register(ControlMethod.agentConfirm) { params, _ throws(RPCError) in
            try params.rejectUnknown(allowed: ["id", "accept"])
            let id = try params.string("id")
            let accept = try params.bool("accept")
            guard a.answer(id, accept: accept) else { throw UnknownPairingRequest(id: id).rpcError }
            return ["id": .string(id), "accepted": .bool(accept)]
        }
    }

    func attach(_ session: BusSession) async { await agent.withLock { $0 }?.attach(session.connection, bluez: session.bluez) }
    func detach() async { agent.withLock { $0 }?.detach() }
}
