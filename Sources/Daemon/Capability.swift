import BlueZ
import Control
import DBus
import FoundationEssentials
import Logging

/// What a capability gets from the daemon.
public struct DaemonContext: Sendable {
    /// The daemon's logger (make a child per capability).
    public let logger: Logger
    /// The daemon's state directory (persistent state lives under it).
    public let stateDirectory: String
    /// The configured default adapter (nil: the first adapter).
    public let defaultAdapter: String?
    /// Settings of sections (`agent.policy`, …) from the configuration file, as written.
    public let settings: [String: String]
    let server: ControlServer

    /// Registers a control method.
    public func register(_ name: String, _ handler: @escaping MethodHandler) { server.register(name, handler) }

    /// Registers a quick control method, answered on the client's queue (see `QuickMethodHandler`).
    public func register(_ name: String, quick handler: @escaping QuickMethodHandler) { server.register(name, quick: handler) }

    /// Sends an event to subscribed control clients.
    public func publish(topic: String, data: JSONValue) { server.publish(topic: topic, data: data) }

    /// Sends an event to one client (subscribed or not); false when it is gone.
    @discardableResult
    public func send(topic: String, data: JSONValue, to clientID: UInt64) -> Bool { server.send(topic: topic, data: data, to: clientID) }

    /// Runs `handler` when a client connection closes, with the client's id.
    public func onClientClose(_ handler: @escaping @Sendable (UInt64) -> Void) { server.onClientClose(handler) }
}

/// The bus-side objects while the daemon is connected to the bus.
public struct BusSession: Sendable {
    /// The bus connection.
    public let connection: BusConnection
    /// The client following bluetoothd and its adapters (`follow` or `events()` for its events, in order).
    public let bluez: BlueZClient
}

/// One area of the daemon's work (GATT server, advertising, central, DNS-SD, ...), kept in
/// its own files. The daemon creates each once; it registers its control methods in
/// `register`, and is told when a bus connection starts and ends. What a user asked for
/// (registered applications, advertisements, publications) belongs to the capability, not
/// to the session, so it can be applied again on a new connection or after bluetoothd or
/// avahi-daemon restarts.
public protocol DaemonCapability: AnyObject, Sendable {
    /// A short name for logs.
    var name: String { get }
    /// Registers the capability's control methods; throws a `ConfigError` for a bad setting of its own.
    func register(_ context: DaemonContext) throws
    /// A bus connection is up (called again after every reconnection).
    func attach(_ session: BusSession) async
    /// The bus connection is gone.
    func detach() async
    /// The daemon is stopping: release what was registered with other services.
    func shutdown() async
}

extension DaemonCapability {
    /// Nothing to release by default.
    public func shutdown() async {}
}
