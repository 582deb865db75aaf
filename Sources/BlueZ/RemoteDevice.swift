import BLE
import DBus

extension BlueZNames {
    /// `org.bluez.GattService1`
    public static let gattService = "org.bluez.GattService1"
    /// `org.bluez.GattCharacteristic1`
    public static let gattCharacteristic = "org.bluez.GattCharacteristic1"
    /// `org.bluez.GattDescriptor1`
    public static let gattDescriptor = "org.bluez.GattDescriptor1"
}

/// A remote device as BlueZ describes it (`org.bluez.Device1`), decoded.
public struct RemoteDevice: Sendable, Hashable {
    /// Object path, e.g. `/org/bluez/hci0/dev_00_AA_01_01_00_01`.
    public var path: ObjectPath
    /// The adapter's object path.
    public var adapterPath: ObjectPath
    /// The device's address.
    public var address: BluetoothAddress
    /// `public` or `random`.
    public var addressType: String
    /// The advertised or GAP name (nil when none was seen).
    public var name: String?
    /// The alias (the name, or the address with dashes when there is none).
    public var alias: String
    /// Signal strength of the last advertisement (127: the controller did not measure it); nil
    /// when the device is not being seen now (BlueZ drops it when discovery stops).
    public var rssi: Int?
    /// Advertised TX power.
    public var txPower: Int?
    /// Service UUIDs (advertised, or resolved once connected).
    public var uuids: [BluetoothUUID]
    /// Manufacturer data by company id.
    public var manufacturerData: [UInt16: [UInt8]]
    /// Service data by service UUID.
    public var serviceData: [BluetoothUUID: [UInt8]]
    /// Raw advertising data by AD type (`AdvertisingData`, experimental in BlueZ).
    public var advertisingData: [UInt8: [UInt8]]
    /// GAP appearance.
    public var appearance: Int?
    /// Link state.
    public var connected: Bool
    /// Whether the GATT services were discovered.
    public var servicesResolved: Bool
    /// Pairing state.
    public var paired: Bool
    /// Whether it is bonded (keys stored).
    public var bonded: Bool
    /// Whether it is trusted.
    public var trusted: Bool
    /// Whether it is blocked.
    public var blocked: Bool

    /// Reads a device from its path and Device1 properties; nil without a valid address.
    public init?(path: ObjectPath, properties p: [String: DBusValue]) {
        guard let a = p["Address"]?.string, let address = BluetoothAddress(a) else { return nil }
        self.path = path
        self.address = address
        adapterPath = p["Adapter"]?.objectPath ?? path.parent ?? BlueZNames.root
        addressType = "public"
        alias = ""
        uuids = []
        manufacturerData = [:]
        serviceData = [:]
        advertisingData = [:]
        connected = false
        servicesResolved = false
        paired = false
        bonded = false
        trusted = false
        blocked = false
        _ = apply(p)
    }

    /// Applies changed (or all) properties; returns the names of the fields that changed.
    @discardableResult
    public mutating func apply(_ p: [String: DBusValue]) -> [String] {
        var keys: [String] = []
        func set<T: Equatable>(_ field: WritableKeyPath<RemoteDevice, T>, _ value: T?, _ key: String) {
            guard let value, self[keyPath: field] != value else { return }
            self[keyPath: field] = value
            keys.append(key)
        }
        set(\.addressType, p["AddressType"]?.string, "address_type")
        if let n = p["Name"]?.string { set(\.name, Optional(n), "name") }
        set(\.alias, p["Alias"]?.string, "alias")
        // 127 is HCI's "RSSI not available" (the emulated controllers report it): still a sighting.
        if let r = p["RSSI"]?.integer { set(\.rssi, Optional(Int(r)), "rssi") }
        if let t = p["TxPower"]?.integer { set(\.txPower, Optional(Int(t)), "tx_power") }
        if let u = p["UUIDs"]?.stringArray { set(\.uuids, u.compactMap { try? BluetoothUUID(parsing: $0) }, "uuids") }
        if let a = p["Appearance"]?.integer { set(\.appearance, Optional(Int(a)), "appearance") }
        if let m = p["ManufacturerData"]?.dictionaryEntries {
            var d: [UInt16: [UInt8]] = [:]
            // (A key that is not a company identifier is skipped: cut to 16 bits it would pass
            // for another company's, and match its --manufacturer filter.)
            for e in m { if let k = e.key.integer.flatMap(UInt16.init(exactly:)), let v = e.value.unwrapped.byteArray { d[k] = v } }
            set(\.manufacturerData, d, "manufacturer_data")
        }
        if let s = p["ServiceData"]?.dictionaryEntries {
            var d: [BluetoothUUID: [UInt8]] = [:]
            for e in s {
                if let k = e.key.string, let u = try? BluetoothUUID(parsing: k), let v = e.value.unwrapped.byteArray { d[u] = v }
            }
            set(\.serviceData, d, "service_data")
        }
        if let s = p["AdvertisingData"]?.dictionaryEntries {
            var d: [UInt8: [UInt8]] = [:]
            for e in s { if let k = e.key.integer.flatMap(UInt8.init(exactly:)), let v = e.value.unwrapped.byteArray { d[k] = v } }
            set(\.advertisingData, d, "advertising_data")
        }
        set(\.connected, p["Connected"]?.bool, "connected")
        set(\.servicesResolved, p["ServicesResolved"]?.bool, "services_resolved")
        set(\.paired, p["Paired"]?.bool, "paired")
        set(\.bonded, p["Bonded"]?.bool, "bonded")
        set(\.trusted, p["Trusted"]?.bool, "trusted")
        set(\.blocked, p["Blocked"]?.bool, "blocked")
        return keys
    }

