import BLE
@testable import BlueZ
import DBus
import Foundation
import Logging
import Synchronization
import Testing
import TestSupport

/// A consumer whose state depends on the order it applies events, as the real ones do
/// (GattServer forgets a registration on a removal and registers again on an addition).
/// Like them it makes a bus call between taking an event and recording what it did (they
/// call RegisterApplication, RegisterAdvertisement): that await is where events handled by
/// a task each overtook one another.
actor AdapterMirror {
    /// What was applied, in the order applied (`describe`).
    private(set) var applied: [String] = []
    /// Each adapter's power, by name: the state the events leave.
    private(set) var powered: [String: Bool] = [:]
    private let progress: AsyncStream<Int>.Continuation
    /// The number of events applied so far, after each one.
    nonisolated let counts: AsyncStream<Int>

    private let connection: BusConnection

    init(_ connection: BusConnection) {
        self.connection = connection
        (counts, progress) = AsyncStream<Int>.makeStream()
    }

    func apply(_ event: BlueZEvent) async {
        let before = powered
        // A round trip to the bus driver: answered whatever the fake is doing.
        _ = try? await connection.nameOwner("org.bluez")
        var now = before
        switch event {
        case .available, .unavailable: break
        case .adapterAdded(let a, _), .adapterChanged(let a, _): now[a.name] = a.powered
        case .adapterRemoved(let a): now[a.name] = nil
        }
        powered = now
        applied.append(Self.describe(event))
        progress.yield(applied.count)
    }

    /// Waits until `n` events were applied, failing after `seconds`.
    func waitForCount(_ n: Int, seconds: Double = 20) async throws {
        let counts = self.counts
        let reached = try await withThrowingTaskGroup(of: Bool.self) { group in
            group.addTask {
                for await c in counts where c >= n { return true }
                return false
            }
            group.addTask {
                try await Task.sleep(for: .seconds(seconds))
                return false
            }
            defer { group.cancelAll() }
            return try await group.next() ?? false
        }
        if !reached { throw TestSupportError("\(n) events not applied within \(seconds) s; applied: \(applied)") }
    }

    /// An event as text: the fields that order changes.
    static func describe(_ e: BlueZEvent) -> String {
        switch e {
        case .available: "available"
        case .unavailable: "unavailable"
        case .adapterAdded(let a, _): "added \(a.name) powered=\(a.powered)"
        case .adapterRemoved(let a): "removed \(a.name)"
        case .adapterChanged(let a, let changed): "changed \(a.name) \(changed.joined(separator: ",")) powered=\(a.powered)"
        }
    }
}

@Suite(.ownThreads, .memoryHeavy) struct EventOrderTests {
    static let a0 = "00:AA:01:00:00:00", a1 = "00:AA:01:01:00:01"

    /// A flood of adapter additions, removals and power changes from a fake bluetoothd, through
    /// the real BlueZClient: each consumer applies exactly the sequence bluetoothd sent and ends
    /// in bluetoothd's state. Handing each event to a task of its own fails this.
    @Test(.timeLimit(.minutes(1))) func floodOfAdapterEventsIsAppliedInOrder() async throws {
        let bus = try PrivateBus()
        let fake = try await FakeBlueZ(busAddress: bus.address, adapters: [.init(name: "hci0", address: Self.a0)])
        let connection = try await BusConnection.connect(.address(bus.address), label: "peerlinkd")
        defer { connection.close() }
        let client = BlueZClient(bus: connection, logger: Logger(label: "test", level: .error, handler: MemoryLogHandler())) { _ in }
        let mirrors = [AdapterMirror(connection), AdapterMirror(connection)]
        // Subscribed before run(): the first events (available, hci0) must not be lost either.
        let loops = mirrors.map { m in client.follow { await m.apply($0) } }
        let running = Task { try await client.run() }
        defer { running.cancel() }
        var expected = ["available", "added hci0 powered=true"]
        // Flooding starts once bluetoothd is known, so every signal below is followed.
        for m in mirrors { try await m.waitForCount(expected.count) }

        let hci0: ObjectPath = "/org/bluez/hci0", hci1: ObjectPath = "/org/bluez/hci1"
        var power0 = true
        for i in 0..<100 {
            let on = i % 2 == 0
            try fake.add(.init(name: "hci1", address: Self.a1, powerState: on ? "on" : "off"))
            expected.append("added hci1 powered=\(on)")
            try fake.connection.setProperty(hci1, "org.bluez.Adapter1", "Powered", .boolean(!on))
            expected.append("changed hci1 powered,power_state powered=\(!on)")
            power0.toggle()
            try fake.connection.setProperty(hci0, "org.bluez.Adapter1", "Powered", .boolean(power0))
            expected.append("changed hci0 powered,power_state powered=\(power0)")
            fake.remove("hci1")
            expected.append("removed hci1")
        }
        try fake.add(.init(name: "hci1", address: Self.a1))
        expected.append("added hci1 powered=true")

        for m in mirrors {
            try await m.waitForCount(expected.count)
            #expect(await m.applied == expected)
            #expect(await m.powered == ["hci0": power0, "hci1": true])
        }
        #expect(client.adaptersNow.map { "\($0.name) \($0.powered)" } == ["hci0 \(power0)", "hci1 true"])
        // A consumer's detach cancels its loop, which lets go of its stream; the client
        // stopping (daemon shutdown, bus lost) ends the others' loops by itself.
        loops[0].cancel()
        await loops[0].value
        #expect(client.fanOut.subscriberCount == 1)
        running.cancel()
        await loops[1].value
        #expect(client.fanOut.subscriberCount == 0)
        _ = fake
    }

