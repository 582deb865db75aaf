import BLE
import DBus

/// Remote GATT: the service tree of a connected device, reads and writes.
extension Central {
    /// How long a read or write may take (BlueZ may pair first, or split a long write).
    static let gattTimeout: Duration = .seconds(30)

    /// A connected device with resolved services.
    func connectedDevice(_ selector: AdapterSelector?, _ address: BluetoothAddress) async throws(CentralError) -> (AdapterInfo, RemoteDevice) {
        let a = try await adapter(selector)
        guard let d = table.device(address, adapter: a.path) else { throw .notFound("device \(address) on \(a.name) (scan and connect first)") }
        guard d.connected else { throw .notConnected(address) }
        if !d.servicesResolved {
            let ok = await waitUntil(.seconds(10)) { t in t.device(address, adapter: a.path)?.servicesResolved == true }
            guard ok, let d2 = table.device(address, adapter: a.path) else { throw .timeout("the services of \(address) were not resolved within 10 s") }
            return (a, d2)
        }
        return (a, d)
    }

    /// The GATT tree of a connected device: services with their characteristics and descriptors.
    /// `refresh` drops BlueZ's cache first (disconnect, remove, connect again); refused for
    /// a paired device, whose bond would go with it.
    public func services(adapter selector: AdapterSelector?, address: BluetoothAddress, refresh: Bool, timeout: Duration) async throws(CentralError) -> (RemoteDevice, [(RemoteAttribute, [(RemoteAttribute, [RemoteAttribute])])]) {
        if refresh {
            let s = try requireSession()
            let a = try await poweredAdapter(selector)
            if let d = table.device(address, adapter: a.path) {
                if d.paired || d.bonded {
                    throw .refreshWouldUnpair(address)
                }
                let key = DeviceKey(adapter: a.address, device: address)
                if d.connected {
                    localDisconnects.insert(key)
                    try? await Device1(s.connection, d.path).disconnect()
                    _ = await waitUntil(.seconds(5)) { t in t.device(address, adapter: a.path)?.connected != true }
                }
                try await removeDevice(d, from: a, what: "removing the cached device \(address)")
            }
            let d = try await connectOnce(a, address: address, addressType: nil, timeout: timeout)
            await settle(d.path, quiet: true)
        }
        let (_, d) = try await connectedDevice(selector, address)
        let tree = table.children(of: d.path, .service).map { s in
            (s, table.children(of: s.path, .characteristic).map { c in (c, table.children(of: c.path, .descriptor)) })
        }
        return (d, tree)
    }

    /// One characteristic of a connected device by UUID (and service UUID when ambiguous).
    func characteristic(_ selector: AdapterSelector?, _ address: BluetoothAddress, _ uuid: BluetoothUUID,
                        service: BluetoothUUID?) async throws(CentralError) -> (AdapterInfo, RemoteDevice, RemoteAttribute) {
        let (a, d) = try await connectedDevice(selector, address)
        let found = table.characteristics(of: d.path, uuid: uuid, service: service)
        guard let c = found.first else {
            throw .characteristicNotFound(uuid, service: service, device: address)
        }
        guard found.count == 1 else {
            throw .invalid("service", "characteristic \(uuid.uuidString) is in \(found.count) services of \(address): give the service UUID")
        }
        return (a, d, c)
    }

    /// A GATT call's failure as the central reports it: no answer is a timeout, bluetoothd
    /// gone is "unavailable", the rest is BlueZ refusing (with its ATT code, when it gave one).
    static func gattFailure(_ e: BlueZCallError, _ what: String, timeout: Duration) -> CentralError {
        switch e.kind {
        case .noReply: .timeout("\(what): no answer within \(timeout.secondsText)")
        case .serviceGone: .bluez(.unavailable("bluetoothd went away"))
        default: .refused(what, e)
        }
    }

    /// Reads a characteristic (from `offset`).
    public func read(adapter selector: AdapterSelector?, address: BluetoothAddress, characteristic uuid: BluetoothUUID,
                     service: BluetoothUUID?, offset: Int) async throws(CentralError) -> (RemoteAttribute, [UInt8]) {
        let s = try requireSession()
        let (_, _, c) = try await characteristic(selector, address, uuid, service: service)
        do {
            return (c, try await GattCharacteristic1(s.connection, c.path).readValue(offset: offset, timeout: Self.gattTimeout))
        } catch {
            throw Self.gattFailure(error, "reading \(uuid.uuidString) of \(address)", timeout: Self.gattTimeout)
        }
    }

    /// Writes a characteristic: with response (`request`; BlueZ splits a long value into
    /// prepared writes, in order) or without (`command`, at most MTU-3 bytes).
    public func write(adapter selector: AdapterSelector?, address: BluetoothAddress, characteristic uuid: BluetoothUUID,
                      service: BluetoothUUID?, value: [UInt8], command: Bool, offset: Int) async throws(CentralError) -> RemoteAttribute {
        let s = try requireSession()
        let (_, _, c) = try await characteristic(selector, address, uuid, service: service)
        if command {
            guard c.flags.contains("write-without-response") else {
                throw .notSupported("characteristic \(uuid.uuidString) does not allow writes without response (flags: \(c.flags.joined(separator: ",")))")
            }
            if let mtu = c.mtu, value.count > mtu - 3 {
                throw .invalid("value", "\(value.count) bytes is too long for a write without response: at most \(mtu - 3) (MTU \(mtu) - 3); a write request can carry long values")
            }
        }
        do {
            try await GattCharacteristic1(s.connection, c.path).writeValue(value, command: command, offset: offset, timeout: Self.gattTimeout)
        } catch {
            throw Self.gattFailure(error, "writing \(uuid.uuidString) of \(address)", timeout: Self.gattTimeout)
        }
        return c
    }
}
