import BLE
import BlueZ
import Control
import DBus
import Foundation
import Synchronization
import SystemKit
import Testing
import TestSupport

/// The central side of a fake bluetoothd: Adapter1 discovery and ConnectDevice, Device1
/// objects that fail Connect a set number of times, and one notifying characteristic with
/// AcquireNotify. Every call is recorded in order, so tests can check what the daemon asked
/// for and when. The lab runs the same against the real bluetoothd (30-32-central-*).
final class FakeCentralBlueZ: Sendable {
    struct State {
        var calls: [String] = []
        var connectFailures: [String: Int] = [:]
        var filters: [[String: DBusValue]] = []
        var notifyEnd: Int32 = -1
        /// When set, ReadValue answers this error (as bluetoothd does for a failed ATT read).
        var readFailure: BusError?
        /// When set, AcquireNotify's answer waits for `releaseAcquireNotify` (a slow device).
        var holdAcquire = false
        var heldAcquire: [@Sendable () -> Void] = []
        /// StartDiscovery's answers wait for `releaseStartDiscovery` while set.
        var holdStartDiscovery = false
        var heldStartDiscovery: [@Sendable () -> Void] = []
        /// Connect's answers for these addresses wait for `releaseConnect` (a device slow to come up).
        var holdConnect: Set<String> = []
        var heldConnect: [@Sendable () -> Void] = []
    }
    final class Box: Sendable { let state = Mutex(State()) }
    let box = Box()
    let fake: FakeBlueZ
    /// hci0, with its discovery and ConnectDevice methods (to add it again after `removeAdapter`).
    let adapter: FakeBlueZ.Adapter
    static let hci0: ObjectPath = "/org/bluez/hci0"

    init(busAddress: String) async throws {
        let box = self.box
        let holder = Mutex<BusConnection?>(nil)
        let record = { @Sendable (s: String) in box.state.withLock { $0.calls.append(s) } }
        let methods = [
            MethodSpec("SetDiscoveryFilter", inputs: [("filter", "a{sv}")]) { call, reply in
                record("SetDiscoveryFilter")
                box.state.withLock { $0.filters.append(call.arguments[0].stringKeyedMap ?? [:]) }
                reply.succeed()
            },
            MethodSpec("StartDiscovery") { _, reply in
                record("StartDiscovery")
                let on: @Sendable () -> Void = {
                    try? holder.withLock { $0 }?.setProperty(Self.hci0, "org.bluez.Adapter1", "Discovering", .boolean(true))
                    reply.succeed()
                }
                let held = box.state.withLock { s -> Bool in
                    if s.holdStartDiscovery { s.heldStartDiscovery.append(on) }
                    return s.holdStartDiscovery
                }
                if !held { on() }
            },
            MethodSpec("StopDiscovery") { _, reply in
                record("StopDiscovery")
                try? holder.withLock { $0 }?.setProperty(Self.hci0, "org.bluez.Adapter1", "Discovering", .boolean(false))
                reply.succeed()
            },
            MethodSpec("ConnectDevice", inputs: [("properties", "a{sv}")], outputs: [("device", "o")]) { call, reply in
                let address = call.arguments[0].stringKeyedMap?["Address"]?.string ?? "?"
                record("ConnectDevice \(address)")
                guard let c = holder.withLock({ $0 }) else { return reply.fail(BusError(name: BusError.failed, message: "no connection")) }
                // Exported off the connection's queue (export waits for it), then answered.
                DispatchQueue.global().async {
                    let path = Self.export(c, box: box, address: address, name: "new", uuids: [], rssi: -70, connected: true)
                    reply.succeed([.objectPath(path)])
                }
            },
        ]
        adapter = .init(name: "hci0", address: "00:AA:01:00:00:00", methods: methods)
        fake = try await FakeBlueZ(busAddress: busAddress, adapters: [adapter])
        holder.withLock { $0 = fake.connection }
    }

    var calls: [String] { box.state.withLock { $0.calls } }

    /// Adds a device as seen in a scan (with an RSSI), with `failures` Connect calls to refuse
    /// first. `silentConnected`: its Connected property changes without a signal (bluetoothd
    /// can answer Connect before it announces the link; here the announcement never comes).
    @discardableResult
    func addDevice(_ address: String, name: String?, uuids: [String], rssi: Int16, manufacturer: UInt16? = nil, failures: Int = 0,
                   silentConnected: Bool = false) -> ObjectPath {
        box.state.withLock { $0.connectFailures[address] = failures }
        return Self.export(fake.connection, box: box, address: address, name: name, uuids: uuids, rssi: rssi, manufacturer: manufacturer,
                           connected: false, silentConnected: silentConnected)
    }

