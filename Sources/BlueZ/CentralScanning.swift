import BLE
import DBus
import FoundationEssentials

/// Scans: each has its own filter and owner; discovery on the adapter follows them all
/// through the `DiscoveryScheduler`, paused while a connect or pairing holds the adapter.
extension Central {
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
        discovery.scanStarted(id, adapter: a.address, filter: filter)
        await reconcile(a.address)
        if scans[id] != nil, !discovery.isDiscovering(a.address), !discovery.isPaused(a.address) {
            scans.removeValue(forKey: id)?.timer?.cancel()
            discovery.scanStopped(id)
            await reconcile(a.address)
            throw .refused("StartDiscovery on \(a.name)", adapterOps[a.address]?.lastDiscoveryError
                           ?? BlueZCallError(BusError(name: BusError.failed, message: "discovery did not start")))
        }
        logger.info("scan started", ["scan": id, "adapter.name": a.name])
        // Devices seen now (they have an RSSI) would not be announced again: report them.
        let adapterPath = a.path
        Task { [weak self] in await self?.reportCurrent(id, adapterPath) }
        return (id, a)
    }

    private func reportCurrent(_ id: String, _ adapterPath: ObjectPath) {
        for d in table.devices(adapter: adapterPath) where d.rssi != nil { report(d, only: id) }
    }

    /// Stops a scan; false when there is none with that id.
    @discardableResult
    public func stopScan(_ id: String, reason: String = "stopped") async -> Bool {
        guard let s = scans.removeValue(forKey: id) else { return false }
        s.timer?.cancel()
        discovery.scanStopped(id)
        onEvent(.scanEnded(scan: id, owner: s.owner, reason: reason))
        logger.info("scan ended", ["scan": id, "reason": reason])
        await reconcile(s.adapter)
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

    /// Reports a device to every scan on its adapter whose filter it passes: bluetoothd merges
    /// every client's filter, so what it reports is checked against each scan's own again.
    func report(_ d: RemoteDevice, only: String? = nil) {
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

    /// Brings discovery on one adapter in line with the scans and pauses (serialised: a
    /// change that arrives while the calls are made is planned again after them).
    func reconcile(_ address: BluetoothAddress) async {
        if adapterOps[address] == nil { adapterOps[address] = AdapterOps() }
        if adapterOps[address]!.reconciling {
            // The running pass goes round again for this change; the caller (a scan judging
            // whether discovery started) waits for that, not for nothing: a second scan while
            // the first one's StartDiscovery was in flight was refused "discovery did not start".
            adapterOps[address]!.reconcileAgain = true
            logger.debug("waiting for the discovery calls under way", ["adapter": address.description])
            await withCheckedContinuation { c in adapterOps[address]!.reconcileWaiters.append(c) }
            return
        }
        adapterOps[address]!.reconciling = true
        repeat {
            adapterOps[address]!.reconcileAgain = false
            await reconcileOnce(address)
        } while adapterOps[address]!.reconcileAgain
        adapterOps[address]!.reconciling = false
        let waiters = adapterOps[address]!.reconcileWaiters
        adapterOps[address]!.reconcileWaiters = []
        for w in waiters { w.resume() }
    }

    /// Makes the calls the scheduler plans, in order, reporting each success back.
    private func reconcileOnce(_ address: BluetoothAddress) async {
        guard let session, let a = adapterInfo(address) else { return }
        let adapter = Adapter1(session.connection, a.path)
        for action in discovery.plan(for: address, powered: a.powered) {
            do {
                switch action {
                case .setFilter(let f):
                    try await adapter.setDiscoveryFilter(f.properties)
                case .start:
                    do {
                        try await adapter.startDiscovery()
                    } catch where error.kind == .inProgress {
                        // Our session is already running (bluetoothd says so): fine.
                    }
                    adapterOps[address]?.lastDiscoveryError = nil
                    logger.debug("discovery on", ["adapter.name": a.name])
                case .stop:
                    do {
                        try await adapter.stopDiscovery()
                    } catch {
                        logger.debug("StopDiscovery failed", ["adapter.name": a.name, "error": "\(error)"])
                    }
                    logger.debug("discovery off", ["adapter.name": a.name, "paused": "\(discovery.isPaused(address))"])
                }
            } catch {
                adapterOps[address]?.lastDiscoveryError = BlueZCallError(error)
                logger.warning("cannot start discovery", ["adapter.name": a.name, "error": "\(error)"])
                return
            }
            for id in discovery.completed(action, adapter: address) {
                if let s = scans[id] { onEvent(.scanResumed(scan: s.id, owner: s.owner, adapter: a)) }
            }
        }
    }

    // MARK: The operation gate

    /// Takes the adapter's gate, waiting in turn until `deadline`; false when it passed first.
    private func acquire(_ address: BluetoothAddress, until deadline: ContinuousClock.Instant) async -> Bool {
        if adapterOps[address] == nil { adapterOps[address] = AdapterOps() }
        if !adapterOps[address]!.busy {
            adapterOps[address]!.busy = true
            return true
        }
        nextGateWaiter += 1
        let id = nextGateWaiter
        let timer = Task { [weak self] in
            try? await Task.sleep(until: deadline)
            if !Task.isCancelled { await self?.gateWaitExpired(address, id) }
        }
        defer { timer.cancel() }
        return await withCheckedContinuation { c in adapterOps[address]!.gateWaiters.append((id, c)) }
    }

    private func gateWaitExpired(_ address: BluetoothAddress, _ id: UInt64) {
        guard let i = adapterOps[address]?.gateWaiters.firstIndex(where: { $0.id == id }) else { return }
        adapterOps[address]!.gateWaiters.remove(at: i).wake.resume(returning: false)
    }

    private func release(_ address: BluetoothAddress) {
        guard adapterOps[address] != nil else { return }
        if adapterOps[address]!.gateWaiters.isEmpty {
            adapterOps[address]!.busy = false
        } else {
            adapterOps[address]!.gateWaiters.removeFirst().wake.resume(returning: true)
        }
    }

    /// Runs `body` with the adapter's gate held and its discovery paused. The gate is
    /// waited for until `deadline` (the operation's own: a connect's timeout counts from its
    /// request, not from when a pairing or a kept device's reconnect let go of the adapter).
    func exclusive<T: Sendable>(_ address: BluetoothAddress, until deadline: ContinuousClock.Instant, _ what: @autoclosure () -> String,
                                _ body: () async throws(CentralError) -> T) async throws(CentralError) -> T {
        guard await acquire(address, until: deadline) else {
            throw .timeout("\(what()): the adapter stayed busy with another connect or pairing until the timeout")
        }
        discovery.connectBegan(adapter: address)
        await reconcile(address)
        let result: Result<T, CentralError>
        do { result = .success(try await body()) } catch { result = .failure(error) }
        discovery.connectEnded(adapter: address)
        await reconcile(address)
        release(address)
        return try result.get()
    }
}
