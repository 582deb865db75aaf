import BLE
import DBus

/// What the central role reports (to the daemon, which routes them to control clients).
public enum CentralEvent: Sendable {
    /// A scan saw a device that passes its filter (first sighting, or every one with duplicates).
    case discovered(scan: String, owner: UInt64, adapter: AdapterInfo, device: RemoteDevice)
    /// A scan ended: `reason` is `timeout`, `stopped` or `client-gone` (a removed adapter
    /// does not end it: it resumes on the adapter's return).
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

/// Why a central operation failed. The cases say what is wrong; the daemon adds how the
/// user fixes it (which command to run), so no wording of its CLI lives here.
public enum CentralError: Error, Sendable, CustomStringConvertible {
    /// bluetoothd or the adapter.
    case bluez(BlueZError)
    /// A device, characteristic, scan or subscription that is not there (`what`, `id`).
    case notFound(String)
    /// Not possible in the current state (not connected, adapter off, ...).
    case invalidState(String)
    /// Not done within the time given.
    case timeout(String)
    /// BlueZ refused: the operation and BlueZ's error (its kind, and the ATT code of a
    /// failed GATT request when BlueZ gave one).
    case refused(String, BlueZCallError)
    /// Not supported by this BlueZ or characteristic.
    case notSupported(String)
    /// A bad argument found only once the device is known (value too long for the MTU, ...).
    case invalid(String, String)
    /// The adapter is powered off.
    case adapterOff(AdapterInfo)
    /// The device is known but not connected.
    case notConnected(BluetoothAddress)
    /// A refresh of the services of a paired device was asked for: removing the device
    /// from BlueZ to drop its cache would remove its bond too.
    case refreshWouldUnpair(BluetoothAddress)
    /// The connected device has no such characteristic (in that service, when one was given).
    case characteristicNotFound(BluetoothUUID, service: BluetoothUUID?, device: BluetoothAddress)

    /// A sentence for users.
    public var description: String {
        switch self {
        case .bluez(let e): e.description
        case .notFound(let what): "not found: \(what)"
        case .invalidState(let what): what
        case .timeout(let what): "timed out: \(what)"
        case .refused(let what, let e): "\(what) failed: \(e.description)"
        case .notSupported(let what): "not supported: \(what)"
        case .invalid(let param, let why): "\(param): \(why)"
        case .adapterOff(let a): "adapter \(a.name) (\(a.address)) is powered off"
        case .notConnected(let d): "device \(d) is not connected"
        case .refreshWouldUnpair(let d): "\(d) is paired: a refresh would remove its bond"
        case .characteristicNotFound(let u, let s, let d):
            "not found: characteristic \(u.uuidString)\(s.map { " in service \($0.uuidString)" } ?? "") on \(d)"
        }
    }

    /// A failed connect as the central reports it.
    public static func connectFailure(_ f: Connector.Failure, device: BluetoothAddress, adapter: String, timeout: Duration) -> CentralError {
        switch f {
        case .timedOut(let attempts, let last):
            .timeout("could not connect to \(device) on \(adapter) within \(timeout.secondsText) (\(attempts) attempt\(attempts == 1 ? "" : "s")\(last.map { "; last: \($0)" } ?? ""))")
        case .refused(let e): .refused("connecting to \(device)", e)
        case .unknownDevice:
            .notFound("device \(device) is not known to BlueZ on \(adapter); scan for it first (connecting to an unseen address needs ConnectDevice, bluetoothd --experimental)")
        case .bluetoothdGone: .bluez(.unavailable("bluetoothd went away"))
        case .cancelled: .invalidState("cancelled")
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
