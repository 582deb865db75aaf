import BLE
import DBus
import Synchronization
import SystemKit

/// A local characteristic at run time: its value, its subscribers and how to reach them.
///
/// Its D-Bus methods run on the connection's queue in arrival order (writes keep their order).
public final class LocalCharacteristic: Sendable {
    /// The application's id.
    public let application: String
    /// The definition.
    public let definition: GattCharacteristicDefinition
    /// Its object path.
    public let path: ObjectPath
    let servicePath: ObjectPath
    let onEvent: @Sendable (GattServerEvent) -> Void
    let state: Mutex<State>

    struct State {
        var value: [UInt8]
        var dbusSubscribers = 0
        var sessions: [NotifySession] = []
        var readHandler: (@Sendable (GattReadRequest) async -> Result<[UInt8], GattError>)?
        var connection: BusConnection?
        var perDeviceNotify = false
    }

    /// The UUID.
    public var uuid: BluetoothUUID { definition.uuid }

    init(application: String, definition: GattCharacteristicDefinition, path: ObjectPath, servicePath: ObjectPath,
         onEvent: @escaping @Sendable (GattServerEvent) -> Void) {
        self.application = application
        self.definition = definition
        self.path = path
        self.servicePath = servicePath
        self.onEvent = onEvent
        state = Mutex(State(value: definition.value))
    }

    /// The stored value.
    public var value: [UInt8] { state.withLock { $0.value } }

    /// How many centrals are subscribed (sessions, plus D-Bus subscribers).
    public var subscriberCount: Int { state.withLock { $0.sessions.filter { !$0.isClosed }.count + $0.dbusSubscribers } }

    /// Whether this bluetoothd gives each central a notification session of its own (5.69+),
    /// so a value can go to one device.
    public var perDeviceNotify: Bool { state.withLock { $0.perDeviceNotify } }

    /// The subscribed devices that BlueZ named (through AcquireNotify).
    public var subscribedDevices: [BluetoothAddress] { state.withLock { $0.sessions.compactMap(\.device) } }

    /// Sets (nil: clears) the handler that answers remote reads instead of the stored value.
    public func setReadHandler(_ h: (@Sendable (GattReadRequest) async -> Result<[UInt8], GattError>)?) {
        state.withLock { $0.readHandler = h }
    }

    /// Whether a read handler is set.
    public var hasReadHandler: Bool { state.withLock { $0.readHandler != nil } }

    /// Replaces the stored value (what the next read returns); no notification.
    public func setValue(_ v: [UInt8]) throws(GattNotifyError) {
        guard v.count <= definition.maxLength else { throw .overMaxLength(length: v.count, maxLength: definition.maxLength) }
        let c = state.withLock { s -> BusConnection? in
            s.value = v
            return s.connection
        }
        try? c?.setProperty(path, "org.bluez.GattCharacteristic1", "Value", .bytes(v))
    }

    /// Sends `value` to every subscriber (or to `device` only), and stores it as the value.
    public func notify(_ value: [UInt8], device: BluetoothAddress? = nil) async throws(GattNotifyError) {
        try await notify(values: CollectionOfOne(value), device: device)
    }

    /// Throws what `notify` would for a value of `length` bytes to `device` (or everyone).
    public func checkNotifyLength(_ length: Int, device: BluetoothAddress?) throws(GattNotifyError) {
        _ = try notifyTargets(longest: length, device: device)
    }

    /// The sessions to notify (empty: the D-Bus path, through `connection`), after checking
    /// that there is someone and that a value of `longest` bytes fits every target.
    private func notifyTargets(longest: Int, device: BluetoothAddress?) throws(GattNotifyError) -> ([NotifySession], BusConnection?) {
        let (sessions, dbus, connection, perDevice) = state.withLock { s in
            s.sessions.removeAll { $0.isClosed }
            return (s.sessions, s.dbusSubscribers, s.connection, s.perDeviceNotify)
        }
        var targets = sessions
        if let device {
            guard perDevice, let session = sessions.first(where: { $0.device == device }) else {
                throw .deviceNotSubscribed(device, perDeviceSupported: perDevice)
            }
            targets = [session]
        }
        if targets.isEmpty && dbus == 0 { throw .noSubscribers(uuid) }
        // Every target must take every value whole, or nothing is sent.
        if let smallest = targets.min(by: { $0.limit < $1.limit }), longest > smallest.limit {
            throw .tooLong(length: longest, limit: smallest.limit, mtu: smallest.mtu)
        }
        if targets.isEmpty, longest > 20 {
            throw .tooLong(length: longest, limit: 20, mtu: nil)
        }
        guard longest <= definition.maxLength else { throw .overMaxLength(length: longest, maxLength: definition.maxLength) }
        return (targets, connection)
    }

