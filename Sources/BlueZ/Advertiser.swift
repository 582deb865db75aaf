import BLE
import DBus
import FoundationEssentials
import Logging

/// Why an advertisement could not start.
public enum AdvertiseError: Error, Sendable, CustomStringConvertible {
    /// BlueZ is not there or no adapter matched.
    case bluez(BlueZError)
    /// The payload does not fit (the message says how many bytes it needs and how many fit).
    case tooLarge(String)
    /// Every advertising instance of the controller is in use (`active` run on `adapter`).
    case noInstances(active: Int, adapter: String)
    /// BlueZ refused it.
    case refused(String)
    /// bluetoothd refused to register it (its error, typed).
    case registerFailed(BlueZCallError)
    /// No such advertisement.
    case unknown(String)

    /// A sentence for users.
    public var description: String {
        switch self {
        case .bluez(let e): e.description
        case .tooLarge(let why): "the advertisement does not fit: \(why)"
        case .noInstances(let active, let a):
            "maximum advertisements reached on \(a): \(active) running, no instance left"
        case .refused(let why): "bluetoothd refused the advertisement: \(why)"
        case .registerFailed(let e): "bluetoothd refused the advertisement: \(e)"
        case .unknown(let id): "no advertisement \(id)"
        }
    }
}

/// What the daemon reports about its advertisements.
public enum AdvertiseEvent: Sendable {
    /// Registered with BlueZ (again: after bluetoothd or the adapter came back, or a Release).
    case started(id: String, adapter: AdapterInfo, again: Bool)
    /// It ended: `reason` is timeout, released, stopped or a failure to register again.
    case stopped(id: String, reason: String)
}

