import BLE
import DBus

/// Pairing, trust and forgetting devices (the daemon's agent answers what BlueZ asks).
extension Central {

    /// Pairs with a device (the daemon's agent answers what BlueZ asks).
    public func pair(adapter selector: AdapterSelector?, address: BluetoothAddress, timeout: Duration) async throws(CentralError) -> (RemoteDevice, already: Bool) {
        let s = try requireSession()
        let a = try await poweredAdapter(selector)
        guard let d = table.device(address, adapter: a.path) else { throw .notFound("device \(address) on \(a.name) (scan for it first)") }
        if d.paired { return (d, true) }
        let deadline = ContinuousClock.now + timeout
        try await exclusive(a.address, until: deadline, "pairing with \(address)") { () async throws(CentralError) -> Void in
            let device = Device1(s.connection, d.path)
            do throws(BlueZCallError) {
                // What is left of the timeout once the adapter is ours (at least a second).
                try await device.pair(timeout: max(.seconds(1), ContinuousClock.now.duration(to: deadline)))
            } catch {
                switch error.kind {
                case .alreadyExists: return
                case .noReply:
                    try? await device.cancelPairing()
                    throw .timeout("pairing with \(address) did not finish within \(timeout.secondsText)")
                default: throw .refused("pairing with \(address)", error)
                }
            }
        }
        _ = await waitUntil(.seconds(5)) { t in t.device(address, adapter: a.path)?.paired == true }
        return (table.device(address, adapter: a.path) ?? d, false)
    }

    /// Marks a device trusted (or not).
    public func trust(adapter selector: AdapterSelector?, address: BluetoothAddress, trusted: Bool) async throws(CentralError) -> RemoteDevice {
        let s = try requireSession()
        let a = try await adapter(selector)
        guard let d = table.device(address, adapter: a.path) else { throw .notFound("device \(address) on \(a.name)") }
        do {
            try await Device1(s.connection, d.path).setTrusted(trusted)
        } catch {
            throw .refused("setting Trusted on \(address)", error)
        }
        _ = await waitUntil(.seconds(5)) { t in t.device(address, adapter: a.path)?.trusted == trusted }
        return table.device(address, adapter: a.path) ?? d
    }

    /// Removes a device from BlueZ (its bond and cache go with it) and stops keeping it.
    public func forget(adapter selector: AdapterSelector?, address: BluetoothAddress) async throws(CentralError) {
        let a = try await adapter(selector)
        let key = DeviceKey(adapter: a.address, device: address)
        kept.removeValue(forKey: key)?.task?.cancel()
        guard let d = table.device(address, adapter: a.path) else { throw .notFound("device \(address) on \(a.name)") }
        if d.connected { localDisconnects.insert(key) }
        try await removeDevice(d, from: a, what: "removing \(address)")
    }

    /// `Adapter1.RemoveDevice` (its link, bond and cached attributes go), then waits until the
    /// object is gone from the table (at most 5 s).
    func removeDevice(_ d: RemoteDevice, from a: AdapterInfo, what: String) async throws(CentralError) {
        let s = try requireSession()
        do {
            try await Adapter1(s.connection, a.path).removeDevice(d.path)
        } catch {
            throw .refused(what, error)
        }
        let address = d.address, adapterPath = a.path
        _ = await waitUntil(.seconds(5)) { t in t.device(address, adapter: adapterPath) == nil }
    }
}
