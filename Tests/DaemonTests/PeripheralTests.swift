import Control
import DBus
import Foundation
import SystemKit
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// The peripheral role end to end on the host: the real peerlinkd, a fake bluetoothd that
/// calls back into it as bluetoothd does, and raw control clients.
// Serialized: these tests block on control-socket calls while the in-process fake bluetoothd
// answers the daemon from async handlers; several at once can starve the cooperative pool
// (two threads on two cores) the fake needs. The daemon runs in its own process.
@Suite(.serialized) struct PeripheralTests {
    static let svc = "c4fb2349-72fe-4ca2-94d6-1f3cb16331ee"
    static let chr = "6a3e4b28-522d-4b3b-82a9-d5e2004534fc"
    static let wchr = "6a3e4b29-522d-4b3b-82a9-d5e2004534fc"
    static let definition: JSONValue = ["name": "test", "services": [["uuid": .string(svc), "characteristics": [
        ["uuid": .string(chr), "flags": ["read", "notify"], "value": "Kenshin Cui's Device"],
        ["uuid": .string(wchr), "flags": ["read", "write"], "value": "initial", "max_length": 8],
    ]]]]

    struct Rig {
        let bus: PrivateBus
        let fake: FakeBlueZ
        let managers: FakePeripheralManagers
        let daemon: DaemonHarness
    }

    static func rig(extraConfig: String = "") async throws -> Rig {
        let bus = try PrivateBus()
        let fake = try await FakeBlueZ(busAddress: bus.address, adapters: [.init(name: "hci0", address: "00:AA:01:00:00:00")], claimName: false)
        let managers = try FakePeripheralManagers(on: fake)
        try await fake.claimName()
        let daemon = try await DaemonHarness(busAddress: bus.address, extraConfig: extraConfig)
        do {
            _ = try await daemon.waitForStatus { $0["adapters"]?.arrayValue?.count == 1 }
        } catch {
            throw TestSupportError("\(error)\ndaemon log:\n\(daemon.log)")
        }
        return Rig(bus: bus, fake: fake, managers: managers, daemon: daemon)
    }

    @Test func registerReadWriteNotify() async throws {
        let r = try await Self.rig()
        defer { r.daemon.stop() }
        let watcher = try RawClient(r.daemon.socketPath)
        _ = try watcher.call("events.subscribe", ["topics": ["gatt"]])
        let app = try r.daemon.call("gatt.register", ["definition": Self.definition, "source": "test.json"])
        #expect(app["id"] == "app1" && app["registered"] == true)
        #expect(r.managers.box.state.withLock { $0.registrations } == 1)
        let c = try #require(r.managers.object("org.bluez.GattCharacteristic1", uuid: Self.chr))
        let w = try #require(r.managers.object("org.bluez.GattCharacteristic1", uuid: Self.wchr))
        #expect(r.managers.object("org.bluez.GattService1", uuid: Self.svc) != nil)
        let props = r.managers.box.state.withLock { $0.tree[c]?["org.bluez.GattCharacteristic1"] }
        #expect(props?["Flags"]?.stringArray == ["read", "notify"])
        #expect(props?["NotifyAcquired"] != nil, "notify-only characteristics offer the AcquireNotify fast path")

        // Reads, with offsets.
        #expect(try await r.managers.callCharacteristic(c, "ReadValue", [FakePeripheralManagers.options()]).first?.byteArray == Array("Kenshin Cui's Device".utf8))
        #expect(try await r.managers.callCharacteristic(c, "ReadValue", [FakePeripheralManagers.options(offset: 8)]).first?.byteArray == Array("Cui's Device".utf8))
        await #expect(throws: BusError(name: "org.bluez.Error.InvalidOffset", message: "invalid offset")) {
            _ = try await r.managers.callCharacteristic(c, "ReadValue", [FakePeripheralManagers.options(offset: 100)])
        }
        _ = try watcher.nextEvent("gatt.read")

