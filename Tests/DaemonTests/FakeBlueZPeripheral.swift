import DBus
import Foundation
import Synchronization
import Testing
import TestSupport

/// The peripheral side of a fake bluetoothd: GattManager1, LEAdvertisingManager1 and
/// AgentManager1 on hci0, calling back into the registering daemon the way bluetoothd does
/// (GetManagedObjects on the application root during RegisterApplication, GetAll on an
/// advertisement). Deterministic host tests of the daemon's peripheral code; the lab runs
/// the same against the real bluetoothd.
final class FakePeripheralManagers: Sendable {
    struct State {
        var appOwner: String?
        var appRoot: ObjectPath?
        var tree: ManagedObjects = [:]
        var registrations = 0
        var ads: [ObjectPath: [String: DBusValue]] = [:]
        var adOwner: String?
        var agent: (owner: String, path: ObjectPath, capability: String)?
        /// RegisterAdvertisement's answers wait (the advertisement registered, the reply held).
        var holdAdvertisementReplies = false
        var heldAdvertisementReplies: [@Sendable () -> Void] = []
        /// RegisterAgent calls to refuse (a bluetoothd that says no).
        var refuseAgentRegistrations = 0
        var supportedInstances: UInt8 = 4
    }

    /// The state, in a class so the method closures can share it.
    final class Box: Sendable { let state = Mutex(State()) }
    let box = Box()
    let connection: BusConnection

    init(on fake: FakeBlueZ) throws {
        connection = fake.connection
        let c = connection
        let hci0: ObjectPath = "/org/bluez/hci0"
        let gatt = InterfaceSpec("org.bluez.GattManager1", methods: [
            MethodSpec("RegisterApplication", inputs: [("application", "o"), ("options", "a{sv}")]) { [box] call, reply in
                let root = call.arguments[0].objectPath!
                // Like bluetoothd: read the whole tree before answering. Done from the queue with
                // a completion, not a task: the tests block threads of the cooperative pool.
                c.call(.methodCall(destination: call.sender!, path: root, interface: StandardInterface.objectManager,
                                   member: "GetManagedObjects"), timeout: .seconds(10)) { result in
                    switch result {
                    case .success(let m):
                        let tree = m.body.first.flatMap { ManagedObjects(decoding: $0) } ?? [:]
                        box.state.withLock {
                            $0.appOwner = call.sender
                            $0.appRoot = root
                            $0.tree = tree
                            $0.registrations += 1
                        }
                        reply.succeed()
                    case .failure(let e):
                        reply.fail(e)
                    }
                }
            },
            MethodSpec("UnregisterApplication", inputs: [("application", "o")]) { [box] _, reply in
                box.state.withLock {
                    $0.appRoot = nil
                    $0.tree = [:]
                }
                reply.succeed()
            },
        ])
        let adv = InterfaceSpec("org.bluez.LEAdvertisingManager1", methods: [
            MethodSpec("RegisterAdvertisement", inputs: [("advertisement", "o"), ("options", "a{sv}")]) { [box] call, reply in
                let path = call.arguments[0].objectPath!
                c.call(.methodCall(destination: call.sender!, path: path, interface: StandardInterface.properties, member: "GetAll",
                                   body: [.string("org.bluez.LEAdvertisement1")]), timeout: .seconds(10)) { result in
                    guard case .success(let m) = result, let props = m.body.first?.stringKeyedMap else {
                        return reply.fail(BusError(name: "org.bluez.Error.Failed", message: "cannot read the advertisement"))
                    }
                    let full = box.state.withLock { s -> Bool in
                        if s.supportedInstances == 0 { return true }
                        s.ads[path] = props
                        s.adOwner = call.sender
                        s.supportedInstances -= 1
                        return false
                    }
                    if full { return reply.fail(BusError(name: "org.bluez.Error.NotPermitted", message: "Maximum advertisements reached")) }
                    try? c.setProperty(hci0, "org.bluez.LEAdvertisingManager1", "SupportedInstances", .byte(box.state.withLock { $0.supportedInstances }))
                    let held = box.state.withLock { s -> Bool in
                        if s.holdAdvertisementReplies { s.heldAdvertisementReplies.append { reply.succeed() } }
                        return s.holdAdvertisementReplies
                    }
                    if !held { reply.succeed() }
                }
            },
            MethodSpec("UnregisterAdvertisement", inputs: [("advertisement", "o")]) { [box] call, reply in
                let path = call.arguments[0].objectPath!
                box.state.withLock { s in
                    if s.ads.removeValue(forKey: path) != nil { s.supportedInstances += 1 }
                }
                reply.succeed()
            },
        ], properties: [PropertySpec("SupportedInstances", "y"), PropertySpec("ActiveInstances", "y"),
                        PropertySpec("SupportedCapabilities", "a{sv}")])
        try connection.export(hci0, interfaces: [gatt, adv], values: ["org.bluez.LEAdvertisingManager1": [
            "SupportedInstances": .byte(4), "ActiveInstances": .byte(0),
            "SupportedCapabilities": .propertyMap(["MaxAdvLen": .byte(31), "MaxScnRspLen": .byte(31)]),
        ]])
        let agents = InterfaceSpec("org.bluez.AgentManager1", methods: [
            MethodSpec("RegisterAgent", inputs: [("agent", "o"), ("capability", "s")]) { [box] call, reply in
                let refuse = box.state.withLock { s -> Bool in
                    guard s.refuseAgentRegistrations > 0 else {
                        s.agent = (call.sender!, call.arguments[0].objectPath!, call.arguments[1].string!)
                        return false
                    }
                    s.refuseAgentRegistrations -= 1
                    s.agent = nil  // the UnregisterAgent before it went through
                    return true
                }
                if refuse { return reply.fail(BusError(name: "org.bluez.Error.Failed", message: "refused by the test")) }
                reply.succeed()
            },
            MethodSpec("UnregisterAgent", inputs: [("agent", "o")]) { _, reply in reply.succeed() },
            MethodSpec("RequestDefaultAgent", inputs: [("agent", "o")]) { _, reply in reply.succeed() },
        ])
        try connection.export("/org/bluez", interfaces: [agents])
    }

