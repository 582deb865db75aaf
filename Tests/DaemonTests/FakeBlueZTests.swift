import Control
import DBus
import Foundation
import Testing
import TestSupport

/// A stand-in for bluetoothd on a private bus: owns `org.bluez` and exports adapters with
/// `org.bluez.Adapter1` under an ObjectManager at `/`, as BlueZ does. For fast, deterministic
/// tests of the daemon's adapter tracking; the lab tests the same against the real bluetoothd.
final class FakeBlueZ: Sendable {
    let connection: BusConnection

    struct Adapter {
        var name: String
        var address: String
        var powerState = "on"
        /// Adapter1 methods (StartDiscovery, ConnectDevice, ...) for tests that need them.
        var methods: [MethodSpec] = []
    }

    /// Exports the adapters; takes the name `org.bluez` unless `claimName` is false (then call
    /// `claimName()` once everything else is exported, as bluetoothd is ready when it appears).
    init(busAddress: String, adapters: [Adapter], claimName: Bool = true) async throws {
        connection = try await BusConnection.connect(.address(busAddress), label: "fake-bluez")
        connection.addObjectManager(at: .root)
        for a in adapters { try add(a) }
        if claimName { try await self.claimName() }
    }

    /// Takes the name `org.bluez`: the daemon sees bluetoothd appear. A fake that replaces
    /// one whose connection was just closed waits (up to 5 s) for the bus to drop the old
    /// owner, as a restarted bluetoothd starts only after the old one is gone.
    func claimName() async throws {
        let deadline = ContinuousClock.now + .seconds(5)
        var owned = try await connection.requestName("org.bluez")
        while !owned, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
            owned = try await connection.requestName("org.bluez")
        }
        #expect(owned)
    }

    func add(_ a: Adapter) throws {
        let path = ObjectPath.root.appending("org").appending("bluez").appending(a.name)
        let conn = connection
        let powered = PropertySpec("Powered", "b", access: .readwrite) { value, _ in
            // bluetoothd refuses to power a blocked adapter with org.bluez.Error.Blocked.
            let state = conn.property(path, "org.bluez.Adapter1", "PowerState")?.string
            if value.bool == true, state == "off-blocked" {
                throw BusError(name: "org.bluez.Error.Blocked", message: "Blocked through rfkill")
            }
            try conn.setProperty(path, "org.bluez.Adapter1", "PowerState", .string(value.bool == true ? "on" : "off"))
        }
        let iface = InterfaceSpec("org.bluez.Adapter1", methods: a.methods, properties: [
            PropertySpec("Address", "s"), PropertySpec("AddressType", "s"), PropertySpec("Name", "s"),
            PropertySpec("Alias", "s", access: .readwrite), powered, PropertySpec("PowerState", "s"),
            PropertySpec("Discoverable", "b", access: .readwrite), PropertySpec("Discovering", "b"),
            PropertySpec("Roles", "as"),
        ])
        try connection.export(path, interfaces: [iface], values: ["org.bluez.Adapter1": [
            "Address": .string(a.address), "AddressType": .string("public"), "Name": .string("fake-\(a.name)"),
            "Alias": .string("fake-\(a.name)"), "Powered": .boolean(a.powerState == "on"), "PowerState": .string(a.powerState),
            "Discoverable": .boolean(false), "Discovering": .boolean(false), "Roles": .stringArray(["central", "peripheral"]),
        ]])
    }

    func remove(_ name: String) {
        connection.unexport(ObjectPath.root.appending("org").appending("bluez").appending(name))
    }

    func powered(_ name: String) -> Bool? {
        connection.property(ObjectPath.root.appending("org").appending("bluez").appending(name), "org.bluez.Adapter1", "Powered")?.bool
    }
}

@Suite(.ownThreads, .memoryHeavy) struct FakeBlueZTests {
    static let a0 = "00:AA:01:00:00:00", a1 = "00:AA:01:01:00:01"

    func start(adapter: String? = nil) async throws -> (PrivateBus, FakeBlueZ, DaemonHarness) {
        let bus = try PrivateBus()
        let fake = try await FakeBlueZ(busAddress: bus.address, adapters: [
            .init(name: "hci0", address: Self.a0), .init(name: "hci1", address: Self.a1),
        ])
        let h = try await DaemonHarness(busAddress: bus.address, adapter: adapter)
        _ = try await h.waitForStatus { $0["adapters"]?.arrayValue?.count == 2 }
        return (bus, fake, h)
    }