    static func export(_ c: BusConnection, box: Box, address: String, name: String?, uuids: [String], rssi: Int16?,
                       manufacturer: UInt16? = nil, connected: Bool, silentConnected: Bool = false) -> ObjectPath {
        let path = hci0.appending("dev_" + address.replacingOccurrences(of: ":", with: "_"))
        let record = { @Sendable (s: String) in box.state.withLock { $0.calls.append(s) } }
        let device = InterfaceSpec("org.bluez.Device1", methods: [
            MethodSpec("Connect") { _, reply in
                record("Connect \(address)")
                let fail = box.state.withLock { s -> Bool in
                    guard let n = s.connectFailures[address], n > 0 else { return false }
                    s.connectFailures[address] = n - 1
                    return true
                }
                if fail { return reply.fail(BusError(name: "org.bluez.Error.Failed", message: "le-connection-abort-by-local")) }
                let up: @Sendable () -> Void = {
                    try? c.setProperty(path, "org.bluez.Device1", "Connected", .boolean(true))
                    try? c.setProperty(path, "org.bluez.Device1", "ServicesResolved", .boolean(true))
                    reply.succeed()
                }
                let held = box.state.withLock { s -> Bool in
                    guard s.holdConnect.contains(address) else { return false }
                    s.heldConnect.append(up)
                    return true
                }
                if !held { up() }
            },
            MethodSpec("Disconnect") { _, reply in
                record("Disconnect \(address)")
                try? c.setProperty(path, "org.bluez.Device1", "ServicesResolved", .boolean(false))
                try? c.setProperty(path, "org.bluez.Device1", "Connected", .boolean(false))
                reply.succeed()
            },
        ], properties: [
            PropertySpec("Address", "s"), PropertySpec("AddressType", "s"), PropertySpec("Alias", "s"), PropertySpec("Adapter", "o"),
            PropertySpec("Name", "s"), PropertySpec("RSSI", "n"), PropertySpec("UUIDs", "as"), PropertySpec("ManufacturerData", "a{qv}"),
            PropertySpec("Connected", "b", changeSignal: silentConnected ? .none : .emits), PropertySpec("ServicesResolved", "b"),
            PropertySpec("Paired", "b"), PropertySpec("Trusted", "b", access: .readwrite),
        ])
        var values: [String: DBusValue] = [
            "Address": .string(address), "AddressType": .string("public"), "Alias": .string(name ?? address.replacingOccurrences(of: ":", with: "-")),
            "Adapter": .objectPath(hci0), "UUIDs": .stringArray(uuids), "Connected": .boolean(connected), "ServicesResolved": .boolean(connected),
            "Paired": .boolean(false), "Trusted": .boolean(false),
            "ManufacturerData": .dictionary(key: "q", value: "v", manufacturer.map { [.init(.uint16($0), .variant(.bytes([1, 2])))] } ?? []),
        ]
        if let name { values["Name"] = .string(name) }
        if let rssi { values["RSSI"] = .int16(rssi) }
        try? c.export(path, interfaces: [device], values: ["org.bluez.Device1": values])
        // One service with a notifying characteristic (AcquireNotify hands out a socket pair).
        let svc = path.appending("service0010"), chr = svc.appending("char0011")
        try? c.export(svc, interfaces: [InterfaceSpec("org.bluez.GattService1", properties: [
            PropertySpec("UUID", "s"), PropertySpec("Device", "o"), PropertySpec("Primary", "b"),
        ])], values: ["org.bluez.GattService1": ["UUID": .string("0000180d-0000-1000-8000-00805f9b34fb"), "Device": .objectPath(path), "Primary": .boolean(true)]])
        try? c.export(chr, interfaces: [InterfaceSpec("org.bluez.GattCharacteristic1", methods: [
            MethodSpec("ReadValue", inputs: [("options", "a{sv}")], outputs: [("value", "ay")]) { call, reply in
                let offset = Int(call.arguments[0].stringKeyedMap?["offset"]?.integer ?? 0)
                record("ReadValue offset=\(offset)")
                if let e = box.state.withLock({ $0.readFailure }) { return reply.fail(e) }
                reply.succeed([.bytes(Array(Array("heart".utf8).dropFirst(offset)))])
            },
            MethodSpec("WriteValue", inputs: [("value", "ay"), ("options", "a{sv}")]) { call, reply in
                record("WriteValue \(call.arguments[1].stringKeyedMap?["type"]?.string ?? "-") \(call.arguments[0].byteArray ?? [])")
                reply.succeed()
            },
            MethodSpec("AcquireNotify", inputs: [("options", "a{sv}")], outputs: [("fd", "h"), ("mtu", "q")]) { _, reply in
                record("AcquireNotify")
                // bluetoothd refuses a second AcquireNotify while the first is under way.
                let (acquired, held) = box.state.withLock { (!$0.heldAcquire.isEmpty, $0.holdAcquire) }
                if acquired { return reply.fail(BusError(name: "org.bluez.Error.NotPermitted", message: "Notify acquired")) }
                let answer: @Sendable () -> Void = {
                    var fds: [Int32] = [0, 0]
                    guard socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue), 0, &fds) == 0 else {
                        return reply.fail(BusError(name: BusError.failed, message: "socketpair"))
                    }
                    box.state.withLock { $0.notifyEnd = fds[0] }
                    reply.succeed([.unixFD(UnixFD(taking: fds[1])), .uint16(247)])
                }
                if held { box.state.withLock { $0.heldAcquire.append(answer) } } else { answer() }
            },

        ], properties: [
            PropertySpec("UUID", "s"), PropertySpec("Service", "o"), PropertySpec("Flags", "as"), PropertySpec("MTU", "q"),
        ])], values: ["org.bluez.GattCharacteristic1": ["UUID": .string("00002a37-0000-1000-8000-00805f9b34fb"), "Service": .objectPath(svc),
                                                         "Flags": .stringArray(["read", "write", "write-without-response", "notify"]), "MTU": .uint16(247)]])
        return path
    }

    /// The controller goes, as bluetoothd reports it: each device's objects removed, then
    /// the adapter's (`adapterFirst`: the other way round, so the devices' removal is
    /// certain to be seen after the adapter left the daemon's list of adapters); the
    /// notification socket closes with the link.
    func removeAdapter(devices: [String], adapterFirst: Bool = false) {
        if adapterFirst { fake.remove("hci0") }
        for address in devices {
            let path = Self.hci0.appending("dev_" + address.replacingOccurrences(of: ":", with: "_"))
            fake.connection.unexport(path.appending("service0010").appending("char0011"))
            fake.connection.unexport(path.appending("service0010"))
            fake.connection.unexport(path)
        }
        closeNotify()
        if !adapterFirst { fake.remove("hci0") }
    }

    /// Sends one notification through the acquired socket (as bluetoothd would).
    func notify(_ bytes: [UInt8]) throws {
        let fd = box.state.withLock { $0.notifyEnd }
        try #require(fd >= 0, "AcquireNotify was not called")
        #expect(bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, 0) } == bytes.count)
    }

    /// Holds StartDiscovery's answers from now on (until `releaseStartDiscovery`).
    func holdStartDiscovery() { box.state.withLock { $0.holdStartDiscovery = true } }

    /// Answers the held StartDiscovery calls and answers later ones at once.
    func releaseStartDiscovery() {
        let held = box.state.withLock { s -> [@Sendable () -> Void] in
            s.holdStartDiscovery = false
            defer { s.heldStartDiscovery = [] }
            return s.heldStartDiscovery
        }
        for answer in held { answer() }
    }

    /// Holds the answers of Connect to `address` (until `releaseConnect`).
    func holdConnect(_ address: String) { box.state.withLock { $0.holdConnect.insert(address) } }

    /// Answers the held Connect calls and answers later ones at once.
    func releaseConnect() {
        let held = box.state.withLock { s -> [@Sendable () -> Void] in
            s.holdConnect = []
            defer { s.heldConnect = [] }
            return s.heldConnect
        }
        for answer in held { answer() }
    }

    /// The link to `address` drops as when the device goes out of range.
    func dropLink(_ address: String) {
        let path = Self.hci0.appending("dev_" + address.replacingOccurrences(of: ":", with: "_"))
        try? fake.connection.setProperty(path, "org.bluez.Device1", "ServicesResolved", .boolean(false))
        try? fake.connection.setProperty(path, "org.bluez.Device1", "Connected", .boolean(false))
    }

    /// Holds AcquireNotify's answers from now on (until `releaseAcquireNotify`).
    func holdAcquireNotify() { box.state.withLock { $0.holdAcquire = true } }

    /// Answers the held AcquireNotify calls, once one was made (waits up to 10 s for it).
    func releaseAcquireNotify() throws {
        let deadline = Date().addingTimeInterval(10)
        while box.state.withLock({ $0.heldAcquire.isEmpty }) && Date() < deadline { usleep(10_000) }
        let held = box.state.withLock { s -> [@Sendable () -> Void] in
            s.holdAcquire = false
            defer { s.heldAcquire = [] }
            return s.heldAcquire
        }
        try #require(!held.isEmpty, "no AcquireNotify came")
        for answer in held { answer() }
    }

    /// Whether the daemon closed its end of the notification socket (it let go).
    func notifySocketClosedByDaemon(within seconds: Double = 10) -> Bool {
        let fd = box.state.withLock { $0.notifyEnd }
        guard fd >= 0 else { return false }
        var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&p, 1, Int32(seconds * 1000)) == 1 else { return false }
        return p.revents & Int16(POLLHUP) != 0
    }

    /// Closes the fake's end: the subscription ends as when the link goes.
    func closeNotify() {
        let fd = box.state.withLock { s -> Int32 in defer { s.notifyEnd = -1 }; return s.notifyEnd }
        if fd >= 0 { close(fd) }
    }
}