    /// Sends each of `values`, in order, to every subscriber (or to `device` only), and stores
    /// the last as the value: a stream of notifications in one call.
    ///
    /// Every value is checked before the first is sent: when one is too long for a target,
    /// nothing is sent. When sending stops part way (the central unsubscribed), the error is
    /// `.interrupted`, saying how many values went out.
    public func notify(values: some BidirectionalCollection<[UInt8]>, device: BluetoothAddress? = nil) async throws(GattNotifyError) {
        if let rest = try notifyWithoutWaiting(values: Array(values), device: device) { try await rest.finish() }
    }

    /// What `notify(values:)` still has to send after `notifyWithoutWaiting`: the targets
    /// whose sockets had no room, each to be given every value (in order, waiting for room).
    public struct NotifyRest: Sendable {
        let targets: [NotifySession]
        let values: [[UInt8]]

        /// Sends the rest, waiting while sockets are full. A central that leaves meanwhile is
        /// one that unsubscribed: the others still get every value (they lost them when one
        /// before them in the list left). The error is the first failure's, and only when no
        /// target took every value.
        public func finish() async throws(GattNotifyError) {
            var firstFailure: GattNotifyError?
            var whole = 0
            for t in targets {
                var sent = 0
                for value in values {
                    do throws(GattNotifyError) {
                        try await t.send(value)
                    } catch {
                        if firstFailure == nil {
                            firstFailure = values.count == 1 ? error : .interrupted(sent: sent, of: values.count, reason: error.description)
                        }
                        break
                    }
                    sent += 1
                }
                if sent == values.count { whole += 1 }
            }
            if whole == 0, let firstFailure { throw firstFailure }
        }
    }

    /// `notify(values:)` without waiting: sends what the targets take now (every value to a
    /// target, or none to it) and returns nil when that was everything, or the rest to
    /// `finish()` (targets whose sockets are full). The same checks and errors as `notify`.
    /// For callers that answer on their own queue and only hop when they must wait.
    public func notifyWithoutWaiting(values: [[UInt8]], device: BluetoothAddress? = nil) throws(GattNotifyError) -> NotifyRest? {
        guard definition.has(GattFlag.notifyLike) else { throw .notNotifiable(uuid) }
        guard let last = values.last else { return nil }
        let longest = values.reduce(0) { max($0, $1.count) }
        let (targets, connection) = try notifyTargets(longest: longest, device: device)
        state.withLock { $0.value = last }
        if targets.isEmpty, let connection {
            // The D-Bus path: bluetoothd notifies every subscriber when Value changes.
            for (sent, value) in values.enumerated() {
                do {
                    try connection.emitSignal(path, StandardInterface.properties, "PropertiesChanged",
                                              [.string("org.bluez.GattCharacteristic1"), .propertyMap(["Value": .bytes(value)]), .stringArray([])])
                } catch {
                    let e = GattNotifyError.failed("\(error)")
                    if values.count == 1 { throw e }
                    throw .interrupted(sent: sent, of: values.count, reason: e.description)
                }
            }
            return nil
        }
        var waiting: [NotifySession] = []
        var taken = 0
        for t in targets {
            switch t.offer(values) {
            case .accepted: taken += 1
            case .full: waiting.append(t)
            case .closed: continue  // leaving (its end is being reported): the others still get them
            }
        }
        if taken == 0 && waiting.isEmpty {
            let e = GattNotifyError.failed("the central's session is closed")
            if values.count == 1 { throw e }
            throw .interrupted(sent: 0, of: values.count, reason: e.description)
        }
        return waiting.isEmpty ? nil : NotifyRest(targets: waiting, values: values)
    }

