/// An error with a D-Bus error name: a reply from a peer, or one this side produced
/// (timeouts, disconnection, bad arguments) under the standard names.
public struct BusError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The D-Bus error name, e.g. `org.bluez.Error.Failed`.
    public var name: String
    /// The human-readable message that came with it (may be empty).
    public var message: String

    /// Creates an error.
    public init(name: String, message: String) {
        self.name = name
        self.message = message
    }

    /// "org.bluez.Error.Failed: Operation already in progress".
    public var description: String { message.isEmpty ? name : "\(name): \(message)" }

    /// The last component of the name (`Failed` for `org.bluez.Error.Failed`).
    public var shortName: String { name.split(separator: ".").last.map(String.init) ?? name }

    /// `org.freedesktop.DBus.Error.Failed`
    public static let failed = "org.freedesktop.DBus.Error.Failed"
    /// `org.freedesktop.DBus.Error.NoReply`: no reply within the timeout.
    public static let noReply = "org.freedesktop.DBus.Error.NoReply"
    /// `org.freedesktop.DBus.Error.Disconnected`: the connection to the bus is gone.
    public static let disconnected = "org.freedesktop.DBus.Error.Disconnected"
    /// `org.freedesktop.DBus.Error.ServiceUnknown`: no one owns the destination name.
    public static let serviceUnknown = "org.freedesktop.DBus.Error.ServiceUnknown"
    /// `org.freedesktop.DBus.Error.NameHasNoOwner`
    public static let nameHasNoOwner = "org.freedesktop.DBus.Error.NameHasNoOwner"
    /// `org.freedesktop.DBus.Error.UnknownObject`
    public static let unknownObject = "org.freedesktop.DBus.Error.UnknownObject"
    /// `org.freedesktop.DBus.Error.UnknownInterface`
    public static let unknownInterface = "org.freedesktop.DBus.Error.UnknownInterface"
    /// `org.freedesktop.DBus.Error.UnknownMethod`
    public static let unknownMethod = "org.freedesktop.DBus.Error.UnknownMethod"
    /// `org.freedesktop.DBus.Error.UnknownProperty`
    public static let unknownProperty = "org.freedesktop.DBus.Error.UnknownProperty"
    /// `org.freedesktop.DBus.Error.PropertyReadOnly`
    public static let propertyReadOnly = "org.freedesktop.DBus.Error.PropertyReadOnly"
    /// `org.freedesktop.DBus.Error.InvalidArgs`
    public static let invalidArgs = "org.freedesktop.DBus.Error.InvalidArgs"
    /// `org.freedesktop.DBus.Error.InvalidSignature`
    public static let invalidSignature = "org.freedesktop.DBus.Error.InvalidSignature"
    /// `org.freedesktop.DBus.Error.NotSupported`
    public static let notSupported = "org.freedesktop.DBus.Error.NotSupported"
    /// `org.freedesktop.DBus.Error.AccessDenied`
    public static let accessDenied = "org.freedesktop.DBus.Error.AccessDenied"
    /// `org.freedesktop.DBus.Error.NoMemory`
    public static let noMemory = "org.freedesktop.DBus.Error.NoMemory"

    /// Whether this error means the peer is not on the bus (so retrying now is pointless).
    public var isServiceGone: Bool {
        name == BusError.serviceUnknown || name == BusError.nameHasNoOwner || name == BusError.disconnected
    }

    static func invalid(_ message: String) -> BusError { BusError(name: invalidArgs, message: message) }
}