/// The LE advertisements the daemon runs, through LEAdvertisingManager1.
public actor Advertiser {
    /// One advertisement.
    public struct Entry: Sendable {
        /// `adv1`, …
        public let id: String
        /// What is advertised.
        public let definition: AdvertisementDefinition
        /// The adapter asked for.
        public let adapter: AdapterSelector?
        /// The adapter it registers on again (`AdapterSelector.following`).
        let follows: AdapterSelector?
        /// The object path.
        public let path: ObjectPath
        /// The adapter it runs on now.
        public var registeredOn: BluetoothAddress?
        /// When it stops by itself (on the monotonic clock: a change of the wall clock neither
        /// ends it early nor keeps it longer).
        public var deadline: ContinuousClock.Instant?
    }

    private var entries: [String: Entry] = [:]
    private var order: [String] = []
    private var nextID = 1
    private var session: (connection: BusConnection, bluez: BlueZClient)?
    /// Advertisements being registered now (the actor is re-entered at each await).
    private var registering: Set<String> = []
    /// The loop applying the session's BlueZ events in order (ends on detach).
    private var events: Task<Void, Never>?
    private let logger: Logger
    private let onEvent: @Sendable (AdvertiseEvent) -> Void

    /// Creates an advertiser; events go to `onEvent`.
    public init(logger: Logger, onEvent: @escaping @Sendable (AdvertiseEvent) -> Void) {
        self.logger = logger
        self.onEvent = onEvent
    }

    /// Uses a new bus connection: exports every advertisement and registers each again
    /// (now, and when bluetoothd or its adapter returns).
    public func attach(connection: BusConnection, bluez: BlueZClient) {
        session = (connection, bluez)
        events?.cancel()
        events = bluez.follow { [weak self] event in await self?.bluezEvent(event) }
        for id in order {
            guard let e = entries[id] else { continue }
            entries[id]?.registeredOn = nil
            try? export(e, on: connection)
        }
    }

    /// The bus connection is gone.
    public func detach() {
        events?.cancel()
        events = nil
        session = nil
        for id in order { entries[id]?.registeredOn = nil }
    }

    /// One BlueZ event, applied before the next is taken (`follow`): a removal is never
    /// applied before the addition that came first.
    private func bluezEvent(_ event: BlueZEvent) async {
        switch event {
        case .available, .adapterAdded: await registerPending()
        case .unavailable: forget(nil)
        case .adapterRemoved(let a): forget(a.address)
        case .adapterChanged(let a, let changed):
            if changed.contains("powered") && a.powered { await registerPending() }
        }
    }

    /// The advertisements, in the order they started.
    public var list: [Entry] { order.compactMap { entries[$0] } }

    /// The controller's advertising limits: (instances left, active, max data, max scan response).
    public func limits(_ adapter: AdapterInfo) async -> (supported: Int, active: Int, maxAdv: Int, maxScan: Int) {
        guard let session, let props = try? await session.connection.getAllProperties(
            destination: BlueZNames.service, path: adapter.path, interface: "org.bluez.LEAdvertisingManager1", timeout: .seconds(5)) else {
            return (1, 0, 31, 31)
        }
        let caps = props["SupportedCapabilities"]?.stringKeyedMap ?? [:]
        return (Int(props["SupportedInstances"]?.integer ?? 1), Int(props["ActiveInstances"]?.integer ?? 0),
                Int(caps["MaxAdvLen"]?.integer ?? 31), Int(caps["MaxScnRspLen"]?.integer ?? 31))
    }

    /// Checks and starts an advertisement; on failure nothing of it remains.
    public func add(_ def: AdvertisementDefinition, adapter: AdapterSelector?) async throws(AdvertiseError) -> Entry {
        guard let session else { throw .bluez(.unavailable("not connected to the bus")) }
        let target: AdapterInfo
        do { target = try await session.bluez.adapter(adapter) } catch { throw .bluez(error) }
        let lim = await limits(target)
        if let problem = def.sizeProblem(maxAdvertisingData: lim.maxAdv, maxScanResponse: lim.maxScan) { throw .tooLarge(problem) }
        if lim.supported <= 0 { throw .noInstances(active: lim.active, adapter: target.name) }
        let id = "adv\(nextID)"
        nextID += 1
        var e = Entry(id: id, definition: def, adapter: adapter, follows: .following(adapter, chosen: target.address), path: ObjectPath.root.appending("org").appending("peerlink").appending(id),
                      registeredOn: nil, deadline: def.timeout.map { ContinuousClock.now.advanced(by: .seconds($0)) })
        do {
            try export(e, on: session.connection)
        } catch {
            throw .refused("exporting the advertisement failed: \(error)")
        }
        do {
            try await register(e, on: target)
        } catch {
            session.connection.unexport(e.path)
            if case .registerFailed(let e) = error, e.isAdvertisingLimit {
                throw .noInstances(active: lim.active, adapter: target.name)
            }
            throw error
        }
        e.registeredOn = target.address
        entries[id] = e
        order.append(id)
        onEvent(.started(id: id, adapter: target, again: false))
        return e
    }

    /// Stops an advertisement.
    public func remove(_ id: String, reason: String = "stopped") async throws(AdvertiseError) {
        guard let e = entries.removeValue(forKey: id) else { throw .unknown(id) }
        order.removeAll { $0 == id }
        if let session {
            if let addr = e.registeredOn, let a = session.bluez.adaptersNow.first(where: { $0.address == addr }) {
                await unregister(e, from: a, on: session.connection)
            }
            session.connection.unexport(e.path)
        }
        onEvent(.stopped(id: id, reason: reason))
    }

    /// Asks bluetoothd to take `e` off `adapter` (a failure, such as the adapter gone, leaves
    /// nothing for this side to do).
    private func unregister(_ e: Entry, from adapter: AdapterInfo, on connection: BusConnection) async {
        _ = try? await connection.call(destination: BlueZNames.service, path: adapter.path, interface: "org.bluez.LEAdvertisingManager1",
                                       member: "UnregisterAdvertisement", [.objectPath(e.path)], timeout: .seconds(5))
    }

    /// Stops every advertisement (daemon shutdown).
    public func removeAll() async {
        for id in order.reversed() { try? await remove(id) }
    }

    // MARK: Internals

    private func export(_ e: Entry, on c: BusConnection) throws {
        let d = e.definition
        var props: [PropertySpec] = [PropertySpec("Type", "s"), PropertySpec("Discoverable", "b"), PropertySpec("Includes", "as")]
        var values: [String: DBusValue] = [
            "Type": .string(d.connectable ? "peripheral" : "broadcast"), "Discoverable": .boolean(d.discoverable),
            "Includes": .stringArray(d.includeTxPower ? ["tx-power"] : []),
        ]
        func add(_ name: String, _ v: DBusValue) {
            props.append(PropertySpec(name, v.signature))
            values[name] = v
        }
        if !d.serviceUUIDs.isEmpty { add("ServiceUUIDs", .stringArray(d.serviceUUIDs.map(\.uuidString))) }
        if let n = d.localName, !n.isEmpty { add("LocalName", .string(n)) }
        if !d.manufacturerData.isEmpty {
            add("ManufacturerData", .dictionary(key: "q", value: "v", d.manufacturerData.sorted { $0.key < $1.key }.map { .init(.uint16($0.key), .variant(.bytes($0.value))) }))
        }
        if !d.serviceData.isEmpty {
            add("ServiceData", .dictionary(key: "s", value: "v", d.serviceData.sorted { $0.key < $1.key }.map { .init(.string($0.key.uuidString), .variant(.bytes($0.value))) }))
        }
        if let a = d.appearance { add("Appearance", .uint16(a)) }
        if let i = d.interval {
            add("MinInterval", .uint32(i.lowerBound))
            add("MaxInterval", .uint32(i.upperBound))
        }
        if let du = d.duration { add("Duration", .uint16(du)) }
        if let t = e.deadline {
            // After a re-registration only the time that is left counts.
            add("Timeout", .uint16(UInt16(clamping: max(1, Int(Self.secondsLeft(t).rounded(.up))))))
        }
        let id = e.id
        let release = MethodSpec("Release") { [weak self] _, reply in
            reply.succeed()
            Task { await self?.released(id) }
        }
        try c.export(e.path, interfaces: [InterfaceSpec("org.bluez.LEAdvertisement1", methods: [release], properties: props)],
                     values: ["org.bluez.LEAdvertisement1": values])
    }

    private func register(_ e: Entry, on adapter: AdapterInfo) async throws(AdvertiseError) {
        guard let session else { throw .bluez(.unavailable("not connected to the bus")) }
        do {
            _ = try await session.connection.call(destination: BlueZNames.service, path: adapter.path, interface: "org.bluez.LEAdvertisingManager1",
                                                  member: "RegisterAdvertisement", [.objectPath(e.path), .propertyMap([:])], timeout: .seconds(10))
        } catch {
            throw .registerFailed(BlueZCallError(error))
        }
        logger.info("advertising", ["adv.id": e.id, "adapter.name": adapter.name])
    }

    /// Seconds from now to `deadline` (negative once past).
    static func secondsLeft(_ deadline: ContinuousClock.Instant) -> Double {
        let left = ContinuousClock.now.duration(to: deadline).components
        return Double(left.seconds) + Double(left.attoseconds) / 1e18
    }

    /// bluetoothd dropped the advertisement: it ends if its time is up, else it starts again.
    private func released(_ id: String) async {
        guard let e = entries[id] else { return }
        entries[id]?.registeredOn = nil
        if let d = e.deadline, Self.secondsLeft(d) <= 0.5 {
            try? await remove(id, reason: "timeout")
            return
        }
        logger.notice("bluetoothd released an advertisement; registering it again", ["adv.id": id])
        await registerPending()
    }

    private func forget(_ address: BluetoothAddress?) {
        for id in order where address == nil || entries[id]?.registeredOn == address { entries[id]?.registeredOn = nil }
    }

    private func registerPending() async {
        guard let session else { return }
        for id in order {
            guard let e = entries[id], e.registeredOn == nil, !registering.contains(id) else { continue }
            if let d = e.deadline, Self.secondsLeft(d) <= 0.5 {
                try? await remove(id, reason: "timeout")
                continue
            }
            // (Stopped while the adapter was looked up: nothing to register.)
            guard let target = try? await session.bluez.adapter(e.follows), target.powered, entries[id] != nil else { continue }
            registering.insert(id)
            defer { registering.remove(id) }
            // The object is exported again so a re-registration carries the remaining timeout.
            session.connection.unexport(e.path)
            do {
                try export(e, on: session.connection)
                try await register(e, on: target)
                guard entries[id] != nil else {
                    // Stopped while bluetoothd registered it: taken back now (it stayed on the
                    // air, out of reach of list and stop, until the daemon's bus connection ended).
                    await unregister(e, from: target, on: session.connection)
                    session.connection.unexport(e.path)
                    continue
                }
                entries[id]?.registeredOn = target.address
                onEvent(.started(id: id, adapter: target, again: true))
            } catch {
                logger.warning("registering an advertisement again failed", ["adv.id": id, "error": "\(error)"])
            }
        }
    }
}