@Suite(.ownThreads, .serialized, .memoryHeavy) struct CentralTests {
    static let hr = "0000180d-0000-1000-8000-00805f9b34fb"

    func start() async throws -> (PrivateBus, FakeCentralBlueZ, DaemonHarness) {
        let bus = try PrivateBus()
        let fake = try await FakeCentralBlueZ(busAddress: bus.address)
        let h = try await DaemonHarness(busAddress: bus.address)
        _ = try await h.waitForStatus { $0["adapters"]?.arrayValue?.count == 1 }
        return (bus, fake, h)
    }

    @Test func scanRechecksFiltersAndReportsEachDeviceOnce() async throws {
        let (bus, fake, h) = try await start()
        defer { h.stop(); _ = bus }
        let client = try RawClient(h.socketPath)
        let r = try client.call("central.scan", ["services": ["180d"], "rssi": -80])
        let scan = try #require(r["scan"]?.stringValue)
        #expect(fake.calls.prefix(2) == ["SetDiscoveryFilter", "StartDiscovery"])
        let filter = try #require(fake.box.state.withLock { $0.filters.first })
        #expect(filter["UUIDs"]?.stringArray == [Self.hr])
        #expect(filter["Transport"]?.string == "le" && filter["RSSI"]?.integer == -80)
        // bluetoothd merges every client's filter: a device it reports may still not match ours.
        fake.addDevice("00:AA:01:09:00:01", name: "other", uuids: ["0000180f-0000-1000-8000-00805f9b34fb"], rssi: -40)
        fake.addDevice("00:AA:01:09:00:02", name: "weak", uuids: [Self.hr], rssi: -90)
        fake.addDevice("00:AA:01:09:00:03", name: "heart", uuids: [Self.hr], rssi: -50, manufacturer: 0xFFFF)
        let e = try client.nextEvent("central.discovered")
        #expect(e["data"]?["address"] == "00:AA:01:09:00:03")
        #expect(e["data"]?["scan"]?.stringValue == scan)
        #expect(e["data"]?["name"] == "heart" && e["data"]?["rssi"] == -50)
        let mfr = e["data"]?["manufacturer_data"]?.arrayValue?.first
        #expect(mfr?["id"] == 65535 && mfr?["value_hex"] == "0102")
        // The same device again (no duplicates): no second event; the scan's end comes next.
        try fake.fake.connection.setProperty("/org/bluez/hci0/dev_00_AA_01_09_00_03", "org.bluez.Device1", "RSSI", .int16(-49))
        #expect(try client.call("central.scan.stop", ["scan": .string(scan)])["stopped"] == [.string(scan)])
        // Discovery stops with the last scan, in one call (the filter stays ours, unused).
        #expect(fake.calls.last == "StopDiscovery")
        // A scan's time limit ends it with an event to its owner.
        _ = try client.call("central.scan", ["timeout": 0.3])
        #expect(try client.nextEvent("central.scan.ended")["data"]?["reason"] == "timeout")
        do {
            _ = try client.call("central.scan", ["name_pattern": "("])
            Issue.record("a bad pattern must be refused")
        } catch let e as RPCError {
            #expect(e.code == RPCErrorCode.invalidParams && e.message.contains("name_pattern"))
        }
    }

    @Test func aConnectAnsweredWithoutItsConnectedChangeReadsTheDeviceAgain() async throws {
        let (bus, fake, h) = try await start()
        defer { h.stop(); _ = bus }
        fake.addDevice("00:AA:01:09:00:04", name: "quiet", uuids: [Self.hr], rssi: -50, silentConnected: true)
        // The daemon knows the device (else it would ask ConnectDevice, not Connect).
        let deadline = Date().addingTimeInterval(10)
        while try h.call("central.devices")["devices"]?.arrayValue?.contains(where: { $0["address"] == "00:AA:01:09:00:04" }) != true {
            guard Date() < deadline else { throw TestSupportError("the daemon never listed 00:AA:01:09:00:04") }
            try await Task.sleep(for: .milliseconds(20))
        }
        let r = try h.call("central.connect", ["address": "00:AA:01:09:00:04", "timeout": 10])
        #expect(r["device"]?["connected"] == true && r["device"]?["services_resolved"] == true)
        #expect(fake.calls.filter { $0 == "Connect 00:AA:01:09:00:04" }.count == 1, "one attempt: the answer was believed, not retried")
        #expect(!fake.calls.contains { $0.hasPrefix("ConnectDevice") }, "\(fake.calls)")
        let read = try h.call("central.read", ["address": "00:AA:01:09:00:04", "characteristic": "2a37"])
        #expect(read["value"] == "heart")
    }

