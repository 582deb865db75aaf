import BLE
import DBus
import Logging
import Synchronization

/// One GATT application: its object tree (root with ObjectManager, services, characteristics,
/// descriptors) built from a definition.
public final class LocalGattApplication: Sendable {
    /// The id the daemon gave it (`app1`).
    public let id: String
    /// The definition it was built from.
    public let definition: GattApplicationDefinition
    /// The adapter it was asked for (nil: the default).
    public let adapter: AdapterSelector?
    /// Its root object path.
    public let root: ObjectPath
    /// Its characteristics, in definition order.
    public let characteristics: [LocalCharacteristic]
    private let objects: [(ObjectPath, [InterfaceSpec], [String: [String: DBusValue]])]

    init(id: String, definition: GattApplicationDefinition, adapter: AdapterSelector?,
         onEvent: @escaping @Sendable (GattServerEvent) -> Void) {
        self.id = id
        self.definition = definition
        self.adapter = adapter
        let root = ObjectPath.root.appending("org").appending("peerlink").appending(id)
        self.root = root
        var chars: [LocalCharacteristic] = []
        var objects: [(ObjectPath, [InterfaceSpec], [String: [String: DBusValue]])] = []
        let servicePaths = definition.services.indices.map { root.appending("service\($0)") }
        for (i, s) in definition.services.enumerated() {
            let sp = servicePaths[i]
            let includes = s.includes.compactMap { u in definition.services.firstIndex { $0.uuid == u }.map { servicePaths[$0] } }
            objects.append((sp, [InterfaceSpec("org.bluez.GattService1", properties: [
                PropertySpec("UUID", "s"), PropertySpec("Primary", "b"), PropertySpec("Includes", "ao"),
            ])], ["org.bluez.GattService1": ["UUID": .string(s.uuid.uuidString), "Primary": .boolean(s.primary),
                                             "Includes": .objectPathArray(includes)]]))
            for (j, c) in s.characteristics.enumerated() {
                let cp = sp.appending("char\(j)")
                let lc = LocalCharacteristic(application: id, definition: c, path: cp, servicePath: sp, onEvent: onEvent)
                chars.append(lc)
                objects.append((cp, [lc.interface], ["org.bluez.GattCharacteristic1": lc.propertyValues]))
                for (k, d) in c.descriptors.enumerated() {
                    let dp = cp.appending("desc\(k)")
                    objects.append((dp, [LocalGattApplication.descriptorInterface(d)], ["org.bluez.GattDescriptor1": [
                        "UUID": .string(d.uuid.uuidString), "Characteristic": .objectPath(cp),
                        "Flags": .stringArray(d.flags.map(\.rawValue)), "Value": .bytes(d.value),
                    ]]))
                }
            }
        }
        characteristics = chars
        self.objects = objects
    }

    /// A descriptor answers reads from its stored value; writes (when allowed) replace it.
    static func descriptorInterface(_ d: GattDescriptorDefinition) -> InterfaceSpec {
        let value = Mutex(d.value)
        let readable = d.flags.contains { GattFlag.readLike.contains($0) }
        let writable = d.flags.contains { GattFlag.writeLike.contains($0) }
        return InterfaceSpec("org.bluez.GattDescriptor1", methods: [
            MethodSpec("ReadValue", inputs: [("options", "a{sv}")], outputs: [("value", "ay")]) { call, reply in
                guard readable else { return reply.fail(GattError.notPermitted.busError) }
                let offset = LocalCharacteristic.options(call.arguments[0]).offset
                let v = value.withLock { $0 }
                guard offset <= v.count else { return reply.fail(GattError.invalidOffset.busError) }
                reply.succeed([.bytes(Array(v[offset...]))])
            },
            MethodSpec("WriteValue", inputs: [("value", "ay"), ("options", "a{sv}")]) { call, reply in
                guard writable else { return reply.fail(GattError.notPermitted.busError) }
                let data = call.arguments[0].byteArray ?? []
                let o = LocalCharacteristic.options(call.arguments[1])
                // A prepared write asks for authorisation only; the data comes with the execute.
                if o.prepare { return reply.succeed() }
                let refused = value.withLock { LocalCharacteristic.write(data, into: &$0, at: o.offset, maxLength: gattMaximumValueLength) }
                if let refused { reply.fail(refused.busError) } else { reply.succeed() }
            },
        ], properties: [PropertySpec("UUID", "s"), PropertySpec("Characteristic", "o"), PropertySpec("Flags", "as"),
                        PropertySpec("Value", "ay", changeSignal: .none)])
    }

