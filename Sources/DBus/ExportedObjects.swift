import Synchronization

/// An incoming method call to an exported object.
public struct MethodCall: Sendable {
    /// The whole message.
    public let message: BusMessage
    /// The arguments (already checked against the method's input signature).
    public var arguments: [DBusValue] { message.body }
    /// The caller's unique bus name.
    public var sender: String? { message.sender }
    /// The object path called.
    public var path: ObjectPath { message.path ?? .root }
}

/// The one reply to a method call. Answer it once, now or later, from any thread; a reply
/// object dropped unanswered sends `org.freedesktop.DBus.Error.Failed` so callers never hang.
public final class MethodReply: Sendable {
    private let connection: BusConnection
    private let call: BusMessage
    private let outSignature: String
    private let answered = Mutex(false)

    init(connection: BusConnection, call: BusMessage, outSignature: String) {
        self.connection = connection
        self.call = call
        self.outSignature = outSignature
    }

    private func claim() -> Bool {
        answered.withLock { done in
            if done { return false }
            done = true
            return true
        }
    }

    /// Sends a successful reply. Values must match the method's output signature.
    public func succeed(_ body: [DBusValue] = []) {
        guard claim() else { return }
        let sig = body.map(\.signature).joined()
        if sig != outSignature {
            send(.errorReply(to: call, BusError(name: BusError.failed, message: "internal error: reply signature \(sig) does not match \(outSignature)")))
            return
        }
        send(.reply(to: call, body: body))
    }

    /// Sends an error reply.
    public func fail(_ error: BusError) {
        guard claim() else { return }
        send(.errorReply(to: call, error))
    }

    /// Sends an error reply for any error: a `BusError` keeps its name, others become `Failed`.
    public func fail(_ error: any Error) {
        if let e = error as? BusError { fail(e) } else { fail(BusError(name: BusError.failed, message: "\(error)")) }
    }

    private func send(_ m: BusMessage) {
        if call.noReplyExpected { return }
        // Encoding a reply cannot fail for valid names; if the caller left, the send is harmless.
        _ = try? connection.send(m)
    }

    deinit {
        if claim() { send(.errorReply(to: call, BusError(name: BusError.failed, message: "the handler returned no reply"))) }
    }
}

/// A method of an exported interface.
public struct MethodSpec: Sendable {
    /// Member name.
    public var name: String
    /// Input arguments: (name, single complete type).
    public var inputs: [(String, String)]
    /// Output arguments: (name, single complete type).
    public var outputs: [(String, String)]
    /// Called on the connection's queue in arrival order; must not block. Answer through the reply.
    public var handler: @Sendable (MethodCall, MethodReply) -> Void

    /// A method whose handler runs in order on the connection's queue and answers through `MethodReply`
    /// (at once or later). Use this where order matters (GATT writes) or the answer comes from elsewhere.
    public init(_ name: String, inputs: [(String, String)] = [], outputs: [(String, String)] = [],
                handler: @escaping @Sendable (MethodCall, MethodReply) -> Void) {
        self.name = name
        self.inputs = inputs
        self.outputs = outputs
        self.handler = handler
    }

    /// A method with an async handler, run in a new task per call (calls may complete out of order).
    public static func async(_ name: String, inputs: [(String, String)] = [], outputs: [(String, String)] = [],
                             _ body: @escaping @Sendable (MethodCall) async throws -> [DBusValue]) -> MethodSpec {
        MethodSpec(name, inputs: inputs, outputs: outputs) { call, reply in
            Task {
                do { reply.succeed(try await body(call)) } catch { reply.fail(error) }
            }
        }
    }

    var inSignature: String { inputs.map(\.1).joined() }
    var outSignature: String { outputs.map(\.1).joined() }
}

/// A property of an exported interface. Its value is stored by the connection.
public struct PropertySpec: Sendable {
    /// Who may do what.
    public enum Access: String, Sendable { case read, write, readwrite }
    /// What `PropertiesChanged` says on a change.
    public enum ChangeSignal: Sendable {
        /// The new value is sent.
        case emits
        /// Only the name is sent (invalidated).
        case invalidates
        /// Nothing is sent (the value never changes, or changes silently).
        case none
    }

    /// Property name.
    public var name: String
    /// Single complete type.
    public var signature: String
    /// Access.
    public var access: Access
    /// Change notification.
    public var changeSignal: ChangeSignal
    /// Called on the queue before a remote `Set` is stored; throw a `BusError` to refuse it.
    public var validateSet: (@Sendable (DBusValue, MethodCall) throws -> Void)?

    /// Creates a property spec.
    public init(_ name: String, _ signature: String, access: Access = .read, changeSignal: ChangeSignal = .emits,
                validateSet: (@Sendable (DBusValue, MethodCall) throws -> Void)? = nil) {
        self.name = name
        self.signature = signature
        self.access = access
        self.changeSignal = changeSignal
        self.validateSet = validateSet
    }
}

/// A signal an interface declares (for introspection).
public struct SignalSpec: Sendable {
    /// Member name.
    public var name: String
    /// Arguments: (name, single complete type).
    public var arguments: [(String, String)]
    /// Creates a signal spec.
    public init(_ name: String, arguments: [(String, String)] = []) {
        self.name = name
        self.arguments = arguments
    }
}

/// An interface an object exports: plain data, built once and shared.
public struct InterfaceSpec: Sendable {
    /// Interface name, e.g. `org.bluez.GattCharacteristic1`.
    public var name: String
    /// Methods by name.
    public var methods: [MethodSpec]
    /// Properties.
    public var properties: [PropertySpec]
    /// Signals.
    public var signals: [SignalSpec]

    /// Creates an interface spec.
    public init(_ name: String, methods: [MethodSpec] = [], properties: [PropertySpec] = [], signals: [SignalSpec] = []) {
        self.name = name
        self.methods = methods
        self.properties = properties
        self.signals = signals
    }

    func method(_ name: String) -> MethodSpec? { methods.first { $0.name == name } }
    func property(_ name: String) -> PropertySpec? { properties.first { $0.name == name } }
}

/// One exported object: its interfaces and their current property values.
struct ExportedObject {
    var interfaces: [String: InterfaceSpec] = [:]
    var values: [String: [String: DBusValue]] = [:]
    /// Interface names in the order they were added (for stable replies).
    var order: [String] = []
}

/// The table of exported objects of one connection.
final class ObjectRegistry: Sendable {
    struct Table {
        var objects: [ObjectPath: ExportedObject] = [:]
        var managers: Set<ObjectPath> = []
    }

    let table = Mutex(Table())
}

/// The standard interface names.
public enum StandardInterface {
    /// `org.freedesktop.DBus.Properties`
    public static let properties = "org.freedesktop.DBus.Properties"
    /// `org.freedesktop.DBus.ObjectManager`
    public static let objectManager = "org.freedesktop.DBus.ObjectManager"
    /// `org.freedesktop.DBus.Introspectable`
    public static let introspectable = "org.freedesktop.DBus.Introspectable"
    /// `org.freedesktop.DBus.Peer`
    public static let peer = "org.freedesktop.DBus.Peer"
}
