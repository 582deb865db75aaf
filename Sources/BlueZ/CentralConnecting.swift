import BLE
import DBus
import SystemKit
import FoundationEssentials

/// Connections: one connect at a time per adapter (discovery paused meanwhile), each a
/// `Connector` run against BlueZ's objects; kept devices are reconnected with `Backoff.reconnect`.
extension Central {
    /// Connects to a device and waits for its services; `keep` reconnects it whenever it
    /// drops, until `disconnect`.
    public func connect(adapter selector: AdapterSelector?, address: BluetoothAddress, addressType: String? = nil,
                        timeout: Duration, keep: Bool) async throws(CentralError) -> (AdapterInfo, RemoteDevice) {
        let a = try await poweredAdapter(selector)
        let key = DeviceKey(adapter: a.address, device: address)
        if keep, kept[key] == nil { kept[key] = KeepState() }
        do {
            let d = try await connectOnce(a, address: address, addressType: addressType, timeout: timeout)
            return (a, d)
        } catch {
            if keep { scheduleReconnect(key, attempt: 1, lastError: error.description) }
            throw error
        }
    }

    private func link(_ address: BluetoothAddress, _ adapterPath: ObjectPath) -> Connector.Link {
        guard let d = table.device(address, adapter: adapterPath), d.connected else { return .down }
        return d.servicesResolved ? .resolved : .connected
    }

    /// Drops a link that came up without its services, and waits (at most 3 s) for it to go.
    private func dropLink(_ d: RemoteDevice, _ key: DeviceKey, _ s: (connection: BusConnection, bluez: BlueZClient)) async {
        localDisconnects.insert(key)
        try? await Device1(s.connection, d.path).disconnect(timeout: .seconds(5))
        let address = d.address, adapterPath = d.adapterPath
        _ = await waitUntil(.seconds(3)) { t in t.device(address, adapter: adapterPath)?.connected != true }
        localDisconnects.remove(key)
    }

    /// One connect: with the adapter's gate held (discovery paused), attempts as the
    /// `Connector` says until the services are resolved or it gives up; then waits for the
    /// GATT tree to settle and reports `connected`.
    ///
    /// `whileKept`: a reconnect of a kept device, given up (its attempt cancelled, the link
    /// dropped) once `disconnect` or `forget` stops keeping it: they do not wait for it, and
    /// it came back connected after they answered.
    func connectOnce(_ a: AdapterInfo, address: BluetoothAddress, addressType: String?, timeout: Duration,
                     whileKept: Bool = false) async throws(CentralError) -> RemoteDevice {
        let key = DeviceKey(adapter: a.address, device: address)
        if let d = table.device(address, adapter: a.path), d.connected, d.servicesResolved { return d }
        let s = try requireSession()
        let adapterPath = a.path
        let isResolved: @Sendable (BlueZObjectTable) -> Bool = { t in
            guard let d = t.device(address, adapter: adapterPath) else { return false }
            return d.connected && d.servicesResolved
        }
        let isConnected: @Sendable (BlueZObjectTable) -> Bool = { t in t.device(address, adapter: adapterPath)?.connected == true }
        logger.info("connecting", ["device": address.description, "adapter.name": a.name, "timeout": timeout.secondsText])
        let deadline = ContinuousClock.now + timeout
        try await exclusive(a.address, until: deadline, "connecting to \(address)") { () async throws(CentralError) -> Void in
            var connector = Connector(deadline: deadline)
            while true {
                if whileKept, kept[key] == nil {
                    try await abandonReconnect(key, s)
                }
                switch connector.next(link: link(address, adapterPath), now: .now) {
                case .done:
                    return
                case .fail(let f):
                    if case .timedOut = f, let d = table.device(address, adapter: a.path) {
                        // Cancel a connection attempt BlueZ may still be making.
                        if d.connected { localDisconnects.insert(key) }
                        try? await Device1(s.connection, d.path).disconnect(timeout: .seconds(5))
                    }
                    throw .connectFailure(f, device: address, adapter: a.name, timeout: timeout)
                case .awaitServices(let limit):
                    if await waitUntil(limit, isResolved) { return }
                    guard let d = table.device(address, adapter: a.path), d.connected else { continue }
                    // Connected without services: drop the link and try again.
                    connector.connectedWithoutServices()
                    logger.info("services not resolved; reconnecting", ["device": address.description])
                    await dropLink(d, key, s)
                case .attempt(let attempt, let linkWait):
                    let step = await attemptOnce(s, a, address: address, addressType: addressType, attempt: attempt, linkWait: linkWait,
                                                 connector: &connector, isResolved: isResolved, isConnected: isConnected)
                    switch step {
                    case .fail(let f): throw .connectFailure(f, device: address, adapter: a.name, timeout: timeout)
                    case .awaitLink(let limit): _ = await waitUntil(limit, isConnected)
                    case .retry(let delay):
                        logger.info("connect failed, retrying", ["device": address.description, "attempt": "\(attempt)",
                                                                  "error": connector.lastError ?? "", "retry_in": "\(delay.seconds)"])
                        try? await Task.sleep(for: delay)
                    default: break
                    }
                case .awaitLink, .retryNow, .retry:
                    continue  // `next` does not return these: they answer `failed`
                }
            }
        }
        guard var d = table.device(address, adapter: a.path) else { throw .invalidState("\(address) went away just after connecting") }
        await settle(d.path)
        if whileKept, kept[key] == nil { try await abandonReconnect(key, s) }
        if table.children(of: d.path, .service).isEmpty {
            await resync()
        }
        d = table.device(address, adapter: a.path) ?? d
        localDisconnects.remove(key)
        logger.info("connected", ["device": address.description, "adapter.name": a.name, "services": "\(table.children(of: d.path, .service).count)"])
        onEvent(.connected(adapter: a, device: d))
        return d
    }

