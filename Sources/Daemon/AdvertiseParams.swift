import BLE
import BlueZ
import Control
import FoundationEssentials

/// Parameter checks and JSON shapes for the `advertise.*` methods.
extension AdvertiseCapability {
    /// Builds an advertisement from the parameters, naming the first bad one.
    static func definition(_ p: RPCParams) throws(RPCError) -> AdvertisementDefinition {
        try p.rejectUnknown(allowed: ["name", "services", "manufacturer", "service_data", "appearance", "tx_power",
                                      "discoverable", "connectable", "interval_ms", "duration", "timeout", "adapter"])
        var d = AdvertisementDefinition()
        d.localName = try p.optionalString("name")
        if let n = d.localName, n.isEmpty { throw .invalidParams("name", "an empty name; leave it out instead") }
        d.serviceUUIDs = try BLEParams.uuids(p, "services")
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
                let uuid = try BLEParams.uuid(item["uuid"]?.stringValue ?? "", param: "service_data[\(i)].uuid")
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

    /// An advertisement as `advertise.start` and `advertise.list` show it.
    static func json(_ e: Advertiser.Entry) -> JSONValue {
        let d = e.definition
        return [
            "id": .string(e.id), "path": .string(e.path.rawValue), "active": .bool(e.registeredOn != nil),
            "address": BLEJSON.address(e.registeredOn),
            "name": d.localName.map { .string($0) } ?? .null,
            "services": BLEJSON.uuids(d.serviceUUIDs),
            "advertising_bytes": .int(Int64(d.advertisingDataSize.total)), "scan_response_bytes": .int(Int64(d.scanResponseSize)),
            "timeout": d.timeout.map { .int(Int64($0)) } ?? .null,
        ]
    }
}
