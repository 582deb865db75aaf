import BLE
import BlueZ
import Control
import Foundation
import Synchronization

/// LE advertising: `advertise.start`, `advertise.stop`, `advertise.list`.
final class AdvertiseCapability: DaemonCapability {
    let name = "advertise"
    private let advertiser = Mutex<Advertiser?>(nil)

    func register(_ ctx: DaemonContext) {
        let adv = Advertiser(logger: ctx.logger.child("advertise")) { e in
            switch e {
            case .started(let id, let a, let again):
                ctx.publish(topic: again ? "advertise.restarted" : "advertise.started",
                            data: ["id": .string(id), "adapter": .string(a.name), "address": .string(a.address.description)])
            case .stopped(let id, let reason):
                ctx.publish(topic: "advertise.stopped", data: ["id": .string(id), "reason": .string(reason)])
            }
        }
        advertiser.withLock { $0 = adv }

        ctx.register("advertise.start") { params, _ throws(RPCError) in
            try params.rejectUnknown(allowed: ["name", "services", "manufacturer", "service_data", "appearance", "tx_power",
                                               "discoverable", "connectable", "interval_ms", "duration", "timeout", "adapter"])
            let def = try Self.definition(params)
            let selector = try PeerlinkDaemon.selector(params) ?? ctx.defaultAdapter.flatMap(AdapterSelector.init)
            do {
                let e = try await adv.add(def, adapter: selector)
                return Self.json(e)
            } catch let e as AdvertiseError {
                throw Self.rpc(e)
            } catch {
                throw .internalError("\(error)")
            }
        }
        ctx.register("advertise.stop") { params, _ throws(RPCError) in
            try params.rejectUnknown(allowed: ["id"])
            let ids: [String]
            if let id = try params.optionalString("id") { ids = [id] } else { ids = await adv.list.map(\.id) }
            for id in ids {
                do { try await adv.remove(id) } catch let e as AdvertiseError { throw Self.rpc(e) } catch { throw .internalError("\(error)") }
            }
            return ["stopped": .array(ids.map { .string($0) })]
        }
        ctx.register("advertise.list") { params, _ throws(RPCError) in
            try params.rejectUnknown(allowed: [])
            return ["advertisements": .array(await adv.list.map { Self.json($0) })]
        }
    }

    func attach(_ session: BusSession) async { await advertiser.withLock { $0 }?.attach(connection: session.connection, bluez: session.bluez) }
    func detach() async { await advertiser.withLock { $0 }?.detach() }
    func shutdown() async { await advertiser.withLock { $0 }?.removeAll() }

    /// Builds an advertisement from the parameters, naming the first bad one.
    static func definition(_ p: RPCParams) throws(RPCError) -> AdvertisementDefinition {
        var d = AdvertisementDefinition()
        d.localName = try p.optionalString("name")
        if let n = d.localName, n.isEmpty { throw .invalidParams("name", "an empty name; leave it out instead") }
        for (i, u) in (try p.optionalStringArray("services") ?? []).enumerated() {
            do { d.serviceUUIDs.append(try BluetoothUUID(parsing: u)) } catch { throw .invalidParams("services[\(i)]", error.description) }
        }
        if let m = p.values["manufacturer"], !m.isNull {
            guard let items = m.arrayValue else { throw .invalidParams("manufacturer", "expected an array of {\"id\": company id, \"data_hex\": hex}") }
            for (i, item) in items.enumerated() {
                guard let id = item["id"]?.intValue, (0...0xFFFF).contains(id) else { throw .invalidParams("manufacturer[\(i)].id", "expected a company id from 0 to 65535") }
                guard let hex = item["data_hex"]?.stringValue, let bytes = parseHex(hex) else { throw .invalidParams("manufacturer[\(i)].data_hex", "expected hex bytes") }
                d.manufacturerData[UInt16(id)] = bytes
            }
        }
        if let s = p.values["service_data"], !s.isNull {
            guard let items = s.arrayValue else { throw .invalidParams("service_data", "expected an array of {\"uuid\": UUID, \"data_hex\": hex}") }
            for (i, item) in items.enumerated() {
                let uuid: BluetoothUUID
                do { uuid = try BluetoothUUID(parsing: item["uuid"]?.stringValue ?? "") } catch { throw .invalidParams("service_data[\(i)].uuid", error.description) }
                guard let hex = item["data_hex"]?.stringValue, let bytes = parseHex(hex) else { throw .invalidParams("service_data[\(i)].data_hex", "expected hex bytes") }
                d.serviceData[uuid] = bytes
            }
        }
        d.appearance = try p.optionalInt("appearance", in: 0...0xFFFF).map { UInt16($0) }
        d.includeTxPower = try p.optionalBool("tx_power") ?? false
        d.discoverable = try p.optionalBool("discoverable") ?? true
        d.connectable = try p.optionalBool("connectable") ?? true
        if let iv = p.values["interval_ms"], !iv.isNull {
            guard let lo = iv["min"]?.intValue, let hi = iv["max"]?.intValue, lo >= 20, hi <= 10_240, lo <= hi else {
                throw .invalidParams("interval_ms", "expected {\"min\": ms, \"max\": ms} with 20 <= min <= max <= 10240")
            }
            d.interval = UInt32(lo)...UInt32(hi)
        }
        d.duration = try p.optionalInt("duration", in: 1...65535).map { UInt16($0) }
        d.timeout = try p.optionalInt("timeout", in: 1...65535).map { UInt16($0) }
        return d
    }

    static func json(_ e: Advertiser.Entry) -> JSONValue {
        let d = e.definition
        return [
            "id": .string(e.id), "path": .string(e.path.rawValue), "active": .bool(e.registeredOn != nil),
            "address": e.registeredOn.map { .string($0.description) } ?? .null,
            "name": d.localName.map { .string($0) } ?? .null,
            "services": .array(d.serviceUUIDs.map { .string($0.uuidString) }),
            "advertising_bytes": .int(Int64(d.advertisingDataSize.total)), "scan_response_bytes": .int(Int64(d.scanResponseSize)),
            "timeout": d.timeout.map { .int(Int64($0)) } ?? .null,
        ]
    }

    static func rpc(_ e: AdvertiseError) -> RPCError {
        switch e {
        case .bluez(let b): PeerlinkDaemon.rpc(b)
        case .tooLarge: RPCError(code: RPCErrorCode.invalidParams, message: e.description, data: ["kind": "too-large"])
        // What to do about it is the daemon's to say: BlueZ knows no peerlink commands.
        case .noInstances: RPCError(code: RPCErrorCode.busy, message: e.description + "; stop one first (peerlink advertise list / stop)",
                                    data: ["kind": "no-instances"])
        case .refused: RPCError(code: RPCErrorCode.dbusError, message: e.description, data: ["kind": "refused"])
        case .unknown: RPCError(code: RPCErrorCode.invalidParams, message: "invalid params: id: \(e.description)", data: ["kind": "unknown-advertisement"])
        }
    }
}