    /// The adapter removed while it scans, holds a connection and a subscription: the
    /// device is reported disconnected (`removed`), the subscription ended, requests for it
    /// fail naming the adapter; the scan is kept, and resumed when the controller is back.
    /// (A fake: the lab moves a real controller in 90-systemd-unit, but not while connected.)
    /// In either order of the removals: the device's was lost when it came second.
    @Test(arguments: [false, true])
    func anAdapterRemovedWhileScanningAndConnected(adapterFirst: Bool) async throws {
        let (bus, fake, h) = try await start()
        defer { h.stop(); _ = bus }
        let watcher = try RawClient(h.socketPath)
        _ = try watcher.call("events.subscribe", ["topics": ["central", "adapter"]])
        let scan = try #require(try watcher.call("central.scan", [:])["scan"]?.stringValue)
        fake.addDevice("00:AA:01:09:00:05", name: "heart", uuids: [Self.hr], rssi: -50)
        _ = try watcher.nextEvent("central.discovered")
        _ = try h.call("central.connect", ["address": "00:AA:01:09:00:05", "timeout": 20])
        _ = try watcher.call("central.subscribe", ["address": "00:AA:01:09:00:05", "characteristic": "2a37"])
        try fake.notify(Array("before".utf8))
        #expect(try watcher.nextEvent("central.notification")["data"]?["value"] == "before")
        let starts = fake.calls.filter { $0 == "StartDiscovery" }.count

        fake.removeAdapter(devices: ["00:AA:01:09:00:05"], adapterFirst: adapterFirst)
        let after = try watcher.events(["central.disconnected", "central.subscription.ended", "adapter.removed"])
        let gone = after["central.disconnected"]?["data"]
        #expect(gone?["device"] == "00:AA:01:09:00:05" && gone?["reason"] == "removed", "\(String(describing: gone))")
        #expect(after["central.subscription.ended"]?["data"]?["count"] == 1)
        do {
            _ = try h.call("central.read", ["address": "00:AA:01:09:00:05", "characteristic": "2a37", "adapter": "hci0"])
            Issue.record("a read on a removed adapter must fail")
        } catch let e as RPCError {
            #expect(e.code == RPCErrorCode.adapterNotFound && e.message.contains("hci0"), "\(e)")
        }
        #expect(try h.call("daemon.status")["adapters"]?.arrayValue?.isEmpty == true)

        try fake.fake.add(fake.adapter)
        _ = try watcher.nextEvent("adapter.added")
        let resumed = try watcher.nextEvent("central.scan.resumed")
        #expect(resumed["data"]?["scan"]?.stringValue == scan)
        #expect(fake.calls.filter { $0 == "StartDiscovery" }.count == starts + 1, "discovery started again: \(fake.calls)")
        fake.addDevice("00:AA:01:09:00:06", name: "after", uuids: [Self.hr], rssi: -50)
        #expect(try watcher.nextEvent("central.discovered")["data"]?["address"] == "00:AA:01:09:00:06")
    }