    /// bluetoothd lost the application (it stopped, or the adapter went): its StartNotify
    /// subscribers are gone, each reported unsubscribed. (AcquireNotify's sessions end by
    /// themselves: bluetoothd's ends of their sockets close.)
    func forgetSubscribers() {
        let dbus = state.withLock { s -> Int in
            defer { s.dbusSubscribers = 0 }
            return s.dbusSubscribers
        }
        for _ in 0..<dbus { onEvent(.unsubscribed(application: application, uuid: uuid, device: nil)) }
    }

    // MARK: D-Bus side (on the connection's queue)

    func attach(_ c: BusConnection?, perDeviceNotify: Bool) {
        let old = state.withLock { s -> [NotifySession] in
            s.connection = c
            s.perDeviceNotify = perDeviceNotify
            s.dbusSubscribers = 0
            let o = s.sessions
            s.sessions = []
            return o
        }
        for o in old { o.close() }
    }

    /// The options of a GATT method call from bluetoothd. Checked, not trusted: an offset
    /// outside 0...65535 becomes `Int.max` (every offset check refuses it: a negative one
    /// trapped as an index), an MTU outside 23...65535 is unknown (`mtu - 3` could overflow).
    static func options(_ v: DBusValue) -> (offset: Int, device: BluetoothAddress?, mtu: Int?, type: String?, prepare: Bool) {
        let m = v.stringKeyedMap ?? [:]
        let device = m["device"]?.objectPath.flatMap { BluetoothAddress(bluezPathElement: $0.lastElement) }
        let offset = m["offset"]?.integer ?? 0
        return ((0...65_535).contains(offset) ? Int(offset) : .max, device, checkedMTU(m["mtu"]), m["type"]?.string, m["prepare-authorize"]?.bool ?? false)
    }

    /// Writes `data` into `value` from `offset` on (a long write comes in pieces), within
    /// `maxLength`: nil, or the ATT error for an offset past the end or a value too long.
    /// Characteristics and descriptors write alike.
    static func write(_ data: [UInt8], into value: inout [UInt8], at offset: Int, maxLength: Int) -> GattError? {
        guard offset <= value.count else { return .invalidOffset }
        guard offset + data.count <= maxLength else { return .invalidValueLength }
        value = Array(value[..<offset]) + data
        return nil
    }

    var interface: InterfaceSpec {
        var methods: [MethodSpec] = [
            MethodSpec("ReadValue", inputs: [("options", "a{sv}")], outputs: [("value", "ay")]) { [self] call, reply in
                read(call.arguments[0], reply)
            },
            MethodSpec("WriteValue", inputs: [("value", "ay"), ("options", "a{sv}")]) { [self] call, reply in
                write(call.arguments[0].byteArray ?? [], call.arguments[1], reply)
            },
            MethodSpec("StartNotify") { [self] _, reply in
                guard definition.has(GattFlag.notifyLike) else { return reply.fail(GattError.notSupported.busError) }
                state.withLock { $0.dbusSubscribers += 1 }
                onEvent(.subscribed(application: application, uuid: uuid, device: nil, mtu: nil, via: "dbus"))
                reply.succeed()
            },
            MethodSpec("StopNotify") { [self] _, reply in
                let had = state.withLock { s -> Bool in
                    guard s.dbusSubscribers > 0 else { return false }
                    s.dbusSubscribers -= 1
                    return true
                }
                if had { onEvent(.unsubscribed(application: application, uuid: uuid, device: nil)) }
                reply.succeed()
            },
            MethodSpec("Confirm") { [self] _, reply in
                onEvent(.confirmed(application: application, uuid: uuid, device: nil))
                reply.succeed()
            },
        ]
        var properties = [
            PropertySpec("UUID", "s"), PropertySpec("Service", "o"), PropertySpec("Flags", "as"),
            // Changes of Value are signalled by hand: only a notification may emit it, or
            // bluetoothd would notify every subscriber after each remote write.
            PropertySpec("Value", "ay", changeSignal: .none),
            PropertySpec("Notifying", "b"),
        ]
        // Indications go through StartNotify, where bluetoothd reports each confirmation
        // (Confirm); notifications use the AcquireNotify socket, the fast path.
        let fastNotify = definition.has([.notify, .encryptNotify, .encryptAuthenticatedNotify, .secureNotify])
            && !definition.has([.indicate, .encryptIndicate, .encryptAuthenticatedIndicate, .secureIndicate])
        if fastNotify {
            properties.append(PropertySpec("NotifyAcquired", "b"))
            methods.append(MethodSpec("AcquireNotify", inputs: [("options", "a{sv}")], outputs: [("fd", "h"), ("mtu", "q")]) { [self] call, reply in
                acquireNotify(call.arguments[0], reply)
            })
        }
        // No AcquireWrite: once a write socket exists, bluetoothd 5.66 sends every write
        // through it (requests too), and each write's type and device would be lost.
        return InterfaceSpec("org.bluez.GattCharacteristic1", methods: methods, properties: properties)
    }