    /// One Connect (or ConnectDevice) call and the watch beside it; returns what the
    /// connector says when the call failed (`.retryNow` when the loop should just look again).
    private func attemptOnce(_ s: (connection: BusConnection, bluez: BlueZClient), _ a: AdapterInfo, address: BluetoothAddress, addressType: String?, attempt: Int, linkWait: Duration,
                             connector: inout Connector, isResolved: @escaping @Sendable (BlueZObjectTable) -> Bool,
                             isConnected: @escaping @Sendable (BlueZObjectTable) -> Bool) async -> Connector.Step {
        let key = DeviceKey(adapter: a.address, device: address)
        // BlueZ answers Connect on LE only once GATT discovery is done; in the field (and
        // in the emulator) that discovery can stall on a live link. So the call runs
        // beside a watch: connected but unresolved for `resolveLimit` means drop the
        // link (which ends the call) and try again.
        let message: BusMessage
        if let d = table.device(address, adapter: a.path) {
            logger.debug("Device1.Connect", ["device": address.description, "attempt": "\(attempt)"])
            message = Device1(s.connection, d.path).connectMessage
        } else {
            // Not in BlueZ's cache (never seen, or evicted): ConnectDevice creates it.
            logger.debug("Adapter1.ConnectDevice", ["device": address.description, "attempt": "\(attempt)"])
            message = Adapter1(s.connection, a.path).connectDeviceMessage(address: address, addressType: addressType ?? "public")
        }
        let outcome = CallOutcome()
        let sent = ContinuousClock.now
        let sinceCall = { "\((ContinuousClock.now - sent).clampedMilliseconds)" }
        s.connection.call(message, timeout: connector.deadline - .now) { [weak self] r in
            outcome.set(r.map { _ in () })
            Task { await self?.recheckWaiters() }
        }
        func failure() -> BlueZCallError? {
            if let r = outcome.result, case .failure(let e) = r { return BlueZCallError(e) }
            return nil
        }
        if await waitUntil(linkWait, { t in outcome.isSet || isConnected(t) }) == false, connector.noLink(now: .now) {
            // No link and no answer: bluetoothd 5.66 can lose a Connect when its ATT
            // connect and the kernel's Device Connected event race (it logs "is already
            // connected" and never answers). Cancel it and try again.
            logger.info("no connection yet; cancelling and retrying", ["device": address.description, "attempt": "\(attempt)"])
            if let d = table.device(address, adapter: a.path) {
                try? await Device1(s.connection, d.path).disconnect(timeout: .seconds(5))
            }
            _ = await waitUntil(.seconds(3)) { _ in outcome.isSet }
            return .retryNow
        }
        if let e = failure() { return connector.failed(e) }
        if isConnected(table), !isResolved(table) {
            let limit = connector.resolveWait(now: .now)
            if await waitUntil(limit, { t in isResolved(t) || (outcome.isSet && !isConnected(t)) }) == false,
               let d = table.device(address, adapter: a.path), d.connected, connector.servicesStalled(now: .now) {
                logger.info("services not resolved; reconnecting", ["device": address.description, "attempt": "\(attempt)"])
                await dropLink(d, key, s)
                return .retryNow
            }
        }
        if isResolved(table) { return .retryNow }
        if let e = failure() { return connector.failed(e) }
        // Answered, not yet resolved: the connected branch of the loop waits for the services.
        if outcome.isSet, await waitUntil(.milliseconds(150), isConnected) == false {
            // BlueZ said yes but no Connected change arrived (seen on the first
            // connect after a scan): read its state again rather than wait.
            logger.info("Connect answered but the device is not connected; reading its properties again",
                        ["device": address.description, "attempt": "\(attempt)", "since_call_ms": sinceCall()])
            // The device's own properties, not the whole tree: GetManagedObjects after a
            // scan took a second in the lab (ours.1 of bench 31, 12-02).
            if let d = table.device(address, adapter: a.path) { await refreshConnected(d.path) } else { await resync() }
            let seen = isConnected(table)
            // The Connected change may still be on its way (bluetoothd answers Connect from the
            // ATT socket's callback and announces the link from the kernel's event, which can
            // come later): wait for it, not for a fixed time (a 500 ms sleep here cost the
            // first connect of a run half a second), and count the attempt only if it never shows.
            let connected = await waitUntil(.milliseconds(500), isConnected)
            // Where the time went (the central's first read waits on this path).
            logger.info(connected ? "device connected after Connect's answer" : "no Connected change after Connect's answer",
                        ["device": address.description, "in_bluez_state": "\(seen)", "since_call_ms": sinceCall()])
            if !connected { connector.answeredWithoutLink() }
        }
        return .retryNow
    }

