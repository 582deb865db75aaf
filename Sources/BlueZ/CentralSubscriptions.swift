import BLE
import DBus
import SystemKit

/// Subscriptions to notifications and indications: one `NotifySource` per characteristic,
/// shared by every subscriber to it, fed by AcquireNotify's socket or by `Value` changes.
extension Central {
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
        let source = try await notifySource(c.path, key: key, uuid: uuid, flags: c.flags, mtu: c.mtu, indicate: indicate,
                                            address: address, connection: s.connection)
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

    /// The characteristic's source, set up once however many subscribe at the same time: a
    /// second subscribe while the first one's AcquireNotify or StartNotify is under way waits
    /// for it (its own AcquireNotify was refused "Notify acquired", or its StartNotify answered
    /// at once and the first one's source then replaced its own, which got no value again).
    private func notifySource(_ path: ObjectPath, key: DeviceKey, uuid: BluetoothUUID, flags: [String], mtu: Int?, indicate: Bool,
                              address: BluetoothAddress, connection: BusConnection) async throws(CentralError) -> NotifySource {
        if let existing = sources[path] { return existing }
        let setup: Task<NotifySource, any Error>
        if let pending = settingUp[path] {
            logger.debug("waiting for the notification setup under way", ["characteristic": uuid.uuidString, "device": address.description])
            setup = pending
        } else {
            setup = Task { try await self.startSource(path, key: key, uuid: uuid, flags: flags, mtu: mtu, indicate: indicate,
                                                      address: address, connection: connection) }
            settingUp[path] = setup
        }
        let result = await setup.result
        if settingUp[path] == setup { settingUp[path] = nil }
        switch result {
        case .success(let source):
            // Stored by whichever waiter resumes first (the actor lets either go first).
            if sources[path] == nil { sources[path] = source }
            return sources[path] ?? source
        case .failure(let e as CentralError): throw e
        case .failure(let e): throw .invalidState("subscribing to \(uuid.uuidString) of \(address): \(e)")
        }
    }

    /// AcquireNotify (for notifications), else StartNotify: a new source for `path`.
    private func startSource(_ path: ObjectPath, key: DeviceKey, uuid: BluetoothUUID, flags: [String], mtu: Int?, indicate: Bool,
                             address: BluetoothAddress, connection: BusConnection) async throws(CentralError) -> NotifySource {
        let source = NotifySource(key: key, uuid: uuid, onEvent: onEvent)
        if !indicate, flags.contains("notify") {
            do {
                let (fd, mtu) = try await GattCharacteristic1(connection, path).acquireNotify()
                let mine = try fd.duplicate()
                source.startReading(fd: mine, mtu: mtu) { [weak self] why in
                    Task { await self?.sourceClosed(path, why) }
                }
            } catch {
                logger.info("AcquireNotify refused, using StartNotify", ["characteristic": uuid.uuidString, "error": "\(error)"])
            }
        }
        if !source.acquired {
            do {
                try await GattCharacteristic1(connection, path).startNotify(timeout: .seconds(10))
            } catch {
                throw Self.gattFailure(error, "subscribing to \(uuid.uuidString) of \(address)", timeout: .seconds(10))
            }
            source.mtu = mtu
        }
        return source
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
                try? await GattCharacteristic1(s.connection, sub.charPath).stopNotify(timeout: .seconds(5))
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

    func endSource(_ path: ObjectPath, _ s: NotifySource, reason: String) {
        sources.removeValue(forKey: path)
        s.stop()
        for (id, owner, count, dropped) in s.drain() {
            subscriptions.removeValue(forKey: id)
            onEvent(.subscriptionEnded(subscription: id, owner: owner, device: s.key.device, characteristic: s.uuid, reason: reason, count: count, dropped: dropped))
        }
    }
}