        // Writes: stored in order, reported with the device; over-long and not-writable refused.
        _ = try await r.managers.callCharacteristic(w, "WriteValue", [.bytes(Array("hello".utf8)), FakePeripheralManagers.options()])
        let ev = try watcher.nextEvent("gatt.write")["data"]
        #expect(ev?["value"] == "hello" && ev?["device"] == "00:AA:01:01:00:01" && ev?["type"] == .null)
        _ = try await r.managers.callCharacteristic(w, "WriteValue", [.bytes(Array("XY".utf8)), FakePeripheralManagers.options(offset: 3)])
        #expect(try watcher.nextEvent("gatt.write")["data"]?["stored_hex"] == .string(Array("helXY".utf8).map { String(format: "%02x", $0) }.joined()))
        await #expect(throws: BusError(name: "org.bluez.Error.InvalidValueLength", message: "invalid value length")) {
            _ = try await r.managers.callCharacteristic(w, "WriteValue", [.bytes(Array("123456789".utf8)), FakePeripheralManagers.options()])
        }
        await #expect(throws: BusError(name: "org.bluez.Error.NotPermitted", message: "not permitted")) {
            _ = try await r.managers.callCharacteristic(c, "WriteValue", [.bytes([1]), FakePeripheralManagers.options()])
        }

        // No subscriber yet: notify says so.
        do {
            _ = try r.daemon.call("gatt.notify", ["uuid": .string(Self.chr), "value": "x"])
            Issue.record("expected no-subscribers")
        } catch let e as RPCError { #expect(e.data?["kind"] == "no-subscribers") }

        // AcquireNotify: the fast path; values arrive as packets; limits are enforced.
        // Only a duplicate of the descriptor is kept, so closing it is bluetoothd closing its end.
        let raw: Int32
        do {
            let acquired = try await r.managers.callCharacteristic(c, "AcquireNotify", [FakePeripheralManagers.options(mtu: 100)])
            guard case .unixFD(let fd) = acquired[0] else { Issue.record("no fd"); return }
            #expect(acquired[1] == .uint16(100))
            raw = try fd.duplicate()
        }
        defer { closeQuietly(raw) }
        let sub = try watcher.nextEvent("gatt.subscribed")["data"]
        #expect(sub?["mtu"] == 100 && sub?["via"] == "fd" && sub?["device"] == "00:AA:01:01:00:01")
        for i in 1...3 {
            #expect(try r.daemon.call("gatt.notify", ["uuid": .string(Self.chr), "value": .string("value \(i)")])["subscribers"] == 1)
        }
        for i in 1...3 {
            var buf = [UInt8](repeating: 0, count: 600)
            #expect(try SocketIO.waitReadable(raw, timeoutMilliseconds: 5000))
            let n = read(raw, &buf, buf.count)
            #expect(Array(buf[0..<max(n, 0)]) == Array("value \(i)".utf8), "one packet per notification, in order")
        }
        do {
            _ = try r.daemon.call("gatt.notify", ["uuid": .string(Self.chr), "value_hex": .string(String(repeating: "00", count: 98))])
            Issue.record("expected too-long")
        } catch let e as RPCError {
            #expect(e.data?["kind"] == "too-long" && e.message.contains("at most 97"), "\(e)")
        }
        do {
            _ = try r.daemon.call("gatt.notify", ["uuid": .string(Self.chr), "value": "x", "device": "00:AA:01:01:00:01"])
            Issue.record("expected device-not-subscribed")
        } catch let e as RPCError {
            #expect(e.data?["kind"] == "device-not-subscribed" && e.message.contains("5.69"), "\(e)")
        }
        // bluetoothd closing its end is the end of the subscription.
        shutdown(raw, Int32(SHUT_RDWR))
        let unsub = try watcher.nextEvent("gatt.unsubscribed", timeout: 10)["data"]
        #expect(unsub?["device"] == "00:AA:01:01:00:01")

        // Unregister: gone from the bus and from bluetoothd.
        _ = try r.daemon.call("gatt.unregister", ["id": "app1"])
        #expect(r.managers.box.state.withLock { $0.appRoot } == nil)
        #expect(try r.daemon.call("gatt.list")["applications"]?.arrayValue?.isEmpty == true)
    }

    @Test func badDefinitionLeavesNothing() async throws {
        let r = try await Self.rig()
        defer { r.daemon.stop() }
        do {
            _ = try r.daemon.call("gatt.register", ["definition": ["services": [["uuid": "xyz"]]], "source": "bad.json"])
            Issue.record("expected invalid-definition")
        } catch let e as RPCError {
            #expect(e.code == RPCErrorCode.invalidParams && e.data?["path"] == "services[0].uuid" && e.message.contains("bad.json"))
        }
        #expect(r.managers.box.state.withLock { $0.registrations } == 0)
        #expect(try r.daemon.call("gatt.list")["applications"]?.arrayValue?.isEmpty == true)
    }

    @Test func readsAnsweredByAControlClient() async throws {
        let r = try await Self.rig()
        defer { r.daemon.stop() }
        _ = try r.daemon.call("gatt.register", ["definition": Self.definition])
        let c = try #require(r.managers.object("org.bluez.GattCharacteristic1", uuid: Self.chr))
        let handler = try RawClient(r.daemon.socketPath)
        _ = try handler.call("gatt.handle-reads", ["uuid": .string(Self.chr)])
        let read = try r.managers.startCharacteristicCall(c, "ReadValue", [FakePeripheralManagers.options(offset: 2)])
        let req = try handler.nextEvent("gatt.read-request")["data"]
        #expect(req?["offset"] == 2 && req?["device"] == "00:AA:01:01:00:01")
        _ = try handler.call("gatt.respond", ["request": req!["request"]!, "value": "dynamic"])
        #expect(try await read.value().first?.byteArray == Array("namic".utf8), "the offset applies to the answer")
        // An error answer becomes the ATT error.
        let failing = try r.managers.startCharacteristicCall(c, "ReadValue", [FakePeripheralManagers.options()])
        let req2 = try handler.nextEvent("gatt.read-request")["data"]
        _ = try handler.call("gatt.respond", ["request": req2!["request"]!, "error": "not-authorized"])
        await #expect(throws: BusError.self) { _ = try await failing.value() }
    }

    @Test func bluetoothdRestartRegistersEverythingAgain() async throws {
        let r = try await Self.rig()
        defer { r.daemon.stop() }
        let watcher = try RawClient(r.daemon.socketPath)
        _ = try watcher.call("events.subscribe", ["topics": ["gatt", "advertise"]])
        _ = try r.daemon.call("gatt.register", ["definition": Self.definition])
        _ = try r.daemon.call("advertise.start", ["name": "Kenshin Cui's Device", "services": [.string(Self.svc)]])
        r.fake.connection.close()
        let fake2 = try await FakeBlueZ(busAddress: r.bus.address, adapters: [.init(name: "hci0", address: "00:AA:01:00:00:00")], claimName: false)
        let managers2 = try FakePeripheralManagers(on: fake2)
        try await fake2.claimName()
        _ = try watcher.nextEvent("gatt.reregistered", timeout: 10)
        _ = try watcher.nextEvent("advertise.restarted", timeout: 10)
        #expect(managers2.box.state.withLock { $0.registrations } == 1)
        #expect(managers2.object("org.bluez.GattCharacteristic1", uuid: Self.chr) != nil)
        #expect(managers2.box.state.withLock { $0.ads.count } == 1)
    }

    @Test func advertisingChecksSizeAndInstances() async throws {
        let r = try await Self.rig()
        defer { r.daemon.stop() }
        let a = try r.daemon.call("advertise.start", ["name": "Kenshin Cui's Device", "services": [.string(Self.svc)]])
        #expect(a["advertising_bytes"] == 21 && a["scan_response_bytes"] == 22)
        let props = r.managers.box.state.withLock { $0.ads.values.first }
        #expect(props?["LocalName"]?.string == "Kenshin Cui's Device" && props?["ServiceUUIDs"]?.stringArray == [Self.svc])
        do {
            _ = try r.daemon.call("advertise.start", ["services": [.string(Self.svc), .string(Self.chr)]])
            Issue.record("expected too-large")
        } catch let e as RPCError {
            #expect(e.data?["kind"] == "too-large" && e.message.contains("needs 37 bytes but 31 fit"))
        }
        for i in 2...4 { _ = try r.daemon.call("advertise.start", ["name": .string("ad\(i)")]) }
        do {
            _ = try r.daemon.call("advertise.start", ["name": "ad5"])
            Issue.record("expected no-instances")
        } catch let e as RPCError {
            #expect(e.data?["kind"] == "no-instances" && e.message.contains("maximum advertisements reached"))
        }
        #expect(try r.daemon.call("advertise.list")["advertisements"]?.arrayValue?.count == 4)
        _ = try r.daemon.call("advertise.stop")
        #expect(r.managers.box.state.withLock { $0.ads.isEmpty })
    }

    @Test func pairingAgentPolicies() async throws {
        let r = try await Self.rig(extraConfig: "[agent]\npolicy = just-works\ntimeout = 1\n")
        defer { r.daemon.stop() }
        let deadline = Date().addingTimeInterval(5)
        while r.managers.box.state.withLock({ $0.agent }) == nil, Date() < deadline { try await Task.sleep(for: .milliseconds(20)) }
        let agent = try #require(r.managers.box.state.withLock { $0.agent })
        #expect(agent.capability == "NoInputNoOutput")
        func startConfirm() -> PendingCall {
            PendingCall(r.managers.connection, .methodCall(destination: agent.owner, path: agent.path, interface: "org.bluez.Agent1",
                                                           member: "RequestConfirmation", body: [.objectPath("/org/bluez/hci0/dev_00_AA_01_01_00_01"), .uint32(123456)]))
        }
        func confirm() async throws { _ = try await startConfirm().value() }
        try await confirm()  // just-works accepts
        _ = try r.daemon.call("agent.policy", ["policy": "reject"])
        await #expect(throws: BusError(name: "org.bluez.Error.Rejected", message: "rejected by policy")) { try await confirm() }
        _ = try r.daemon.call("agent.policy", ["policy": "confirm"])
        #expect(r.managers.box.state.withLock { $0.agent?.capability } == "DisplayYesNo")
        let asker = try RawClient(r.daemon.socketPath)
        _ = try asker.call("events.subscribe", ["topics": ["agent.request"]])
        let accepted = startConfirm()
        let req = try asker.nextEvent("agent.request")["data"]
        #expect(req?["passkey"] == "123456" && req?["device"] == "00:AA:01:01:00:01" && req?["kind"] == "confirm")
        _ = try asker.call("agent.confirm", ["id": req!["id"]!, "accept": true])
        _ = try await accepted.value()
        // Unanswered within the configured timeout (1 s): refused.
        await #expect(throws: BusError.self) { try await confirm() }
        do {
            _ = try r.daemon.call("agent.policy", ["policy": "passkey 12"])
            Issue.record("expected invalid params")
        } catch let e as RPCError { #expect(e.code == RPCErrorCode.invalidParams) }
    }
}
