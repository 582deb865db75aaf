import BLE
import BlueZ
import Control
import DBus
import Foundation
import Synchronization

/// The BLE central role: `central.scan`, `central.connect`, `central.read`, ... Scans and
/// subscriptions belong to the control client that made them (their events go to it alone,
/// and they end with its connection); connections and their events are shared.
final class CentralCapability: DaemonCapability {
    let name = "central"
    private let central = Mutex<Central?>(nil)

    func register(_ ctx: DaemonContext) {
        let c = Central(logger: ctx.logger.child("central")) { e in Self.route(e, ctx) }
        central.withLock { $0 = c }
        ctx.onClientClose { id in Task { await c.ownerGone(id) } }
        let defaultAdapter = ctx.defaultAdapter.flatMap(AdapterSelector.init)
        @Sendable func adapter(_ p: RPCParams) throws(RPCError) -> AdapterSelector? { try PeerlinkDaemon.selector(p) ?? defaultAdapter }

        ctx.register("central.scan") { p, req throws(RPCError) in
            try p.rejectUnknown(allowed: ["adapter", "services", "name", "name_pattern", "rssi", "manufacturer", "duplicates", "timeout"])
            var f = ScanFilter()
            for (i, u) in (try p.optionalStringArray("services") ?? []).enumerated() {
                f.services.append(try Self.uuid(u, param: "services[\(i)]"))
            }
            f.namePrefix = try p.optionalString("name")
            if let pattern = try p.optionalString("name_pattern") {
                if let why = ScanFilter.validatePattern(pattern) { throw .invalidParams("name_pattern", why) }
                f.namePattern = pattern
            }
            f.minimumRSSI = try p.optionalInt("rssi", in: -127...20).map { Int($0) }
            f.manufacturer = try p.optionalInt("manufacturer", in: 0...0xFFFF).map { UInt16($0) }
            f.duplicates = try p.optionalBool("duplicates") ?? false
            let timeout = try p.optionalDouble("timeout", in: 0.1...86_400).map { Duration.milliseconds(Int64($0 * 1000)) }
            let sel = try adapter(p)
            return try await Self.rpc { () async throws(CentralError) -> JSONValue in
                let (id, a) = try await c.startScan(owner: req.clientID, adapter: sel, filter: f, timeout: timeout)
                return ["scan": .string(id), "adapter": .string(a.name), "address": .string(a.address.description)]
            }
        }
        ctx.register("central.scan.stop") { p, req throws(RPCError) in
            try p.rejectUnknown(allowed: ["scan"])
            if let id = try p.optionalString("scan") {
                guard await c.stopScan(id) else { throw Self.notFound("scan", id) }
                return ["stopped": .array([.string(id)])]
            }
            var stopped: [JSONValue] = []
            for s in await c.scanList where s.owner == req.clientID {
                if await c.stopScan(s.id) { stopped.append(.string(s.id)) }
            }
            return ["stopped": .array(stopped)]
        }
        ctx.register("central.connect") { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: ["adapter", "address", "address_type", "timeout", "keep"])
            let address = try Self.address(p)
            let type = try p.optionalString("address_type")
            if let type, type != "public", type != "random" { throw .invalidParams("address_type", "expected public or random, got \"\(type)\"") }
            let timeout = try p.optionalDouble("timeout", in: 0.5...600) ?? 30
            let keep = try p.optionalBool("keep") ?? false
            let sel = try adapter(p)
            return try await Self.rpc { () async throws(CentralError) -> JSONValue in
                let (a, d) = try await c.connect(adapter: sel, address: address, addressType: type, timeout: .milliseconds(Int64(timeout * 1000)), keep: keep)
                return ["adapter": .string(a.name), "device": Self.json(d), "keep": .bool(keep)]
            }
        }
        ctx.register("central.disconnect") { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: ["adapter", "address"])
            let address = try Self.address(p)
            let sel = try adapter(p)
            return try await Self.rpc { () async throws(CentralError) -> JSONValue in
                let was = try await c.disconnect(adapter: sel, address: address)
                return ["address": .string(address.description), "was_connected": .bool(was)]
            }
        }
        ctx.register("central.devices") { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: ["adapter", "connected"])
            let onlyConnected = try p.optionalBool("connected") ?? false
            let sel = try adapter(p)
            return try await Self.rpc { () async throws(CentralError) -> JSONValue in
                let (a, list, kept) = try await c.devices(adapter: sel)
                return ["adapter": .string(a.name), "devices": .array(list.filter { !onlyConnected || $0.connected }.map { d in
                    Self.json(d, extra: ["keep": .bool(kept.contains(d.address))])
                })]
            }
        }
        ctx.register("central.services") { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: ["adapter", "address", "refresh", "timeout"])
            let address = try Self.address(p)
            let refresh = try p.optionalBool("refresh") ?? false
            let timeout = try p.optionalDouble("timeout", in: 0.5...600) ?? 30
            let sel = try adapter(p)
            return try await Self.rpc { () async throws(CentralError) -> JSONValue in
                let (d, tree) = try await c.services(adapter: sel, address: address, refresh: refresh, timeout: .milliseconds(Int64(timeout * 1000)))
                return ["device": .string(d.address.description), "services": .array(tree.map { s, chars in
                    ["uuid": .string(s.uuid.uuidString), "handle": Self.int(s.handle), "primary": .bool(s.primary), "path": .string(s.path.rawValue),
                     "characteristics": .array(chars.map { ch, descs in
                         ["uuid": .string(ch.uuid.uuidString), "handle": Self.int(ch.handle), "flags": .array(ch.flags.map { .string($0) }),
                          "path": .string(ch.path.rawValue),
                          "descriptors": .array(descs.map { ["uuid": .string($0.uuid.uuidString), "handle": Self.int($0.handle), "flags": .array($0.flags.map { .string($0) })] })]
                     })]
                })]
            }
        }
        ctx.register("central.read") { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: ["adapter", "address", "characteristic", "service", "offset"])
            let (address, uuid, service) = try Self.target(p)
            let offset = Int(try p.optionalInt("offset", in: 0...512) ?? 0)
            let sel = try adapter(p)
            return try await Self.rpc { () async throws(CentralError) -> JSONValue in
                let (ch, v) = try await c.read(adapter: sel, address: address, characteristic: uuid, service: service, offset: offset)
                return GattCapability.valueJSON(v, extra: ["device": .string(address.description), "characteristic": .string(ch.uuid.uuidString),
                                                           "length": .int(Int64(v.count)), "offset": .int(Int64(offset))])
            }
        }
        ctx.register("central.write") { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: ["adapter", "address", "characteristic", "service", "value", "value_hex", "value_base64", "command", "offset"])
            let (address, uuid, service) = try Self.target(p)
            let value = try GattCapability.value(p)
            guard value.count <= 512 else { throw .invalidParams("value", "\(value.count) bytes: a characteristic value is at most 512 bytes") }
            let command = try p.optionalBool("command") ?? false
            let offset = Int(try p.optionalInt("offset", in: 0...511) ?? 0)
            let sel = try adapter(p)
            return try await Self.rpc { () async throws(CentralError) -> JSONValue in
                let ch = try await c.write(adapter: sel, address: address, characteristic: uuid, service: service, value: value, command: command, offset: offset)
                return ["device": .string(address.description), "characteristic": .string(ch.uuid.uuidString),
                        "length": .int(Int64(value.count)), "type": .string(command ? "command" : "request")]
            }
        }
        ctx.register("central.subscribe") { p, req throws(RPCError) in
            try p.rejectUnknown(allowed: ["adapter", "address", "characteristic", "service", "indicate", "batch", "stream"])
            let (address, uuid, service) = try Self.target(p)
            let indicate = try p.optionalBool("indicate") ?? false
            let batch = try p.optionalBool("batch") ?? false
            let stream = try p.optionalBool("stream") ?? false
            if batch && stream { throw .invalidParams("stream", "give batch or stream, not both") }
            let sel = try adapter(p)
            return try await Self.rpc { () async throws(CentralError) -> JSONValue in
                let s = try await c.subscribe(owner: req.clientID, adapter: sel, address: address, characteristic: uuid, service: service,
                                              indicate: indicate, batch: batch, stream: stream)
                if let fd = s.streamFD { req.passWithReply(fd) }
                return ["subscription": .string(s.id), "device": .string(address.description), "characteristic": .string(uuid.uuidString),
                        "via": .string(s.via), "mtu": Self.int(s.mtu), "fd": .bool(s.streamFD != nil)]
            }
        }
        ctx.register("central.unsubscribe") { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: ["subscription"])
            let id = try p.string("subscription")
            guard await c.unsubscribe(id) else { throw Self.notFound("subscription", id) }
            return ["subscription": .string(id), "ended": true]
        }
        ctx.register("central.status") { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: [])
            let scans = await c.scanList
            let subs = await c.subscriptionList
            return ["scans": .array(scans.map { ["scan": .string($0.id), "client": .int(Int64($0.owner)), "address": .string($0.adapter.description),
                                                 "reported": .int(Int64($0.reported))] }),
                    "subscriptions": .array(subs.map { ["subscription": .string($0.id), "client": .int(Int64($0.owner)),
                                                        "device": .string($0.key.device.description), "characteristic": .string($0.characteristic.uuidString),
                                                        "via": .string($0.via), "mtu": Self.int($0.mtu)] })]
        }
        ctx.register("central.pair") { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: ["adapter", "address", "timeout"])
            let address = try Self.address(p)
            let timeout = try p.optionalDouble("timeout", in: 1...600) ?? 60
            let sel = try adapter(p)
            return try await Self.rpc { () async throws(CentralError) -> JSONValue in
                let (d, already) = try await c.pair(adapter: sel, address: address, timeout: .milliseconds(Int64(timeout * 1000)))
                return ["device": Self.json(d), "already_paired": .bool(already)]
            }
        }
        ctx.register("central.trust") { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: ["adapter", "address", "trusted"])
            let address = try Self.address(p)
            let trusted = try p.optionalBool("trusted") ?? true
            let sel = try adapter(p)
            return try await Self.rpc { () async throws(CentralError) -> JSONValue in
                let d = try await c.trust(adapter: sel, address: address, trusted: trusted)
                return ["device": Self.json(d)]
            }
        }
        ctx.register("central.forget") { p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: ["adapter", "address"])
            let address = try Self.address(p)
            let sel = try adapter(p)
            return try await Self.rpc { () async throws(CentralError) -> JSONValue in
                try await c.forget(adapter: sel, address: address)
                return ["address": .string(address.description), "removed": true]
            }
        }
    }

    func attach(_ session: BusSession) async { await central.withLock { $0 }?.attach(connection: session.connection, bluez: session.bluez) }
    func detach() async { await central.withLock { $0 }?.detach() }
    func shutdown() async { await central.withLock { $0 }?.shutdown() }

    // MARK: Events

    static func route(_ e: CentralEvent, _ ctx: DaemonContext) {
        switch e {
        case .discovered(let scan, let owner, let a, let d):
            ctx.send(topic: "central.discovered", data: json(d, extra: ["scan": .string(scan), "adapter": .string(a.name)]), to: owner)
        case .scanEnded(let scan, let owner, let reason):
            ctx.send(topic: "central.scan.ended", data: ["scan": .string(scan), "reason": .string(reason)], to: owner)
        case .scanResumed(let scan, let owner, let a):
            ctx.send(topic: "central.scan.resumed", data: ["scan": .string(scan), "adapter": .string(a.name)], to: owner)
        case .connected(let a, let d):
            ctx.publish(topic: "central.connected", data: ["device": .string(d.address.description), "adapter": .string(a.name),
                                                           "name": d.name.map { .string($0) } ?? .null])
        case .disconnected(let a, let d, let reason, let again):
            ctx.publish(topic: "central.disconnected", data: ["device": .string(d.description), "adapter_address": .string(a.description),
                                                              "reason": .string(reason), "will_reconnect": .bool(again)])
        case .reconnecting(let a, let d, let attempt, let delay, let last):
            ctx.publish(topic: "central.reconnecting", data: ["device": .string(d.description), "adapter_address": .string(a.description),
                                                              "attempt": .int(Int64(attempt)), "delay": .double(delay),
                                                              "last_error": last.map { .string($0) } ?? .null])
        case .notifications(let sub, let owner, let d, let ch, let values, let first, let batch):
            let common: [String: JSONValue] = ["subscription": .string(sub), "device": .string(d.description), "characteristic": .string(ch.uuidString)]
            if batch {
                // One event for the values that arrived together: base64, compact to send and decode.
                var o = common
                o["seq"] = .int(Int64(first))
                o["count"] = .int(Int64(values.count))
                o["values_base64"] = .array(values.map { .string(Data($0).base64EncodedString()) })
                ctx.send(topic: "central.notifications", data: .object(o), to: owner)
            } else {
                for (i, v) in values.enumerated() {
                    var o = common
                    o["seq"] = .int(Int64(first) + Int64(i))
                    ctx.send(topic: "central.notification", data: GattCapability.valueJSON(v, extra: o), to: owner)
                }
            }
        case .subscriptionEnded(let sub, let owner, let d, let ch, let reason, let count, let dropped):
            ctx.send(topic: "central.subscription.ended", data: ["subscription": .string(sub), "device": .string(d.description),
                                                                 "characteristic": .string(ch.uuidString), "reason": .string(reason),
                                                                 "count": .int(Int64(count)), "dropped": .int(Int64(dropped))], to: owner)
        }
    }

    // MARK: JSON

    static func int(_ v: Int?) -> JSONValue { v.map { .int(Int64($0)) } ?? .null }

    /// A device, decoded and raw.
    static func json(_ d: RemoteDevice, extra: [String: JSONValue] = [:]) -> JSONValue {
        let base: [String: JSONValue] = [
            "address": .string(d.address.description), "address_type": .string(d.addressType),
            "name": d.name.map { .string($0) } ?? .null, "alias": .string(d.alias),
            "rssi": int(d.rssi), "tx_power": int(d.txPower), "appearance": int(d.appearance),
            "uuids": .array(d.uuids.map { .string($0.uuidString) }),
            "manufacturer_data": .array(d.manufacturerData.keys.sorted().map { id in
                GattCapability.valueJSON(d.manufacturerData[id]!, extra: ["id": .int(Int64(id))])
            }),
            "service_data": .array(d.serviceData.keys.sorted().map { u in
                GattCapability.valueJSON(d.serviceData[u]!, extra: ["uuid": .string(u.uuidString)])
            }),
            "advertising_data": .array(d.advertisingData.keys.sorted().map { t in
                ["type": .int(Int64(t)), "data_hex": .string(GattCapability.hex(d.advertisingData[t]!))]
            }),
            "connected": .bool(d.connected), "services_resolved": .bool(d.servicesResolved),
            "paired": .bool(d.paired), "bonded": .bool(d.bonded), "trusted": .bool(d.trusted),
        ]
        return .object(base.merging(extra) { _, new in new })
    }

    static func uuid(_ text: String, param: String) throws(RPCError) -> BluetoothUUID {
        do { return try BluetoothUUID(parsing: text) } catch { throw .invalidParams(param, error.description) }
    }

    // MARK: Params and errors

    static func address(_ p: RPCParams) throws(RPCError) -> BluetoothAddress {
        let text = try p.string("address")
        guard let a = BluetoothAddress(text) else { throw .invalidParams("address", "expected a device address like 00:AA:01:01:00:01, got \"\(text)\"") }
        return a
    }

    /// address, characteristic and the optional service.
    static func target(_ p: RPCParams) throws(RPCError) -> (BluetoothAddress, BluetoothUUID, BluetoothUUID?) {
        let a = try address(p)
        let u = try uuid(try p.string("characteristic"), param: "characteristic")
        let s = try p.optionalString("service").map { t throws(RPCError) in try uuid(t, param: "service") }
        return (a, u, s)
    }

    static func notFound(_ what: String, _ id: String) -> RPCError {
        RPCError(code: RPCErrorCode.notFound, message: "no \(what) \(id)", data: ["kind": "not-found", "what": .string(what), "id": .string(id)])
    }

    static func rpc(_ body: () async throws(CentralError) -> JSONValue) async throws(RPCError) -> JSONValue {
        do {
            return try await body()
        } catch {
            throw rpcError(error)
        }
    }

    static func rpcError(_ e: CentralError) -> RPCError {
        let text = message(e)
        switch e {
        case .bluez(let b): return PeerlinkDaemon.rpc(b)
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

    /// The error's sentence for the user: BlueZ's description, and for the errors the user
    /// fixes with a `peerlink` command, which one.
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
