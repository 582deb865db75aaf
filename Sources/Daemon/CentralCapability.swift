import BLE
import BlueZ
import Control
import DBus
import FoundationEssentials
import Synchronization

/// The BLE central role: `central.scan`, `central.connect`, `central.read`, ... Scans and
/// subscriptions belong to the control client that made them (their events go to it alone,
/// and they end with its connection); connections and their events are shared. Parameters
/// and result shapes are in `CentralParams.swift`.
final class CentralCapability: DaemonCapability {
    let name = "central"
    private let central = Mutex<Central?>(nil)

    func register(_ ctx: DaemonContext) {
        let c = Central(logger: ctx.logger.child("central")) { e in Self.route(e, ctx) }
        central.withLock { $0 = c }
        ctx.onClientClose { id in Task { await c.ownerGone(id) } }
        let defaultAdapter = ctx.defaultAdapter.flatMap(AdapterSelector.init)
        @Sendable func adapter(_ p: RPCParams) throws(RPCError) -> AdapterSelector? { try BLEParams.adapter(p) ?? defaultAdapter }

        ctx.register(ControlMethod.centralScan) { p, req throws(RPCError) in
            let (filter, timeout) = try Self.scan(p)
            let sel = try adapter(p)
            let (id, a) = try await rpc { try await c.startScan(owner: req.clientID, adapter: sel, filter: filter, timeout: timeout) }
            // A client gone while the scan started (its close found nothing to end): now.
            // (Not a close handler per scan: a client scanning again and again kept them all.)
            if req.connectionClosed { Task { await c.stopScan(id, reason: "client-gone") } }
            return ["scan": .string(id), "adapter": .string(a.name), "address": .string(a.address.description)]
        }
        ctx.register(ControlMethod.centralScanStop) { p, req throws(RPCError) in
            try p.rejectUnknown(allowed: ["scan"])
            if let id = try p.optionalString("scan") {
                // Another connection's scan is not this one's to stop (its events go to its owner).
                guard await c.scanList.contains(where: { $0.id == id && $0.owner == req.clientID }) else {
                    throw UnknownCentralID(what: "scan", id: id).rpcError
                }
                guard await c.stopScan(id) else { throw UnknownCentralID(what: "scan", id: id).rpcError }
                return ["stopped": .array([.string(id)])]
            }
            var stopped: [JSONValue] = []
            for s in await c.scanList where s.owner == req.clientID {
                if await c.stopScan(s.id) { stopped.append(.string(s.id)) }
            }
            return ["stopped": .array(stopped)]
        }
        ctx.register(ControlMethod.centralConnect) { p, _ throws(RPCError) in
            let r = try Self.connect(p)
            let sel = try adapter(p)
            do throws(RPCError) {
                let (a, d) = try await rpc { try await c.connect(adapter: sel, address: r.address, addressType: r.type, timeout: r.timeout, keep: r.keep) }
                return ["adapter": .string(a.name), "device": BLEJSON.device(d), "keep": .bool(r.keep)]
            } catch var e where r.keep {
                // The device stays kept: the first attempt failed, the daemon goes on trying.
                e.message += " (kept: the daemon keeps reconnecting in the background until 'peerlink disconnect')"
                var data = e.data?.objectValue ?? [:]
                data["keep"] = true
                e.data = .object(data)
                throw e
            }
        }
        ctx.register(ControlMethod.centralDisconnect) { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: ["adapter", "address"])
            let address = try BLEParams.deviceAddress(p)
            let sel = try adapter(p)
            let was = try await rpc { try await c.disconnect(adapter: sel, address: address) }
            return ["address": .string(address.description), "was_connected": .bool(was)]
        }
        ctx.register(ControlMethod.centralDevices) { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: ["adapter", "connected"])
            let onlyConnected = try p.optionalBool("connected") ?? false
            let sel = try adapter(p)
            let (a, list, kept) = try await rpc { try await c.devices(adapter: sel) }
            return ["adapter": .string(a.name), "devices": .array(list.filter { !onlyConnected || $0.connected }.map { d in
                BLEJSON.device(d, extra: ["keep": .bool(kept.contains(d.address))])
            })]
        }
        ctx.register(ControlMethod.centralServices) { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: ["adapter", "address", "refresh", "timeout"])
            let address = try BLEParams.deviceAddress(p)
            let refresh = try p.optionalBool("refresh") ?? false
            let timeout = try Self.seconds(p, "timeout", in: 0.5...600, default: 30)
            let sel = try adapter(p)
            let (d, tree) = try await rpc { try await c.services(adapter: sel, address: address, refresh: refresh, timeout: timeout) }
            return ["device": .string(d.address.description), "services": BLEJSON.remoteServices(tree)]
        }
        ctx.register(ControlMethod.centralRead) { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: ["adapter", "address", "characteristic", "service", "offset"])
            let (address, uuid, service) = try Self.target(p)
            let offset = Int(try p.optionalInt("offset", in: 0...512) ?? 0)
            let sel = try adapter(p)
            let (ch, v) = try await rpc { try await c.read(adapter: sel, address: address, characteristic: uuid, service: service, offset: offset) }
            return CentralJSON.read(address, ch, v, offset: offset)
        }
        ctx.register(ControlMethod.centralWrite) { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: ["adapter", "address", "characteristic", "service", "value", "value_hex", "value_base64", "command", "offset"])
            let (address, uuid, service) = try Self.target(p)
            let w = try Self.write(p)
            let sel = try adapter(p)
            let ch = try await rpc {
                try await c.write(adapter: sel, address: address, characteristic: uuid, service: service, value: w.value, command: w.command, offset: w.offset)
            }
            return ["device": .string(address.description), "characteristic": .string(ch.uuid.uuidString),
                    "length": .int(Int64(w.value.count)), "type": .string(w.command ? "command" : "request")]
        }
        ctx.register(ControlMethod.centralSubscribe) { p, req throws(RPCError) in
            try p.rejectUnknown(allowed: ["adapter", "address", "characteristic", "service", "indicate", "batch", "stream"])
            let (address, uuid, service) = try Self.target(p)
            let how = try Self.delivery(p)
            let sel = try adapter(p)
            let s = try await rpc {
                try await c.subscribe(owner: req.clientID, adapter: sel, address: address, characteristic: uuid, service: service,
                                      indicate: how.indicate, batch: how.batch, stream: how.stream)
            }
            // A client gone while the subscription was set up (AcquireNotify, StartNotify: up to
            // 30 s; its close found nothing to end) would leave it on for ever: ended now.
            if req.connectionClosed { Task { await c.unsubscribe(s.id, reason: "client-gone") } }
            if let fd = s.streamFD { req.passWithReply(fd) }
            return ["subscription": .string(s.id), "device": .string(address.description), "characteristic": .string(uuid.uuidString),
                    "via": .string(s.via), "mtu": BLEJSON.int(s.mtu), "fd": .bool(s.streamFD != nil)]
        }
        ctx.register(ControlMethod.centralUnsubscribe) { p, req throws(RPCError) in
            try p.rejectUnknown(allowed: ["subscription"])
            let id = try p.string("subscription")
            guard await c.subscriptionList.contains(where: { $0.id == id && $0.owner == req.clientID }) else {
                throw UnknownCentralID(what: "subscription", id: id).rpcError
            }
            guard await c.unsubscribe(id) else { throw UnknownCentralID(what: "subscription", id: id).rpcError }
            return ["subscription": .string(id), "ended": true]
        }
        ctx.register(ControlMethod.centralStatus) { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: [])
            return CentralJSON.status(await c.scanList, await c.subscriptionList)
        }
        ctx.register(ControlMethod.centralPair) { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: ["adapter", "address", "timeout"])
            let address = try BLEParams.deviceAddress(p)
            let timeout = try Self.seconds(p, "timeout", in: 1...600, default: 60)
            let sel = try adapter(p)
            let (d, already) = try await rpc { try await c.pair(adapter: sel, address: address, timeout: timeout) }
            return ["device": BLEJSON.device(d), "already_paired": .bool(already)]
        }
        ctx.register(ControlMethod.centralTrust) { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: ["adapter", "address", "trusted"])
            let address = try BLEParams.deviceAddress(p)
            let trusted = try p.optionalBool("trusted") ?? true
            let sel = try adapter(p)
            let d = try await rpc { try await c.trust(adapter: sel, address: address, trusted: trusted) }
            return ["device": BLEJSON.device(d)]
        }
        ctx.register(ControlMethod.centralForget) { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: ["adapter", "address"])
            let address = try BLEParams.deviceAddress(p)
            let sel = try adapter(p)
            try await rpc { try await c.forget(adapter: sel, address: address) }
            return ["address": .string(address.description), "removed": true]
        }
    }

    func attach(_ session: BusSession) async { await central.withLock { $0 }?.attach(connection: session.connection, bluez: session.bluez) }
    func detach() async { await central.withLock { $0 }?.detach() }
    func shutdown() async { await central.withLock { $0 }?.shutdown() }

    // MARK: Events

    static func route(_ e: CentralEvent, _ ctx: DaemonContext) {
        switch e {
        case .discovered(let scan, let owner, let a, let d):
            ctx.send(topic: ControlEvent.centralDiscovered, data: BLEJSON.device(d, extra: ["scan": .string(scan), "adapter": .string(a.name)]), to: owner)
        case .scanEnded(let scan, let owner, let reason):
            ctx.send(topic: ControlEvent.centralScanEnded, data: ["scan": .string(scan), "reason": .string(reason)], to: owner)
        case .scanResumed(let scan, let owner, let a):
            ctx.send(topic: ControlEvent.centralScanResumed, data: ["scan": .string(scan), "adapter": .string(a.name)], to: owner)
        case .connected(let a, let d):
            ctx.publish(topic: ControlEvent.centralConnected, data: ["device": .string(d.address.description), "adapter": .string(a.name),
                                                                     "name": d.name.map { .string($0) } ?? .null])
        case .disconnected(let a, let d, let reason, let again):
            ctx.publish(topic: ControlEvent.centralDisconnected, data: ["device": .string(d.description), "adapter_address": .string(a.description),
                                                                        "reason": .string(reason), "will_reconnect": .bool(again)])
        case .reconnecting(let a, let d, let attempt, let delay, let last):
            ctx.publish(topic: ControlEvent.centralReconnecting, data: ["device": .string(d.description), "adapter_address": .string(a.description),
                                                                        "attempt": .int(Int64(attempt)), "delay": .double(delay),
                                                                        "last_error": last.map { .string($0) } ?? .null])
        case .notifications(let sub, let owner, let d, let ch, let values, let first, let batch):
            let common = CentralJSON.notificationFields(sub, d, ch)
            if batch {
                // One event for the values that arrived together: base64, compact to send and decode.
                var o = common
                o["seq"] = .int(Int64(first))
                o["count"] = .int(Int64(values.count))
                o["values_base64"] = .array(values.map { .string(Data($0).base64EncodedString()) })
                ctx.send(topic: ControlEvent.centralNotifications, data: .object(o), to: owner)
            } else {
                for (i, v) in values.enumerated() {
                    var o = common
                    o["seq"] = .int(Int64(first) + Int64(i))
                    ctx.send(topic: ControlEvent.centralNotification, data: BLEJSON.value(v, extra: o), to: owner)
                }
            }
        case .subscriptionEnded(let sub, let owner, let d, let ch, let reason, let count, let dropped):
            var o = CentralJSON.notificationFields(sub, d, ch)
            o["reason"] = .string(reason)
            o["count"] = .int(Int64(count))
            o["dropped"] = .int(Int64(dropped))
            ctx.send(topic: ControlEvent.centralSubscriptionEnded, data: .object(o), to: owner)
        }
    }
}

