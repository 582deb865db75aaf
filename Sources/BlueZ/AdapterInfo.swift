import BLE
import DBus

/// BlueZ's bus name, interfaces and paths.
public enum BlueZNames {
    /// `org.bluez`
    public static let service = "org.bluez"
    /// `org.bluez.Adapter1`
    public static let adapter = "org.bluez.Adapter1"
    /// `org.bluez.Device1`
    public static let device = "org.bluez.Device1"
    /// BlueZ objects live below this path.
    public static let root: ObjectPath = "/org/bluez"
}

/// What the daemon knows of one adapter, from its `org.bluez.Adapter1` properties.
public struct AdapterInfo: Sendable, Hashable {
    /// Object path, e.g. `/org/bluez/hci0` (changes when the adapter re-appears as hci1).
    public var path: ObjectPath
    /// Kernel name, `hci0` (the last element of the path).
    public var name: String
    /// The adapter's address: the stable key.
    public var address: BluetoothAddress
    /// `public` or `random`.
    public var addressType: String
    /// The user-visible name.
    public var alias: String
    /// Whether the adapter is powered.
    public var powered: Bool
    /// `on`, `off`, `off-enabling`, `on-disabling` or `off-blocked` (rfkill).
    public var powerState: String
    /// Whether it is discoverable.
    public var discoverable: Bool
    /// Whether a discovery is running.
    public var discovering: Bool
    /// Supported roles: `central`, `peripheral`, `central-peripheral`.
    public var roles: [String]
    /// Whether bluetoothd gives each subscribed central its own AcquireNotify socket
    /// (BlueZ 5.69+). Seen through the `Manufacturer` property, which arrived in 5.71:
    /// without it, notifications are treated as shared by all subscribers.
    public var perDeviceNotify: Bool

    /// Reads an adapter from its path and properties; nil without a valid `Address`.
    public init?(path: ObjectPath, properties p: [String: DBusValue]) {
        guard let a = p["Address"]?.string, let address = BluetoothAddress(a) else { return nil }
        self.path = path
        name = path.lastElement
        self.address = address
        addressType = p["AddressType"]?.string ?? "public"
        alias = p["Alias"]?.string ?? p["Name"]?.string ?? ""
        powered = p["Powered"]?.bool ?? false
        // PowerState is newer than Powered (BlueZ 5.64); derive it on older daemons.
        powerState = p["PowerState"]?.string ?? (powered ? "on" : "off")
        discoverable = p["Discoverable"]?.bool ?? false
        discovering = p["Discovering"]?.bool ?? false
        roles = p["Roles"]?.stringArray ?? []
        perDeviceNotify = p["Manufacturer"] != nil
    }

    /// Applies changed properties; returns the names of the fields that changed
    /// (`powered`, `power_state`, `alias`, `discoverable`, `discovering`, `roles`).
    public mutating func apply(_ changed: [String: DBusValue]) -> [String] {
        var keys: [String] = []
        func set<T: Equatable>(_ field: WritableKeyPath<AdapterInfo, T>, _ value: T?, _ key: String) {
            guard let value, self[keyPath: field] != value else { return }
            self[keyPath: field] = value
            keys.append(key)
        }
        set(\.powered, changed["Powered"]?.bool, "powered")
        set(\.powerState, changed["PowerState"]?.string, "power_state")
        if changed["PowerState"] == nil, let p = changed["Powered"]?.bool { set(\.powerState, p ? "on" : "off", "power_state") }
        set(\.alias, changed["Alias"]?.string, "alias")
        set(\.discoverable, changed["Discoverable"]?.bool, "discoverable")
        set(\.discovering, changed["Discovering"]?.bool, "discovering")
        set(\.roles, changed["Roles"]?.stringArray, "roles")
        return keys
    }

    /// Whether a selector names this adapter.
    public func matches(_ s: AdapterSelector) -> Bool {
        switch s {
        case .name(let n): name == n
        case .address(let a): address == a
        }
    }
}

/// What happened to BlueZ or its adapters.
public enum BlueZEvent: Sendable, Hashable {
    /// `bluetoothd` is on the bus (at start, or back after a restart).
    case available
    /// `bluetoothd` left the bus.
    case unavailable
    /// An adapter appeared; `previousName` when this controller (same address) was last seen
    /// under another name (its hciN changed while it was gone).
    case adapterAdded(AdapterInfo, previousName: String?)
    /// An adapter disappeared.
    case adapterRemoved(AdapterInfo)
    /// Some of an adapter's properties changed (field names as in `AdapterInfo.apply`).
    case adapterChanged(AdapterInfo, changed: [String])
}