    static let gapService = BluetoothUUID(uuid16: 0x1800)
    static let gattService = BluetoothUUID(uuid16: 0x1801)

    /// Waits (at most 5 s) until a device's GATT tree looks whole: ServicesResolved can come
    /// before BlueZ has exported every object (bluez #191; seen in the lab after a cache
    /// refresh: one service, no characteristics; and, once in a run of 30-central-example,
    /// every service but the last), so "resolved" alone is not "the tree is there". A tree
    /// whose own services (not GAP/GATT) all have characteristics is taken at once unless
    /// `quiet`; otherwise the objects must have stopped changing for 500 ms. `quiet` is for a
    /// discovery from nothing (`services --refresh`), where a whole service can still be on
    /// its way; a connect keeps the quick answer (the first read waits on it).
    func settle(_ device: ObjectPath, quiet: Bool = false) async {
        let start = ContinuousClock.now
        while ContinuousClock.now - start < .seconds(5) {
            let services = table.children(of: device, .service)
            // A tree with a service of its own (not only GAP/GATT, whose characteristics BlueZ
            // keeps to itself) where every such service has characteristics is taken as it is;
            // otherwise wait for the objects to stop coming.
            let own = services.filter { $0.uuid != Self.gapService && $0.uuid != Self.gattService }
            let complete = !own.isEmpty && own.allSatisfy { !table.children(of: $0.path, .characteristic).isEmpty }
            if complete && !quiet { return }
            if !services.isEmpty, let last = lastAttributeChange[device], ContinuousClock.now - last >= .milliseconds(500) { return }
            try? await Task.sleep(for: .milliseconds(100))
        }
    }
    /// A reconnect whose device is no longer kept: BlueZ's attempt cancelled (or the link that
    /// came up dropped), and the reconnect ends.
    private func abandonReconnect(_ key: DeviceKey, _ s: (connection: BusConnection, bluez: BlueZClient)) async throws(CentralError) -> Never {
        if let d = table.device(key.device, adapter: adapterInfo(key.adapter)?.path ?? BlueZNames.root) {
            if d.connected { localDisconnects.insert(key) }
            try? await Device1(s.connection, d.path).disconnect(timeout: .seconds(5))
        }
        logger.info("reconnect given up: the device is no longer kept", ["device": key.device.description])
        throw .invalidState("\(key.device) is no longer kept connected")
    }