// MARK: - CentralError → RPCError (the one place a central failure gets its code, message and kind)

extension CentralError: RPCErrorConvertible {
    /// Case by case: how each central failure reads on the control socket.
    var rpcError: RPCError {
        let text = CentralCapability.message(self)
        switch self {
        case .bluez(let b): return b.rpcError
        case .notFound, .characteristicNotFound: return RPCError(code: RPCErrorCode.notFound, message: text, data: ["kind": "not-found"])
        case .invalidState, .adapterOff, .notConnected, .refreshWouldUnpair:
            return RPCError(code: RPCErrorCode.invalidState, message: text, data: ["kind": "invalid-state"])
        case .timeout: return RPCError(code: RPCErrorCode.timeout, message: text, data: ["kind": "timeout"])
        case .refused(_, let b):
            var data: [String: JSONValue] = ["kind": "bluez-error", "name": .string(b.name), "message": .string(b.message)]
            if let att = b.att {
                data["att_error"] = .int(Int64(att.rawValue))
                data["att_name"] = .string(att.name)
            }
            return RPCError(code: RPCErrorCode.dbusError, message: text, data: .object(data))
        case .notSupported: return RPCError(code: RPCErrorCode.notSupported, message: text, data: ["kind": "not-supported"])
        case .invalid(let param, let why): return RPCError.invalidParams(param, why)
        }
    }
}

extension CentralCapability {
    /// The error's sentence for the user: BlueZ's description, and for the errors the user
    /// fixes with a `peerlink` command, which one (BlueZ itself names no CLI command).
    static func message(_ e: CentralError) -> String {
        switch e {
        case .adapterOff(let a): "\(e.description); turn it on with 'peerlink adapter power on --adapter \(a.name)'"
        case .notConnected(let d): "\(e.description); connect first ('peerlink connect \(d)')"
        case .refreshWouldUnpair: "\(e.description); use 'peerlink forget' and pair again to rebuild the cache"
        case .characteristicNotFound(_, _, let d): "\(e.description) (see 'peerlink services \(d)')"
        default: e.description
        }
    }
}

/// A scan or subscription id the central does not have (its own bookkeeping, not BlueZ's).
struct UnknownCentralID: Error, RPCErrorConvertible {
    /// `scan` or `subscription`.
    let what: String
    /// The id the client gave.
    let id: String

    var rpcError: RPCError {
        RPCError(code: RPCErrorCode.notFound, message: "no \(what) \(id) of this connection's (a \(what) belongs to the connection that made it)",
                 data: ["kind": "not-found", "what": .string(what), "id": .string(id)])
    }
}
