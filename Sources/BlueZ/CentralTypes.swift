import BLE
import DBus

/// What the central role reports (to the daemon, which routes them to control clients).
public enum CentralEvent: Sendable {
    /// A scan saw a device that passes its filter (first sighting, or every one with duplicates).
    case discovered(scan: String, owner: UInt64, adapter: AdapterInfo, device: RemoteDevice)
    /// A scan ended: `reason` is `timeout`, `stopped`, `client-gone` or `adapter-gone`.
    case scanEnded(scan: String, owner: UInt64, reason: String)
    /// Discovery was started again for a scan (after bluetoothd or the adapter came back).
    case scanResumed(scan: String, owner: UInt64, adapter: AdapterInfo)
    /// A device connected and its services are resolved.
    case connected(adapter: AdapterInfo, device: RemoteDevice)
    /// A device disconnected; `reason` as in `DisconnectReason`.
    case disconnected(adapter: BluetoothAddress, device: BluetoothAddress, reason: String, willReconnect: Bool)
    /// Keep-connected mode tries again after `delay` seconds.
    case reconnecting(adapter: BluetoothAddress, device: BluetoothAddress, attempt: Int, delay: Double, lastError: String?)
    /// Notifications or indications for one subscription, in order, numbered from 1:
    /// `values[i]` has number `firstSequence + i`. Several when they arrived together.
    /// `batch`: the subscriber asked for them in one event (else one event per value).
    case notifications(subscription: String, owner: UInt64, device: BluetoothAddress, characteristic: BluetoothUUID,
                       values: [[UInt8]], firstSequence: UInt64, batch: Bool)
    /// A subscription ended (unsubscribed, disconnected, bluetoothd gone).
    /// `count`: values delivered; `dropped`: values a stream subscriber's socket had no room for.
    case subscriptionEnded(subscription: String, owner: UInt64, device: BluetoothAddress, characteristic: BluetoothUUID, reason: String, count: UInt64, dropped: UInt64)
}

/// Why a central operation failed.
public enum CentralError: Error, Sendable, CustomStringConvertible {
    /// bluetoothd or the adapter.
    case bluez(BlueZError)
    /// A device, characteristic, scan or subscription that is not there (`what`, `id`).
    case notFound(String)
    /// Not possible in the current state (not connected, adapter off, ...).
    case invalidState(String)
    /// Not done within the time given.
    case timeout(String)
    /// BlueZ refused: the operation and BlueZ's error (ATT errors come as org.bluez.Error.*).
    case refused(String, BusError)
    /// Not supported by this BlueZ or characteristic.
    case notSupported(String)
    /// A bad argument found only once the device is known (value too long for the MTU, ...).
    case invalid(String, String)

    /// A sentence for users.
    public var description: String {
        switch self {
        case .bluez(let e): e.description
        case .notFound(let what): "not found: \(what)"
        case .invalidState(let what): what
        case .timeout(let what): "timed out: \(what)"
        case .refused(let what, let e): "\(what) failed: \(e.name): \(e.message)"
        case .notSupported(let what): "not supported: \(what)"
        case .invalid(let param, let why): "\(param): \(why)"
        }
    }
}

/// A device on one adapter: the key of connections and subscriptions.
public struct DeviceKey: Sendable, Hashable, CustomStringConvertible {
    /// The adapter's address.
    public var adapter: BluetoothAddress
    /// The device's address.
    public var device: BluetoothAddress
    /// Creates a key.
    public init(adapter: BluetoothAddress, device: BluetoothAddress) {
        self.adapter = adapter
        self.device = device
    }
    /// "00:AA:01:01:00:01 on 00:AA:01:00:00:00".
    public var description: String { "\(device) on \(adapter)" }
}

/// A scan's public state.
public struct ScanInfo: Sendable {
    /// Its id (`scan-N`).
    public var id: String
    /// The control client that owns it.
    public var owner: UInt64
    /// The adapter's address.
    public var adapter: BluetoothAddress
    /// Its filter.
    public var filter: ScanFilter
    /// How many devices it reported.
    public var reported: Int
}

/// One subscription's public state.
public struct SubscriptionInfo: Sendable {
    /// Its id (`sub-N`).
    public var id: String
    /// The owner.
    public var owner: UInt64
    /// The device.
    public var key: DeviceKey
    /// The characteristic.
    public var characteristic: BluetoothUUID
    /// `acquire-notify` (the socket) or `start-notify` (D-Bus).
    public var via: String
    /// The link's ATT MTU when known.
    public var mtu: Int?
    /// With `stream`: the client's end of the packet socket the values go to (the caller
    /// passes it on and closes it).
    public var streamFD: Int32? = nil
}

/// Classifies BlueZ errors of Connect that a retry can fix (docs/reference-flows.md U2).
public enum ConnectErrors {
    /// Whether a failed Connect/ConnectDevice is worth another attempt.
    public static func isTransient(_ e: BusError) -> Bool {
        if e.shortName == "InProgress" || e.shortName == "NotReady" { return true }
        let m = e.message.lowercased()
        return ["le-connection-abort-by-local", "software caused connection abort", "connection-aborted",
                "br-connection-canceled", "le-connection-canceled", "connection refused", "timed out", "timeout",
                "resource temporarily unavailable", "busy", "page-timeout", "connection-timeout"].contains { m.contains($0) }
    }
}
