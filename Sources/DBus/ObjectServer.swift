import Synchronization

extension BusConnection {
    // MARK: Exporting

    /// Exports `interfaces` at `path` with initial property values (interface → name → value).
    ///
    /// Adds to an object already there; an interface it already has is an error. Under an
    /// object-manager root this emits `InterfacesAdded`. Every property must be given a value
    /// of its declared type.
    public func export(_ path: ObjectPath, interfaces: [InterfaceSpec], values: [String: [String: DBusValue]] = [:]) throws {
        for i in interfaces {
            try Codec.validate(interface: i.name)
            for p in i.properties {
                guard let v = values[i.name]?[p.name] else {
                    throw BusError.invalid("\(path) \(i.name).\(p.name): no initial value")
                }
                guard v.signature == p.signature else {
                    throw BusError.invalid("\(path) \(i.name).\(p.name): value of type \(v.signature), declared \(p.signature)")
                }
            }
        }
        let manager: ObjectPath? = try objects.table.withLock { t throws(BusError) -> ObjectPath? in
            var o = t.objects[path] ?? ExportedObject()
            for i in interfaces where o.interfaces[i.name] != nil {
                throw BusError.invalid("\(path) already exports \(i.name)")
            }
            for i in interfaces {
                o.interfaces[i.name] = i
                o.values[i.name] = values[i.name] ?? [:]
                o.order.append(i.name)
            }
            t.objects[path] = o
            return managerRoot(of: path, in: t)
        }
        if let manager, !interfaces.isEmpty {
            let added = DBusValue.dictionary(key: "s", value: "a{sv}", interfaces.map { i in
                .init(.string(i.name), .propertyMap(Self.readable(i, values[i.name] ?? [:])))
            })
            _ = try? send(.signal(path: manager, interface: StandardInterface.objectManager, member: "InterfacesAdded",
                              body: [.objectPath(path), added]))
        }
    }

    /// Removes interfaces (all when nil) from the object at `path`; emits `InterfacesRemoved`
    /// under an object-manager root.
    public func unexport(_ path: ObjectPath, interfaces names: [String]? = nil) {
        let (removed, manager) = objects.table.withLock { t -> ([String], ObjectPath?) in
            guard var o = t.objects[path] else { return ([], nil) }
            let gone = names.map { n in o.order.filter { n.contains($0) } } ?? o.order
            for n in gone {
                o.interfaces.removeValue(forKey: n)
                o.values.removeValue(forKey: n)
            }
            o.order.removeAll { gone.contains($0) }
            t.objects[path] = o.order.isEmpty ? nil : o
            return (gone, managerRoot(of: path, in: t))
        }
        if let manager, !removed.isEmpty {
            _ = try? send(.signal(path: manager, interface: StandardInterface.objectManager, member: "InterfacesRemoved",
                              body: [.objectPath(path), .stringArray(removed)]))
        }
    }

    /// Makes `path` an `org.freedesktop.DBus.ObjectManager` root for the objects below it.
    public func addObjectManager(at path: ObjectPath) {
        _ = objects.table.withLock { $0.managers.insert(path) }
    }

    /// Stops `path` being an object-manager root.
    public func removeObjectManager(at path: ObjectPath) {
        _ = objects.table.withLock { $0.managers.remove(path) }
    }

    /// Sets a stored property value and emits `PropertiesChanged` as the property declares
    /// (every time, even for an equal value: a repeated GATT notification is a real event).
    public func setProperty(_ path: ObjectPath, _ interface: String, _ name: String, _ value: DBusValue) throws {
        let spec = try objects.table.withLock { t throws(BusError) -> PropertySpec in
            guard let o = t.objects[path], let i = o.interfaces[interface] else {
                throw BusError(name: BusError.unknownInterface, message: "\(path) does not export \(interface)")
            }
            guard let p = i.property(name) else {
                throw BusError(name: BusError.unknownProperty, message: "\(interface) has no property \(name)")
            }
            guard value.signature == p.signature else {
                throw BusError.invalid("\(interface).\(name) is \(p.signature), not \(value.signature)")
            }
            t.objects[path]!.values[interface]![name] = value
            return p
        }
        try emitPropertiesChanged(path, interface, [name: value], spec.changeSignal)
    }