    var propertyValues: [String: DBusValue] {
        var v: [String: DBusValue] = [
            "UUID": .string(uuid.uuidString), "Service": .objectPath(servicePath),
            "Flags": .stringArray(definition.flags.map(\.rawValue)), "Value": .bytes(value), "Notifying": .boolean(false),
        ]
        if interface.properties.contains(where: { $0.name == "NotifyAcquired" }) { v["NotifyAcquired"] = .boolean(false) }
        return v
    }

    private func read(_ opts: DBusValue, _ reply: MethodReply) {
        guard definition.has(GattFlag.readLike) else { return reply.fail(GattError.notPermitted.busError) }
        let o = Self.options(opts)
        onEvent(.read(application: application, uuid: uuid, device: o.device, offset: o.offset))
        let (value, handler) = state.withLock { ($0.value, $0.readHandler) }
        if let handler {
            let req = GattReadRequest(application: application, uuid: uuid, device: o.device, offset: o.offset, mtu: o.mtu)
            Task {
                switch await handler(req) {
                case .success(let v):
                    guard o.offset <= v.count else { return reply.fail(GattError.invalidOffset.busError) }
                    reply.succeed([.bytes(Array(v[o.offset...]))])
                case .failure(let e):
                    reply.fail(e.busError)
                }
            }
            return
        }
        guard o.offset <= value.count else { return reply.fail(GattError.invalidOffset.busError) }
        reply.succeed([.bytes(Array(value[o.offset...]))])
    }

    private func write(_ data: [UInt8], _ opts: DBusValue, _ reply: MethodReply) {
        guard definition.has(GattFlag.writeLike) else { return reply.fail(GattError.notPermitted.busError) }
        let o = Self.options(opts)
        if o.prepare {
            // A prepared write asks for authorisation only; the data comes with the execute.
            return reply.succeed()
        }
        let type = o.type
        let result = state.withLock { s -> Result<[UInt8], GattError> in
            if let refused = Self.write(data, into: &s.value, at: o.offset, maxLength: definition.maxLength) { return .failure(refused) }
            return .success(s.value)
        }
        switch result {
        case .failure(let e):
            reply.fail(e.busError)
        case .success(let v):
            reply.succeed()
            onEvent(.wrote(application: application, uuid: uuid, device: o.device, data: data, offset: o.offset, type: type, value: v))
        }
    }

    private func acquireNotify(_ opts: DBusValue, _ reply: MethodReply) {
        let o = Self.options(opts)
        let mtu = o.mtu ?? 23
        let fds: (Int32, Int32)
        do {
            fds = try DescriptorPassing.packetPair()
        } catch {
            return reply.fail(BusError(name: "org.bluez.Error.Failed", message: "socketpair: \(error)"))
        }
        let theirs = UnixFD(taking: fds.1)
        let session = NotifySession(fd: fds.0, device: o.device, mtu: mtu, onConfirm: { [self] in
            onEvent(.confirmed(application: application, uuid: uuid, device: o.device))
        }, onClose: { [weak self] s in
            guard let self else { return }
            state.withLock { $0.sessions.removeAll { $0 === s } }
            onEvent(.unsubscribed(application: application, uuid: uuid, device: s.device))
        })
        let replaced = state.withLock { s -> [NotifySession] in
            let old = s.sessions.filter { $0.device == o.device }
            s.sessions.removeAll { $0.device == o.device }
            s.sessions.append(session)
            return old
        }
        for r in replaced { r.close() }
        reply.succeed([.unixFD(theirs), .uint16(UInt16(clamping: mtu))])
        onEvent(.subscribed(application: application, uuid: uuid, device: o.device, mtu: mtu, via: "fd"))
    }
}
