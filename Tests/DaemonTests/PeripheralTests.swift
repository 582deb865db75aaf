import Control
import DBus
import Foundation
import Synchronization
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
@Suite(.ownThreads, .serialized, .memoryHeavy) struct PeripheralTests {
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

    /// Subscribes through AcquireNotify (MTU 100: values up to 97 bytes) and returns our copy
    /// of bluetoothd's end of the socket.
    static func acquire(_ r: Rig) async throws -> Int32 {
        let c = try #require(r.managers.object("org.bluez.GattCharacteristic1", uuid: Self.chr))
        let acquired = try await r.managers.callCharacteristic(c, "AcquireNotify", [FakePeripheralManagers.options(mtu: 100)])
        guard case .unixFD(let fd) = acquired[0] else { throw TestSupportError("no fd") }
        return try fd.duplicate()
    }

    /// The next packet on a notification socket, nil when none comes within `timeout` seconds.
    static func packet(_ fd: Int32, timeout: Double = 5) throws -> [UInt8]? {
        guard try SocketIO.waitReadable(fd, timeoutMilliseconds: Int32(timeout * 1000)) else { return nil }
        var buf = [UInt8](repeating: 0, count: 600)
        let n = read(fd, &buf, buf.count)
        return n < 0 ? nil : Array(buf[0..<n])
    }

    /// Two centrals subscribed (a session each), both slow; one leaves while notifications
    /// wait for room: the other still gets every value, and no notify fails (one before it
    /// in the list leaving made it miss the value, and every later notify failed).
    @Test func aCentralLeavingCostsTheOthersNothing() async throws {
        let r = try await Self.rig()
        defer { r.daemon.stop() }
        _ = try r.daemon.call("gatt.register", ["definition": Self.definition])
        let c = try #require(r.managers.object("org.bluez.GattCharacteristic1", uuid: Self.chr))
        func acquire(_ device: String) async throws -> Int32 {
            let acquired = try await r.managers.callCharacteristic(c, "AcquireNotify", [FakePeripheralManagers.options(device: device, mtu: 100)])
            guard case .unixFD(let fd) = acquired[0] else { throw TestSupportError("no fd") }
            return try fd.duplicate()
        }
        let leaving = try await acquire("/org/bluez/hci0/dev_00_AA_01_01_00_01")
        let staying = try await acquire("/org/bluez/hci0/dev_00_AA_01_01_00_02")
        defer { closeQuietly(staying) }
        // More than both sockets and outboxes hold: the notifies wait for room.
        let n = 400
        let client = try RawClient(r.daemon.socketPath)
        var lines = ""
        for i in 0..<n {
            let v = String(format: "%04d", i) + String(repeating: "x", count: 86)
            lines += "{\"jsonrpc\":\"2.0\",\"id\":\(i),\"method\":\"gatt.notify\",\"params\":{\"uuid\":\"\(Self.chr)\",\"value\":\"\(v)\"}}\n"
        }
        try client.send(lines)
        var replies: [JSONValue] = []
        while let m = (try? client.readJSON(timeout: 0.5)) ?? nil { replies.append(m) }  // until they wait
        closeQuietly(leaving)  // bluetoothd closes the leaving central's socket
        var got: [String] = []
        while got.count < n, let p = try Self.packet(staying, timeout: 10) { got.append(String(decoding: p.prefix(4), as: UTF8.self)) }
        let expected = (0..<n).map { String(format: "%04d", $0) }
        let missing = expected.filter { !got.contains($0) }
        #expect(missing.isEmpty && got == expected, "the staying central got every value, in order: missing \(missing), \(got.count) of \(n)")
        while replies.count < n, let m = try client.readJSON(timeout: 10) { replies.append(m) }
        #expect(replies.count == n && replies.allSatisfy { $0["error"] == nil }, "\(replies.first { $0["error"] != nil } ?? .null)")
    }

    @Test func notifyStreamThroughAPassedSocket() async throws {
        let r = try await Self.rig()
        defer { r.daemon.stop() }
        _ = try r.daemon.call("gatt.register", ["definition": Self.definition])
        let raw = try await Self.acquire(r)
        defer { closeQuietly(raw) }
        let client = try RawClient(r.daemon.socketPath)
        // To one device, where this bluetoothd has no session per central (before 5.69):
        // refused as gatt.notify refuses it (every value was counted "no subscriber").
        let perDevice = try RawClient(r.daemon.socketPath).request("gatt.notify-stream", ["uuid": .string(Self.chr), "device": "00:AA:01:01:00:01"])
        #expect(perDevice["error"]?["data"]?["kind"] == "device-not-subscribed" && perDevice["error"]?["message"]?.stringValue?.contains("5.69") == true,
                "\(perDevice)")
        let res = try client.call("gatt.notify-stream", ["uuid": .string(Self.chr)])
        #expect(res["fd"] == true && res["stream"] == "stream1" && res["subscribers"] == 1, "\(res)")
        let s = try #require(client.descriptors.first, "the reply carries the stream's socket")
        defer { closeQuietly(s) }

