import BLE
import BlueZ
import Control
import DBus

/// Bluetooth input: GATT definition files (from users, through `gatt.register`) and what
/// nearby devices advertise, as bluetoothd relays it in Device1's properties.
enum BLETargets {
    // MARK: GATT definitions

    /// The input as a definition file. Property: a definition that parses, written back as
    /// a document in the same format (`document(_:)`), parses to the same definition; and
    /// what the parser accepts keeps its own rules (values within `max_length` and 512
    /// bytes, unique services, includes naming services of the application).
    static func gattDefinition(_ input: [UInt8]) throws(PropertyViolation) {
        guard let json = try? JSONValue.parse(input) else { return }
        let definition: GattApplicationDefinition
        do { definition = try GattApplicationDefinition.parse(json, source: "fuzz.json") } catch { return }

        let services = Set(definition.services.map(\.uuid))
        try check(services.count == definition.services.count, "duplicate service UUIDs were accepted")
        for s in definition.services {
            try check(s.includes.allSatisfy { services.contains($0) && $0 != s.uuid }, "service \(s.uuid) includes an unknown service or itself")
            for c in s.characteristics {
                try check(!c.flags.isEmpty && c.value.count <= c.maxLength && c.maxLength <= gattMaximumValueLength,
                          "characteristic \(c.uuid): \(c.value.count) bytes, max_length \(c.maxLength), flags \(c.flags)")
                for d in c.descriptors {
                    try check(d.value.count <= gattMaximumValueLength && !d.flags.isEmpty, "descriptor \(d.uuid) breaks the rules")
                }
            }
        }

        let written = document(definition).encoded()
        let again: GattApplicationDefinition
        do { again = try GattApplicationDefinition.parse(JSONValue.parse(written), source: "fuzz.json") } catch {
            throw PropertyViolation("a parsed definition written back does not parse: \(error); document \(show(written))")
        }
        try check(again == definition, "a parsed definition written back parses differently: \(show(written))")
    }

    /// The definition in the file format: hex values, every field spelt out. A
    /// "description" became a 0x2901 descriptor when parsed and is written as that descriptor.
    static func document(_ d: GattApplicationDefinition) -> JSONValue {
        func flags(_ f: [GattFlag]) -> JSONValue { .array(f.map { .string($0.rawValue) }) }
        return [
            "name": .string(d.name),
            "services": .array(d.services.map { s in
                [
                    "uuid": .string(s.uuid.uuidString),
                    "primary": .bool(s.primary),
                    "includes": .array(s.includes.map { .string($0.uuidString) }),
                    "characteristics": .array(s.characteristics.map { c in
                        [
                            "uuid": .string(c.uuid.uuidString), "flags": flags(c.flags), "value_hex": .string(hexString(c.value)),
                            "max_length": .int(Int64(c.maxLength)),
                            "descriptors": .array(c.descriptors.map { dd in
                                ["uuid": .string(dd.uuid.uuidString), "flags": flags(dd.flags), "value_hex": .string(hexString(dd.value))]
                            }),
                        ]
                    }),
                ]
            }),
        ]
    }

    // MARK: Advertisements

    /// Device1 property names, so a byte picks one that the decoder reads.
    private static let propertyNames = [
        "Address", "AddressType", "Name", "Alias", "RSSI", "TxPower", "UUIDs", "Appearance", "ManufacturerData",
        "ServiceData", "AdvertisingData", "Connected", "ServicesResolved", "Paired", "Bonded", "Trusted", "Blocked", "Adapter",
    ]