    /// A clean stop (SIGTERM) with bluetoothd on the bus logs no warning or error and does
    /// not say bluetoothd left: the daemon closed its own bus connection ("lost the bus" and
    /// "bluetoothd left the bus" at every stop were reports without a cause).
    @Test func aCleanStopReportsNothingLost() async throws {
        let (bus, _, h) = try await start()
        defer { _ = bus }
        _ = try await h.waitForStatus { $0["bluez"]?["available"] == true }
        let (status, log) = h.stopReadingLog()
        #expect(status == 0)
        let stopping = try #require(log.range(of: "shutting down"), "no shutdown in the log:\n\(log)")
        let after = log[stopping.lowerBound...]
        let loud = after.split(separator: "\n").filter { $0.hasPrefix("<2>") || $0.hasPrefix("<3>") || $0.hasPrefix("<4>") }
        #expect(loud.isEmpty, "logged while stopping: \(loud)")
        #expect(!after.contains("bluetoothd left the bus") && !after.contains("connected to the bus"), "\(after)")
        #expect(after.contains("peerlinkd stopped"))
    }

    @Test func adaptersAreListedByAddressWithTheDefault() async throws {
        let (bus, fake, h) = try await start(adapter: Self.a1)
        defer { h.stop(); _ = (bus, fake) }
        let list = try #require(try h.call("adapter.list")["adapters"]?.arrayValue)
        #expect(list.map { $0["address"]?.stringValue } == [Self.a0, Self.a1])
        #expect(list.map { $0["name"]?.stringValue } == ["hci0", "hci1"])
        #expect(list.map { $0["default"]?.boolValue } == [false, true])
        #expect(list[0]["powered"] == true && list[0]["power_state"] == "on")
        #expect(list[0]["path"] == "/org/bluez/hci0")
        let s = try h.call("daemon.status")
        #expect(s["default_adapter"] == "hci1")
        #expect(s["bluez"]?["available"] == true)
    }

    @Test func powerOffAndOnAreSeenByBlueZAndAsEvents() async throws {
        let (bus, fake, h) = try await start()
        defer { h.stop(); _ = bus }
        let watcher = try RawClient(h.socketPath)
        _ = try watcher.call("events.subscribe", ["topics": ["adapter"]])
        let off = try h.call("adapter.power", ["on": false, "adapter": "hci0"])
        #expect(off["powered"] == false && off["power_state"] == "off")
        #expect(fake.powered("hci0") == false)  // what "bluetoothd" holds, not what the daemon says
        let ev = try watcher.nextEvent("adapter.powered")
        #expect(ev["data"]?["powered"] == false)
        #expect(ev["data"]?["adapter"]?["address"]?.stringValue == Self.a0)
        #expect(ev["time"]?.stringValue?.hasSuffix("Z") == true)
        let on = try h.call("adapter.power", ["on": true, "adapter": .string(Self.a0)])
        #expect(on["powered"] == true)
        #expect(try watcher.nextEvent("adapter.powered")["data"]?["powered"] == true)
        #expect(fake.powered("hci0") == true)
    }

    @Test func blockedAndUnknownAdaptersGiveClearErrors() async throws {
        let bus = try PrivateBus()
        let fake = try await FakeBlueZ(busAddress: bus.address, adapters: [.init(name: "hci0", address: Self.a0, powerState: "off-blocked")])
        let h = try await DaemonHarness(busAddress: bus.address)
        defer { h.stop(); _ = fake }
        _ = try await h.waitForStatus { $0["adapters"]?.arrayValue?.count == 1 }
        do {
            _ = try h.call("adapter.power", ["on": true])
            Issue.record("expected rfkill error")
        } catch let e as RPCError {
            #expect(e.code == RPCErrorCode.adapterBlocked)
            #expect(e.message.contains("rfkill"))
            #expect(e.data?["kind"] == "rfkill-blocked")
        }
        do {
            _ = try h.call("adapter.power", ["on": true, "adapter": "hci9"])
            Issue.record("expected adapter-not-found")
        } catch let e as RPCError {
            #expect(e.code == RPCErrorCode.adapterNotFound)
            #expect(e.message.contains("hci9") && e.message.contains("hci0"))
        }
    }

