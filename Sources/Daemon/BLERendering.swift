import BLE
import BlueZ
import Control
import FoundationEssentials

/// The JSON shapes of BLE things, shared by every method and event that shows them (the
/// adapter methods, the central, the GATT server): adapters, devices, attribute values and
/// GATT trees. One place, so a device looks the same in `central.devices` and in
/// `central.discovered`, and a value the same in `gatt.write` and `central.read`.
enum BLEJSON {
    /// An optional integer, null when absent.
    static func int(_ v: Int?) -> JSONValue { v.map { .int(Int64($0)) } ?? .null }

    /// An optional address, null when absent (BlueZ does not always name the central).
    static func address(_ a: BluetoothAddress?) -> JSONValue { a.map { .string($0.description) } ?? .null }

    /// UUIDs as strings.
    static func uuids(_ u: [BluetoothUUID]) -> JSONValue { .array(u.map { .string($0.uuidString) }) }

    /// Lower-case hex of `b`.
    static func hex(_ b: [UInt8]) -> String { hexString(b) }

    /// A value as hex, plus UTF-8 text when it is printable text, merged into `extra`.
    static func value(_ v: [UInt8], extra: [String: JSONValue] = [:]) -> JSONValue {
        var o = extra
        o["value_hex"] = .string(hex(v))
        if let s = String(validating: v, as: UTF8.self), !s.unicodeScalars.contains(where: { $0.value < 0x20 && $0 != "\n" && $0 != "\t" }) {
            o["value"] = .string(s)
        }
        return .object(o)
    }

    /// The adapter as the control protocol shows it (`isDefault`: it is the daemon's default adapter).
    static func adapter(_ a: AdapterInfo, isDefault: Bool) -> JSONValue {
        [
            "name": .string(a.name), "address": .string(a.address.description), "address_type": .string(a.addressType),
            "alias": .string(a.alias), "powered": .bool(a.powered), "power_state": .string(a.powerState),
            "discoverable": .bool(a.discoverable), "discovering": .bool(a.discovering),
            "roles": .array(a.roles.map { .string($0) }), "path": .string(a.path.rawValue), "default": .bool(isDefault),
        ]
    }

    /// A remote device, decoded and raw, merged with `extra`.
    static func device(_ d: RemoteDevice, extra: [String: JSONValue] = [:]) -> JSONValue {
        let base: [String: JSONValue] = [
            "address": .string(d.address.description), "address_type": .string(d.addressType),
            "name": d.name.map { .string($0) } ?? .null, "alias": .string(d.alias),
            "rssi": int(d.rssi), "tx_power": int(d.txPower), "appearance": int(d.appearance),
            "uuids": uuids(d.uuids),
            "manufacturer_data": .array(d.manufacturerData.keys.sorted().map { id in
                value(d.manufacturerData[id]!, extra: ["id": .int(Int64(id))])
            }),
            "service_data": .array(d.serviceData.keys.sorted().map { u in
                value(d.serviceData[u]!, extra: ["uuid": .string(u.uuidString)])
            }),
            "advertising_data": .array(d.advertisingData.keys.sorted().map { t in
                ["type": .int(Int64(t)), "data_hex": .string(hex(d.advertisingData[t]!))]
            }),
            "connected": .bool(d.connected), "services_resolved": .bool(d.servicesResolved),
            "paired": .bool(d.paired), "bonded": .bool(d.bonded), "trusted": .bool(d.trusted),
        ]
        return .object(base.merging(extra) { _, new in new })
    }

    /// A remote device's GATT tree: services, their characteristics, their descriptors.
    static func remoteServices(_ tree: [(RemoteAttribute, [(RemoteAttribute, [RemoteAttribute])])]) -> JSONValue {
        .array(tree.map { s, chars in
            ["uuid": .string(s.uuid.uuidString), "handle": int(s.handle), "primary": .bool(s.primary), "path": .string(s.path.rawValue),
             "characteristics": .array(chars.map { ch, descs in
                 ["uuid": .string(ch.uuid.uuidString), "handle": int(ch.handle), "flags": .array(ch.flags.map { .string($0) }),
                  "path": .string(ch.path.rawValue),
                  "descriptors": .array(descs.map { ["uuid": .string($0.uuid.uuidString), "handle": int($0.handle), "flags": .array($0.flags.map { .string($0) })] })]
             })]
        })
    }

    /// A local GATT application with its services, characteristics and their values.
    static func application(_ app: LocalGattApplication, registeredOn: BluetoothAddress?) -> JSONValue {
        [
            "id": .string(app.id), "name": .string(app.definition.name), "root": .string(app.root.rawValue),
            "registered": .bool(registeredOn != nil), "address": address(registeredOn),
            "services": .array(app.definition.services.map { s in
                ["uuid": .string(s.uuid.uuidString), "primary": .bool(s.primary),
                 "characteristics": .array(app.characteristics.filter { s.characteristics.contains($0.definition) }
                     .map { c in value(c.value, extra: [
                         "uuid": .string(c.uuid.uuidString), "flags": .array(c.definition.flags.map { .string($0.rawValue) }),
                         "subscribers": .int(Int64(c.subscriberCount)), "read_handler": .bool(c.hasReadHandler),
                     ]) })]
            }),
        ]
    }
}