    /// Properties BlueZ invalidated (sent without a value): RSSI and TxPower go when the
    /// device is no longer seen.
    public mutating func invalidate(_ names: [String]) {
        for n in names {
            switch n {
            case "RSSI": rssi = nil
            case "TxPower": txPower = nil
            case "Name": name = nil
            default: break
            }
        }
    }
}

/// A remote GATT service, characteristic or descriptor, from BlueZ's objects.
public struct RemoteAttribute: Sendable, Hashable {
    /// What kind of attribute it is.
    public enum Kind: String, Sendable { case service, characteristic, descriptor }
    /// The kind.
    public var kind: Kind
    /// Object path.
    public var path: ObjectPath
    /// The parent: the device (service), the service (characteristic) or the characteristic (descriptor).
    public var parent: ObjectPath
    /// The UUID.
    public var uuid: BluetoothUUID
    /// The attribute handle (from `Handle`, else from the path's hex suffix).
    public var handle: Int?
    /// Characteristic and descriptor flags.
    public var flags: [String]
    /// Primary (services).
    public var primary: Bool
    /// Included services (services).
    public var includes: [ObjectPath]
    /// Whether notifications are on (characteristics).
    public var notifying: Bool
    /// Whether an AcquireNotify socket is open (characteristics).
    public var notifyAcquired: Bool
    /// The ATT MTU BlueZ reports for the link (characteristics, BlueZ 5.62+).
    public var mtu: Int?
    /// The cached value (characteristics and descriptors).
    public var value: [UInt8]?

    /// Reads an attribute from the interfaces of one object; nil when it has none of the
    /// three GATT interfaces or no valid UUID.
    public init?(path: ObjectPath, interfaces: [String: [String: DBusValue]]) {
        let kind: Kind
        let p: [String: DBusValue]
        let parentKey: String
        if let s = interfaces[BlueZNames.gattService] { kind = .service; p = s; parentKey = "Device" }
        else if let c = interfaces[BlueZNames.gattCharacteristic] { kind = .characteristic; p = c; parentKey = "Service" }
        else if let d = interfaces[BlueZNames.gattDescriptor] { kind = .descriptor; p = d; parentKey = "Characteristic" }
        else { return nil }
        guard let u = p["UUID"]?.string, let uuid = try? BluetoothUUID(parsing: u) else { return nil }
        self.kind = kind
        self.path = path
        self.uuid = uuid
        parent = p[parentKey]?.objectPath ?? path.parent ?? BlueZNames.root
        if let h = p["Handle"]?.integer, h > 0 {
            handle = Int(h)
        } else {
            // service0010 / char0011 / desc0013: the handle in hex.
            handle = Int(String(path.lastElement.suffix(4)), radix: 16)
        }
        flags = p["Flags"]?.stringArray ?? []
        primary = p["Primary"]?.bool ?? true
        includes = p["Includes"]?.arrayElements?.compactMap(\.objectPath) ?? []
        notifying = p["Notifying"]?.bool ?? false
        notifyAcquired = p["NotifyAcquired"]?.bool ?? false
        mtu = checkedMTU(p["MTU"])
        value = p["Value"]?.byteArray
    }

    /// Applies changed properties of the attribute's interface.
    public mutating func apply(_ p: [String: DBusValue]) {
        if let v = p["Notifying"]?.bool { notifying = v }
        if let v = p["NotifyAcquired"]?.bool { notifyAcquired = v }
        if p["MTU"] != nil { mtu = checkedMTU(p["MTU"]) }
        if let v = p["Value"]?.byteArray { value = v }
        if let v = p["Flags"]?.stringArray { flags = v }
    }
}

/// BlueZ's objects below `/org/bluez` that the central role uses: devices and their GATT
/// attributes, kept current from `InterfacesAdded`, `InterfacesRemoved` and
/// `PropertiesChanged`. Plain data: the central actor owns one.
public struct BlueZObjectTable: Sendable {
    /// Devices by path.
    public private(set) var devices: [ObjectPath: RemoteDevice] = [:]
    /// GATT attributes by path.
    public private(set) var attributes: [ObjectPath: RemoteAttribute] = [:]

    /// An empty table.
    public init() {}