    /// Disconnects (and stops keeping) a device.
    public func disconnect(adapter selector: AdapterSelector?, address: BluetoothAddress) async throws(CentralError) -> Bool {
        let s = try requireSession()
        let a = try await adapter(selector)
        let key = DeviceKey(adapter: a.address, device: address)
        var wasKept = false
        if let k = kept.removeValue(forKey: key) {
            k.task?.cancel()
            wasKept = true
        }
        guard let d = table.device(address, adapter: a.path) else {
            if wasKept { return false }
            throw .notFound("device \(address) on \(a.name)")
        }
        guard d.connected else { return false }
        localDisconnects.insert(key)
        do {
            try await Device1(s.connection, d.path).disconnect()
        } catch {
            localDisconnects.remove(key)
            throw .refused("disconnecting \(address)", error)
        }
        _ = await waitUntil(.seconds(5)) { t in t.device(address, adapter: a.path)?.connected != true }
        return true
    }

    func deviceDisconnected(_ key: DeviceKey, reason given: String?) {
        let reason: String
        if localDisconnects.remove(key) != nil { reason = "local" }
        else if let given { reason = given }
        else if adapterInfo(key.adapter)?.powered == false { reason = "adapter-off" }
        else { reason = "remote" }  // the link was lost or the peer ended it (BlueZ < 5.80 does not say which)
        reportDisconnect(key, reason: reason)
    }

    func reportDisconnect(_ key: DeviceKey, reason: String) {
        let keep = kept[key] != nil
        logger.info("disconnected", ["device": key.device.description, "reason": reason, "keep": "\(keep)"])
        for (path, s) in sources where s.key == key { endSource(path, s, reason: "disconnected (\(reason))") }
        onEvent(.disconnected(adapter: key.adapter, device: key.device, reason: reason, willReconnect: keep))
        if keep { scheduleReconnect(key, attempt: 1, lastError: nil) }
    }

    func restartKept(adapter: BluetoothAddress) {
        for key in kept.keys where key.adapter == adapter {
            if table.device(key.device, adapter: adapterInfo(adapter)?.path ?? BlueZNames.root)?.connected == true { continue }
            scheduleReconnect(key, attempt: 1, lastError: nil)
        }
    }

    /// Keep-connected: tries again after a growing delay (`Backoff.reconnect`).
    private func scheduleReconnect(_ key: DeviceKey, attempt: Int, lastError: String?) {
        guard let k = kept[key] else { return }
        if let running = k.task, !running.isCancelled { return }
        let delay = Backoff.reconnect.delay(after: attempt)
        onEvent(.reconnecting(adapter: key.adapter, device: key.device, attempt: attempt, delay: delay.seconds, lastError: lastError))
        kept[key]?.task = Task { [weak self] in
            try? await Task.sleep(for: delay)
            if Task.isCancelled { return }
            await self?.reconnect(key, attempt: attempt)
        }
    }

    private func reconnect(_ key: DeviceKey, attempt: Int) async {
        guard kept[key] != nil else { return }
        kept[key]?.task = nil
        guard let a = adapterInfo(key.adapter), a.powered else { return }  // restarted when the adapter is back
        do {
            _ = try await connectOnce(a, address: key.device, addressType: nil, timeout: .seconds(15), whileKept: true)
        } catch {
            guard let k = kept[key], k.task == nil else { return }
            scheduleReconnect(key, attempt: attempt + 1, lastError: error.description)
        }
    }

    /// The devices BlueZ knows on an adapter.
    public func devices(adapter selector: AdapterSelector?) async throws(CentralError) -> (AdapterInfo, [RemoteDevice], kept: Set<BluetoothAddress>) {
        let a = try await adapter(selector)
        return (a, table.devices(adapter: a.path), Set(kept.keys.filter { $0.adapter == a.address }.map(\.device)))
    }
}
