import BLE
import DBus
import FoundationEssentials
import Logging

/// The BLE central role over BlueZ: scans with filters, one operation gate per adapter,
/// connections (optionally kept), GATT discovery, reads, writes, subscriptions, pairing.
///
/// Everything a user asked for (scans, kept connections, subscriptions) belongs to this
/// actor, not to the bus session, so it is applied again when bluetoothd or an adapter
/// comes back (docs/reference-flows.md U1). This file follows BlueZ's objects; the roles are extensions beside it
/// (`CentralScanning`, `CentralConnecting`, `CentralGatt`, `CentralSubscriptions`,
/// `CentralPairing`). The decisions are made by pure types (`DiscoveryScheduler`,
/// `Connector`, `Backoff`); the calls go through the typed proxies (`Adapter1`, ...).
public actor Central {
    let logger: Logger
    let onEvent: @Sendable (CentralEvent) -> Void
    var session: (connection: BusConnection, bluez: BlueZClient)?
    private var sessionTask: Task<Void, Never>?
    var table = BlueZObjectTable()
    private var waiters: [UUID: TableWaiter] = [:]

    var scans: [String: Scan] = [:]
    var nextScan = 1
    /// When discovery runs on each adapter (pure: scans, merged filters, pauses).
    var discovery = DiscoveryScheduler()
    /// Per adapter: the serialised reconcile and the operation gate.
    var adapterOps: [BluetoothAddress: AdapterOps] = [:]
    /// Why the last StartDiscovery (or its filter) was refused, for the scan that asked.

    /// Devices to keep connected, with their reconnect loop.
    var kept: [DeviceKey: KeepState] = [:]
    /// Disconnects we asked for (their event says `local`).
    var localDisconnects: Set<DeviceKey> = []
    /// Reasons BlueZ 5.80+ gives in Device1.Disconnected, until the Connected change arrives.
    var disconnectReasons: [ObjectPath: String] = [:]
    /// The address each adapter path had when last seen. The devices of a removed adapter
    /// come out of the object table on one stream, the adapter out of BlueZClient's list on
    /// another: a connected device removed after its adapter left that list is still
    /// reported disconnected (it was lost without a word).
    var adapterAtPath: [ObjectPath: BluetoothAddress] = [:]
    /// When each device's GATT objects last appeared, changed or went (see `settle`).
    var lastAttributeChange: [ObjectPath: ContinuousClock.Instant] = [:]

    var sources: [ObjectPath: NotifySource] = [:]
    /// Sources whose AcquireNotify or StartNotify is under way (later subscribers wait for it).
    var settingUp: [ObjectPath: Task<NotifySource, any Error>] = [:]
    var subscriptions: [String: Subscription] = [:]
    var nextSubscription = 1

    struct KeepState {
        /// The pending reconnect, if one is scheduled.
        var task: Task<Void, Never>?
    }

    struct Scan {
        let id: String
        let owner: UInt64
        let adapter: BluetoothAddress
        let filter: ScanFilter
        var reported: Set<BluetoothAddress> = []
        var timer: Task<Void, Never>?
    }

    struct AdapterOps {
        var reconciling = false
        var reconcileAgain = false
        /// Callers of `reconcile` while one ran: resumed once the pass that includes their
        /// change is done.
        var reconcileWaiters: [CheckedContinuation<Void, Never>] = []
        /// Why the adapter's last discovery call failed (nil once one succeeds).
        var lastDiscoveryError: BlueZCallError?
        /// The operation gate: one connect (or pair) at a time on an adapter.
        var busy = false
        /// Operations waiting for the gate, in order: resumed true when it is theirs, false
        /// when their deadline passed first.
        var gateWaiters: [(id: UInt64, wake: CheckedContinuation<Bool, Never>)] = []
    }
    /// Numbers the gate's waiters (to take the one whose deadline passed out of line).
    var nextGateWaiter: UInt64 = 0

    struct Subscription {
        let id: String
        let owner: UInt64
        let key: DeviceKey
        let charPath: ObjectPath
        let uuid: BluetoothUUID
    }

    struct TableWaiter {
        let predicate: @Sendable (BlueZObjectTable) -> Bool
        let continuation: CheckedContinuation<Bool, Never>
    }

    /// Creates the central; events go to `onEvent` (from the actor or a notification queue, in order per source).
    public init(logger: Logger, onEvent: @escaping @Sendable (CentralEvent) -> Void) {
        self.logger = logger
        self.onEvent = onEvent
    }

    // MARK: Session

    /// Uses a new bus connection: follows BlueZ's objects and restarts what was asked for.
    public func attach(connection: BusConnection, bluez: BlueZClient) async {
        session = (connection, bluez)
        // BlueZ's events, one at a time in the order emitted; subscribed now, so none is missed.
        let events = bluez.follow { [weak self] event in await self?.bluezEvent(event) }
        sessionTask?.cancel()
        sessionTask = Task { [weak self] in
            // This task lasts until the event loop ends, so cancelling it (detach, the next
            // attach) ends that loop too.
            await withTaskCancellationHandler {
                if let signals = try? await connection.signals(MatchRule(sender: BlueZNames.service)) {
                    await self?.resync()
                    for await m in signals {
                        guard let self else { break }
                        await self.handle(m)
                    }
                }
                await events.value
            } onCancel: {
                events.cancel()
            }
        }
    }

    /// The bus connection is gone: everything bus-side is gone with it.
    public func detach() {
        sessionTask?.cancel()
        sessionTask = nil
        session = nil
        lostBluetoothd(reason: "the bus connection was lost")
    }

    /// Stops everything (daemon shutdown): scans, subscriptions, kept connections.
    public func shutdown() async {
        for (_, k) in kept { k.task?.cancel() }
        kept = [:]
        for id in Array(scans.keys) { await stopScan(id, reason: "stopped") }
        for id in Array(subscriptions.keys) { await unsubscribe(id, reason: "stopped") }
    }

    private func bluezEvent(_ event: BlueZEvent) async {
        switch event {
        case .available:
            await resync()
        case .unavailable:
            lostBluetoothd(reason: "bluetoothd stopped")
        case .adapterAdded(let a, _):
            adapterAtPath[a.path] = a.address
            await resync()
            discovery.adapterAppeared(a.address)
            await reconcile(a.address)
            restartKept(adapter: a.address)
        case .adapterRemoved(let a):
            discovery.adapterGone(a.address)
        case .adapterChanged(let a, let changed):
            if changed.contains("powered") {
                discovery.adapterPowerChanged(a.address, on: a.powered)
                if a.powered {
                    await reconcile(a.address)
                    restartKept(adapter: a.address)
                }
            } else if changed.contains("discovering"), !a.discovering, discovery.discoveryStopped(adapter: a.address) {
                // Someone (or the controller) stopped discovery under us: start it again.
                await reconcile(a.address)
            }
        }
    }

    private func lostBluetoothd(reason: String) {
        discovery.bluetoothdGone()
        for d in table.devices.values where d.connected {
            if let a = adapterAddress(of: d.adapterPath) { reportDisconnect(DeviceKey(adapter: a, device: d.address), reason: "bluetoothd-gone") }
        }
        for (path, s) in sources { endSource(path, s, reason: reason) }
        _ = table.reset([:])
    }

    /// Reads BlueZ's objects again.
    func resync() async {
        guard let session else { return }
        do {
            let objects = try await session.connection.getManagedObjects(destination: BlueZNames.service, timeout: .seconds(10))
            let changes = table.reset(objects)
            process(changes)
        } catch {
            logger.debug("cannot read BlueZ objects", ["error": "\(error)"])
        }
    }

    /// Reads whether a device is connected (one GetAll: much cheaper than `resync` when the
    /// tree holds every device a scan saw); falls back to `resync` when that fails.
    ///
    /// Only `Connected` is taken from the answer. The table follows bluetoothd's signals in
    /// order, and a reply overtakes the signals still queued for the table: taking
    /// `ServicesResolved` from it would let a connect finish before the `InterfacesAdded` of
    /// the GATT objects that came before it (seen in the lab: a refreshed tree without its
    /// service). `ServicesResolved` is waited for in its place in the signal order.
    func refreshConnected(_ device: ObjectPath) async {
        guard let session else { return }
        do {
            let props = try await session.connection.getAllProperties(destination: BlueZNames.service, path: device,
                                                                      interface: BlueZNames.device, timeout: .seconds(5))
            process(table.refresh(device: device, props.filter { $0.key == "Connected" }))
        } catch {
            logger.debug("cannot read the device's properties", ["path": device.description, "error": "\(error)"])
            await resync()
        }
    }

    private func handle(_ m: BusMessage) {
        if let (path, reason) = Device1.disconnected(m) {
            // BlueZ 5.80+: the reason, before Connected goes false.
            disconnectReasons[path] = reason
            return
        }
        process(table.apply(m))
    }

    private func process(_ changes: [BlueZObjectTable.Change]) {
        for c in changes {
            switch c {
            case .deviceAdded(let d):
                report(d)
            case .deviceChanged(let d, let keys):
                if keys.contains("connected"), !d.connected, let a = adapterAddress(of: d.adapterPath) {
                    let reason = disconnectReasons.removeValue(forKey: d.path)
                    deviceDisconnected(DeviceKey(adapter: a, device: d.address), reason: reason)
                }
                if keys.contains(where: { ["rssi", "manufacturer_data", "service_data", "name", "uuids", "tx_power"].contains($0) }) {
                    report(d)
                }
            case .deviceRemoved(let d):
                lastAttributeChange.removeValue(forKey: d.path)
                if d.connected, let a = adapterAddress(of: d.adapterPath) {
                    deviceDisconnected(DeviceKey(adapter: a, device: d.address), reason: "removed")
                }
            case .value(let path, let value):
                if let s = sources[path], !s.acquired { s.deliver([value]) }
            case .attribute(let path):
                // Remember when a device's GATT objects last changed (see settle()).
                if let dev = table.devices.keys.first(where: { path.isDescendant(of: $0, orSelf: false) }) {
                    lastAttributeChange[dev] = .now
                }
                if let s = sources[path], !s.acquired, table.attributes[path]?.notifying == false {
                    endSource(path, s, reason: "notifications stopped")
                }
            }
        }
        for (id, w) in waiters where w.predicate(table) {
            waiters.removeValue(forKey: id)
            w.continuation.resume(returning: true)
        }
    }

    func adapterAddress(of path: ObjectPath) -> BluetoothAddress? {
        if let a = session?.bluez.adaptersNow.first(where: { $0.path == path }) {
            adapterAtPath[path] = a.address
            return a.address
        }
        return adapterAtPath[path]
    }

    func adapterInfo(_ address: BluetoothAddress) -> AdapterInfo? {
        session?.bluez.adaptersNow.first { $0.address == address }
    }

    /// Waits until `predicate` holds for the object table, at most `timeout`; false on timeout.
    func waitUntil(_ timeout: Duration, _ predicate: @escaping @Sendable (BlueZObjectTable) -> Bool) async -> Bool {
        if predicate(table) { return true }
        let id = UUID()
        let timer = Task { [weak self] in
            try? await Task.sleep(for: timeout)
            await self?.expireWaiter(id)
        }
        defer { timer.cancel() }
        return await withCheckedContinuation { c in
            waiters[id] = TableWaiter(predicate: predicate, continuation: c)
        }
    }

    /// Checks the waiters again (a call's completion changed what a predicate reads).
    func recheckWaiters() { process([]) }

    private func expireWaiter(_ id: UUID) {
        waiters.removeValue(forKey: id)?.continuation.resume(returning: false)
    }

    func requireSession() throws(CentralError) -> (connection: BusConnection, bluez: BlueZClient) {
        guard let session else { throw .bluez(.unavailable("not connected to the system bus")) }
        return session
    }

    /// The adapter a selector names (the first one for nil).
    func adapter(_ selector: AdapterSelector?) async throws(CentralError) -> AdapterInfo {
        let s = try requireSession()
        do { return try await s.bluez.adapter(selector) } catch { throw .bluez(error) }
    }

    /// The adapter a selector names; it must be powered.
    func poweredAdapter(_ selector: AdapterSelector?) async throws(CentralError) -> AdapterInfo {
        let a = try await adapter(selector)
        if a.powerState == "off-blocked" { throw .bluez(.blocked(a)) }
        guard a.powered else { throw .adapterOff(a) }
        return a
    }

}