    /// Exports the tree on `c` (the root becomes an ObjectManager).
    func export(on c: BusConnection, perDeviceNotify: Bool) throws {
        c.addObjectManager(at: root)
        do {
            for (p, i, v) in objects { try c.export(p, interfaces: i, values: v) }
        } catch {
            unexport(from: c)
            throw error
        }
        for ch in characteristics { ch.attach(c, perDeviceNotify: perDeviceNotify) }
    }

    /// Removes the tree from `c`.
    func unexport(from c: BusConnection) {
        for (p, _, _) in objects.reversed() { c.unexport(p) }
        c.removeObjectManager(at: root)
        for ch in characteristics { ch.attach(nil, perDeviceNotify: false) }
    }
}

/// Why an application could not be added.
public enum GattServerError: Error, Sendable, CustomStringConvertible {
    /// BlueZ is not there or no adapter matched.
    case bluez(BlueZError)
    /// BlueZ refused the registration.
    case registration(String)
    /// No such application.
    case unknownApplication(String)

    /// A sentence for users.
    public var description: String {
        switch self {
        case .bluez(let e): e.description
        case .registration(let why): "bluetoothd refused the application: \(why)"
        case .unknownApplication(let id): "no application \(id)"
        }
    }
}

/// The local GATT applications: registered with BlueZ through GattManager1, and registered
/// again when bluetoothd comes back or their adapter re-appears (they belong to the daemon,
/// not to one bluetoothd).
public actor GattServer {
    /// Each application, the adapter it is registered on now, and the one it registers on
    /// again (`AdapterSelector.following`).
    private var applications: [String: (app: LocalGattApplication, registeredOn: BluetoothAddress?, follows: AdapterSelector?)] = [:]
    private var order: [String] = []
    private var nextID = 1
    private var session: (connection: BusConnection, bluez: BlueZClient)?
    /// Applications being registered now: the actor is re-entered at each await, and several
    /// events (available, adapter added) ask for registration at once.
    private var registering: Set<String> = []
    /// The loop applying the session's BlueZ events in order (ends on detach).
    private var events: Task<Void, Never>?
    /// The applications in order, readable without entering the actor: control requests
    /// look characteristics up (`characteristic(_:application:)`) for every notification.
    private nonisolated let lookup = Mutex<[LocalGattApplication]>([])
    private let logger: Logger
    private let onEvent: @Sendable (GattServerEvent) -> Void

    /// Creates an empty server; events (requests, subscriptions, registrations) go to `onEvent`.
    public init(logger: Logger, onEvent: @escaping @Sendable (GattServerEvent) -> Void) {
        self.logger = logger
        self.onEvent = onEvent
    }

    /// Uses a new bus connection: exports every application there and registers each when
    /// its adapter is present (now, and whenever bluetoothd or the adapter comes back).
    public func attach(connection: BusConnection, bluez: BlueZClient) async {
        session = (connection, bluez)
        events?.cancel()
        events = bluez.follow { [weak self] event in await self?.bluezEvent(event) }
        for id in order {
            guard let e = applications[id] else { continue }
            applications[id]?.registeredOn = nil
            // What its adapter's bluetoothd said at registration (it read false after any bus
            // reconnection: --device refused on 5.69+ from then on).
            let perDevice = e.app.characteristics.first?.perDeviceNotify ?? false
            try? e.app.export(on: connection, perDeviceNotify: perDevice)
        }
    }

    /// The bus connection is gone.
    public func detach() {
        events?.cancel()
        events = nil
        session = nil
        for id in order { applications[id]?.registeredOn = nil }
    }

    /// One BlueZ event, applied before the next is taken (`follow`): a removal is never
    /// applied before the addition that came first.
    private func bluezEvent(_ event: BlueZEvent) async {
        switch event {
        case .available, .adapterAdded: await registerPending(again: true)
        case .unavailable: forgetRegistrations(nil)
        case .adapterRemoved(let a): forgetRegistrations(a.address)
        case .adapterChanged: break
        }
    }

    /// Builds, exports and registers an application; on failure nothing of it remains.
    public func add(_ definition: GattApplicationDefinition, adapter: AdapterSelector?) async throws(GattServerError) -> LocalGattApplication {
        guard let session else { throw .bluez(.unavailable("not connected to the bus")) }
        let target: AdapterInfo
        do { target = try await session.bluez.adapter(adapter) } catch { throw .bluez(error) }
        let id = "app\(nextID)"
        nextID += 1
        let app = LocalGattApplication(id: id, definition: definition, adapter: adapter, onEvent: onEvent)
        do {
            try app.export(on: session.connection, perDeviceNotify: target.perDeviceNotify)
        } catch {
            throw .registration("exporting the objects failed: \(error)")
        }
        do {
            try await register(app, on: target)
        } catch {
            app.unexport(from: session.connection)
            throw error
        }
        applications[id] = (app, target.address, .following(adapter, chosen: target.address))
        order.append(id)
        publishLookup()
        onEvent(.registered(application: id, adapter: target, again: false))
        return app
    }

    /// Unregisters and removes an application.
    public func remove(_ id: String) async throws(GattServerError) {
        guard let e = applications.removeValue(forKey: id) else { throw .unknownApplication(id) }
        order.removeAll { $0 == id }
        publishLookup()
        guard let session else { return }
        if let addr = e.registeredOn, let a = session.bluez.adaptersNow.first(where: { $0.address == addr }) {
            await unregister(e.app, from: a, on: session.connection)
        }
        e.app.unexport(from: session.connection)
    }

    /// Asks bluetoothd to forget `app` on `adapter` (a failure, such as the adapter gone,
    /// leaves nothing for this side to do).
    private func unregister(_ app: LocalGattApplication, from adapter: AdapterInfo, on connection: BusConnection) async {
        _ = try? await connection.call(destination: BlueZNames.service, path: adapter.path, interface: "org.bluez.GattManager1",
                                       member: "UnregisterApplication", [.objectPath(app.root)], timeout: .seconds(5))
    }

    /// Removes every application (daemon shutdown).
    public func removeAll() async {
        for id in order.reversed() { try? await remove(id) }
    }

    /// The applications, in the order they were added, with the adapter each is registered on.
    public var list: [(app: LocalGattApplication, registeredOn: BluetoothAddress?)] {
        order.compactMap { applications[$0].map { ($0.app, $0.registeredOn) } }
    }

    /// The characteristic with `uuid` (in application `id`, or the first application that has
    /// it). Nonisolated: a lookup does not wait for the actor (which may be registering).
    public nonisolated func characteristic(_ uuid: BluetoothUUID, application id: String? = nil) -> LocalCharacteristic? {
        lookup.withLock { apps in
            for app in apps where id == nil || app.id == id {
                if let c = app.characteristics.first(where: { $0.uuid == uuid }) { return c }
            }
            return nil
        }
    }

    private func publishLookup() {
        let apps = order.compactMap { applications[$0]?.app }
        lookup.withLock { $0 = apps }
    }

    private func register(_ app: LocalGattApplication, on adapter: AdapterInfo) async throws(GattServerError) {
        guard let session else { throw .bluez(.unavailable("not connected to the bus")) }
        do {
            _ = try await session.connection.call(destination: BlueZNames.service, path: adapter.path, interface: "org.bluez.GattManager1",
                                                  member: "RegisterApplication", [.objectPath(app.root), .propertyMap([:])],
                                                  timeout: .seconds(15))
        } catch {
            throw .registration("\(error)")
        }
        logger.info("GATT application registered", ["gatt.app": app.id, "adapter.name": adapter.name])
    }

    private func forgetRegistrations(_ address: BluetoothAddress?) {
        for id in order where address == nil || applications[id]?.registeredOn == address {
            applications[id]?.registeredOn = nil
            // bluetoothd's subscriptions went with it (no StopNotify comes from a bluetoothd
            // that died): a count left standing made notify say it reached centrals that
            // were gone, and never came back to 0.
            for c in applications[id]?.app.characteristics ?? [] { c.forgetSubscribers() }
        }
    }

    /// Registers every application that is not registered and whose adapter is present.
    private func registerPending(again: Bool) async {
        guard let session else { return }
        for id in order {
            guard let e = applications[id], e.registeredOn == nil, !registering.contains(id) else { continue }
            let target: AdapterInfo
            do { target = try await session.bluez.adapter(e.follows) } catch { continue }
            guard applications[id] != nil else { continue }  // removed while the adapter was looked up
            registering.insert(id)
            defer { registering.remove(id) }
            do {
                try await register(e.app, on: target)
                guard applications[id] != nil else {
                    // Removed while bluetoothd registered it: taken back now, no event for it.
                    await unregister(e.app, from: target, on: session.connection)
                    continue
                }
                applications[id]?.registeredOn = target.address
                onEvent(.registered(application: id, adapter: target, again: again))
            } catch {
                guard applications[id] != nil else { continue }  // removed meanwhile: no failure to report
                logger.warning("registering a GATT application again failed", ["gatt.app": id, "error": error.description])
                onEvent(.registrationFailed(application: id, adapter: target.address, reason: error.description))
            }
        }
    }
}