    /// The registered object with interface `iface` whose UUID is `uuid`.
    func object(_ iface: String, uuid: String) -> ObjectPath? {
        box.state.withLock { s in s.tree.first { $0.value[iface]?["UUID"]?.string == uuid }?.key }
    }

    /// Calls a method on the daemon's characteristic, as bluetoothd does for a central.
    func callCharacteristic(_ path: ObjectPath, _ member: String, _ body: [DBusValue]) async throws -> [DBusValue] {
        let owner = try #require(box.state.withLock { $0.appOwner })
        return try await connection.call(destination: owner, path: path, interface: "org.bluez.GattCharacteristic1",
                                         member: member, body, timeout: .seconds(10))
    }

    /// bluetoothd's option dictionary for a request from central `device`.
    static func options(device: String = "/org/bluez/hci0/dev_00_AA_01_01_00_01", offset: UInt16 = 0, mtu: UInt16 = 517) -> DBusValue {
        .propertyMap(["device": .objectPath(try! ObjectPath(validating: device)), "offset": .uint16(offset), "mtu": .uint16(mtu), "link": .string("LE")])
    }
}

/// A call started without a task; its result is collected when it arrives.
final class PendingCall: Sendable {
    private let result = Mutex<Result<BusMessage, Error>?>(nil)

    /// Sends `m` on `c` now; the reply is kept for `value()`.
    init(_ c: BusConnection, _ m: BusMessage) {
        c.call(m, timeout: .seconds(20)) { [weak self] r in self?.result.withLock { $0 = r } }
    }

    /// The reply body, once it came (checking every 10 ms, at most `timeout` seconds).
    func value(timeout: Double = 20) async throws -> [DBusValue] {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let r = result.withLock({ $0 }) { return try r.get().body }
            try await Task.sleep(for: .milliseconds(10))
        }
        throw TestSupportError("no reply within \(timeout) s")
    }
}

extension FakePeripheralManagers {
    /// Starts a call on the daemon's characteristic from the fake's queue (no task needed).
    func startCharacteristicCall(_ path: ObjectPath, _ member: String, _ body: [DBusValue]) throws -> PendingCall {
        let owner = try #require(box.state.withLock { $0.appOwner })
        return PendingCall(connection, .methodCall(destination: owner, path: path, interface: "org.bluez.GattCharacteristic1",
                                                   member: member, body: body))
    }
}
