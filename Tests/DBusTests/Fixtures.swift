import DBus
import Foundation
import Synchronization
import Testing
import TestSupport

/// A private bus with a `server` exporting a small object tree under an ObjectManager root,
/// and a `client` connection. The tree, with two interfaces per object:
///
///     /org/peerlink/test                 ObjectManager
///     /org/peerlink/test/dev0            org.peerlink.Device1, org.peerlink.Battery1
///     /org/peerlink/test/dev1            org.peerlink.Device1, org.peerlink.Battery1
struct DeviceTree {
    static let root: ObjectPath = "/org/peerlink/test"
    static let device = "org.peerlink.Device1"
    static let battery = "org.peerlink.Battery1"
    static let names = ["dev0", "dev1"]

    let bus: PrivateBus
    let server: BusConnection
    let client: BusConnection
    /// The server's unique name: the destination for external tools.
    var dest: String { server.uniqueName }

    static func path(_ name: String) -> ObjectPath { root.appending(name) }

    init() async throws {
        bus = try PrivateBus()
        server = try await BusConnection.connect(.address(bus.address), label: "tree-server")
        client = try await BusConnection.connect(.address(bus.address), label: "tree-client")
        server.addObjectManager(at: Self.root)
        for (i, name) in Self.names.enumerated() {
            try server.export(Self.path(name), interfaces: [Self.deviceInterface, Self.batteryInterface],
                              values: Self.values(name, index: i))
        }
    }

    /// Initial property values of device `name`.
    static func values(_ name: String, index: Int) -> [String: [String: DBusValue]] {
        [
            device: [
                "Name": .string(name), "Alias": .string("Device \(index)"), "RSSI": .int16(Int16(-40 - index)),
                "Connected": .boolean(index == 0), "UUIDs": .stringArray(["180f", "180a"]), "Secret": .string("hidden"),
            ],
            battery: ["Percentage": .byte(UInt8(80 + index)), "Threshold": .uint16(20), "Calibration": .double(1.5)],
        ]
    }

    /// Methods with several argument types; read-only, read-write and write-only properties; a signal.
    static let deviceInterface = InterfaceSpec(device, methods: [
        MethodSpec("Describe", inputs: [("name", "s"), ("count", "u"), ("flag", "b")], outputs: [("text", "s")]) { call, reply in
            let a = call.arguments
            reply.succeed([.string("name=\(a[0].string!) count=\(a[1].integer!) flag=\(a[2].bool!)")])
        },
        MethodSpec("Sum", inputs: [("values", "ai")], outputs: [("total", "x")]) { call, reply in
            let total = call.arguments[0].arrayElements!.reduce(Int64(0)) { $0 + $1.integer! }
            reply.succeed([.int64(total)])
        },
        MethodSpec.async("Configure", inputs: [("target", "o"), ("options", "a{sv}")],
                         outputs: [("target", "o"), ("count", "u"), ("keys", "as")]) { call in
            let options = call.arguments[1].stringKeyedMap!
            return [call.arguments[0], .uint32(UInt32(options.count)), .stringArray(options.keys.sorted())]
        },
        MethodSpec("Reverse", inputs: [("data", "ay")], outputs: [("data", "ay"), ("length", "q")]) { call, reply in
            let bytes = call.arguments[0].byteArray!
            reply.succeed([.bytes(bytes.reversed()), .uint16(UInt16(bytes.count))])
        },
    ], properties: [
        PropertySpec("Name", "s"),
        PropertySpec("Alias", "s", access: .readwrite),
        PropertySpec("RSSI", "n"),
        PropertySpec("Connected", "b"),
        PropertySpec("UUIDs", "as"),
        PropertySpec("Secret", "s", access: .write),
    ], signals: [
        SignalSpec("Notified", arguments: [("value", "ay")]),
    ])

