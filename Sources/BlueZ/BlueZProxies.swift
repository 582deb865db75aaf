import BLE
import DBus

/// One BlueZ object seen through one interface: the shared part of the typed proxies
/// (`Adapter1`, `Device1`, `GattCharacteristic1`). A proxy makes one D-Bus call per method
/// and throws only `BlueZCallError`.
struct BlueZObject: Sendable {
    /// The bus connection the calls go out on.
    let connection: BusConnection
    /// The object's path.
    let path: ObjectPath
    /// The interface the calls name.
    let interface: String

    /// Calls `member` and returns the reply's body.
    func call(_ member: String, _ body: [DBusValue] = [], timeout: Duration) async throws(BlueZCallError) -> [DBusValue] {
        do {
            return try await connection.call(destination: BlueZNames.service, path: path, interface: interface, member: member, body, timeout: timeout)
        } catch {
            throw BlueZCallError(error)
        }
    }

    /// Sets one property of the interface.
    func set(_ property: String, _ value: DBusValue, timeout: Duration) async throws(BlueZCallError) {
        do {
            try await connection.setRemoteProperty(destination: BlueZNames.service, path: path, interface: interface,
                                                   name: property, value: value, timeout: timeout)
        } catch {
            throw BlueZCallError(error)
        }
    }

    /// The method call `member` as a message, for calls answered through a completion.
    func message(_ member: String, _ body: [DBusValue] = []) -> BusMessage {
        .methodCall(destination: BlueZNames.service, path: path, interface: interface, member: member, body: body)
    }
}

/// `org.bluez.Adapter1` of one adapter.
struct Adapter1: Sendable {
    let object: BlueZObject

    /// The adapter at `path`.
    init(_ connection: BusConnection, _ path: ObjectPath) {
        object = BlueZObject(connection: connection, path: path, interface: BlueZNames.adapter)
    }

    /// `SetDiscoveryFilter` (an empty map clears ours).
    func setDiscoveryFilter(_ filter: [String: DBusValue]) async throws(BlueZCallError) {
        _ = try await object.call("SetDiscoveryFilter", [.propertyMap(filter)], timeout: .seconds(10))
    }

    /// `StartDiscovery`: starts this client's discovery session.
    func startDiscovery() async throws(BlueZCallError) {
        _ = try await object.call("StartDiscovery", timeout: .seconds(10))
    }

    /// `StopDiscovery`: ends this client's discovery session.
    func stopDiscovery() async throws(BlueZCallError) {
        _ = try await object.call("StopDiscovery", timeout: .seconds(10))
    }

    /// Sets `Powered`.
    func setPowered(_ on: Bool, timeout: Duration) async throws(BlueZCallError) {
        try await object.set("Powered", .boolean(on), timeout: timeout)
    }

    /// `RemoveDevice`: the device's link, bond and cached attributes go.
    func removeDevice(_ device: ObjectPath) async throws(BlueZCallError) {
        _ = try await object.call("RemoveDevice", [.objectPath(device)], timeout: .seconds(10))
    }

    /// `ConnectDevice` (experimental in BlueZ) as a message: connects to an address BlueZ has
    /// no object for. Sent with a completion (see `Central.connectOnce`).
    func connectDeviceMessage(address: BluetoothAddress, addressType: String) -> BusMessage {
        object.message("ConnectDevice", [.propertyMap(["Address": .string(address.description), "AddressType": .string(addressType)])])
    }
}

/// `org.bluez.Device1` of one remote device.
struct Device1: Sendable {
    let object: BlueZObject

    /// The device at `path`.
    init(_ connection: BusConnection, _ path: ObjectPath) {
        object = BlueZObject(connection: connection, path: path, interface: BlueZNames.device)
    }

