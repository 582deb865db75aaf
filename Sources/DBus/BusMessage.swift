/// A D-Bus message as plain Swift values: header fields and a decoded body.
///
/// Messages are decoded completely when they arrive, so no C object outlives the
/// connection's queue and handlers can keep a message as long as they like.
public struct BusMessage: Sendable {
    /// The four message types.
    public enum Kind: Sendable, Hashable {
        /// A method call.
        case methodCall
        /// A successful reply.
        case methodReturn
        /// An error reply.
        case error
        /// A signal.
        case signal
    }

    /// The message type.
    public var kind: Kind
    /// The serial the sender gave it (0 until sent).
    public var serial: UInt32 = 0
    /// For replies: the serial of the call answered.
    public var replySerial: UInt32?
    /// Object path (calls and signals).
    public var path: ObjectPath?
    /// Interface (calls and signals).
    public var interface: String?
    /// Method or signal name.
    public var member: String?
    /// Error name (errors).
    public var errorName: String?
    /// Destination bus name.
    public var destination: String?
    /// Sender's unique bus name (set by the bus).
    public var sender: String?
    /// The arguments.
    public var body: [DBusValue]
    /// For calls: the caller wants no reply.
    public var noReplyExpected = false
    /// For calls: the callee may prompt the user for authorisation (polkit).
    public var allowInteractiveAuthorization = false

    /// Creates a message of `kind` with `body`.
    public init(kind: Kind, body: [DBusValue] = []) {
        self.kind = kind
        self.body = body
    }

    /// The body's signature.
    public var signature: String { body.map(\.signature).joined() }

    /// A method call.
    public static func methodCall(destination: String?, path: ObjectPath, interface: String?, member: String, body: [DBusValue] = []) -> BusMessage {
        var m = BusMessage(kind: .methodCall, body: body)
        m.destination = destination
        m.path = path
        m.interface = interface
        m.member = member
        return m
    }

    /// A signal.
    public static func signal(path: ObjectPath, interface: String, member: String, body: [DBusValue] = [], destination: String? = nil) -> BusMessage {
        var m = BusMessage(kind: .signal, body: body)
        m.path = path
        m.interface = interface
        m.member = member
        m.destination = destination
        return m
    }

    /// A successful reply to `call`.
    public static func reply(to call: BusMessage, body: [DBusValue] = []) -> BusMessage {
        var m = BusMessage(kind: .methodReturn, body: body)
        m.replySerial = call.serial
        m.destination = call.sender
        return m
    }

    /// An error reply to `call`.
    public static func errorReply(to call: BusMessage, _ error: BusError) -> BusMessage {
        var m = BusMessage(kind: .error, body: error.message.isEmpty ? [] : [.string(error.message)])
        m.replySerial = call.serial
        m.destination = call.sender
        m.errorName = error.name
        return m
    }

    /// For an error message, the error it carries.
    public var asError: BusError? {
        guard kind == .error else { return nil }
        let text = body.first?.string ?? ""
        return BusError(name: errorName ?? BusError.failed, message: text)
    }

    /// "signal /org/bluez/hci0 org.freedesktop.DBus.Properties.PropertiesChanged (sa{sv}as)".
    public var summary: String {
        let what: String
        switch kind {
        case .methodCall: what = "call"
        case .methodReturn: what = "return"
        case .error: what = "error \(errorName ?? "?")"
        case .signal: what = "signal"
        }
        let target = [path?.rawValue, [interface, member].compactMap { $0 }.joined(separator: ".")]
            .compactMap { $0 }.filter { !$0.isEmpty }.joined(separator: " ")
        return "\(what) \(target) (\(signature))"
    }
}