    /// Input: a program building a Device1 property dictionary (`a{sv}`) of any shape: each
    /// entry a name byte, a type byte and operands, values of the right and of wrong types.
    /// Properties: the device decodes when and only when "Address" is a valid address;
    /// applying the same properties again changes nothing; every UUID, address and hex
    /// string that parses prints to text that parses to the same value; the size the
    /// advertised data would take as our own advertisement is the sum of its parts.
    static func advertisement(_ input: [UInt8]) throws(PropertyViolation) {
        var r = ByteReader(input)
        var properties: [String: DBusValue] = [:]
        while !r.isAtEnd && properties.count < 32 {
            let nameByte = r.byte()
            let name = nameByte < 0xF0 ? propertyNames[Int(nameByte) % propertyNames.count] : String(decoding: r.shortBlob(), as: UTF8.self)
            properties[name] = .variant(value(&r, depth: 0))
        }
        let path: ObjectPath = "/org/bluez/hci0/dev_00_11_22_33_44_55"
        let device = RemoteDevice(path: path, properties: properties.mapValues(\.unwrapped))
        let address = properties["Address"]?.unwrapped.string.flatMap { BluetoothAddress($0) }
        try check((device == nil) == (address == nil), "a device decoded with Address \(String(describing: properties["Address"]))")
        if var device {
            let changed = device.apply(properties.mapValues(\.unwrapped))
            try check(changed.isEmpty, "applying the same properties again changed \(changed)")
            device.invalidate(Array(properties.keys))

            var ad = AdvertisementDefinition()
            ad.localName = device.name
            ad.serviceUUIDs = device.uuids
            ad.manufacturerData = device.manufacturerData
            ad.serviceData = device.serviceData
            ad.appearance = device.appearance.map { UInt16(truncatingIfNeeded: $0) }
            let size = ad.advertisingDataSize
            try check(size.total == size.parts.reduce(0) { $0 + $1.1 }, "advertising size \(size.total) is not the sum of \(size.parts)")
            _ = ad.sizeProblem(maxAdvertisingData: 31, maxScanResponse: 31)
        }
        for case .string(let text) in properties.values.map(\.unwrapped) {
            try checkTextForms(text)
        }
    }

    /// One value: its type from a byte (the types Device1 uses, and wrong ones).
    private static func value(_ r: inout ByteReader, depth: Int) -> DBusValue {
        let type = r.byte()
        switch type % 12 {
        case 0: return .string(String(decoding: r.shortBlob(), as: UTF8.self))
        case 1: return .bytes(r.shortBlob())
        case 2: return .int16(Int16(bitPattern: r.uint16()))
        case 3: return .uint16(r.uint16())
        case 4: return .boolean(r.byte() & 1 == 1)
        case 5: return .array(element: "s", (0..<Int(r.byte() % 8)).map { _ in .string(String(decoding: r.shortBlob(), as: UTF8.self)) })
        case 6: return .dictionary(key: "q", value: "v", (0..<Int(r.byte() % 8)).map { _ in .init(.uint16(r.uint16()), .variant(.bytes(r.shortBlob()))) })
        case 7: return .dictionary(key: "s", value: "v", (0..<Int(r.byte() % 8)).map { _ in
            .init(.string(String(decoding: r.shortBlob(), as: UTF8.self)), .variant(.bytes(r.shortBlob())))
        })
        case 8: return .dictionary(key: "y", value: "v", (0..<Int(r.byte() % 8)).map { _ in .init(.byte(r.byte()), .variant(.bytes(r.shortBlob()))) })
        case 9:
            // Only valid paths: libdbus rejects the others before they reach a decoder.
            let path = try? ObjectPath(validating: "/org/bluez/" + String(decoding: r.shortBlob(), as: UTF8.self))
            return .objectPath(path ?? "/org/bluez/hci0")
        case 10: return .int32(Int32(bitPattern: r.uint32()))
        default: return depth < 3 ? .variant(value(&r, depth: depth + 1)) : .uint64(r.uint64())
        }
    }

    /// The BLE text forms found in the input (a string property) round-trip through their
    /// printed forms; the parsers must not trap on anything.
    private static func checkTextForms(_ text: String) throws(PropertyViolation) {
        if let uuid = try? BluetoothUUID(parsing: text) {
            try check((try? BluetoothUUID(parsing: uuid.uuidString)) == uuid, "UUID \(uuid.uuidString) does not parse back")
            try check((try? BluetoothUUID(parsing: text.uppercased())) == uuid, "UUID \(text) parses differently in capitals")
            if let short = uuid.uuid16 { try check(BluetoothUUID(uuid16: short) == uuid, "uuid16 of \(uuid) is not its short form") }
        }
        if let address = BluetoothAddress(text) {
            try check(BluetoothAddress(address.description) == address, "address \(address) does not parse back")
            try check(BluetoothAddress(bluezPathElement: address.bluezPathElement) == address, "address \(address) path element")
        }
        if let selector = AdapterSelector(text) {
            try check(AdapterSelector(selector.description) == selector, "adapter selector \(selector) does not parse back")
        }
        if let bytes = parseHex(text) {
            try check(parseHex(hexString(bytes)) == bytes, "hex \(hexString(bytes)) does not parse back")
        }
    }
}
