import BLE
import BlueZ
import Control
import FoundationEssentials
import Synchronization

/// LE advertising: `advertise.start`, `advertise.stop`, `advertise.list`. Parameters and
/// result shapes are in `AdvertiseParams.swift`.
final class AdvertiseCapability: DaemonCapability {
    let name = "advertise"
    private let advertiser = Mutex<Advertiser?>(nil)

    func register(_ ctx: DaemonContext) {
        let adv = Advertiser(logger: ctx.logger.child("advertise")) { e in
            switch e {
            case .started(let id, let a, let again):
                ctx.publish(topic: again ? ControlEvent.advertiseRestarted : ControlEvent.advertiseStarted,
                            data: ["id": .string(id), "adapter": .string(a.name), "address": .string(a.address.description)])
            case .stopped(let id, let reason):
                ctx.publish(topic: ControlEvent.advertiseStopped, data: ["id": .string(id), "reason": .string(reason)])
            }
        }
        advertiser.withLock { $0 = adv }

        ctx.register(ControlMethod.advertiseStart) { params, _ throws(RPCError) in
            let def = try Self.definition(params)
            let selector = try BLEParams.adapter(params) ?? ctx.defaultAdapter.flatMap(AdapterSelector.init)
            return Self.json(try await rpc { try await adv.add(def, adapter: selector) })
        }
        ctx.register(ControlMethod.advertiseStop) { params, _ throws(RPCError) -> JSONValue in
            try params.rejectUnknown(allowed: ["id"])
            if let id = try params.optionalString("id") {
                try await rpc { try await adv.remove(id) }
                return ["stopped": .array([.string(id)])]
            }
            // All: one that ended meanwhile (its timeout, another client) is passed over, not
            // an error about an id the caller never gave that left the rest running.
            var stopped: [JSONValue] = []
            for id in await adv.list.map(\.id) {
                do throws(AdvertiseError) {
                    try await adv.remove(id)
                    stopped.append(.string(id))
                } catch {
                    if case .unknown = error { continue }
                    throw error.rpcError
                }
            }
            return ["stopped": .array(stopped)]
        }
        ctx.register(ControlMethod.advertiseList) { params, _ throws(RPCError) in
            try params.rejectUnknown(allowed: [])
            return ["advertisements": .array(await adv.list.map { Self.json($0) })]
        }
    }

    func attach(_ session: BusSession) async { await advertiser.withLock { $0 }?.attach(connection: session.connection, bluez: session.bluez) }
    func detach() async { await advertiser.withLock { $0 }?.detach() }
    func shutdown() async { await advertiser.withLock { $0 }?.removeAll() }
}

// MARK: Errors

extension AdvertiseError: RPCErrorConvertible {
    /// Starting or stopping an advertisement failed.
    var rpcError: RPCError {
        switch self {
        case .bluez(let b): b.rpcError
        case .tooLarge: RPCError(code: RPCErrorCode.invalidParams, message: description, data: ["kind": "too-large"])
        // What to do about it is the daemon's to say: BlueZ knows no peerlink commands.
        case .noInstances: RPCError(code: RPCErrorCode.busy, message: description + "; stop one first (peerlink advertise list / stop)",
                                    data: ["kind": "no-instances"])
        case .refused: RPCError(code: RPCErrorCode.dbusError, message: description, data: ["kind": "refused"])
        case .registerFailed(let e):
            RPCError(code: RPCErrorCode.dbusError, message: description, data: ["kind": "refused", "name": .string(e.name)])
        case .unknown: RPCError(code: RPCErrorCode.invalidParams, message: "invalid params: id: \(description)", data: ["kind": "unknown-advertisement"])
        }
    }
}
