/// The managed objects of a remote object manager: path → interface → property → value
/// (variants removed).
public typealias ManagedObjects = [ObjectPath: [String: [String: DBusValue]]]

extension BusConnection {
    /// `org.freedesktop.DBus.Properties.Get`, the value without its variant.
    public func getProperty(destination: String, path: ObjectPath, interface: String, name: String,
                            timeout: Duration = .seconds(25)) async throws -> DBusValue {
        let r = try await call(destination: destination, path: path, interface: StandardInterface.properties,
                               member: "Get", [.string(interface), .string(name)], timeout: timeout)
        guard r.count == 1, case .variant(let v) = r[0] else {
            throw BusError(name: BusError.invalidSignature, message: "Properties.Get on \(path) returned (\(r.map(\.signature).joined())), expected (v)")
        }
        return v
    }

    /// `org.freedesktop.DBus.Properties.GetAll`, values without their variants.
    public func getAllProperties(destination: String, path: ObjectPath, interface: String,
                                 timeout: Duration = .seconds(25)) async throws -> [String: DBusValue] {
        let r = try await call(destination: destination, path: path, interface: StandardInterface.properties,
                               member: "GetAll", [.string(interface)], timeout: timeout)
        guard r.count == 1, let map = r[0].stringKeyedMap else {
            throw BusError(name: BusError.invalidSignature, message: "Properties.GetAll on \(path) returned (\(r.map(\.signature).joined())), expected (a{sv})")
        }
        return map
    }

    /// `org.freedesktop.DBus.Properties.Set`.
    public func setRemoteProperty(destination: String, path: ObjectPath, interface: String, name: String, value: DBusValue,
                                  timeout: Duration = .seconds(25)) async throws {
        _ = try await call(destination: destination, path: path, interface: StandardInterface.properties,
                           member: "Set", [.string(interface), .string(name), .variant(value)], timeout: timeout)
    }

    /// `org.freedesktop.DBus.ObjectManager.GetManagedObjects` on `path`.
    public func getManagedObjects(destination: String, path: ObjectPath = .root,
                                  timeout: Duration = .seconds(25)) async throws -> ManagedObjects {
        let r = try await call(destination: destination, path: path, interface: StandardInterface.objectManager,
                               member: "GetManagedObjects", timeout: timeout)
        guard r.count == 1, let objects = ManagedObjects(decoding: r[0]) else {
            throw BusError(name: BusError.invalidSignature, message: "GetManagedObjects on \(path) of \(destination) returned (\(r.map(\.signature).joined())), expected (a{oa{sa{sv}}})")
        }
        return objects
    }
}

extension Dictionary where Key == ObjectPath, Value == [String: [String: DBusValue]] {
    /// Reads an `a{oa{sa{sv}}}` value; nil if it has another shape.
    public init?(decoding value: DBusValue) {
        guard let entries = value.dictionaryEntries else { return nil }
        self.init()
        for e in entries {
            guard let path = e.key.objectPath, let ifaces = InterfaceProperties(decoding: e.value) else { return nil }
            self[path] = ifaces
        }
    }
}

/// Interface → property → value, as in `InterfacesAdded`.
public typealias InterfaceProperties = [String: [String: DBusValue]]

extension Dictionary where Key == String, Value == [String: DBusValue] {
    /// Reads an `a{sa{sv}}` value; nil if it has another shape.
    public init?(decoding value: DBusValue) {
        guard let entries = value.dictionaryEntries else { return nil }
        self.init()
        for e in entries {
            guard let name = e.key.string, let props = e.value.stringKeyedMap else { return nil }
            self[name] = props
        }
    }
}
