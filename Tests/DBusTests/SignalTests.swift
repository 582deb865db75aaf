import DBus
import Foundation
import Testing
import TestSupport

/// Signals: what the exported tree emits, seen by `dbus-monitor` and by a second connection;
/// match rules (path_namespace, arg0, well-known senders); name owners; signals from outside.
@Suite(.ownThreads, .memoryHeavy) struct SignalTests {
    static let testIface = "org.peerlink.Test"

    /// Returns once the bus has routed everything `c` sent before: it handles one connection's
    /// messages in order, so a reply to `c` comes after the signals `c` emitted earlier.
    static func flush(_ c: BusConnection) async throws {
        _ = try await c.nameOwner("org.freedesktop.DBus")
    }

    static func ticks(_ messages: [BusMessage]) -> [UInt32] {
        messages.compactMap { $0.body.first?.integer.map(UInt32.init) }
    }

    // MARK: What the object tree emits

    @Test func dbusMonitorSeesPropertiesChangedAndInterfacesAddedRemoved() async throws {
        let t = try await DeviceTree()
        let monitor = try await Tools.monitor(t.bus, ["type='signal',sender='\(t.dest)'"], emitter: t.server)
        try t.server.setProperty(DeviceTree.path("dev0"), DeviceTree.device, "Alias", .string("Seen by monitor"))
        let dev2 = DeviceTree.path("dev2")
        try t.server.export(dev2, interfaces: [DeviceTree.batteryInterface], values: [
            DeviceTree.battery: ["Percentage": .byte(42), "Threshold": .uint16(7), "Calibration": .double(2)],
        ])
        t.server.unexport(dev2)
        #expect(await monitor.waitForOutput(containing: ["member=InterfacesRemoved"]), "\(monitor.text)")
        monitor.stop()
        // One block per message: header line, then the indented body. dbus-monitor also
        // prints its own NameAcquired/NameLost, which come from the bus.
        let text = monitor.text
        let blocks = text.components(separatedBy: "\nsignal ").filter { $0.contains("sender=\(t.dest) ") && !$0.contains("member=Ready") }
        let flat = blocks.map { b in
            b.split(separator: "\n").map { $0.split(separator: " ").joined(separator: " ") }.joined(separator: "|")
        }
        try #require(flat.count == 3, "\(text)")
        #expect(flat[0].contains("path=/org/peerlink/test/dev0; interface=org.freedesktop.DBus.Properties; member=PropertiesChanged"))
        #expect(flat[0].contains("|string \"org.peerlink.Device1\"|array [|dict entry(|string \"Alias\"|variant string \"Seen by monitor\"|)|]|array [|]"),
                "\(flat[0])")
        #expect(flat[1].contains("path=/org/peerlink/test; interface=org.freedesktop.DBus.ObjectManager; member=InterfacesAdded"))
        #expect(flat[1].contains("|object path \"/org/peerlink/test/dev2\"|array [|dict entry(|string \"org.peerlink.Battery1\"|array [|"
                                 + "dict entry(|string \"Calibration\"|variant double 2|)|dict entry(|string \"Percentage\"|variant byte 42|)|"
                                 + "dict entry(|string \"Threshold\"|variant uint16 7|)|]|)|]"), "\(flat[1])")
        #expect(flat[2].contains("path=/org/peerlink/test; interface=org.freedesktop.DBus.ObjectManager; member=InterfacesRemoved"))
        #expect(flat[2].contains("|object path \"/org/peerlink/test/dev2\"|array [|string \"org.peerlink.Battery1\"|]"), "\(flat[2])")
    }

    @Test func secondConnectionReceivesChangesInOrder() async throws {
        let t = try await DeviceTree()
        let changes = Collector(try await t.client.signals(.propertiesChanged(sender: t.dest, pathNamespace: DeviceTree.root)))
        let objects = Collector(try await t.client.signals(MatchRule(sender: t.dest, interface: "org.freedesktop.DBus.ObjectManager",
                                                                     path: DeviceTree.root)))
        let n = 1000
        for i in 0..<n {
            try t.server.setProperty(DeviceTree.path("dev1"), DeviceTree.battery, "Threshold", .uint16(UInt16(i)))
        }
        let got = await changes.wait(for: n)
        try #require(got.count == n)
        #expect(got.map { $0.body[1].stringKeyedMap?["Threshold"]?.integer } == (0..<n).map { Int64($0) })
        #expect(got.allSatisfy { $0.path == DeviceTree.path("dev1") && $0.body[0] == .string(DeviceTree.battery) && $0.sender == t.dest })

        let dev2 = DeviceTree.path("dev2")
        try t.server.export(dev2, interfaces: [DeviceTree.deviceInterface, DeviceTree.batteryInterface], values: DeviceTree.values("dev2", index: 2))
        t.server.unexport(dev2, interfaces: [DeviceTree.battery])
        t.server.unexport(dev2)
        let o = await objects.wait(for: 3)
        try #require(o.count == 3)
        #expect(o.map { $0.member } == ["InterfacesAdded", "InterfacesRemoved", "InterfacesRemoved"])
        #expect(o.allSatisfy { $0.body.first == .objectPath(dev2) })
        let added = try #require(InterfaceProperties(decoding: o[0].body[1]))
        var expected = DeviceTree.values("dev2", index: 2)
        expected[DeviceTree.device]!["Secret"] = nil  // write-only
        #expect(added == expected)
        #expect(o[1].body[1] == .stringArray([DeviceTree.battery]))
        #expect(o[2].body[1] == .stringArray([DeviceTree.device]))
    }

    // MARK: Match rules

    @Test func pathNamespaceMatchesThePathAndBelowOnly() async throws {
        let t = try await DeviceTree()
        let dev0 = DeviceTree.path("dev0")
        let scoped = Collector(try await t.client.signals(MatchRule(interface: Self.testIface, member: "Tick", pathNamespace: dev0)))
        // A broader rule on the same connection makes the bus deliver everything: then only our
        // own matching keeps the scoped stream to its namespace.
        let all = Collector(try await t.client.signals(MatchRule(interface: Self.testIface)))
        let paths: [ObjectPath] = [DeviceTree.root, "/org/peerlink/test/dev00", DeviceTree.path("dev1"), dev0,
                                   dev0.appending("char0"), dev0.appending("char0").appending("desc1"), "/", "/org/peerlink/test/dev"]
        for (i, p) in paths.enumerated() { try t.server.emitSignal(p, Self.testIface, "Tick", [.uint32(UInt32(i))]) }
        try t.server.emitSignal(dev0, Self.testIface, "Tick", [.uint32(99)])  // sentinel
        #expect(Self.ticks(await all.wait(for: paths.count + 1)) == Array(0...UInt32(paths.count - 1)) + [99])
        #expect(Self.ticks(await scoped.wait(for: 4)) == [3, 4, 5, 99])
    }

    @Test func argumentMatchingSelectsOnStringArguments() async throws {
        let t = try await DeviceTree()
        let battery = Collector(try await t.client.signals(MatchRule(interface: "org.freedesktop.DBus.Properties",
                                                                     member: "PropertiesChanged", arguments: [0: DeviceTree.battery])))
        let secondArg = Collector(try await t.client.signals(MatchRule(interface: Self.testIface, arguments: [1: "b"])))
        let all = Collector(try await t.client.signals(MatchRule(sender: t.dest)))
        try t.server.setProperty(DeviceTree.path("dev0"), DeviceTree.device, "Alias", .string("a"))
        try t.server.setProperty(DeviceTree.path("dev0"), DeviceTree.battery, "Threshold", .uint16(1))
        try t.server.setProperty(DeviceTree.path("dev1"), DeviceTree.device, "Alias", .string("b"))
        try t.server.setProperty(DeviceTree.path("dev1"), DeviceTree.battery, "Threshold", .uint16(2))
        try t.server.emitSignal("/x", Self.testIface, "Pair", [.string("a"), .string("a")])
        try t.server.emitSignal("/x", Self.testIface, "Pair", [.string("a"), .string("b")])
        try t.server.emitSignal("/x", Self.testIface, "Pair", [.string("a")])                      // no argument 1
        try t.server.emitSignal("/x", Self.testIface, "Pair", [.string("a"), .objectPath("/b")])  // not a string
        try t.server.emitSignal("/x", Self.testIface, "Pair", [.uint32(0), .string("b")])
        #expect(await all.wait(for: 9).count == 9)
        let b = await battery.wait(for: 2)
        #expect(b.map { $0.body[1].stringKeyedMap?["Threshold"] } == [.uint16(1), .uint16(2)])
        let s = await secondArg.wait(for: 2)
        #expect(s.map(\.body) == [[.string("a"), .string("b")], [.uint32(0), .string("b")]])
    }

    @Test func wellKnownSenderMatchesOnlyItsCurrentOwner() async throws {
        let bus = try PrivateBus()
        let client = try await BusConnection.connect(.address(bus.address), label: "client")
        let other = try await BusConnection.connect(.address(bus.address), label: "other")
        let owner1 = try await BusConnection.connect(.address(bus.address), label: "owner1")
        let owner2 = try await BusConnection.connect(.address(bus.address), label: "owner2")
        let name = "org.peerlink.Sender"
        let baseRules = try await client.busMatchRuleCount(of: client.uniqueName)

        // Subscribed while nobody owns the name.
        let ticks = Collector(try await client.signals(MatchRule(sender: name, interface: Self.testIface, member: "Tick")))
        // The stream's rule and the owner-tracking rule.
        #expect(client.subscriptionCounts == (2, 2))
        #expect(try await client.busMatchRuleCount(of: client.uniqueName) == baseRules + 2)

        func tick(_ c: BusConnection, _ n: UInt32) async throws {
            try c.emitSignal("/", Self.testIface, "Tick", [.uint32(n)])
            try await Self.flush(c)
        }
        try await tick(other, 0)
        #expect(try await owner1.requestName(name))
        try await tick(owner1, 1)
        try await tick(other, 2)
        // The owner goes away and another connection takes the name.
        owner1.close()
        #expect(try await eventually { try await other.nameOwner(name) == nil })
        #expect(try await owner2.requestName(name))
        try await tick(other, 3)
        try await tick(owner2, 4)
        // Identical signals from the previous owner's replacement only.
        #expect(Self.ticks(await ticks.wait(for: 2)) == [1, 4])
        try await tick(other, 5)
        try await tick(owner2, 6)
        #expect(Self.ticks(await ticks.wait(for: 3)) == [1, 4, 6])

        ticks.stop()
        #expect(await eventually { client.subscriptionCounts == (0, 0) })
        #expect(try await client.busMatchRuleCount(of: client.uniqueName) == baseRules)
    }

    /// With `followingOwner`, one stream holds the owner changes and the owners' signals in the
    /// order the bus sent them: each owner's ticks sit between its arrival and its departure.
    @Test func followingOwnerPutsOwnerChangesAmongTheSignalsInOrder() async throws {
        let bus = try PrivateBus()
        let client = try await BusConnection.connect(.address(bus.address), label: "client")
        let owner1 = try await BusConnection.connect(.address(bus.address), label: "owner1")
        let owner2 = try await BusConnection.connect(.address(bus.address), label: "owner2")
        let name = "org.peerlink.Followed"
        let stream = Collector(try await client.signals(MatchRule(sender: name, interface: Self.testIface, member: "Tick"), followingOwner: true))
        func tick(_ c: BusConnection, _ n: UInt32) async throws {
            try c.emitSignal("/", Self.testIface, "Tick", [.uint32(n)])
        }
        #expect(try await owner1.requestName(name))
        for n: UInt32 in 1...3 { try await tick(owner1, n) }
        owner1.close()
        #expect(try await eventually { try await client.nameOwner(name) == nil })
        #expect(try await owner2.requestName(name))
        for n: UInt32 in 4...6 { try await tick(owner2, n) }
        let seen = await stream.wait(for: 10).map { m in
            m.ownerChange.map { "owner \($0.owner ?? "-")" } ?? "tick \(m.body.first?.integer ?? -1) from \(m.sender ?? "?")"
        }
        #expect(seen == ["owner -", "owner \(owner1.uniqueName)"] + (1...3).map { "tick \($0) from \(owner1.uniqueName)" }
            + ["owner -", "owner \(owner2.uniqueName)"] + (4...6).map { "tick \($0) from \(owner2.uniqueName)" })
        stream.stop()
        #expect(await eventually { client.subscriptionCounts == (0, 0) })
    }

    @Test func watchNameOwnerReportsNobodyThenOwnerThenNobody() async throws {
        let bus = try PrivateBus()
        let client = try await BusConnection.connect(.address(bus.address), label: "client")
        let owners = Collector(try await client.watchNameOwner("org.peerlink.Watched"))
        #expect(await owners.wait(for: 1) == [nil])
        let owner = try await BusConnection.connect(.address(bus.address), label: "owner")
        #expect(try await owner.requestName("org.peerlink.Watched"))
        #expect(await owners.wait(for: 2) == [nil, owner.uniqueName])
        owner.close()
        #expect(await owners.wait(for: 3) == [nil, owner.uniqueName, nil])
        // Stopping the watch removes its subscription.
        owners.stop()
        #expect(await eventually { client.subscriptionCounts == (0, 0) })
    }

    // MARK: Signals from outside

    @Test func signalsFromBusctlAndDbusSendAreReceived() async throws {
        let bus = try PrivateBus()
        let client = try await BusConnection.connect(.address(bus.address), label: "client")
        let got = Collector(try await client.signals(MatchRule(interface: "org.peerlink.External")))
        var r = try await Tools.busctl(bus, ["emit", "/org/peerlink/ext", "org.peerlink.External", "Poke", "sua{sv}", "hello", "7", "1", "K", "b", "true"])
        #expect(r.status == 0, "\(r)")
        r = try await Tools.dbusSend(bus, ["--type=signal", "/org/peerlink/ext/sub", "org.peerlink.External.Poke", "string:hi", "uint32:8"])
        #expect(r.status == 0, "\(r)")
        // Addressed to the client only.
        r = try await Tools.busctl(bus, ["emit", "/org/peerlink/ext", "org.peerlink.External", "Direct", "ay", "2", "1", "2"],
                                   options: ["--destination=\(client.uniqueName)"])
        #expect(r.status == 0, "\(r)")
        let m = await got.wait(for: 3)
        try #require(m.count == 3)
        #expect(m[0].path == "/org/peerlink/ext" && m[0].member == "Poke")
        #expect(m[0].body == [.string("hello"), .uint32(7), .propertyMap(["K": .boolean(true)])])
        #expect(m[1].path == "/org/peerlink/ext/sub" && m[1].body == [.string("hi"), .uint32(8)])
        #expect(m[2].member == "Direct" && m[2].destination == client.uniqueName && m[2].body == [.bytes([1, 2])])
        #expect(m.allSatisfy { $0.sender?.hasPrefix(":") == true && $0.sender != client.uniqueName })
    }

    // MARK: Ending subscriptions

    @Test func cancellingTheConsumingTaskUnsubscribes() async throws {
        let bus = try PrivateBus()
        let client = try await BusConnection.connect(.address(bus.address), label: "client")
        let base = try await client.busMatchRuleCount(of: client.uniqueName)
        let rule = MatchRule(interface: Self.testIface, member: "Tick")

        // Two tasks iterating streams of the same rule: one rule on the bus.
        let streams = [try await client.signals(rule), try await client.signals(rule)]
        let tasks = streams.map { s in Task { var n = 0; for await _ in s { n += 1 }; return n } }
        #expect(client.subscriptionCounts == (2, 1))
        #expect(try await client.busMatchRuleCount(of: client.uniqueName) == base + 1)

        tasks[0].cancel()
        _ = await tasks[0].value
        #expect(await eventually { client.subscriptionCounts == (1, 1) })
        #expect(try await client.busMatchRuleCount(of: client.uniqueName) == base + 1)

        tasks[1].cancel()
        _ = await tasks[1].value
        #expect(await eventually { client.subscriptionCounts == (0, 0) })
        #expect(try await client.busMatchRuleCount(of: client.uniqueName) == base)

        // A stream dropped without being iterated ends its subscription at once.
        do { _ = try await client.signals(rule) }
        #expect(client.subscriptionCounts == (0, 0))
        #expect(try await client.busMatchRuleCount(of: client.uniqueName) == base)
    }

    /// `Task.cancel()` runs the stream's termination handler with the task's status locked,
    /// while the connection's queue may be resuming that same task with a signal: the handler
    /// must not wait for the queue. 200 cancellations in the middle of a flood of signals.
    @Test(.timeLimit(.minutes(1))) func cancellingWhileSignalsArriveDoesNotDeadlock() async throws {
        let bus = try PrivateBus()
        let client = try await BusConnection.connect(.address(bus.address), label: "client")
        let emitter = try await BusConnection.connect(.address(bus.address), label: "emitter")
        let rule = MatchRule(interface: Self.testIface, member: "Flood")
        let flooding = Task {
            var i: UInt32 = 0
            while !Task.isCancelled {
                try? emitter.emitSignal("/", Self.testIface, "Flood", [.uint32(i)])
                i &+= 1
                if i % 64 == 0 { try? await Self.flush(emitter) }
            }
        }
        for _ in 0..<200 {
            let s = try await client.signals(rule)
            let t = Task { var n = 0; for await _ in s { n += 1 }; return n }
            try await Task.sleep(for: .microseconds(200))
            t.cancel()
            _ = await t.value
        }
        flooding.cancel()
        await flooding.value
        #expect(await eventually { client.subscriptionCounts == (0, 0) })
    }

    @Test func concurrentSubscribersOfOneRuleAreAllOnTheBusWhenTheyReturn() async throws {
        let bus = try PrivateBus()
        let client = try await BusConnection.connect(.address(bus.address), label: "client")
        let emitter = try await BusConnection.connect(.address(bus.address), label: "emitter")
        let base = try await client.busMatchRuleCount(of: client.uniqueName)
        let rule = MatchRule(interface: Self.testIface, member: "Tick")
        let n = 20
        // Each subscriber, once subscribed, has the emitter send a tick and waits for it:
        // a subscriber that returned before the shared AddMatch was answered could miss it.
        let received = try await withThrowingTaskGroup(of: Bool.self) { group in
            for i in 0..<n {
                group.addTask {
                    let s = try await client.signals(rule)
                    try emitter.emitSignal("/", Self.testIface, "Tick", [.uint32(UInt32(i))])
                    for await m in s where m.body.first == .uint32(UInt32(i)) { return true }
                    return false
                }
            }
            return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
        }
        #expect(received == n)
        #expect(await eventually { client.subscriptionCounts == (0, 0) })
        #expect(try await client.busMatchRuleCount(of: client.uniqueName) == base)
    }
}