        // Each packet written is one notification, in order; the last is the stored value.
        let values: [[UInt8]] = [[1], [2, 3], Array("hello".utf8)] + (0..<200).map { i in [UInt8(i & 0xff), 0xaa] }
        for v in values { #expect(send(s, v, v.count, 0) == v.count) }
        for v in values { #expect(try Self.packet(raw) == v) }
        func stored() throws -> JSONValue? {
            try r.daemon.call("gatt.list")["applications"]?.arrayValue?.first?["services"]?.arrayValue?.first?["characteristics"]?.arrayValue?.first?["value_hex"]
        }
        #expect(try stored() == "c7aa")

        // A value longer than one notification (98 > MTU 100 - 3) ends the stream: the event
        // says why and how many went out; the client's end is closed; nothing more is sent.
        let long = [UInt8](repeating: 7, count: 98)
        #expect(send(s, long, long.count, 0) == long.count)
        let ended = try client.nextEvent("gatt.stream.ended")["data"]
        #expect(ended?["reason"] == "too-long" && ended?["message"]?.stringValue?.contains("at most 97") == true, "\(String(describing: ended))")
        #expect(ended?["sent"]?.intValue == Int64(values.count) && ended?["received"]?.intValue == Int64(values.count + 1) && ended?["dropped"] == 1)
        #expect(try Self.packet(raw, timeout: 0.3) == nil)
        var b = [UInt8](repeating: 0, count: 8)
        #expect(recv(s, &b, b.count, 0) == 0, "the daemon closed its end")

        // Nobody subscribed: values are stored, not sent, counted as unsent; closing ends it.
        shutdown(raw, Int32(SHUT_RDWR))
        try await Task.sleep(for: .milliseconds(200))
        _ = try client.call("gatt.notify-stream", ["uuid": .string(Self.chr)])
        let s2 = try #require(client.descriptors.last)
        #expect(send(s2, [0x61], 1, 0) == 1 && send(s2, [0x62], 1, 0) == 1)
        try await Task.sleep(for: .milliseconds(200))
        closeQuietly(s2)
        let ended2 = try client.nextEvent("gatt.stream.ended")["data"]
        #expect(ended2?["reason"] == "closed" && ended2?["unsent"] == 2 && ended2?["sent"] == 0 && ended2?["stream"] == "stream2", "\(String(describing: ended2))")
        #expect(try stored() == "62")

        // The stream ends with the control connection that opened it.
        let other = try RawClient(r.daemon.socketPath)
        _ = try other.call("gatt.notify-stream", ["uuid": .string(Self.chr)])
        let s3 = try #require(other.descriptors.first)
        defer { closeQuietly(s3) }
        other.close()
        #expect(try SocketIO.waitReadable(s3, timeoutMilliseconds: 5000))
        #expect(recv(s3, &b, b.count, 0) == 0)

        // Bad requests: unknown characteristic, unknown parameter, bad device.
        #expect(throws: RPCError.self) { try client.call("gatt.notify-stream", ["uuid": "180d"]) }
        #expect(throws: RPCError.self) { try client.call("gatt.notify-stream", ["uuid": .string(Self.chr), "x": 1]) }
        #expect(throws: RPCError.self) { try client.call("gatt.notify-stream", ["uuid": .string(Self.chr), "device": "nope"]) }
        #expect(client.descriptors.count == 2, "no descriptor comes with an error")

        // Its application unregistered: the stream ends then, said so, its socket closed
        // (it ended only at its next value, a sensor's minutes away).
        _ = try client.call("gatt.notify-stream", ["uuid": .string(Self.chr)])
        let s4 = try #require(client.descriptors.last)
        defer { closeQuietly(s4) }
        _ = try r.daemon.call("gatt.unregister", ["id": "app1"])
        let ended4 = try client.nextEvent("gatt.stream.ended")["data"]
        #expect(ended4?["reason"] == "unregistered" && ended4?["stream"] == "stream4", "\(String(describing: ended4))")
        #expect(try SocketIO.waitReadable(s4, timeoutMilliseconds: 5000))
        #expect(recv(s4, &b, b.count, 0) == 0)
    }

    @Test func notifyManyValuesAtOnce() async throws {
        let r = try await Self.rig()
        defer { r.daemon.stop() }
        _ = try r.daemon.call("gatt.register", ["definition": Self.definition])
        let raw = try await Self.acquire(r)
        defer { closeQuietly(raw) }

        // values / values_hex / values_base64: one packet each, in order; the last is stored.
        let res = try r.daemon.call("gatt.notify", ["uuid": .string(Self.chr), "values_hex": ["01", "0203", "04 05 06"]])
        #expect(res["count"] == 3 && res["length"] == 6 && res["subscribers"] == 1, "\(res)")
        for expected: [UInt8] in [[1], [2, 3], [4, 5, 6]] { #expect(try Self.packet(raw) == expected) }
        _ = try r.daemon.call("gatt.notify", ["uuid": .string(Self.chr), "values": ["a", "bc"]])
        _ = try r.daemon.call("gatt.notify", ["uuid": .string(Self.chr), "values_base64": ["AQI=", "Aw=="]])
        for expected: [UInt8] in [Array("a".utf8), Array("bc".utf8), [1, 2], [3]] { #expect(try Self.packet(raw) == expected) }
        #expect(try r.daemon.call("gatt.notify", ["uuid": .string(Self.chr), "value": "one"])["count"] == 1)
        #expect(try Self.packet(raw) == Array("one".utf8))
        let stored = try r.daemon.call("gatt.list")["applications"]?.arrayValue?.first?["services"]?.arrayValue?.first?["characteristics"]?.arrayValue?.first
        #expect(stored?["value_hex"] == "6f6e65", "the last value sent is the stored value")

        // Every value is checked first: one too long (98 > MTU 100 - 3) and nothing is sent.
        func refused(_ params: [String: JSONValue]) throws -> RPCError? {
            do {
                _ = try r.daemon.call("gatt.notify", params)
                return nil
            } catch let e as RPCError { return e }
        }
        let tooLong = try refused(["uuid": .string(Self.chr), "values_hex": ["01", .string(String(repeating: "00", count: 98)), "02"]])
        #expect(tooLong?.data?["kind"] == "too-long" && tooLong?.message.contains("at most 97") == true, "\(String(describing: tooLong))")
        #expect(try Self.packet(raw, timeout: 0.3) == nil, "nothing of a refused batch is sent")
        // The forms exclude each other; the arrays hold strings of their form and are not empty.
        #expect(try refused(["uuid": .string(Self.chr), "value": "x", "values": ["y"]])?.message.contains("not several") == true)
        #expect(try refused(["uuid": .string(Self.chr), "values": []])?.data?["param"] == "values")
        #expect(try refused(["uuid": .string(Self.chr), "values": ["x", 1]])?.message.contains("index 1") == true)
        #expect(try refused(["uuid": .string(Self.chr), "values_hex": ["0g"]])?.message.contains("not hex") == true)
        #expect(try refused(["uuid": .string(Self.chr), "values_base64": ["@@"]])?.message.contains("not valid base64") == true)
        #expect(try refused(["uuid": .string(Self.chr)])?.message.contains("values_base64") == true, "the error names both forms")
        #expect(try Self.packet(raw, timeout: 0.3) == nil)

        // bluetoothd leaving in the middle of a long batch: the reply says how many went out.
        // The socket holds a few hundred packets (its send buffer); the rest wait for room that
        // never comes.
        let client = try RawClient(r.daemon.socketPath)
        let many = JSONValue.array((0..<2000).map { _ in .string(String(repeating: "ab", count: 90)) })
        try client.send(RPCRequest(id: 1, method: "gatt.notify", params: ["uuid": .string(Self.chr), "values_hex": many]).encodedLine())
        // Sending has begun once the first value arrives (a fixed sleep lost the race under load:
        // the daemon had not parsed the 370 KB request yet and answered no-subscribers).
        #expect(try Self.packet(raw, timeout: 10) != nil, "the first value of the batch arrives")
        shutdown(raw, Int32(SHUT_RDWR))
        let reply = try #require(try client.readJSON(timeout: 10))
        let sent = reply["error"]?["data"]?["sent"]?.intValue ?? -1
        #expect(reply["error"]?["data"]?["kind"] == "interrupted" && sent >= 1 && sent < 2000, "\(reply)")
        #expect(reply["error"]?["message"]?.stringValue?.contains("after \(sent) of 2000 values were sent") == true, "\(reply)")
    }

    /// Many requests in flight on one connection, against a receiver slower than the sender (the
    /// daemon waits for room in the socket most of the time): every reply, in order, and every
    /// value, in order.
    @Test func pipelinedNotificationsKeepTheirOrder() async throws {
        let r = try await Self.rig()
        defer { r.daemon.stop() }
        _ = try r.daemon.call("gatt.register", ["definition": Self.definition])
        let raw = try await Self.acquire(r)
        defer { closeQuietly(raw) }
        let n = 1000
        var lines: [UInt8] = []
        for i in 1...n {
            // Single values and small batches of two, mixed.
            let params: [String: JSONValue] = i % 4 == 0
                ? ["uuid": .string(Self.chr), "values": [.string("v\(i)a"), .string("v\(i)b")]]
                : ["uuid": .string(Self.chr), "value": .string("v\(i)")]
            lines += RPCRequest(id: .int(Int64(i)), method: "gatt.notify", params: params).encodedLine()
        }
        let client = try RawClient(r.daemon.socketPath)
        try client.send(lines)
        // The receiver starts late and reads slowly at first.
        let received = Mutex<[String]>([])
        let expectedCount = n + n / 4
        let reader = Thread {
            Thread.sleep(forTimeInterval: 0.2)
            while received.withLock({ $0.count }) < expectedCount {
                guard let p = try? Self.packet(raw, timeout: 10) else { return }
                received.withLock { $0.append(String(decoding: p, as: UTF8.self)) }
                if received.withLock({ $0.count }) < 50 { Thread.sleep(forTimeInterval: 0.002) }
            }
        }
        reader.start()
        for i in 1...n {
            let reply = try #require(try client.readJSON(timeout: 20))
            #expect(reply["id"] == .int(Int64(i)) && reply["result"]?["count"] == .int(i % 4 == 0 ? 2 : 1), "\(reply)")
        }
        let deadline = Date().addingTimeInterval(10)
        while received.withLock({ $0.count }) < expectedCount && Date() < deadline { try await Task.sleep(for: .milliseconds(10)) }
        let want = (1...n).flatMap { i in i % 4 == 0 ? ["v\(i)a", "v\(i)b"] : ["v\(i)"] }
        #expect(received.withLock { $0 } == want)
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

    /// What bluetoothd passes is checked, not trusted: a negative offset (it trapped as an
    /// index, taking every client down) is an invalid offset, an MTU out of range is unknown;
    /// a descriptor's write goes from its offset on (the offset was ignored: a long write's
    /// last piece replaced the value); a client's answer to a read longer than the
    /// characteristic's max_length is refused to that client, the read still waiting.
    @Test func whatBluetoothdPassesIsCheckedNotTrusted() async throws {
        let r = try await Self.rig()
        defer { r.daemon.stop() }
        let def: JSONValue = ["name": "checked", "services": [["uuid": .string(Self.svc), "characteristics": [
            ["uuid": .string(Self.chr), "flags": ["read", "write"], "value": "abc", "max_length": 8,
             "descriptors": [["uuid": "2901", "flags": ["read", "write"], "value": "desc"]]],
        ]]]]
        _ = try r.daemon.call("gatt.register", ["definition": def])
        let c = try #require(r.managers.object("org.bluez.GattCharacteristic1", uuid: Self.chr))
        let d = try #require(r.managers.object("org.bluez.GattDescriptor1", uuid: "00002901-0000-1000-8000-00805f9b34fb"))
        let owner = try #require(r.managers.box.state.withLock { $0.appOwner })
        func call(_ path: ObjectPath, _ iface: String, _ member: String, _ body: [DBusValue]) async throws -> [DBusValue] {
            try await r.managers.connection.call(destination: owner, path: path, interface: iface, member: member, body, timeout: .seconds(10))
        }
        let badOffset = DBusValue.propertyMap(["offset": .int16(-1), "mtu": .int64(Int64.min)])
        let invalidOffset = BusError(name: "org.bluez.Error.InvalidOffset", message: "invalid offset")
        await #expect(throws: invalidOffset) { _ = try await call(c, "org.bluez.GattCharacteristic1", "ReadValue", [badOffset]) }
        await #expect(throws: invalidOffset) {
            _ = try await call(c, "org.bluez.GattCharacteristic1", "WriteValue", [.bytes([1]), .propertyMap(["offset": .int64(-5)])])
        }
        await #expect(throws: invalidOffset) { _ = try await call(d, "org.bluez.GattDescriptor1", "ReadValue", [badOffset]) }
        _ = try await call(d, "org.bluez.GattDescriptor1", "WriteValue", [.bytes(Array("XY".utf8)), .propertyMap(["offset": .uint16(2)])])
        #expect(try await call(d, "org.bluez.GattDescriptor1", "ReadValue", [.propertyMap([:])]).first?.byteArray == Array("deXY".utf8),
                "written from its offset on")
        await #expect(throws: invalidOffset) {
            _ = try await call(d, "org.bluez.GattDescriptor1", "WriteValue", [.bytes([1]), .propertyMap(["offset": .uint16(9)])])
        }
        #expect(try r.daemon.call("daemon.status")["pid"] != nil, "still serving")
        // A client answering a read with more than max_length (8) bytes is told; the read waits.
        let handler = try RawClient(r.daemon.socketPath)
        _ = try handler.call("gatt.handle-reads", ["uuid": .string(Self.chr)])
        let read = try r.managers.startCharacteristicCall(c, "ReadValue", [FakePeripheralManagers.options()])
        let req = try #require(try handler.nextEvent("gatt.read-request")["data"])
        do {
            _ = try handler.call("gatt.respond", ["request": req["request"]!, "value": "far too long"])
            Issue.record("an answer over max_length was taken")
        } catch let e as RPCError {
            #expect(e.code == RPCErrorCode.invalidParams && e.message.contains("over the characteristic's max_length 8"), "\(e.message)")
        }
        _ = try handler.call("gatt.respond", ["request": req["request"]!, "value": "fits"])
        #expect(try await read.value().first?.byteArray == Array("fits".utf8))
        // A stored value over max_length says so (it spoke of an unknown MTU and StartNotify).
        let set = try RawClient(r.daemon.socketPath).request("gatt.set", ["uuid": .string(Self.chr), "value": "far too long"])
        #expect(set["error"]?["message"]?.stringValue?.contains("over the characteristic's max_length 8") == true, "\(set)")
        // Another connection cannot take the handler away (it could, and the owner's reads
        // silently went back to the stored value).
        let other = try RawClient(r.daemon.socketPath).request("gatt.handle-reads", ["uuid": .string(Self.chr), "enable": false])
        #expect(other["error"]?["data"]?["kind"] == "not-yours", "\(other)")
        #expect(try handler.call("gatt.handle-reads", ["uuid": .string(Self.chr), "enable": false])["handled"] == false)
    }

    @Test func bluetoothdRestartRegistersEverythingAgain() async throws {
        let r = try await Self.rig()
        defer { r.daemon.stop() }
        let watcher = try RawClient(r.daemon.socketPath)
        _ = try watcher.call("events.subscribe", ["topics": ["gatt", "advertise"]])
        _ = try r.daemon.call("gatt.register", ["definition": Self.definition])
        _ = try r.daemon.call("advertise.start", ["name": "Kenshin Cui's Device", "services": [.string(Self.svc)]])
        // A central subscribed through StartNotify (bluetoothd's path without AcquireNotify).
        let c = try #require(r.managers.object("org.bluez.GattCharacteristic1", uuid: Self.chr))
        _ = try await r.managers.callCharacteristic(c, "StartNotify", [])
        #expect(try r.daemon.call("gatt.notify", ["uuid": .string(Self.chr), "value": "before"])["subscribers"] == 1)
        r.fake.connection.close()
        let fake2 = try await FakeBlueZ(busAddress: r.bus.address, adapters: [.init(name: "hci0", address: "00:AA:01:00:00:00")], claimName: false)
        let managers2 = try FakePeripheralManagers(on: fake2)
        try await fake2.claimName()
        // GATT and advertising follow BlueZ's events each in its own loop: either may re-register first.
        var pending: Set = ["gatt.reregistered", "advertise.restarted"]
        let deadline = Date().addingTimeInterval(10)
        while !pending.isEmpty {
            let m = try #require(try watcher.readJSON(timeout: max(0.01, deadline.timeIntervalSinceNow)), "still waiting for \(pending)")
            if m["method"] == "event", let topic = m["params"]?["topic"]?.stringValue { pending.remove(topic) }
        }
        #expect(managers2.box.state.withLock { $0.registrations } == 1)
        #expect(managers2.object("org.bluez.GattCharacteristic1", uuid: Self.chr) != nil)
        #expect(managers2.box.state.withLock { $0.ads.count } == 1)
        // The subscriber went with the old bluetoothd (no StopNotify comes from one that died).
        let after = try RawClient(r.daemon.socketPath).request("gatt.notify", ["uuid": .string(Self.chr), "value": "after"])
        #expect(after["error"]?["data"]?["kind"] == "no-subscribers", "\(after)")
    }

    /// An advertisement stopped while bluetoothd (back after a restart) registers it again:
    /// taken back once registered, not left on the air out of reach of list and stop.
    @Test func anAdvertisementStoppedWhileRegisteredAgainIsTakenBack() async throws {
        let r = try await Self.rig()
        defer { r.daemon.stop() }
        _ = try r.daemon.call("advertise.start", ["name": "Kenshin Cui's Device", "services": [.string(Self.svc)]])
        r.fake.connection.close()
        let fake2 = try await FakeBlueZ(busAddress: r.bus.address, adapters: [.init(name: "hci0", address: "00:AA:01:00:00:00")], claimName: false)
        let managers2 = try FakePeripheralManagers(on: fake2)
        managers2.box.state.withLock { $0.holdAdvertisementReplies = true }
        try await fake2.claimName()
        let deadline = Date().addingTimeInterval(10)
        while managers2.box.state.withLock({ $0.heldAdvertisementReplies.isEmpty }) && Date() < deadline { try await Task.sleep(for: .milliseconds(20)) }
        #expect(managers2.box.state.withLock { $0.ads.count } == 1, "registered again, its reply held")
        _ = try r.daemon.call("advertise.stop", ["id": "adv1"])
        let held = managers2.box.state.withLock { s -> [@Sendable () -> Void] in
            defer { s.heldAdvertisementReplies = []; s.holdAdvertisementReplies = false }
            return s.heldAdvertisementReplies
        }
        for answer in held { answer() }
        let gone = Date().addingTimeInterval(10)
        while managers2.box.state.withLock({ !$0.ads.isEmpty }) && Date() < gone { try await Task.sleep(for: .milliseconds(20)) }
        #expect(managers2.box.state.withLock { $0.ads.isEmpty }, "taken back from bluetoothd")
        #expect(try r.daemon.call("advertise.list")["advertisements"]?.arrayValue?.isEmpty == true)
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

    /// A policy change bluetoothd refuses leaves the policy as it was, in the daemon and in
    /// bluetoothd (registered again with the old capability): `agent.policy` showed the new
    /// policy while bluetoothd had none, or the old capability, in force.
    @Test func aRefusedPolicyChangeLeavesTheOldOneInForce() async throws {
        let r = try await Self.rig(extraConfig: "[agent]\npolicy = just-works\n")
        defer { r.daemon.stop() }
        let deadline = Date().addingTimeInterval(5)
        while r.managers.box.state.withLock({ $0.agent }) == nil, Date() < deadline { try await Task.sleep(for: .milliseconds(20)) }
        #expect(r.managers.box.state.withLock { $0.agent?.capability } == "NoInputNoOutput")
        r.managers.box.state.withLock { $0.refuseAgentRegistrations = 1 }
        let refused = try RawClient(r.daemon.socketPath).request("agent.policy", ["policy": "passkey 123456"])
        #expect(refused["error"] != nil, "\(refused)")
        #expect(try r.daemon.call("agent.policy")["policy"] == "just-works")
        #expect(r.managers.box.state.withLock { $0.agent?.capability } == "NoInputNoOutput", "registered again as it was")
        _ = try r.daemon.call("agent.policy", ["policy": "passkey 123456"])
        #expect(try r.daemon.call("agent.policy")["policy"] == "passkey 123456")
        #expect(r.managers.box.state.withLock { $0.agent?.capability } == "KeyboardDisplay")
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
        // A passkey policy: the passkey shown must match, and a pairing that shows none ("just
        // works") is refused (it was accepted: any device near could bond without the passkey).
        _ = try r.daemon.call("agent.policy", ["policy": "passkey 123456"])
        try await confirm()
        func authorize() async throws {
            _ = try await PendingCall(r.managers.connection, .methodCall(destination: agent.owner, path: agent.path, interface: "org.bluez.Agent1",
                                                                         member: "RequestAuthorization",
                                                                         body: [.objectPath("/org/bluez/hci0/dev_00_AA_01_01_00_01")])).value()
        }
        await #expect(throws: BusError(name: "org.bluez.Error.Rejected", message: "rejected by policy")) { try await authorize() }
    }
}
