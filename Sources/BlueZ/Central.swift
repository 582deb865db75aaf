import BLE
import DBus
import Foundation
import Logging
import Synchronization
import SystemKit

/// The BLE central role over BlueZ: scans with filters, one operation scheduler per adapter,
/// connections (optionally kept), GATT discovery, reads, writes, subscriptions, pairing.
///
/// Everything a user asked for (scans, kept connections, subscriptions) belongs to this
/// actor, not to the bus session, so it is applied again when bluetoothd or an adapter
/// comes back (FIELD.md section 3, item 1).
public actor Central {
    private let logger: Logger
    private let onEvent: @Sendable (CentralEvent) -> Void
    private var session: (connection: BusConnection, bluez: BlueZClient)?
    private var sessionTask: Task<Void, Never>?
    private var table = BlueZObjectTable()
    private var waiters: [UUID: TableWaiter] = [:]

    private var scans: [String: Scan] = [:]
    private var nextScan = 1
    private var adapterOps: [BluetoothAddress: AdapterOps] = [:]

    /// Devices to keep connected, with their reconnect loop.
    private var kept: [DeviceKey: KeepState] = [:]
    /// Disconnects we asked for (their event says `local`).
    private var localDisconnects: Set<DeviceKey> = []
    /// Reasons BlueZ 5.80+ gives in Device1.Disconnected, until the Connected change arrives.
    private var disconnectReasons: [ObjectPath: String] = [:]

    private var sources: [ObjectPath: NotifySource] = [:]
    private var subscriptions: [String: Subscription] = [:]
    private var nextSubscription = 1

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
        /// Whether our discovery session is running (as far as we know).
        var discovering = false
        /// The filter last set.
        var appliedFilter: [String: DBusValue]?
        /// Connects in progress: discovery is paused while this is above 0.
        var pauses = 0
        var reconciling = false
        var reconcileAgain = false
        /// The operation gate: one connect (or pair) at a time on an adapter.
        var busy = false
        var gateWaiters: [CheckedContinuation<Void, Never>] = []
    }

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
        bluez.addListener { [weak self] event in
            guard let self else { return }
            Task { await self.bluezEvent(event) }
        }
        sessionTask?.cancel()
        sessionTask = Task { [weak self] in
            guard let signals = try? await connection.signals(MatchRule(sender: BlueZNames.service)) else { return }
            await self?.resync()
            for await m in signals {
                guard let self else { return }
                await self.handle(m)
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
        case .adapterAdded(let a):
            await resync()
            adapterOps[a.address]?.discovering = false
            adapterOps[a.address]?.appliedFilter = nil
            await reconcile(a.address, resumed: true)
            restartKept(adapter: a.address)
        case .adapterRemoved(let a):
            adapterOps[a.address]?.discovering = false
            adapterOps[a.address]?.appliedFilter = nil
        case .adapterChanged(let a, let changed):
            if changed.contains("powered") {
                adapterOps[a.address]?.discovering = false
                adapterOps[a.address]?.appliedFilter = nil
                if a.powered {
                    await reconcile(a.address, resumed: true)
                    restartKept(adapter: a.address)
                }
            } else if changed.contains("discovering"), !a.discovering, adapterOps[a.address]?.discovering == true,
                      adapterOps[a.address]?.pauses == 0, scans.values.contains(where: { $0.adapter == a.address }) {
                // Someone (or the controller) stopped discovery under us: start it again.
                adapterOps[a.address]?.discovering = false
                await reconcile(a.address, resumed: false)
            }
        }
    }

    private func lostBluetoothd(reason: String) {
        for k in Array(adapterOps.keys) {
            adapterOps[k]?.discovering = false
            adapterOps[k]?.appliedFilter = nil
        }
        for d in table.devices.values where d.connected {
            if let a = adapterAddress(of: d.adapterPath) { reportDisconnect(DeviceKey(adapter: a, device: d.address), reason: "bluetoothd-gone") }
        }
        for (path, s) in sources { endSource(path, s, reason: reason) }
        _ = table.reset([:])
    }

    /// Reads BlueZ's objects again.
    private func resync() async {
        guard let session else { return }
        do {
            let objects = try await session.connection.getManagedObjects(destination: BlueZNames.service, timeout: .seconds(10))
            let changes = table.reset(objects)
            process(changes)
        } catch {
            logger.debug("cannot read BlueZ objects", ["error": "\(error)"])
        }
    }

    private func handle(_ m: BusMessage) {
        if m.interface == BlueZNames.device, m.member == "Disconnected", let path = m.path {
            // BlueZ 5.80+: the reason, before Connected goes false.
            let reason = m.body.first?.string.map { $0.split(separator: ".").last.map { String($0).lowercased() } ?? $0 } ?? "unknown"
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

    private func adapterAddress(of path: ObjectPath) -> BluetoothAddress? {
        session?.bluez.adaptersNow.first { $0.path == path }?.address
    }

    private func adapterInfo(_ address: BluetoothAddress) -> AdapterInfo? {
        session?.bluez.adaptersNow.first { $0.address == address }
    }

    /// Waits until `predicate` holds for the object table, at most `timeout`; false on timeout.
    private func waitUntil(_ timeout: Duration, _ predicate: @escaping @Sendable (BlueZObjectTable) -> Bool) async -> Bool {
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

    private func expireWaiter(_ id: UUID) {
        waiters.removeValue(forKey: id)?.continuation.resume(returning: false)
    }

    private func requireSession() throws(CentralError) -> (connection: BusConnection, bluez: BlueZClient) {
        guard let session else { throw .bluez(.unavailable("not connected to the system bus")) }
        return session
    }

    /// The adapter a selector names (the first one for nil).
    private func adapter(_ selector: AdapterSelector?) async throws(CentralError) -> AdapterInfo {
        let s = try requireSession()
        do { return try await s.bluez.adapter(selector) } catch { throw .bluez(error) }
    }

    /// The adapter a selector names; it must be powered.
    private func poweredAdapter(_ selector: AdapterSelector?) async throws(CentralError) -> AdapterInfo {
        let a = try await adapter(selector)
        if a.powerState == "off-blocked" { throw .bluez(.blocked(a)) }
        guard a.powered else { throw .invalidState("adapter \(a.name) (\(a.address)) is powered off; turn it on with 'peerlink adapter power on --adapter \(a.name)'") }
        return a
    }

    // MARK: Scanning

    /// Starts a scan for `owner`; returns its id and adapter. Devices being seen already that
    /// match are reported at once.
    public func startScan(owner: UInt64, adapter selector: AdapterSelector?, filter: ScanFilter, timeout: Duration?) async throws(CentralError) -> (id: String, adapter: AdapterInfo) {
        let a = try await poweredAdapter(selector)
        let id = "scan-\(nextScan)"
        nextScan += 1
        var scan = Scan(id: id, owner: owner, adapter: a.address, filter: filter)
        if let timeout {
            scan.timer = Task { [weak self] in
                try? await Task.sleep(for: timeout)
                if Task.isCancelled { return }
                await self?.stopScan(id, reason: "timeout")
            }
        }
        scans[id] = scan
        if adapterOps[a.address] == nil { adapterOps[a.address] = AdapterOps() }
        await reconcile(a.address, resumed: false)
        if scans[id] != nil, adapterOps[a.address]?.discovering != true, adapterOps[a.address]?.pauses == 0 {
            scans.removeValue(forKey: id)?.timer?.cancel()
            await reconcile(a.address, resumed: false)
            throw .refused("StartDiscovery on \(a.name)", lastDiscoveryError ?? BusError(name: BusError.failed, message: "discovery did not start"))
        }
        logger.info("scan started", ["scan": id, "adapter.name": a.name])
        // Devices seen now (they have an RSSI) would not be announced again: report them.
        let adapterPath = a.path
        Task { [weak self] in await self?.reportCurrent(id, adapterPath) }
        return (id, a)
    }

    private var lastDiscoveryError: BusError?

    private func reportCurrent(_ id: String, _ adapterPath: ObjectPath) {
        for d in table.devices(adapter: adapterPath) where d.rssi != nil { report(d, only: id) }
    }

    /// Stops a scan; false when there is none with that id.
    @discardableResult
    public func stopScan(_ id: String, reason: String = "stopped") async -> Bool {
        guard let s = scans.removeValue(forKey: id) else { return false }
        s.timer?.cancel()
        onEvent(.scanEnded(scan: id, owner: s.owner, reason: reason))
        logger.info("scan ended", ["scan": id, "reason": reason])
        await reconcile(s.adapter, resumed: false)
        return true
    }

    /// The scans running now.
    public var scanList: [ScanInfo] {
        scans.values.sorted { $0.id < $1.id }.map { ScanInfo(id: $0.id, owner: $0.owner, adapter: $0.adapter, filter: $0.filter, reported: $0.reported.count) }
    }

    /// Ends everything a control client owned (its scans and subscriptions).
    public func ownerGone(_ owner: UInt64) async {
        for s in scans.values where s.owner == owner { await stopScan(s.id, reason: "client-gone") }
        for s in subscriptions.values where s.owner == owner { await unsubscribe(s.id, reason: "client-gone") }
    }

    private func report(_ d: RemoteDevice, only: String? = nil) {
        guard d.rssi != nil, let a = session?.bluez.adaptersNow.first(where: { $0.path == d.adapterPath }) else { return }
        for (id, s) in scans where s.adapter == a.address && (only == nil || only == id) {
            guard s.filter.matches(d) else { continue }
            if !s.filter.duplicates {
                guard !s.reported.contains(d.address) else { continue }
            }
            scans[id]?.reported.insert(d.address)
            onEvent(.discovered(scan: id, owner: s.owner, adapter: a, device: d))
        }
    }

    /// Brings discovery on one adapter in line with the scans and pauses (serialised).
    private func reconcile(_ address: BluetoothAddress, resumed: Bool) async {
        if adapterOps[address] == nil { adapterOps[address] = AdapterOps() }
        if adapterOps[address]!.reconciling {
            adapterOps[address]!.reconcileAgain = true
            return
        }
        adapterOps[address]!.reconciling = true
        repeat {
            adapterOps[address]!.reconcileAgain = false
            await reconcileOnce(address, resumed: resumed)
        } while adapterOps[address]!.reconcileAgain
        adapterOps[address]!.reconciling = false
    }

    private func reconcileOnce(_ address: BluetoothAddress, resumed: Bool) async {
        guard let session, let a = adapterInfo(address) else { return }
        let mine = scans.values.filter { $0.adapter == address }
        let ops = adapterOps[address]!
        let wanted = !mine.isEmpty && ops.pauses == 0 && a.powered
        let call = { (member: String, body: [DBusValue]) async throws in
            _ = try await session.connection.call(destination: BlueZNames.service, path: a.path, interface: BlueZNames.adapter,
                                                  member: member, body, timeout: .seconds(10))
        }
        if wanted {
            let filter = ScanFilter.discoveryFilter(merging: mine.map(\.filter))
            do {
                if ops.appliedFilter != filter {
                    try await call("SetDiscoveryFilter", [.propertyMap(filter)])
                    adapterOps[address]?.appliedFilter = filter
                }
                if !ops.discovering {
                    do {
                        try await call("StartDiscovery", [])
                    } catch let e as BusError where e.shortName == "InProgress" {
                        // Our session is already running (bluetoothd says so): fine.
                    }
                    adapterOps[address]?.discovering = true
                    lastDiscoveryError = nil
                    logger.debug("discovery on", ["adapter.name": a.name])
                    if resumed { for s in mine { onEvent(.scanResumed(scan: s.id, owner: s.owner, adapter: a)) } }
                }
            } catch {
                lastDiscoveryError = (error as? BusError) ?? BusError(name: BusError.failed, message: "\(error)")
                logger.warning("cannot start discovery", ["adapter.name": a.name, "error": "\(error)"])
            }
        } else if ops.discovering {
            do {
                try await call("StopDiscovery", [])
            } catch {
                logger.debug("StopDiscovery failed", ["adapter.name": a.name, "error": "\(error)"])
            }
            adapterOps[address]?.discovering = false
            if mine.isEmpty, ops.appliedFilter != nil {
                try? await call("SetDiscoveryFilter", [.propertyMap([:])])
                adapterOps[address]?.appliedFilter = nil
            }
            logger.debug("discovery off", ["adapter.name": a.name, "paused": "\(ops.pauses > 0)"])
        }
    }

    // MARK: The operation gate

    private func acquire(_ address: BluetoothAddress) async {
        if adapterOps[address] == nil { adapterOps[address] = AdapterOps() }
        if !adapterOps[address]!.busy {
            adapterOps[address]!.busy = true
            return
        }
        await withCheckedContinuation { c in adapterOps[address]!.gateWaiters.append(c) }
    }

    private func release(_ address: BluetoothAddress) {
        guard adapterOps[address] != nil else { return }
        if adapterOps[address]!.gateWaiters.isEmpty {
            adapterOps[address]!.busy = false
        } else {
            adapterOps[address]!.gateWaiters.removeFirst().resume()
        }
    }

    /// Runs `body` with the adapter's gate held and its discovery paused.
    private func exclusive<T: Sendable>(_ address: BluetoothAddress, _ body: () async throws(CentralError) -> T) async throws(CentralError) -> T {
        await acquire(address)
        adapterOps[address]!.pauses += 1
        await reconcile(address, resumed: false)
        let result: Result<T, CentralError>
        do { result = .success(try await body()) } catch { result = .failure(error) }
        adapterOps[address]!.pauses -= 1
        await reconcile(address, resumed: false)
        release(address)
        return try result.get()
    }

    // MARK: Connections

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

    private func connectOnce(_ a: AdapterInfo, address: BluetoothAddress, addressType: String?, timeout: Duration) async throws(CentralError) -> RemoteDevice {
        let deadline = ContinuousClock.now + timeout
        let key = DeviceKey(adapter: a.address, device: address)
        if let d = table.device(address, adapter: a.path), d.connected, d.servicesResolved { return d }
        let s = try requireSession()
        let adapterPath = a.path
        let isResolved: @Sendable (BlueZObjectTable) -> Bool = { t in
            guard let d = t.device(address, adapter: adapterPath) else { return false }
            return d.connected && d.servicesResolved
        }
        logger.info("connecting", ["device": address.description, "adapter.name": a.name, "timeout": timeout.secondsText])
        try await exclusive(a.address) { () async throws(CentralError) -> Void in
            var attempt = 0
            var lastError: String?
            while true {
                let remaining = deadline - .now
                if remaining <= .milliseconds(50) {
                    // Cancel a connection attempt BlueZ may still be making.
                    if let d = table.device(address, adapter: a.path) {
                        if d.connected { localDisconnects.insert(key) }
                        _ = try? await s.connection.call(destination: BlueZNames.service, path: d.path, interface: BlueZNames.device,
                                                         member: "Disconnect", timeout: .seconds(5))
                    }
                    throw .timeout("could not connect to \(address) on \(a.name) within \(timeout.secondsText) (\(attempt) attempt\(attempt == 1 ? "" : "s")\(lastError.map { "; last: \($0)" } ?? ""))")
                }
                if let d = table.device(address, adapter: a.path), d.connected {
                    // Connected (by us, or already): wait for GATT discovery (bluez #191, bleak #882).
                    if d.servicesResolved { return }
                    if await waitUntil(min(remaining, .seconds(10)), isResolved) { return }
                    guard table.device(address, adapter: a.path)?.connected == true else { continue }
                    // Connected without services: drop the link and try again.
                    lastError = "connected but the services were not resolved"
                    logger.info("services not resolved; reconnecting", ["device": address.description])
                    localDisconnects.insert(key)
                    _ = try? await s.connection.call(destination: BlueZNames.service, path: d.path, interface: BlueZNames.device,
                                                     member: "Disconnect", timeout: .seconds(5))
                    _ = await waitUntil(.seconds(3)) { t in t.device(address, adapter: adapterPath)?.connected != true }
                    localDisconnects.remove(key)
                    continue
                }
                attempt += 1
                do {
                    // BlueZ answers Connect on LE only once GATT discovery is done; in the field (and
                    // in the emulator) that discovery can stall on a live link. So the call runs
                    // beside a watch: connected but unresolved for `resolveLimit` means drop the
                    // link (which ends the call) and try again.
                    let message: BusMessage
                    if let d = table.device(address, adapter: a.path) {
                        logger.debug("Device1.Connect", ["device": address.description, "attempt": "\(attempt)"])
                        message = .methodCall(destination: BlueZNames.service, path: d.path, interface: BlueZNames.device, member: "Connect")
                    } else {
                        // Not in BlueZ's cache (never seen, or evicted): ConnectDevice creates it.
                        logger.debug("Adapter1.ConnectDevice", ["device": address.description, "attempt": "\(attempt)"])
                        let params: [String: DBusValue] = ["Address": .string(address.description), "AddressType": .string(addressType ?? "public")]
                        message = .methodCall(destination: BlueZNames.service, path: a.path, interface: BlueZNames.adapter, member: "ConnectDevice",
                                              body: [.propertyMap(params)])
                    }
                    let outcome = CallOutcome()
                    s.connection.call(message, timeout: remaining) { [weak self] r in
                        outcome.set(r.map { _ in () })
                        Task { await self?.recheckWaiters() }
                    }
                    let isConnected: @Sendable (BlueZObjectTable) -> Bool = { t in t.device(address, adapter: adapterPath)?.connected == true }
                    let linkWait = min(max(deadline - .now, .milliseconds(100)), Self.linkLimit)
                    if await waitUntil(linkWait, { t in outcome.isSet || isConnected(t) }) == false, deadline - .now > .milliseconds(500) {
                        // No link and no answer: bluetoothd 5.66 can lose a Connect when its ATT
                        // connect and the kernel's Device Connected event race (it logs "is already
                        // connected" and never answers). Cancel it and try again.
                        lastError = "no connection within \(Self.linkLimit.secondsText)"
                        logger.info("no connection yet; cancelling and retrying", ["device": address.description, "attempt": "\(attempt)"])
                        if let d = table.device(address, adapter: a.path) {
                            _ = try? await s.connection.call(destination: BlueZNames.service, path: d.path, interface: BlueZNames.device,
                                                             member: "Disconnect", timeout: .seconds(5))
                        }
                        _ = await waitUntil(.seconds(3)) { _ in outcome.isSet }
                        continue
                    }
                    if let r = outcome.result, case .failure(let e) = r { throw e }
                    if table.device(address, adapter: a.path)?.connected == true, !isResolved(table) {
                        let limit = min(max(deadline - .now, .milliseconds(100)), Self.resolveLimit)
                        if await waitUntil(limit, { t in isResolved(t) || (outcome.isSet && !isConnected(t)) }) == false,
                           let d = table.device(address, adapter: a.path), d.connected, deadline - .now > .milliseconds(500) {
                            lastError = "connected but the services were not resolved within \(Self.resolveLimit.secondsText)"
                            logger.info("services not resolved; reconnecting", ["device": address.description, "attempt": "\(attempt)"])
                            localDisconnects.insert(key)
                            _ = try? await s.connection.call(destination: BlueZNames.service, path: d.path, interface: BlueZNames.device,
                                                             member: "Disconnect", timeout: .seconds(5))
                            _ = await waitUntil(.seconds(3)) { t in t.device(address, adapter: adapterPath)?.connected != true }
                            localDisconnects.remove(key)
                            continue
                        }
                    }
                    if isResolved(table) { return }
                    if let r = outcome.result, case .failure(let e) = r { throw e }
                    // Answered, not yet resolved: the connected branch above waits for the services.
                    if outcome.isSet, await waitUntil(.milliseconds(150), isConnected) == false {
                        // BlueZ said yes but no Connected change arrived (seen on the first
                        // connect after a scan): read its objects again rather than wait.
                        logger.info("Connect answered but the device is not connected; reading BlueZ's state again",
                                    ["device": address.description, "attempt": "\(attempt)"])
                        await resync()
                        if !isConnected(table) {
                            lastError = "BlueZ answered Connect but the device did not connect"
                            try? await Task.sleep(for: .milliseconds(500))
                        }
                    }
                    continue
                } catch let e as BusError {
                    lastError = e.message.isEmpty ? e.name : e.message
                    if e.shortName == "AlreadyConnected" || e.shortName == "AlreadyExists" {
                        _ = await waitUntil(.seconds(2)) { t in t.device(address, adapter: adapterPath)?.connected == true }
                        continue
                    }
                    if e.name == BusError.unknownMethod {
                        throw .notFound("device \(address) is not known to BlueZ on \(a.name); scan for it first (connecting to an unseen address needs ConnectDevice, bluetoothd --experimental)")
                    }
                    if e.isServiceGone { throw .bluez(.unavailable("bluetoothd went away")) }
                    if e.name == BusError.noReply { continue }
                    guard ConnectErrors.isTransient(e) else { throw .refused("connecting to \(address)", e) }
                    let delay = min(0.25 * pow(2, Double(attempt - 1)), 2.0)
                    logger.info("connect failed, retrying", ["device": address.description, "attempt": "\(attempt)", "error": lastError ?? "", "retry_in": "\(delay)"])
                    try? await Task.sleep(for: .milliseconds(Int(delay * 1000)))
                } catch is CancellationError {
                    throw .invalidState("cancelled")
                } catch {
                    throw .refused("connecting to \(address)", BusError(name: BusError.failed, message: "\(error)"))
                }
            }
        }
        guard var d = table.device(address, adapter: a.path) else { throw .invalidState("\(address) went away just after connecting") }
        await settle(d.path)
        if table.children(of: d.path, .service).isEmpty {
            await resync()
        }
        d = table.device(address, adapter: a.path) ?? d
        localDisconnects.remove(key)
        logger.info("connected", ["device": address.description, "adapter.name": a.name, "services": "\(table.children(of: d.path, .service).count)"])
        onEvent(.connected(adapter: a, device: d))
        return d
    }

    /// How long a connected device may take to resolve its services before the link is
    /// dropped and tried again.
    static let resolveLimit: Duration = .seconds(15)
    /// How long one connection attempt may go without a link before it is cancelled and made again.
    static let linkLimit: Duration = .seconds(12)

    private func recheckWaiters() { process([]) }

    static let gapService = BluetoothUUID(uuid16: 0x1800)
    static let gattService = BluetoothUUID(uuid16: 0x1801)

    /// When each device's GATT objects last appeared, changed or went.
    private var lastAttributeChange: [ObjectPath: ContinuousClock.Instant] = [:]

    /// Waits (at most 5 s) until a device's GATT tree looks whole: ServicesResolved can come
    /// before BlueZ has exported every object (bluez #191; seen in the lab after a cache
    /// refresh: one service, no characteristics), so "resolved" alone is not "the tree is
    /// there". A tree whose own services (not GAP/GATT) all have characteristics is taken at
    /// once; otherwise the objects must have stopped changing for 500 ms.
    private func settle(_ device: ObjectPath) async {
        let start = ContinuousClock.now
        while ContinuousClock.now - start < .seconds(5) {
            let services = table.children(of: device, .service)
            // A tree with a service of its own (not only GAP/GATT, whose characteristics BlueZ
            // keeps to itself) where every such service has characteristics is taken as it is;
            // otherwise wait for the objects to stop coming.
            let own = services.filter { $0.uuid != Self.gapService && $0.uuid != Self.gattService }
            let complete = !own.isEmpty && own.allSatisfy { !table.children(of: $0.path, .characteristic).isEmpty }
            if complete { return }
            if !services.isEmpty, let last = lastAttributeChange[device], ContinuousClock.now - last >= .milliseconds(500) { return }
            try? await Task.sleep(for: .milliseconds(100))
        }
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
            _ = try await s.connection.call(destination: BlueZNames.service, path: d.path, interface: BlueZNames.device,
                                            member: "Disconnect", timeout: .seconds(10))
        } catch let e as BusError {
            localDisconnects.remove(key)
            throw .refused("disconnecting \(address)", e)
        } catch {
            throw .invalidState("\(error)")
        }
        _ = await waitUntil(.seconds(5)) { t in t.device(address, adapter: a.path)?.connected != true }
        return true
    }

    private func deviceDisconnected(_ key: DeviceKey, reason given: String?) {
        let reason: String
        if localDisconnects.remove(key) != nil { reason = "local" }
        else if let given { reason = given }
        else if adapterInfo(key.adapter)?.powered == false { reason = "adapter-off" }
        else { reason = "remote" }  // the link was lost or the peer ended it (BlueZ < 5.80 does not say which)
        reportDisconnect(key, reason: reason)
    }

    private func reportDisconnect(_ key: DeviceKey, reason: String) {
        let keep = kept[key] != nil
        logger.info("disconnected", ["device": key.device.description, "reason": reason, "keep": "\(keep)"])
        for (path, s) in sources where s.key == key { endSource(path, s, reason: "disconnected (\(reason))") }
        onEvent(.disconnected(adapter: key.adapter, device: key.device, reason: reason, willReconnect: keep))
        if keep { scheduleReconnect(key, attempt: 1, lastError: nil) }
    }

    private func restartKept(adapter: BluetoothAddress) {
        for key in kept.keys where key.adapter == adapter {
            if table.device(key.device, adapter: adapterInfo(adapter)?.path ?? BlueZNames.root)?.connected == true { continue }
            scheduleReconnect(key, attempt: 1, lastError: nil)
        }
    }

    /// Keep-connected: tries again after a growing delay (0.5 s doubling to 30 s).
    private func scheduleReconnect(_ key: DeviceKey, attempt: Int, lastError: String?) {
        guard let k = kept[key] else { return }
        if let running = k.task, !running.isCancelled { return }
        let delay = min(0.5 * pow(2, Double(attempt - 1)), 30)
        onEvent(.reconnecting(adapter: key.adapter, device: key.device, attempt: attempt, delay: delay, lastError: lastError))
        kept[key]?.task = Task { [weak self] in
            try? await Task.sleep(for: .milliseconds(Int(delay * 1000)))
            if Task.isCancelled { return }
            await self?.reconnect(key, attempt: attempt)
        }
    }

    private func reconnect(_ key: DeviceKey, attempt: Int) async {
        guard kept[key] != nil else { return }
        kept[key]?.task = nil
        guard let a = adapterInfo(key.adapter), a.powered else { return }  // restarted when the adapter is back
        do {
            _ = try await connectOnce(a, address: key.device, addressType: nil, timeout: .seconds(15))
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

    /// A connected device with resolved services.
    private func connectedDevice(_ selector: AdapterSelector?, _ address: BluetoothAddress) async throws(CentralError) -> (AdapterInfo, RemoteDevice) {
        let a = try await adapter(selector)
        guard let d = table.device(address, adapter: a.path) else { throw .notFound("device \(address) on \(a.name) (scan and connect first)") }
        guard d.connected else { throw .invalidState("device \(address) is not connected; connect first ('peerlink connect \(address)')") }
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
                    throw .invalidState("\(address) is paired: a refresh would remove its bond; use 'peerlink forget' and pair again to rebuild the cache")
                }
                let key = DeviceKey(adapter: a.address, device: address)
                if d.connected {
                    localDisconnects.insert(key)
                    _ = try? await s.connection.call(destination: BlueZNames.service, path: d.path, interface: BlueZNames.device, member: "Disconnect", timeout: .seconds(10))
                    _ = await waitUntil(.seconds(5)) { t in t.device(address, adapter: a.path)?.connected != true }
                }
                try await removeDevice(d, from: a, what: "removing the cached device \(address)")
            }
            _ = try await connectOnce(a, address: address, addressType: nil, timeout: timeout)
        }
        let (_, d) = try await connectedDevice(selector, address)
        let tree = table.children(of: d.path, .service).map { s in
            (s, table.children(of: s.path, .characteristic).map { c in (c, table.children(of: c.path, .descriptor)) })
        }
        return (d, tree)
    }

    /// One characteristic of a connected device by UUID (and service UUID when ambiguous).
    private func characteristic(_ selector: AdapterSelector?, _ address: BluetoothAddress, _ uuid: BluetoothUUID,
                                service: BluetoothUUID?) async throws(CentralError) -> (AdapterInfo, RemoteDevice, RemoteAttribute) {
        let (a, d) = try await connectedDevice(selector, address)
        let found = table.characteristics(of: d.path, uuid: uuid, service: service)
        guard let c = found.first else {
            throw .notFound("characteristic \(uuid.uuidString)\(service.map { " in service \($0.uuidString)" } ?? "") on \(address) (see 'peerlink services \(address)')")
        }
        guard found.count == 1 else {
            throw .invalid("service", "characteristic \(uuid.uuidString) is in \(found.count) services of \(address): give the service UUID")
        }
        return (a, d, c)
    }

    private static func bluezCall(_ s: (connection: BusConnection, bluez: BlueZClient), _ path: ObjectPath, _ member: String,
                                  _ body: [DBusValue], what: String, timeout: Duration = .seconds(30)) async throws(CentralError) -> [DBusValue] {
        do {
            return try await s.connection.call(destination: BlueZNames.service, path: path, interface: BlueZNames.gattCharacteristic,
                                               member: member, body, timeout: timeout)
        } catch let e as BusError {
            if e.name == BusError.noReply { throw .timeout("\(what): no answer within \(timeout.secondsText)") }
            if e.isServiceGone { throw .bluez(.unavailable("bluetoothd went away")) }
            throw .refused(what, e)
        } catch {
            throw .invalidState("\(error)")
        }
    }

    /// Reads a characteristic (from `offset`).
    public func read(adapter selector: AdapterSelector?, address: BluetoothAddress, characteristic uuid: BluetoothUUID,
                     service: BluetoothUUID?, offset: Int) async throws(CentralError) -> (RemoteAttribute, [UInt8]) {
        let s = try requireSession()
        let (_, _, c) = try await characteristic(selector, address, uuid, service: service)
        var opts: [String: DBusValue] = [:]
        if offset > 0 { opts["offset"] = .uint16(UInt16(clamping: offset)) }
        let r = try await Self.bluezCall(s, c.path, "ReadValue", [.propertyMap(opts)], what: "reading \(uuid.uuidString) of \(address)")
        guard let bytes = r.first?.byteArray else {
            throw .refused("reading \(uuid.uuidString)", BusError(name: BusError.invalidSignature, message: "ReadValue returned (\(r.map(\.signature).joined())), expected (ay)"))
        }
        return (c, bytes)
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
        var opts: [String: DBusValue] = ["type": .string(command ? "command" : "request")]
        if offset > 0 { opts["offset"] = .uint16(UInt16(clamping: offset)) }
        _ = try await Self.bluezCall(s, c.path, "WriteValue", [.bytes(value), .propertyMap(opts)], what: "writing \(uuid.uuidString) of \(address)")
        return c
    }

    // MARK: Subscriptions

    /// Subscribes `owner` to notifications (AcquireNotify, falling back to StartNotify) or,
    /// with `indicate`, through StartNotify (BlueZ acquires only notifications).
    public func subscribe(owner: UInt64, adapter selector: AdapterSelector?, address: BluetoothAddress, characteristic uuid: BluetoothUUID,
                          service: BluetoothUUID?, indicate: Bool, batch: Bool = false, stream: Bool = false) async throws(CentralError) -> SubscriptionInfo {
        let s = try requireSession()
        let (a, _, c) = try await characteristic(selector, address, uuid, service: service)
        guard c.flags.contains("notify") || c.flags.contains("indicate") else {
            throw .notSupported("characteristic \(uuid.uuidString) neither notifies nor indicates (flags: \(c.flags.joined(separator: ",")))")
        }
        let key = DeviceKey(adapter: a.address, device: address)
        let id = "sub-\(nextSubscription)"
        nextSubscription += 1
        if sources[c.path] == nil {
            let source = NotifySource(key: key, uuid: uuid, onEvent: onEvent)
            if !indicate, c.flags.contains("notify") {
                do {
                    let r = try await s.connection.call(destination: BlueZNames.service, path: c.path, interface: BlueZNames.gattCharacteristic,
                                                        member: "AcquireNotify", [.propertyMap([:])], timeout: .seconds(10))
                    guard r.count == 2, case .unixFD(let fd) = r[0], let mtu = r[1].integer else {
                        throw BusError(name: BusError.invalidSignature, message: "AcquireNotify returned (\(r.map(\.signature).joined())), expected (hq)")
                    }
                    let mine = try fd.duplicate()
                    source.startReading(fd: mine, mtu: Int(mtu)) { [weak self] why in
                        Task { await self?.sourceClosed(c.path, why) }
                    }
                } catch {
                    logger.info("AcquireNotify refused, using StartNotify", ["characteristic": uuid.uuidString, "error": "\(error)"])
                }
            }
            if !source.acquired {
                _ = try await Self.bluezCall(s, c.path, "StartNotify", [], what: "subscribing to \(uuid.uuidString) of \(address)", timeout: .seconds(10))
                source.mtu = c.mtu
            }
            sources[c.path] = source
        }
        let source = sources[c.path]!
        var writer: Channel?
        var theirs: Int32?
        if stream {
            // Each value goes to the client as one packet on a socket of its own; the client
            // closing it ends the subscription.
            let ours: Int32
            do {
                (ours, theirs) = try DescriptorPassing.packetPair()
            } catch {
                if source.isEmpty { sources.removeValue(forKey: c.path); source.stop() }
                throw .invalidState("cannot make the stream's socket pair: \(error)")
            }
            writer = Channel.packetWriter(fd: ours, label: id) { [weak self] why in
                Task { await self?.unsubscribe(id, reason: "stream ended: \(why)") }
            }
        }
        subscriptions[id] = Subscription(id: id, owner: owner, key: key, charPath: c.path, uuid: uuid)
        source.add(id, owner: owner, batch: batch, writer: writer)
        logger.info("subscribed", ["subscription": id, "device": address.description, "characteristic": uuid.uuidString, "via": source.via,
                                   "stream": "\(stream)"])
        return SubscriptionInfo(id: id, owner: owner, key: key, characteristic: uuid, via: source.via, mtu: source.mtu, streamFD: theirs)
    }

    /// Ends a subscription; false when there is none with that id.
    @discardableResult
    public func unsubscribe(_ id: String, reason: String = "unsubscribed") async -> Bool {
        guard let sub = subscriptions.removeValue(forKey: id) else { return false }
        guard let source = sources[sub.charPath] else { return true }
        let (count, dropped) = source.remove(id)
        onEvent(.subscriptionEnded(subscription: id, owner: sub.owner, device: sub.key.device, characteristic: sub.uuid, reason: reason, count: count, dropped: dropped))
        if source.isEmpty {
            sources.removeValue(forKey: sub.charPath)
            if source.acquired {
                source.stop()
            } else if let s = session {
                _ = try? await Self.bluezCall(s, sub.charPath, "StopNotify", [], what: "StopNotify", timeout: .seconds(5))
            }
        }
        return true
    }

    /// The subscriptions now.
    public var subscriptionList: [SubscriptionInfo] {
        subscriptions.values.sorted { $0.id < $1.id }.map { s in
            let src = sources[s.charPath]
            return SubscriptionInfo(id: s.id, owner: s.owner, key: s.key, characteristic: s.uuid, via: src?.via ?? "-", mtu: src?.mtu)
        }
    }

    private func sourceClosed(_ path: ObjectPath, _ why: String) {
        guard let s = sources[path] else { return }
        let connected = table.devices.values.first { $0.address == s.key.device && adapterAddress(of: $0.adapterPath) == s.key.adapter }?.connected == true
        endSource(path, s, reason: connected ? "notifications stopped (\(why))" : "disconnected")
    }

    private func endSource(_ path: ObjectPath, _ s: NotifySource, reason: String) {
        sources.removeValue(forKey: path)
        s.stop()
        for (id, owner, count, dropped) in s.drain() {
            subscriptions.removeValue(forKey: id)
            onEvent(.subscriptionEnded(subscription: id, owner: owner, device: s.key.device, characteristic: s.uuid, reason: reason, count: count, dropped: dropped))
        }
    }

    // MARK: Pairing and the device list

    /// Pairs with a device (the daemon's agent answers what BlueZ asks).
    public func pair(adapter selector: AdapterSelector?, address: BluetoothAddress, timeout: Duration) async throws(CentralError) -> (RemoteDevice, already: Bool) {
        let s = try requireSession()
        let a = try await poweredAdapter(selector)
        guard let d = table.device(address, adapter: a.path) else { throw .notFound("device \(address) on \(a.name) (scan for it first)") }
        if d.paired { return (d, true) }
        try await exclusive(a.address) { () async throws(CentralError) -> Void in
            do {
                _ = try await s.connection.call(destination: BlueZNames.service, path: d.path, interface: BlueZNames.device, member: "Pair", timeout: timeout)
            } catch let e as BusError {
                if e.shortName == "AlreadyExists" { return }
                if e.name == BusError.noReply {
                    _ = try? await s.connection.call(destination: BlueZNames.service, path: d.path, interface: BlueZNames.device, member: "CancelPairing", timeout: .seconds(5))
                    throw .timeout("pairing with \(address) did not finish within \(timeout.secondsText)")
                }
                throw .refused("pairing with \(address)", e)
            } catch {
                throw .invalidState("\(error)")
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
            try await s.connection.setRemoteProperty(destination: BlueZNames.service, path: d.path, interface: BlueZNames.device,
                                                     name: "Trusted", value: .boolean(trusted), timeout: .seconds(10))
        } catch let e as BusError {
            throw .refused("setting Trusted on \(address)", e)
        } catch {
            throw .invalidState("\(error)")
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
    private func removeDevice(_ d: RemoteDevice, from a: AdapterInfo, what: String) async throws(CentralError) {
        let s = try requireSession()
        do {
            _ = try await s.connection.call(destination: BlueZNames.service, path: a.path, interface: BlueZNames.adapter,
                                            member: "RemoveDevice", [.objectPath(d.path)], timeout: .seconds(10))
        } catch let e as BusError {
            throw .refused(what, e)
        } catch {
            throw .invalidState("\(error)")
        }
        let address = d.address, adapterPath = a.path
        _ = await waitUntil(.seconds(5)) { t in t.device(address, adapter: adapterPath) == nil }
    }
}

/// The notifications of one remote characteristic, shared by every subscription to it
/// (BlueZ gives one AcquireNotify socket per characteristic and client). Values are sent
/// to the subscribers straight from the socket's queue, without a hop through the actor.
final class NotifySource: Sendable {
    struct Subscriber: Sendable {
        let id: String
        let owner: UInt64
        var count: UInt64
        let batch: Bool
        /// A stream subscriber's socket (values as packets instead of events).
        let writer: Channel?

        /// Closes its stream; (values delivered, values its stream dropped).
        func finish() -> (UInt64, UInt64) {
            guard let w = writer else { return (count, 0) }
            w.close()
            let dropped = w.counts.refused
            return (count - dropped, dropped)
        }
    }
    let key: DeviceKey
    let uuid: BluetoothUUID
    private let onEvent: @Sendable (CentralEvent) -> Void
    private struct State {
        var subscribers: [Subscriber] = []
        var reader: NotifyReader?
        var mtu: Int?
    }
    private let state = Mutex(State())

    init(key: DeviceKey, uuid: BluetoothUUID, onEvent: @escaping @Sendable (CentralEvent) -> Void) {
        self.key = key
        self.uuid = uuid
        self.onEvent = onEvent
    }

    var acquired: Bool { state.withLock { $0.reader != nil } }
    var via: String { acquired ? "acquire-notify" : "start-notify" }
    var mtu: Int? {
        get { state.withLock { $0.mtu } }
        set { state.withLock { $0.mtu = newValue } }
    }
    var isEmpty: Bool { state.withLock { $0.subscribers.isEmpty } }

    func startReading(fd: Int32, mtu: Int, onClose: @escaping @Sendable (String) -> Void) {
        let reader = NotifyReader(fd: fd, mtu: mtu, label: "\(key.device)-\(uuid.uuidString)",
                                  onValues: { [weak self] v in self?.deliver(v) }, onClose: onClose)
        state.withLock {
            $0.reader = reader
            $0.mtu = mtu
        }
    }

    func add(_ id: String, owner: UInt64, batch: Bool, writer: Channel?) {
        state.withLock { $0.subscribers.append(Subscriber(id: id, owner: owner, count: 0, batch: batch, writer: writer)) }
    }

    /// Removes a subscriber (closing its stream); returns how many values it got and how
    /// many its stream dropped.
    func remove(_ id: String) -> (UInt64, UInt64) {
        let sub = state.withLock { s -> Subscriber? in
            guard let i = s.subscribers.firstIndex(where: { $0.id == id }) else { return nil }
            return s.subscribers.remove(at: i)
        }
        guard let sub else { return (0, 0) }
        return sub.finish()
    }

    /// Removes every subscriber; returns them with their counts.
    func drain() -> [(String, UInt64, UInt64, UInt64)] {
        let subs = state.withLock { s in
            defer { s.subscribers = [] }
            return s.subscribers
        }
        return subs.map { sub in
            let (count, dropped) = sub.finish()
            return (sub.id, sub.owner, count, dropped)
        }
    }

    /// Sends values (in order) to every subscriber, numbered per subscription.
    func deliver(_ values: [[UInt8]]) {
        let n = UInt64(values.count)
        let targets = state.withLock { s -> [(Subscriber, UInt64)] in
            for i in s.subscribers.indices { s.subscribers[i].count += n }
            return s.subscribers.map { ($0, $0.count - n + 1) }
        }
        for (sub, first) in targets {
            if let w = sub.writer {
                // Beyond its bound a slow client's values are dropped (and counted).
                for v in values { w.send(v) }
            } else {
                onEvent(.notifications(subscription: sub.id, owner: sub.owner, device: key.device, characteristic: uuid,
                                       values: values, firstSequence: first, batch: sub.batch))
            }
        }
    }

    /// Closes the socket (bluetoothd then stops the notifications).
    func stop() {
        let r = state.withLock { s -> NotifyReader? in defer { s.reader = nil }; return s.reader }
        r?.close()
    }
}

/// The result of a D-Bus call made with a completion, readable from predicates.
final class CallOutcome: Sendable {
    private let value = Mutex<Result<Void, Error>?>(nil)
    func set(_ r: Result<Void, Error>) { value.withLock { $0 = r } }
    var result: Result<Void, Error>? { value.withLock { $0 } }
    var isSet: Bool { result != nil }
}