    /// The device and reason of a `Disconnected` signal (BlueZ 5.80+), nil for any other
    /// message: `org.bluez.Reason.Remote` reads as `remote`, an empty body as `unknown`.
    static func disconnected(_ m: BusMessage) -> (ObjectPath, String)? {
        guard m.interface == BlueZNames.device, m.member == "Disconnected", let path = m.path else { return nil }
        let reason = m.body.first?.string.map { $0.split(separator: ".").last.map { String($0).lowercased() } ?? $0 } ?? "unknown"
        return (path, reason)
    }

    /// `Connect` as a message (sent with a completion: see `Central.connectOnce`).
    var connectMessage: BusMessage { object.message("Connect") }

    /// `Disconnect`: drops the link (and ends a connection attempt still being made).
    func disconnect(timeout: Duration = .seconds(10)) async throws(BlueZCallError) {
        _ = try await object.call("Disconnect", timeout: timeout)
    }

    /// `Pair`: answered when pairing ends (the agent answers bluetoothd's questions).
    func pair(timeout: Duration) async throws(BlueZCallError) {
        _ = try await object.call("Pair", timeout: timeout)
    }

    /// `CancelPairing`
    func cancelPairing() async throws(BlueZCallError) {
        _ = try await object.call("CancelPairing", timeout: .seconds(5))
    }

    /// Sets `Trusted`.
    func setTrusted(_ trusted: Bool) async throws(BlueZCallError) {
        try await object.set("Trusted", .boolean(trusted), timeout: .seconds(10))
    }
}

/// `org.bluez.GattCharacteristic1` of one remote characteristic.
struct GattCharacteristic1: Sendable {
    let object: BlueZObject

    /// The characteristic at `path`.
    init(_ connection: BusConnection, _ path: ObjectPath) {
        object = BlueZObject(connection: connection, path: path, interface: BlueZNames.gattCharacteristic)
    }

    /// `ReadValue` from `offset`.
    func readValue(offset: Int, timeout: Duration) async throws(BlueZCallError) -> [UInt8] {
        var opts: [String: DBusValue] = [:]
        if offset > 0 { opts["offset"] = .uint16(UInt16(clamping: offset)) }
        let r = try await object.call("ReadValue", [.propertyMap(opts)], timeout: timeout)
        guard let bytes = r.first?.byteArray else { throw .badReply("ReadValue", r, expected: "ay") }
        return bytes
    }

    /// `WriteValue`: with response (`request`) or without (`command`), from `offset`.
    func writeValue(_ value: [UInt8], command: Bool, offset: Int, timeout: Duration) async throws(BlueZCallError) {
        var opts: [String: DBusValue] = ["type": .string(command ? "command" : "request")]
        if offset > 0 { opts["offset"] = .uint16(UInt16(clamping: offset)) }
        _ = try await object.call("WriteValue", [.bytes(value), .propertyMap(opts)], timeout: timeout)
    }

    /// `AcquireNotify`: the socket the notifications come on, and the link's MTU.
    func acquireNotify() async throws(BlueZCallError) -> (fd: UnixFD, mtu: Int) {
        let r = try await object.call("AcquireNotify", [.propertyMap([:])], timeout: .seconds(10))
        guard r.count == 2, case .unixFD(let fd) = r[0], let mtu = checkedMTU(r[1]) else {
            throw .badReply("AcquireNotify", r, expected: "hq (an MTU of 23 to 65535)")
        }
        return (fd, mtu)
    }

    /// `StartNotify`: values then come as `Value` changes on the bus.
    func startNotify(timeout: Duration) async throws(BlueZCallError) {
        _ = try await object.call("StartNotify", timeout: timeout)
    }

    /// `StopNotify`
    func stopNotify(timeout: Duration) async throws(BlueZCallError) {
        _ = try await object.call("StopNotify", timeout: timeout)
    }
}

/// An ATT MTU from bluetoothd (a property, a method's argument or reply), checked: 23 to
/// 65535; another value, or none, is unknown (nil), not a number `mtu - 3` could overflow on
/// or turn negative.
func checkedMTU(_ v: DBusValue?) -> Int? { v?.integer.flatMap { (23...65_535).contains($0) ? Int($0) : nil } }