    /// The stored value of a property of an exported object.
    public func property(_ path: ObjectPath, _ interface: String, _ name: String) -> DBusValue? {
        objects.table.withLock { $0.objects[path]?.values[interface]?[name] }
    }

    /// Emits a signal from an exported object.
    public func emitSignal(_ path: ObjectPath, _ interface: String, _ member: String, _ body: [DBusValue] = []) throws {
        try send(.signal(path: path, interface: interface, member: member, body: body))
    }

    /// The paths of all exported objects.
    public var exportedPaths: [ObjectPath] { objects.table.withLock { Array($0.objects.keys).sorted() } }

    private func emitPropertiesChanged(_ path: ObjectPath, _ interface: String, _ changed: [String: DBusValue],
                                       _ mode: PropertySpec.ChangeSignal) throws {
        switch mode {
        case .none: return
        case .emits:
            try send(.signal(path: path, interface: StandardInterface.properties, member: "PropertiesChanged",
                             body: [.string(interface), .propertyMap(changed), .stringArray([])]))
        case .invalidates:
            try send(.signal(path: path, interface: StandardInterface.properties, member: "PropertiesChanged",
                             body: [.string(interface), .propertyMap([:]), .stringArray(changed.keys.sorted())]))
        }
    }

    /// The values of `spec`'s readable properties: a write-only value is never shown
    /// (`InterfacesAdded` and `GetManagedObjects` answer like `GetAll`).
    static func readable(_ spec: InterfaceSpec, _ values: [String: DBusValue]) -> [String: DBusValue] {
        values.filter { name, _ in spec.property(name)?.access != .write }
    }

    private func managerRoot(of path: ObjectPath, in t: ObjectRegistry.Table) -> ObjectPath? {
        var p = path.parent
        while let q = p {
            if t.managers.contains(q) { return q }
            p = q.parent
        }
        return nil
    }

    // MARK: Routing incoming calls (on the queue)

    func handleMethodCall(_ m: BusMessage) {
        let path = m.path ?? .root
        let member = m.member ?? ""
        func fail(_ name: String, _ text: String) {
            if !m.noReplyExpected { _ = try? send(.errorReply(to: m, BusError(name: name, message: text))) }
        }
        func reply(_ body: [DBusValue]) {
            if !m.noReplyExpected { _ = try? send(.reply(to: m, body: body)) }
        }
        func expect(_ sig: String) -> Bool {
            if m.signature == sig { return true }
            fail(BusError.invalidArgs, "\(m.interface ?? "").\(member) takes (\(sig)), got (\(m.signature))")
            return false
        }

        switch m.interface {
        case StandardInterface.introspectable where member == "Introspect":
            guard expect("") else { return }
            if let xml = introspect(path) { reply([.string(xml)]) } else { fail(BusError.unknownObject, "no object at \(path)") }
            return
        case StandardInterface.properties:
            handlePropertiesCall(m, path: path, member: member, reply: reply, fail: fail, expect: expect)
            return
        case StandardInterface.objectManager where member == "GetManagedObjects":
            guard expect("") else { return }
            guard let objects = managedObjects(under: path) else {
                fail(BusError.unknownMethod, "\(path) is not an object manager")
                return
            }
            reply([objects])
            return
        default:
            break
        }

        let lookup = objects.table.withLock { t -> (ExportedObject?, [String]) in (t.objects[path], Array(t.objects.keys).map(\.rawValue)) }
        guard let object = lookup.0 else {
            fail(BusError.unknownObject, "no object at \(path)")
            return
        }
        let spec: MethodSpec?
        if let iface = m.interface {
            guard let i = object.interfaces[iface] else {
                fail(BusError.unknownInterface, "\(path) does not export \(iface)")
                return
            }
            spec = i.method(member)
        } else {
            spec = object.order.lazy.compactMap { object.interfaces[$0]?.method(member) }.first
        }
        guard let spec else {
            fail(BusError.unknownMethod, "\(path) has no method \(m.interface.map { $0 + "." } ?? "")\(member)")
            return
        }
        guard expect(spec.inSignature) else { return }
        spec.handler(MethodCall(message: m), MethodReply(connection: self, call: m, outSignature: spec.outSignature))
    }