    /// bluetoothd restarting again and again, each time announcing an adapter as soon as it has
    /// the name: the client applies the owner change and the signals from one input, so a
    /// consumer sees the old adapter go, bluetoothd go and come back, and only then the new
    /// adapter. With owner changes and signals in two loops the adapter came first (the
    /// signal overtook the owner change) and was reported while bluetoothd was "unavailable".
    ///
    /// Two fakes take turns with the name instead of a new connection per restart: a request
    /// right after connecting, as a just-closed owner is dropped, went unanswered for 25 s about
    /// once in a few hundred restarts (the lab restarts the real bluetoothd).
    @Test func bluetoothdRestartsAreAppliedInOrder() async throws {
        let bus = try PrivateBus()
        let fakes = [try await FakeBlueZ(busAddress: bus.address, adapters: [.init(name: "hci1", address: Self.a1)]),
                     try await FakeBlueZ(busAddress: bus.address, adapters: [], claimName: false)]
        let connection = try await BusConnection.connect(.address(bus.address), label: "peerlinkd")
        defer { connection.close() }
        let client = BlueZClient(bus: connection, logger: Logger(label: "test", level: .error, handler: MemoryLogHandler())) { _ in }
        let mirror = AdapterMirror(connection)
        let loop = client.follow { await mirror.apply($0) }
        defer { loop.cancel() }
        let running = Task { try await client.run() }
        defer { running.cancel() }
        var expected = ["available", "added hci1 powered=true"]
        try await mirror.waitForCount(expected.count)
        for i in 0..<20 {
            let (old, new) = (fakes[i % 2], fakes[(i + 1) % 2])
            try await old.releaseName()
            old.remove("hci1")  // no longer the owner: nobody follows it
            #expect(try await new.connection.requestName("org.bluez"))
            try new.add(.init(name: "hci1", address: Self.a1))
            expected += ["removed hci1", "unavailable", "available", "added hci1 powered=true"]
        }
        try await mirror.waitForCount(expected.count)
        #expect(await mirror.applied == expected)
        #expect(await mirror.powered == ["hci1": true])
        #expect(client.availableNow && client.adaptersNow.map(\.name) == ["hci1"])
    }

    /// The ordered-delivery primitive alone: every subscriber sees every event in order; a
    /// stream whose reader is cancelled (a consumer's detach) or that is dropped unsubscribes;
    /// `finish()` (the client stopped following BlueZ) ends every stream, and later ones at once.
    @Test func fanOutDeliversInOrderAndEndsOnCancelDropAndFinish() async throws {
        let fan = EventFanOut<Int>()
        let seen = Mutex<[Int]>([])
        let stream = fan.subscribe()
        let reader = Task { for await i in stream { seen.withLock { $0.append(i) } } }
        let other = fan.subscribe()
        let cancelled = Task { for await _ in other {} }
        #expect(fan.subscriberCount == 2)
        cancelled.cancel()
        await cancelled.value
        #expect(fan.subscriberCount == 1)
        do { _ = fan.subscribe() }  // dropped at once: unsubscribed with it
        #expect(fan.subscriberCount == 1)
        for i in 0..<1000 { fan.yield(i) }
        fan.finish()
        await reader.value
        #expect(seen.withLock { $0 } == Array(0..<1000))
        #expect(fan.subscriberCount == 0)
        var late = fan.subscribe().makeAsyncIterator()
        let first = await late.next()
        #expect(first == nil)
    }
}

extension FakeBlueZ {
    /// Gives up the name `org.bluez`: the daemon sees bluetoothd leave (its connection stays).
    func releaseName() async throws {
        _ = try await connection.call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                                      member: "ReleaseName", [.string("org.bluez")])
    }
}