    @Test func connectPausesDiscoveryRetriesTransientFailuresAndResumes() async throws {
        let (bus, fake, h) = try await start()
        defer { h.stop(); _ = bus }
        let scanner = try RawClient(h.socketPath)
        _ = try scanner.call("central.scan", [:])
        fake.addDevice("00:AA:01:09:00:03", name: "heart", uuids: [Self.hr], rssi: -50, failures: 2)
        _ = try scanner.nextEvent("central.discovered")
        let watcher = try RawClient(h.socketPath)
        _ = try watcher.call("events.subscribe", ["topics": ["central"]])
        let r = try h.call("central.connect", ["address": "00:AA:01:09:00:03", "timeout": 20])
        #expect(r["device"]?["connected"] == true && r["device"]?["services_resolved"] == true)
        let calls = fake.calls
        let firstConnect = try #require(calls.firstIndex(of: "Connect 00:AA:01:09:00:03"))
        // Discovery stopped before the first attempt, three attempts (two refused), then resumed.
        #expect(calls[..<firstConnect].last == "StopDiscovery")
        #expect(calls.filter { $0 == "Connect 00:AA:01:09:00:03" }.count == 3)
        #expect(calls.last == "StartDiscovery")
        let ev = try watcher.nextEvent("central.connected")
        #expect(ev["data"]?["device"] == "00:AA:01:09:00:03" && ev["data"]?["adapter"] == "hci0")

        // Reads, writes and notifications through the fake's characteristic.
        let read = try h.call("central.read", ["address": "00:AA:01:09:00:03", "characteristic": "2a37", "offset": 1])
        #expect(read["value"] == "eart" && read["value_hex"] == "65617274")
        _ = try h.call("central.write", ["address": "00:AA:01:09:00:03", "characteristic": "2a37", "value_hex": "0102", "command": true])
        #expect(fake.calls.last == "WriteValue command [1, 2]")
        do {
            _ = try h.call("central.write", ["address": "00:AA:01:09:00:03", "characteristic": "2a37", "value": .string(String(repeating: "x", count: 245)), "command": true])
            Issue.record("a command longer than MTU-3 must be refused")
        } catch let e as RPCError {
            #expect(e.code == RPCErrorCode.invalidParams && e.message.contains("at most 244"))
        }
        let sub = try watcher.call("central.subscribe", ["address": "00:AA:01:09:00:03", "characteristic": "2a37"])
        #expect(sub["via"] == "acquire-notify" && sub["mtu"] == 247)
        for i in 1...50 { try fake.notify(Array("value \(i)".utf8)) }
        for i in 1...50 {
            let n = try watcher.nextEvent("central.notification")
            #expect(n["data"]?["value"]?.stringValue == "value \(i)" && n["data"]?["seq"] == .int(Int64(i)))
        }
        fake.closeNotify()
        let ended = try watcher.nextEvent("central.subscription.ended")
        #expect(ended["data"]?["count"] == 50)
        // Subscribe again and end it from this side: the socket is closed, later values go nowhere.
        // (Subscriptions belong to their connection: h.call's one-shot connections would end them.)
        let sub2 = try #require(try watcher.call("central.subscribe", ["address": "00:AA:01:09:00:03", "characteristic": "2a37"])["subscription"])
        try fake.notify([1, 2, 3, 4])
        #expect(try watcher.call("central.unsubscribe", ["subscription": sub2])["ended"] == true)
        for _ in 0..<3 {
            let fd = fake.box.state.withLock { $0.notifyEnd }
            _ = [UInt8](repeating: 0, count: 4).withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT | MSG_NOSIGNAL)) }
        }
        fake.closeNotify()
        #expect(try h.call("central.status")["subscriptions"] == [])
        do {
            _ = try h.call("central.unsubscribe", ["subscription": sub2])
            Issue.record("a second unsubscribe must be refused")
        } catch let e as RPCError {
            #expect(e.code == RPCErrorCode.notFound)
        }

        // batch: the values that arrive together come in one event, base64, numbered.
        let batched = try RawClient(h.socketPath)
        let sub3 = try #require(try batched.call("central.subscribe", ["address": "00:AA:01:09:00:03", "characteristic": "2a37", "batch": true])["subscription"])
        for i in 1...20 { try fake.notify([UInt8(i), 0xAA]) }
        var got: [[UInt8]] = []
        while got.count < 20 {
            let e = try batched.nextEvent("central.notifications")
            #expect(e["data"]?["subscription"] == sub3 && e["data"]?["seq"] == .int(Int64(got.count + 1)))
            let values = e["data"]?["values_base64"]?.arrayValue?.compactMap { $0.stringValue.flatMap { Data(base64Encoded: $0) }.map(Array.init) } ?? []
            #expect(e["data"]?["count"] == .int(Int64(values.count)) && !values.isEmpty)
            got += values
        }
        #expect(got == (1...20).map { [UInt8($0), 0xAA] })
        fake.closeNotify()
        _ = try batched.nextEvent("central.subscription.ended")

        // stream: the values come as packets on a socket passed with the reply, in order; the
        // client closing it ends the subscription. batch and stream exclude each other.
        let streamer = try RawClient(h.socketPath)
        #expect(throws: RPCError.self) {
            try streamer.call("central.subscribe", ["address": "00:AA:01:09:00:03", "characteristic": "2a37", "batch": true, "stream": true])
        }
        let r4 = try streamer.call("central.subscribe", ["address": "00:AA:01:09:00:03", "characteristic": "2a37", "stream": true])
        #expect(r4["fd"] == true && r4["via"] == "acquire-notify", "\(r4)")
        let sfd = try #require(streamer.descriptors.first, "the reply carries the stream's socket")
        for i in 1...100 { try fake.notify([UInt8(i), 0xBB, 0xCC]) }
        for i in 1...100 {
            #expect(try SocketIO.waitReadable(sfd, timeoutMilliseconds: 5000))
            var buf = [UInt8](repeating: 0, count: 600)
            let n = recv(sfd, &buf, buf.count, 0)
            #expect(Array(buf[0..<max(n, 0)]) == [UInt8(i), 0xBB, 0xCC], "packet \(i)")
        }
        closeQuietly(sfd)
        let ended4 = try streamer.nextEvent("central.subscription.ended")["data"]
        #expect(ended4?["subscription"] == r4["subscription"] && ended4?["count"] == 100 && ended4?["dropped"] == 0, "\(String(describing: ended4))")
        #expect(ended4?["reason"]?.stringValue?.contains("stream ended") == true)
        #expect(try h.call("central.status")["subscriptions"] == [])

        // An address BlueZ has not seen: ConnectDevice.
        _ = try h.call("central.connect", ["address": "00:AA:01:09:00:07", "timeout": 10])
        #expect(fake.calls.contains("ConnectDevice 00:AA:01:09:00:07"))
        do {
            _ = try h.call("central.read", ["address": "00:AA:01:09:00:03", "characteristic": "2a99"])
            Issue.record("an unknown characteristic must be refused")
        } catch let e as RPCError {
            #expect(e.code == RPCErrorCode.notFound && e.message.contains("00002a99"))
        }
        _ = try h.call("central.disconnect", ["address": "00:AA:01:09:00:03"])
        let d = try watcher.nextEvent("central.disconnected")
        #expect(d["data"]?["reason"] == "local" && d["data"]?["will_reconnect"] == false)
    }

    /// Two clients subscribing to one characteristic while its AcquireNotify is under way
    /// (a slow device): one AcquireNotify, both subscribed, both get every value. Before, the
    /// second's own AcquireNotify was refused "Notify acquired" (bluetoothd holds it from the
    /// call on) and it failed.
    @Test func twoSubscribesAtOnceShareOneAcquireNotify() async throws {
        let (bus, fake, h) = try await start()
        defer { h.stop(); _ = bus }
        fake.addDevice("00:AA:01:09:00:07", name: "heart", uuids: [Self.hr], rssi: -50)
        _ = try h.call("central.connect", ["address": "00:AA:01:09:00:07", "timeout": 20])
        fake.holdAcquireNotify()
        let a = try RawClient(h.socketPath), b = try RawClient(h.socketPath)
        let params: [String: JSONValue] = ["address": "00:AA:01:09:00:07", "characteristic": "2a37"]
        try a.send("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"central.subscribe\",\"params\":\(String(decoding: JSONValue.object(params).encoded(), as: UTF8.self))}\n")
        try b.send("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"central.subscribe\",\"params\":\(String(decoding: JSONValue.object(params).encoded(), as: UTF8.self))}\n")
        // The second waits for the first one's setup (said in the debug log) before the answer comes.
        try await Self.waitForLog(h, "waiting for the notification setup under way")
        try fake.releaseAcquireNotify()
        for c in [a, b] {
            let reply = try #require(try c.readJSON())
            #expect(reply["result"]?["via"] == "acquire-notify", "\(reply)")
        }
        #expect(fake.calls.filter { $0 == "AcquireNotify" }.count == 1, "\(fake.calls)")
        for c in [a, b] { _ = try c.call("events.subscribe", ["topics": ["central.notification"]]) }
        try fake.notify(Array("both".utf8))
        for c in [a, b] { #expect(try c.nextEvent("central.notification")["data"]?["value"] == "both") }
    }

    /// A client the daemon drops while its subscription is being set up (here: it began a
    /// line and did not finish it within `request_timeout`; also a client not reading its
    /// events): once set up, the subscription ends and the daemon lets go of the
    /// notifications. Before, the close found nothing to end, and it stayed on for ever.
    @Test func aSubscriptionWhoseClientWasDroppedDuringItsSetUpEnds() async throws {
        let bus = try PrivateBus()
        let fake = try await FakeCentralBlueZ(busAddress: bus.address)
        let h = try await DaemonHarness(busAddress: bus.address, requestTimeout: 0.5)
        defer { h.stop(); _ = bus }
        _ = try await h.waitForStatus { $0["adapters"]?.arrayValue?.count == 1 }
        fake.addDevice("00:AA:01:09:00:08", name: "heart", uuids: [Self.hr], rssi: -50)
        _ = try h.call("central.connect", ["address": "00:AA:01:09:00:08", "timeout": 20])
        fake.holdAcquireNotify()
        let leaving = try RawClient(h.socketPath)
        let params: [String: JSONValue] = ["address": "00:AA:01:09:00:08", "characteristic": "2a37"]
        try leaving.send("{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"central.subscribe\",\"params\":\(String(decoding: JSONValue.object(params).encoded(), as: UTF8.self))}\n{")
        let dropped = try #require(try leaving.readJSON())
        #expect(dropped["error"]?["message"]?.stringValue?.contains("no end of line") == true, "\(dropped)")
        _ = try await h.waitForStatus { $0["clients"] == 1 }  // only the asking one: it was dropped
        try fake.releaseAcquireNotify()
        #expect(fake.notifySocketClosedByDaemon(), "the daemon let go of the notifications")
        #expect(try h.call("central.status")["subscriptions"] == [])
    }

    /// `disconnect` of a kept device while its reconnect is under way (Connect not answered
    /// yet): the reconnect gives up and drops the link it brought up, instead of reporting
    /// the device connected after the disconnect answered (and leaving it so, unkept).
    @Test func aDisconnectDuringAReconnectEndsIt() async throws {
        let (bus, fake, h) = try await start()
        defer { h.stop(); _ = bus }
        let dev = "00:AA:01:09:00:0A"
        fake.addDevice(dev, name: "kept", uuids: [Self.hr], rssi: -50)
        let watcher = try RawClient(h.socketPath)
        _ = try watcher.call("events.subscribe", ["topics": ["central"]])
        _ = try h.call("central.connect", ["address": .string(dev), "timeout": 20, "keep": true])
        _ = try watcher.nextEvent("central.connected")
        fake.holdConnect(dev)
        fake.dropLink(dev)
        #expect(try watcher.nextEvent("central.disconnected")["data"]?["will_reconnect"] == true)
        // The reconnect's Connect is under way (held).
        let deadline = Date().addingTimeInterval(10)
        while fake.calls.filter({ $0 == "Connect \(dev)" }).count < 2 && Date() < deadline { try await Task.sleep(for: .milliseconds(20)) }
        #expect(fake.calls.filter { $0 == "Connect \(dev)" }.count == 2, "\(fake.calls)")
        let r = try h.call("central.disconnect", ["address": .string(dev)])
        #expect(r["was_connected"] == false)
        // Connect answers; the reconnect sees the device is no longer kept and drops it.
        fake.releaseConnect()
        let gone = try watcher.nextEvent("central.disconnected", timeout: 10)
        #expect(gone["data"]?["reason"] == "local" && gone["data"]?["will_reconnect"] == false, "\(gone)")
        let devices = try h.call("central.devices", ["connected": true])["devices"]?.arrayValue ?? []
        #expect(devices.isEmpty, "\(devices)")
        #expect(fake.calls.last == "Disconnect \(dev)", "\(fake.calls)")
    }

    /// A connect's timeout counts from its request, the wait for the adapter included (one
    /// connect or pairing at a time per adapter): behind a connect that takes 3 s, a connect
    /// with 1 s fails `timeout` saying the adapter was busy, instead of starting its second
    /// after the other ended (the CLI had given up on it by then).
    @Test func aConnectsTimeoutCountsItsWaitForTheAdapter() async throws {
        let (bus, fake, h) = try await start()
        defer { h.stop(); _ = bus }
        fake.addDevice("00:AA:01:09:00:0B", name: "slow", uuids: [Self.hr], rssi: -50)
        fake.addDevice("00:AA:01:09:00:0C", name: "quick", uuids: [Self.hr], rssi: -50)
        fake.holdConnect("00:AA:01:09:00:0B")
        let first = try RawClient(h.socketPath)
        try first.send("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"central.connect\",\"params\":{\"address\":\"00:AA:01:09:00:0B\",\"timeout\":20}}\n")
        let deadline = Date().addingTimeInterval(10)
        while !fake.calls.contains("Connect 00:AA:01:09:00:0B") && Date() < deadline { try await Task.sleep(for: .milliseconds(20)) }
        #expect(fake.calls.contains("Connect 00:AA:01:09:00:0B"), "the first connect holds the adapter")
        let second = try RawClient(h.socketPath).request("central.connect", ["address": "00:AA:01:09:00:0C", "timeout": 1])
        #expect(second["error"]?["code"]?.intValue == Int64(RPCErrorCode.timeout), "\(second)")
        #expect(second["error"]?["message"]?.stringValue?.contains("adapter stayed busy") == true, "\(second)")
        #expect(!fake.calls.contains("Connect 00:AA:01:09:00:0C"))
        fake.releaseConnect()
        #expect(try first.readJSON()?["result"]?["device"]?["connected"] == true)
    }

    /// Two scans started at once while StartDiscovery takes its time: both run (the second
    /// waits for the discovery the first one's call starts, instead of being refused
    /// "discovery did not start" because it looked before the call was answered).
    @Test func twoScansStartedAtOnceBothRun() async throws {
        let (bus, fake, h) = try await start()
        defer { h.stop(); _ = bus }
        fake.holdStartDiscovery()
        let a = try RawClient(h.socketPath), b = try RawClient(h.socketPath)
        try a.send("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"central.scan\",\"params\":{}}\n")
        let deadline = Date().addingTimeInterval(10)
        while !fake.calls.contains("StartDiscovery") && Date() < deadline { try await Task.sleep(for: .milliseconds(10)) }
        try b.send("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"central.scan\",\"params\":{}}\n")
        // The second waits for the first one's StartDiscovery (said in the debug log): held
        // until then, so the race is certain to be run.
        try await Self.waitForLog(h, "waiting for the discovery calls under way")
        fake.releaseStartDiscovery()
        for c in [a, b] {
            var reply = try #require(try c.readJSON())
            while reply["id"] == nil { reply = try #require(try c.readJSON()) }  // the scan's own events may come first
            #expect(reply["result"]?["scan"]?.stringValue?.hasPrefix("scan-") == true, "\(reply)")
        }
        #expect(fake.calls.filter { $0 == "StartDiscovery" }.count == 1, "\(fake.calls)")
    }

    /// `connect --keep` whose first attempt fails: the error says the device stays kept and
    /// the daemon keeps trying (it said only that the connect failed, and went on silently),
    /// and `central.devices` lists it kept.
    @Test func aFailedKeptConnectSaysItKeepsTrying() async throws {
        let (bus, fake, h) = try await start()
        defer { h.stop(); _ = bus }
        fake.addDevice("00:AA:01:09:00:0D", name: "away", uuids: [Self.hr], rssi: -50, failures: 1_000)
        let r = try RawClient(h.socketPath).request("central.connect", ["address": "00:AA:01:09:00:0D", "timeout": 1, "keep": true])
        #expect(r["error"]?["message"]?.stringValue?.contains("keeps reconnecting in the background") == true, "\(r)")
        #expect(r["error"]?["data"]?["keep"] == true, "\(r)")
        let devices = try h.call("central.devices")["devices"]?.arrayValue ?? []
        #expect(devices.first { $0["address"] == "00:AA:01:09:00:0D" }?["keep"] == true, "\(devices)")
        _ = try h.call("central.disconnect", ["address": "00:AA:01:09:00:0D"])
    }

    /// A scan or subscription is its connection's: another connection cannot stop it (the
    /// ids are sequential and `central.status` lists everyone's), and the owner's goes on.
    @Test func anotherConnectionCannotStopAScanOrSubscription() async throws {
        let (bus, fake, h) = try await start()
        defer { h.stop(); _ = bus }
        fake.addDevice("00:AA:01:09:00:0E", name: "mine", uuids: [Self.hr], rssi: -50)
        _ = try h.call("central.connect", ["address": "00:AA:01:09:00:0E", "timeout": 20])
        let owner = try RawClient(h.socketPath), other = try RawClient(h.socketPath)
        let scan = try #require(try owner.call("central.scan", [:])["scan"]?.stringValue)
        let sub = try #require(try owner.call("central.subscribe", ["address": "00:AA:01:09:00:0E", "characteristic": "2a37"])["subscription"]?.stringValue)
        let stop = try other.request("central.scan.stop", ["scan": .string(scan)])
        #expect(stop["error"]?["code"]?.intValue == Int64(RPCErrorCode.notFound), "\(stop)")
        let unsub = try other.request("central.unsubscribe", ["subscription": .string(sub)])
        #expect(unsub["error"]?["code"]?.intValue == Int64(RPCErrorCode.notFound), "\(unsub)")
        let status = try h.call("central.status")
        #expect(status["scans"]?.arrayValue?.count == 1 && status["subscriptions"]?.arrayValue?.count == 1, "\(status)")
        #expect(try owner.call("central.unsubscribe", ["subscription": .string(sub)])["ended"] == true)
        #expect(try owner.call("central.scan.stop", ["scan": .string(scan)])["stopped"] == [.string(scan)])
    }

    /// Waits (up to 10 s) until the daemon's log has `text`.
    static func waitForLog(_ h: DaemonHarness, _ text: String) async throws {
        let deadline = Date().addingTimeInterval(10)
        while !h.log.contains(text) {
            guard Date() < deadline else { throw TestSupportError("no \"\(text)\" in the daemon's log within 10 s") }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    @Test func gattErrorsNameTheirATTCodeAndHintsNameTheCommand() async throws {
        let (bus, fake, h) = try await start()
        defer { h.stop(); _ = bus }
        let scanner = try RawClient(h.socketPath)
        _ = try scanner.call("central.scan", [:])
        fake.addDevice("00:AA:01:09:00:04", name: "locked", uuids: [Self.hr], rssi: -50)
        // Seen by the daemon (its object table has the device) before anything is asked of it.
        _ = try scanner.nextEvent("central.discovered")
        // Not connected yet: the daemon's text names the command to run.
        do {
            _ = try h.call("central.read", ["address": "00:AA:01:09:00:04", "characteristic": "2a37"])
            Issue.record("a read from a device that is not connected must be refused")
        } catch let e as RPCError {
            #expect(e.code == RPCErrorCode.invalidState)
            #expect(e.message == "device 00:AA:01:09:00:04 is not connected; connect first ('peerlink connect 00:AA:01:09:00:04')")
        }
        _ = try h.call("central.connect", ["address": "00:AA:01:09:00:04", "timeout": 10])
        // What a new user meets reading an encrypt-read characteristic whose peripheral's agent refuses pairing.
        fake.box.state.withLock { $0.readFailure = BusError(name: "org.bluez.Error.Failed", message: "Operation failed with ATT error: 0x0e") }
        do {
            _ = try h.call("central.read", ["address": "00:AA:01:09:00:04", "characteristic": "2a37"])
            Issue.record("the read must fail")
        } catch let e as RPCError {
            #expect(e.code == RPCErrorCode.dbusError)
            #expect(e.message.hasSuffix("failed: org.bluez.Error.Failed: Operation failed with ATT error: 0x0e (Unlikely Error (0x0e): pairing was refused or is needed)"), "\(e.message)")
            #expect(e.data?["kind"] == "bluez-error" && e.data?["att_error"] == 14 && e.data?["att_name"] == "Unlikely Error")
        }
        do {
            _ = try h.call("central.read", ["address": "00:AA:01:09:00:04", "characteristic": "2a99"])
            Issue.record("an unknown characteristic must be refused")
        } catch let e as RPCError {
            #expect(e.message == "not found: characteristic 00002a99-0000-1000-8000-00805f9b34fb on 00:AA:01:09:00:04 (see 'peerlink services 00:AA:01:09:00:04')")
        }
    }
}

@Suite(.ownThreads, .memoryHeavy) struct CentralModelTests {
    static let hr = try! BluetoothUUID(parsing: "180d")

    func device(_ props: [String: DBusValue]) -> RemoteDevice {
        var p: [String: DBusValue] = ["Address": .string("00:AA:01:09:00:01"), "Adapter": .objectPath("/org/bluez/hci0")]
        p.merge(props) { _, new in new }
        return RemoteDevice(path: "/org/bluez/hci0/dev_00_AA_01_09_00_01", properties: p)!
    }

    @Test func devicePropertiesAreDecoded() {
        var d = device([
            "Name": .string("Kenshin"), "RSSI": .int16(-60), "TxPower": .int16(4), "UUIDs": .stringArray(["0000180d-0000-1000-8000-00805f9b34fb"]),
            "ManufacturerData": .dictionary(key: "q", value: "v", [.init(.uint16(0x004C), .variant(.bytes([2, 21])))]),
            "ServiceData": .dictionary(key: "s", value: "v", [.init(.string("00009999-0000-1000-8000-00805f9b34fb"), .variant(.bytes([0, 1])))]),
        ])
        #expect(d.name == "Kenshin" && d.rssi == -60 && d.txPower == 4 && d.uuids == [Self.hr])
        #expect(d.manufacturerData == [0x004C: [2, 21]])
        #expect(d.serviceData[try! BluetoothUUID(parsing: "9999")] == [0, 1])
        #expect(d.apply(["RSSI": .int16(-60)]).isEmpty)
        #expect(d.apply(["RSSI": .int16(-55), "Connected": .boolean(true)]) == ["rssi", "connected"])
        d.invalidate(["RSSI"])
        #expect(d.rssi == nil)
        #expect(RemoteDevice(path: "/org/bluez/hci0/dev_x", properties: ["Address": .string("nope")]) == nil)
    }

    @Test func scanFiltersCheckEveryCondition() {
        let d = device(["Name": .string("Kenshin Cui's Device"), "RSSI": .int16(-60), "UUIDs": .stringArray(["0000180d-0000-1000-8000-00805f9b34fb"]),
                        "ManufacturerData": .dictionary(key: "q", value: "v", [.init(.uint16(0xFFFF), .variant(.bytes([1])))])])
        var f = ScanFilter()
        #expect(f.matches(d))
        f.services = [try! BluetoothUUID(parsing: "180f")]
        #expect(!f.matches(d))
        f.services.append(Self.hr)
        #expect(f.matches(d))
        f.namePrefix = "Kenshin"
        f.namePattern = "Cui's D.vice$"
        f.minimumRSSI = -60
        f.manufacturer = 0xFFFF
        #expect(f.matches(d))
        var g = f; g.namePrefix = "kenshin"; #expect(!g.matches(d))
        g = f; g.namePattern = "^Cui"; #expect(!g.matches(d))
        g = f; g.minimumRSSI = -59; #expect(!g.matches(d))
        g = f; g.manufacturer = 0x004C; #expect(!g.matches(d))
        #expect(ScanFilter.validatePattern("(") != nil && ScanFilter.validatePattern("^a.*") == nil)
        // Merged for bluetoothd: UUIDs and RSSI only when every scan has them.
        var any = ScanFilter(); any.minimumRSSI = -90
        let merged = ScanFilter.discoveryFilter(merging: [f, any])
        #expect(merged["UUIDs"] == nil && merged["RSSI"] == .int16(-90) && merged["Transport"] == .string("le"))
        let both = ScanFilter.discoveryFilter(merging: [f, f])
        #expect(both["UUIDs"]?.stringArray?.count == 2 && both["RSSI"] == .int16(-60))
    }

    @Test func objectTableFollowsSignalsAndOrdersAttributes() {
        var t = BlueZObjectTable()
        let dev: ObjectPath = "/org/bluez/hci0/dev_00_AA_01_09_00_01"
        func added(_ path: ObjectPath, _ iface: String, _ props: [String: DBusValue]) -> BusMessage {
            .signal(path: "/", interface: StandardInterface.objectManager, member: "InterfacesAdded", body: [
                .objectPath(path), .dictionary(key: "s", value: "a{sv}", [.init(.string(iface), .propertyMap(props))]),
            ])
        }
        var changes = t.apply(added(dev, "org.bluez.Device1", ["Address": .string("00:AA:01:09:00:01"), "Adapter": .objectPath("/org/bluez/hci0")]))
        #expect(changes.count == 1)
        let svc = dev.appending("service0020"), c2 = svc.appending("char0024"), c1 = svc.appending("char0021")
        _ = t.apply(added(svc, "org.bluez.GattService1", ["UUID": .string("180d"), "Device": .objectPath(dev), "Primary": .boolean(true)]))
        _ = t.apply(added(c2, "org.bluez.GattCharacteristic1", ["UUID": .string("2a38"), "Service": .objectPath(svc), "Flags": .stringArray(["read"])]))
        _ = t.apply(added(c1, "org.bluez.GattCharacteristic1", ["UUID": .string("2a37"), "Service": .objectPath(svc), "Flags": .stringArray(["notify"])]))
        #expect(t.children(of: svc, .characteristic).map(\.handle) == [0x21, 0x24])
        #expect(t.characteristics(of: dev, uuid: try! BluetoothUUID(parsing: "2a37")).map(\.path) == [c1])
        #expect(t.characteristics(of: dev, uuid: try! BluetoothUUID(parsing: "2a37"), service: try! BluetoothUUID(parsing: "180f")).isEmpty)
        changes = t.apply(.signal(path: c1, interface: StandardInterface.properties, member: "PropertiesChanged", body: [
            .string("org.bluez.GattCharacteristic1"), .propertyMap(["Value": .bytes([6, 70])]), .stringArray([]),
        ]))
        #expect(changes == [.value(c1, [6, 70])])
        changes = t.apply(.signal(path: dev, interface: StandardInterface.properties, member: "PropertiesChanged", body: [
            .string("org.bluez.Device1"), .propertyMap(["Connected": .boolean(true)]), .stringArray([]),
        ]))
        #expect(changes.count == 1 && t.devices[dev]?.connected == true)
        changes = t.apply(.signal(path: "/", interface: StandardInterface.objectManager, member: "InterfacesRemoved", body: [
            .objectPath(dev), .stringArray(["org.bluez.Device1"]),
        ]))
        #expect(t.devices.isEmpty && changes.count == 1)
    }

    @Test func transientConnectErrorsAreRetriedOthersAreNot() {
        #expect(ConnectErrors.isTransient(BusError(name: "org.bluez.Error.Failed", message: "le-connection-abort-by-local")))
        #expect(ConnectErrors.isTransient(BusError(name: "org.bluez.Error.InProgress", message: "In Progress")))
        #expect(!ConnectErrors.isTransient(BusError(name: "org.bluez.Error.NotAvailable", message: "Operation currently not available")))
        #expect(!ConnectErrors.isTransient(BusError(name: "org.bluez.Error.AuthenticationFailed", message: "Authentication Failed")))
    }
}