    @Test func bluetoothdRestartIsFollowed() async throws {
        let (bus, fake, h) = try await start()
        defer { h.stop() }
        let watcher = try RawClient(h.socketPath)
        _ = try watcher.call("events.subscribe", [:])
        fake.connection.close()  // bluetoothd "crashes"
        _ = try watcher.nextEvent("bluez.unavailable")
        _ = try await h.waitForStatus { $0["bluez"]?["available"] == false && $0["adapters"]?.arrayValue?.isEmpty == true }
        do {
            _ = try h.call("adapter.list")
            Issue.record("expected bluetooth-unavailable")
        } catch let e as RPCError {
            #expect(e.code == RPCErrorCode.bluetoothUnavailable)
        }
        let again = try await FakeBlueZ(busAddress: bus.address, adapters: [.init(name: "hci0", address: Self.a0)])
        _ = try watcher.nextEvent("bluez.available")
        let added = try watcher.nextEvent("adapter.added")
        #expect(added["data"]?["adapter"]?["address"]?.stringValue == Self.a0)
        #expect(try h.call("adapter.list")["adapters"]?.arrayValue?.count == 1)
        _ = again
    }

    @Test func adapterReappearingUnderAnotherNameKeepsItsAddress() async throws {
        let (bus, fake, h) = try await start(adapter: Self.a1)
        defer { h.stop(); _ = bus }
        let watcher = try RawClient(h.socketPath)
        _ = try watcher.call("events.subscribe", ["topics": ["adapter.added", "adapter.removed"]])
        fake.remove("hci1")
        let removed = try watcher.nextEvent("adapter.removed")
        #expect(removed["data"]?["adapter"]?["address"]?.stringValue == Self.a1)
        try fake.add(.init(name: "hci2", address: Self.a1))
        let added = try watcher.nextEvent("adapter.added")
        #expect(added["data"]?["adapter"]?["name"] == "hci2")
        #expect(added["data"]?["previous_name"] == "hci1")
        // The default was configured by address, so it follows the adapter to its new name.
        #expect(try h.call("daemon.status")["default_adapter"] == "hci2")
        #expect(try h.call("adapter.power", ["on": false])["name"] == "hci2")
        #expect(fake.powered("hci2") == false)
    }

    /// A default configured by name follows its controller to the new name, until another
    /// controller takes the old name: then the name means that one, and an adapter that
    /// comes back under its own name is not reported as moved.
    @Test func aNameFollowsItsControllerUntilAnotherTakesIt() async throws {
        let (bus, fake, h) = try await start(adapter: "hci1")
        defer { h.stop(); _ = bus }
        let watcher = try RawClient(h.socketPath)
        _ = try watcher.call("events.subscribe", ["topics": ["adapter.added", "adapter.removed"]])
        fake.remove("hci1")
        _ = try watcher.nextEvent("adapter.removed")
        try fake.add(.init(name: "hci2", address: Self.a1))
        #expect(try watcher.nextEvent("adapter.added")["data"]?["previous_name"] == "hci1")
        #expect(try h.call("daemon.status")["default_adapter"] == "hci2")
        #expect(try h.call("adapter.power", ["on": false, "adapter": "hci1"])["address"]?.stringValue == Self.a1)
        #expect(fake.powered("hci2") == false)

        let a3 = "00:AA:01:03:00:03"
        try fake.add(.init(name: "hci1", address: a3))
        let other = try watcher.nextEvent("adapter.added")
        #expect(other["data"]?["adapter"]?["address"]?.stringValue == a3)
        #expect(other["data"]?["previous_name"] == nil)
        #expect(try h.call("daemon.status")["default_adapter"] == "hci1")
        #expect(try h.call("adapter.power", ["on": false, "adapter": "hci1"])["address"]?.stringValue == a3)

        fake.remove("hci0")
        _ = try watcher.nextEvent("adapter.removed")
        try fake.add(.init(name: "hci0", address: Self.a0))
        #expect(try watcher.nextEvent("adapter.added")["data"]?["previous_name"] == nil)
    }
}