    private func handlePropertiesCall(_ m: BusMessage, path: ObjectPath, member: String,
                                      reply: ([DBusValue]) -> Void, fail: (String, String) -> Void, expect: (String) -> Bool) {
        let object = objects.table.withLock { $0.objects[path] }
        guard let object else {
            fail(BusError.unknownObject, "no object at \(path)")
            return
        }
        switch member {
        case "Get":
            guard expect("ss"), let iface = m.body[0].string, let name = m.body[1].string else { return }
            guard let i = object.interfaces[iface] else { return fail(BusError.unknownInterface, "\(path) does not export \(iface)") }
            guard let p = i.property(name) else { return fail(BusError.unknownProperty, "\(iface) has no property \(name)") }
            guard p.access != .write else { return fail(BusError.accessDenied, "\(iface).\(name) is write-only") }
            reply([.variant(object.values[iface]![name]!)])
        case "GetAll":
            guard expect("s"), let iface = m.body[0].string else { return }
            guard let i = object.interfaces[iface] else { return fail(BusError.unknownInterface, "\(path) does not export \(iface)") }
            let readable = i.properties.filter { $0.access != .write }.map(\.name)
            var map: [String: DBusValue] = [:]
            for n in readable { map[n] = object.values[iface]![n] }
            reply([.propertyMap(map)])
        case "Set":
            guard expect("ssv"), let iface = m.body[0].string, let name = m.body[1].string,
                  case .variant(let value) = m.body[2] else { return }
            guard let i = object.interfaces[iface] else { return fail(BusError.unknownInterface, "\(path) does not export \(iface)") }
            guard let p = i.property(name) else { return fail(BusError.unknownProperty, "\(iface) has no property \(name)") }
            guard p.access != .read else { return fail(BusError.propertyReadOnly, "\(iface).\(name) is read-only") }
            guard value.signature == p.signature else {
                return fail(BusError.invalidArgs, "\(iface).\(name) is \(p.signature), not \(value.signature)")
            }
            do {
                try p.validateSet?(value, MethodCall(message: m))
                try setProperty(path, iface, name, value)
                reply([])
            } catch let e as BusError {
                fail(e.name, e.message)
            } catch {
                fail(BusError.failed, "\(error)")
            }
        default:
            fail(BusError.unknownMethod, "\(StandardInterface.properties) has no method \(member)")
        }
    }

    /// `a{oa{sa{sv}}}` for the objects below `root`, or nil when `root` is not a manager.
    func managedObjects(under root: ObjectPath) -> DBusValue? {
        objects.table.withLock { t -> DBusValue? in
            guard t.managers.contains(root) else { return nil }
            let entries = t.objects.keys.filter { $0.isDescendant(of: root, orSelf: false) }.sorted().map { p -> DBusValue.DictEntry in
                let o = t.objects[p]!
                let ifaces = DBusValue.dictionary(key: "s", value: "a{sv}", o.order.map { n in
                    .init(.string(n), .propertyMap(Self.readable(o.interfaces[n]!, o.values[n] ?? [:])))
                })
                return .init(.objectPath(p), ifaces)
            }
            return .dictionary(key: "o", value: "a{sa{sv}}", entries)
        }
    }
}