    /// A change the table saw.
    public enum Change: Sendable, Equatable {
        /// A device object appeared.
        case deviceAdded(RemoteDevice)
        /// A device's properties changed (the changed field names).
        case deviceChanged(RemoteDevice, [String])
        /// A device object went.
        case deviceRemoved(RemoteDevice)
        /// A GATT attribute appeared, changed or went.
        case attribute(ObjectPath)
        /// A characteristic's value changed (a notification on the D-Bus path, or a read).
        case value(ObjectPath, [UInt8])
    }

    /// Replaces everything with the result of GetManagedObjects; returns the changes.
    public mutating func reset(_ objects: ManagedObjects) -> [Change] {
        var changes: [Change] = []
        let old = devices
        devices = [:]
        attributes = [:]
        for (path, ifaces) in objects {
            changes += added(path, ifaces)
        }
        for (p, d) in old where devices[p] == nil { changes.append(.deviceRemoved(d)) }
        return changes
    }

    /// Applies one BlueZ signal (any other message is ignored); returns the changes.
    public mutating func apply(_ m: BusMessage) -> [Change] {
        guard let path = m.path else { return [] }
        switch (m.interface, m.member) {
        case (StandardInterface.objectManager, "InterfacesAdded"):
            guard m.body.count == 2, let p = m.body[0].objectPath, let ifaces = InterfaceProperties(decoding: m.body[1]) else { return [] }
            return added(p, ifaces)
        case (StandardInterface.objectManager, "InterfacesRemoved"):
            guard m.body.count == 2, let p = m.body[0].objectPath, let names = m.body[1].stringArray else { return [] }
            var changes: [Change] = []
            if names.contains(BlueZNames.device), let d = devices.removeValue(forKey: p) {
                changes.append(.deviceRemoved(d))
            }
            if names.contains(where: { $0.hasPrefix("org.bluez.Gatt") }), attributes.removeValue(forKey: p) != nil {
                changes.append(.attribute(p))
            }
            return changes
        case (StandardInterface.properties, "PropertiesChanged"):
            guard m.body.count >= 2, let iface = m.body[0].string, let changed = m.body[1].stringKeyedMap else { return [] }
            let invalidated = m.body.count > 2 ? (m.body[2].stringArray ?? []) : []
            if iface == BlueZNames.device, var d = devices[path] {
                var keys = d.apply(changed)
                if !invalidated.isEmpty {
                    let before = d
                    d.invalidate(invalidated)
                    if before != d { keys.append(contentsOf: invalidated.map { $0 == "RSSI" ? "rssi" : $0.lowercased() }) }
                }
                devices[path] = d
                return keys.isEmpty ? [] : [.deviceChanged(d, keys)]
            }
            if iface.hasPrefix("org.bluez.Gatt"), var a = attributes[path] {
                a.apply(changed)
                attributes[path] = a
                if let v = changed["Value"]?.byteArray { return [.value(path, v)] }
                return [.attribute(path)]
            }
            return []
        default:
            return []
        }
    }

    /// Applies some of a device's properties as `Properties.GetAll` returns them; returns the
    /// changes.
    public mutating func refresh(device path: ObjectPath, _ properties: [String: DBusValue]) -> [Change] {
        added(path, [BlueZNames.device: properties])
    }

    private mutating func added(_ path: ObjectPath, _ ifaces: InterfaceProperties) -> [Change] {
        var changes: [Change] = []
        if let props = ifaces[BlueZNames.device] {
            if var d = devices[path] {
                let keys = d.apply(props)
                devices[path] = d
                if !keys.isEmpty { changes.append(.deviceChanged(d, keys)) }
            } else if let d = RemoteDevice(path: path, properties: props) {
                devices[path] = d
                changes.append(.deviceAdded(d))
            }
        }
        if let a = RemoteAttribute(path: path, interfaces: ifaces) {
            attributes[path] = a
            changes.append(.attribute(path))
        }
        return changes
    }

    /// The device with `address` under the adapter at `adapterPath`.
    public func device(_ address: BluetoothAddress, adapter adapterPath: ObjectPath) -> RemoteDevice? {
        devices[adapterPath.appending(address.bluezPathElement)]
            ?? devices.values.first { $0.address == address && $0.adapterPath == adapterPath }
    }

    /// The devices of one adapter, by address.
    public func devices(adapter adapterPath: ObjectPath) -> [RemoteDevice] {
        devices.values.filter { $0.adapterPath == adapterPath }.sorted { $0.address < $1.address }
    }

    /// The children of `parent` of one kind, ordered by handle.
    public func children(of parent: ObjectPath, _ kind: RemoteAttribute.Kind) -> [RemoteAttribute] {
        attributes.values.filter { $0.parent == parent && $0.kind == kind }
            .sorted { ($0.handle ?? 0, $0.path) < ($1.handle ?? 0, $1.path) }
    }

    /// The characteristics of a device with `uuid` (optionally in the service `service`).
    public func characteristics(of device: ObjectPath, uuid: BluetoothUUID, service: BluetoothUUID? = nil) -> [RemoteAttribute] {
        children(of: device, .service).filter { service == nil || $0.uuid == service }.flatMap { s in
            children(of: s.path, .characteristic).filter { $0.uuid == uuid }
        }
    }
}