    static let batteryInterface = InterfaceSpec(battery, methods: [
        MethodSpec("Refresh", outputs: [("level", "y")]) { call, reply in
            reply.succeed([.byte(80)])
        },
    ], properties: [
        PropertySpec("Percentage", "y"),
        PropertySpec("Threshold", "q", access: .readwrite) { value, _ in
            if value.integer! > 100 { throw BusError(name: BusError.invalidArgs, message: "Threshold above 100") }
        },
        PropertySpec("Calibration", "d", access: .readwrite, changeSignal: .invalidates),
    ])
}

/// Collects what a stream yields, from a task of its own, so a test can wait for a count with
/// a deadline. `stop()` (or releasing the collector) cancels the task, which ends the stream.
final class Collector<Element: Sendable>: Sendable {
    private final class Items: Sendable {
        let list = Mutex<[Element]>([])
    }

    private let items = Items()
    private let task: Task<Void, Never>

    init<S: AsyncSequence & Sendable>(_ sequence: S) where S.Element == Element {
        let items = items
        task = Task {
            do {
                for try await e in sequence { items.list.withLock { $0.append(e) } }
            } catch {}
        }
    }

    /// Everything collected so far.
    var all: [Element] { items.list.withLock { $0 } }

    /// Waits until at least `count` elements have arrived (at most `timeout`); returns them all.
    func wait(for count: Int, timeout: Duration = .seconds(10)) async -> [Element] {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            let now = all
            if now.count >= count { return now }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return all
    }

    func stop() { task.cancel() }

    deinit { stop() }
}

extension BusConnection {
    /// The bus daemon's own count of match rules held by connection `name`, from
    /// `org.freedesktop.DBus.Debug.Stats.GetConnectionStats`. When asked on the connection
    /// whose rules are counted, every `RemoveMatch` it sent before has been applied: the bus
    /// handles one connection's messages in order.
    func busMatchRuleCount(of name: String) async throws -> Int {
        let r = try await call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                               interface: "org.freedesktop.DBus.Debug.Stats", member: "GetConnectionStats", [.string(name)])
        guard let n = r.first?.stringKeyedMap?["MatchRules"]?.integer else {
            throw TestSupportError("GetConnectionStats has no MatchRules: \(r)")
        }
        return Int(n)
    }
}

/// The tools the tests drive, with flags common to every run.
enum Tools {
    static let busctl = "/usr/bin/busctl"
    static let dbusSend = "/usr/bin/dbus-send"
    static let dbusMonitor = "/usr/bin/dbus-monitor"

    /// `busctl --address=<bus> <options> -- <args>` (after `--`, arguments such as `-10` are not options).
    static func busctl(_ bus: PrivateBus, _ args: [String], options: [String] = []) async throws -> ToolResult {
        try await runTool(busctl, ["--address=\(bus.address)", "--no-pager"] + options + ["--"] + args,
                          environment: ["SYSTEMD_COLORS": "0", "SYSTEMD_PAGER": ""], timeout: 20)
    }

    /// `dbus-send --bus=<bus> <args>`.
    static func dbusSend(_ bus: PrivateBus, _ args: [String]) async throws -> ToolResult {
        try await runTool(dbusSend, ["--bus=\(bus.address)"] + args, timeout: 20)
    }

    /// Parses busctl's `--json=short` output.
    static func json(_ r: ToolResult) throws -> Any {
        do {
            return try JSONSerialization.jsonObject(with: Data(r.stdout.utf8))
        } catch {
            throw TestSupportError("busctl printed no JSON (\(error)): \(r)")
        }
    }

    /// Starts `dbus-monitor` on `bus` with `matches`, and returns once it is seen to be
    /// monitoring: `emitter` sends a marker signal (which the matches must admit) until it shows.
    static func monitor(_ bus: PrivateBus, _ matches: [String], emitter: BusConnection) async throws -> BackgroundTool {
        let tool = try BackgroundTool(dbusMonitor, ["--address", bus.address] + matches)
        for _ in 0..<200 {
            try emitter.emitSignal("/org/peerlink/marker", "org.peerlink.Marker", "Ready")
            if await tool.waitForOutput(containing: ["member=Ready"], timeout: 0.05) { return tool }
        }
        throw TestSupportError("dbus-monitor did not start: \(tool.text)")
    }
}
