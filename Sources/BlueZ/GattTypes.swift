import BLE
import DBus

/// An error a GATT server answers a remote request with, as BlueZ turns it into ATT.
public enum GattError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Offset beyond the value (ATT 0x07).
    case invalidOffset
    /// Value too long for the attribute (ATT 0x0D).
    case invalidValueLength
    /// The operation is not allowed (ATT 0x02/0x03).
    case notPermitted
    /// Not authorized (ATT 0x08).
    case notAuthorized
    /// Not supported (ATT 0x06).
    case notSupported
    /// Busy with another request.
    case inProgress
    /// An application error code 0x80...0x9F.
    case application(UInt8)

    /// The BlueZ error this becomes on D-Bus.
    public var busError: BusError {
        switch self {
        case .invalidOffset: BusError(name: "org.bluez.Error.InvalidOffset", message: "invalid offset")
        case .invalidValueLength: BusError(name: "org.bluez.Error.InvalidValueLength", message: "invalid value length")
        case .notPermitted: BusError(name: "org.bluez.Error.NotPermitted", message: "not permitted")
        case .notAuthorized: BusError(name: "org.bluez.Error.NotAuthorized", message: "not authorized")
        case .notSupported: BusError(name: "org.bluez.Error.NotSupported", message: "not supported")
        case .inProgress: BusError(name: "org.bluez.Error.InProgress", message: "in progress")
        case .application(let code):
            BusError(name: "org.bluez.Error.Failed", message: "0x" + String(code, radix: 16))
        }
    }

    /// Parses the names the control protocol uses: `invalid-offset`, `not-permitted`, …, or `0x80`…`0x9f`.
    public init?(name: String) {
        switch name {
        case "invalid-offset": self = .invalidOffset
        case "invalid-value-length": self = .invalidValueLength
        case "not-permitted": self = .notPermitted
        case "not-authorized": self = .notAuthorized
        case "not-supported": self = .notSupported
        case "in-progress": self = .inProgress
        default:
            guard name.hasPrefix("0x"), let v = UInt8(name.dropFirst(2), radix: 16), (0x80...0x9F).contains(v) else { return nil }
            self = .application(v)
        }
    }

    /// The control-protocol name.
    public var description: String {
        switch self {
        case .invalidOffset: "invalid-offset"
        case .invalidValueLength: "invalid-value-length"
        case .notPermitted: "not-permitted"
        case .notAuthorized: "not-authorized"
        case .notSupported: "not-supported"
        case .inProgress: "in-progress"
        case .application(let c): "0x" + String(c, radix: 16)
        }
    }
}

/// A remote read that the owner of the application answers.
public struct GattReadRequest: Sendable {
    /// The application's id.
    public var application: String
    /// The characteristic (or descriptor) UUID.
    public var uuid: BluetoothUUID
    /// The central, when BlueZ names it.
    public var device: BluetoothAddress?
    /// The read offset.
    public var offset: Int
    /// The negotiated MTU, when BlueZ gives it.
    public var mtu: Int?
}

/// What happens on a local GATT application, reported to its owner.
public enum GattServerEvent: Sendable {
    /// An application is registered with BlueZ on an adapter.
    case registered(application: String, adapter: AdapterInfo, again: Bool)
    /// Registering failed (the application stays defined and is tried again when the adapter or bluetoothd returns).
    case registrationFailed(application: String, adapter: BluetoothAddress?, reason: String)
    /// A central read a value.
    case read(application: String, uuid: BluetoothUUID, device: BluetoothAddress?, offset: Int)
    /// A central wrote a value (`type`: request, command or reliable, nil when bluetoothd does
    /// not say: 5.66 does not); `value` is the whole stored value after the write.
    case wrote(application: String, uuid: BluetoothUUID, device: BluetoothAddress?, data: [UInt8], offset: Int, type: String?, value: [UInt8])
    /// A central subscribed (`via`: fd or dbus). The device is nil when BlueZ does not say (StartNotify).
    case subscribed(application: String, uuid: BluetoothUUID, device: BluetoothAddress?, mtu: Int?, via: String)
    /// A subscription ended.
    case unsubscribed(application: String, uuid: BluetoothUUID, device: BluetoothAddress?)
    /// An indication was confirmed.
    case confirmed(application: String, uuid: BluetoothUUID, device: BluetoothAddress?)
}

/// Why a notification could not be sent.
public enum GattNotifyError: Error, Sendable, Hashable, CustomStringConvertible {
    /// No such characteristic.
    case unknownCharacteristic(BluetoothUUID)
    /// The characteristic has neither notify nor indicate.
    case notNotifiable(BluetoothUUID)
    /// Nobody is subscribed.
    case noSubscribers(BluetoothUUID)
    /// The value does not fit in one notification.
    case tooLong(length: Int, limit: Int, mtu: Int?)
    /// Longer than the characteristic's `max_length` (its definition's bound, not the link's).
    case overMaxLength(length: Int, maxLength: Int)
    /// The device has no notification session of its own.
    case deviceNotSubscribed(BluetoothAddress, perDeviceSupported: Bool)
    /// Writing to the notification socket failed.
    case failed(String)
    /// Sending several values stopped after `sent` of them (`reason`: why).
    case interrupted(sent: Int, of: Int, reason: String)

    /// A sentence for users.
    public var description: String {
        switch self {
        case .unknownCharacteristic(let u): "no characteristic \(u) in any registered application"
        case .notNotifiable(let u): "characteristic \(u) has neither the notify nor the indicate flag"
        case .noSubscribers(let u): "no central is subscribed to \(u)"
        case .tooLong(let n, let limit, let mtu):
            if let mtu { "the value is \(n) bytes but one notification carries at most \(limit) (ATT MTU \(mtu) - 3)" }
            else { "the value is \(n) bytes but the MTU of this subscription is unknown (it came through StartNotify), so at most \(limit) bytes (the minimum ATT MTU 23 - 3) are sure to arrive whole" }
        case .overMaxLength(let n, let max): "the value is \(n) bytes, over the characteristic's max_length \(max)"
        case .deviceNotSubscribed(let d, let perDevice):
            perDevice ? "device \(d) is not subscribed"
            : "device \(d) has no notification session of its own: this bluetoothd shares one session among all subscribers (per-device notification needs BlueZ 5.69 or newer); notify without --device"
        case .failed(let why): "sending the notification failed: \(why)"
        case .interrupted(let sent, let total, let why): "\(why) (after \(sent) of \(total) values were sent)"
        }
    }
}
