import DBus
import Foundation
import Glibc
import Synchronization
import SystemKit
import Testing
import TestSupport

/// Two connections on a private bus: `server` exports an echo object, `client` calls it.
struct EchoPair {
    let bus: PrivateBus
    let server: BusConnection
    let client: BusConnection

    static let path: ObjectPath = "/org/peerlink/test/echo"
    static let iface = "org.peerlink.Test"

    /// Calls of `Never` the server holds unanswered (the pair never answers them: a test that
    /// needs a call to stay pending must not depend on how soon it acts after sending it).
    let held = HeldReplies()

    init() async throws {
        bus = try PrivateBus()
        server = try await BusConnection.connect(.address(bus.address), label: "server")
        client = try await BusConnection.connect(.address(bus.address), label: "client")
        // Echo: returns its variant argument unchanged; EchoAll: every argument, any signature.
        let echo = MethodSpec("Echo", inputs: [("value", "v")], outputs: [("value", "v")]) { call, reply in
            reply.succeed(call.arguments)
        }
        let fail = MethodSpec.async("Fail", inputs: [("name", "s")]) { call in
            throw BusError(name: call.arguments[0].string!, message: "asked to fail")
        }
        let never = MethodSpec("Never") { [held] _, reply in held.keep(reply) }
        try server.export(Self.path, interfaces: [InterfaceSpec(Self.iface, methods: [echo, fail, never])])
    }

    func echo(_ v: DBusValue) async throws -> DBusValue {
        let r = try await client.call(destination: server.uniqueName, path: Self.path, interface: Self.iface,
                                      member: "Echo", [.variant(v)])
        guard r.count == 1, case .variant(let out) = r[0] else { throw TestSupportError("bad echo reply \(r)") }
        return out
    }
}

/// The replies of calls the server keeps unanswered, and how many arrived.
final class HeldReplies: Sendable {
    private let replies = Mutex<[MethodReply]>([])

    func keep(_ reply: MethodReply) { replies.withLock { $0.append(reply) } }

    /// Waits until the server holds `n` calls (throws after 10 s).
    func wait(for n: Int) async throws {
        let deadline = ContinuousClock.now + .seconds(10)
        while replies.withLock({ $0.count }) < n {
            guard ContinuousClock.now < deadline else { throw TestSupportError("the server did not get the call") }
            try await Task.sleep(for: .milliseconds(5))
        }
    }
}

/// Every D-Bus type, alone and nested, through a real dbus-daemon and back.
@Suite(.ownThreads, .memoryHeavy) struct RoundTripTests {
    static let samples: [DBusValue] = [
        .byte(0), .byte(255), .boolean(true), .boolean(false),
        .int16(-32768), .uint16(65535), .int32(Int32.min), .uint32(UInt32.max),
        .int64(Int64.min), .uint64(UInt64.max), .double(-1.5e300), .double(0),
        .string(""), .string("héllo wörld ✓ 🎉"), .objectPath("/"), .objectPath("/org/bluez/hci0/dev_00_AA"),
        .signature("a{sv}(iiay)"), .signature(""),
        .bytes([]), .bytes(Array(0...255)),
        .array(element: "s", []), .array(element: "s", [.string("a"), .string("b")]),
        .array(element: "ai", [.array(element: "i", [.int32(1)]), .array(element: "i", [])]),
        .dictionary(key: "s", value: "v", []),
        .propertyMap(["Name": .string("x"), "RSSI": .int16(-40), "UUIDs": .stringArray(["180f"]), "Data": .bytes([1, 2])]),
        .dictionary(key: "q", value: "ay", [.init(.uint16(0x004C), .bytes([2, 21]))]),
        .dictionary(key: "o", value: "a{sa{sv}}", [.init(.objectPath("/a"), .dictionary(key: "s", value: "a{sv}", [
            .init(.string("org.x"), .propertyMap(["P": .uint32(1)])),
        ]))]),
        .structure([.int32(1), .string("two"), .structure([.double(3), .bytes([4])])]),
        .variant(.variant(.variant(.string("deep")))),
        .array(element: "v", [.variant(.int32(1)), .variant(.string("s")), .variant(.array(element: "v", []))]),
        .array(element: "(sv)", [.structure([.string("k"), .variant(.variant(.boolean(true)))])]),
    ]

    @Test func everyTypeRoundTrips() async throws {
        let pair = try await EchoPair()
        for v in Self.samples {
            let back = try await pair.echo(v)
            #expect(back == v, "round trip of \(v.signature)")
        }
    }

    @Test func manyArgumentsRoundTrip() async throws {
        let pair = try await EchoPair()
        let many = MethodSpec("Many", inputs: Self.samples.indices.map { ("a\($0)", Self.samples[$0].signature) },
                              outputs: Self.samples.indices.map { ("a\($0)", Self.samples[$0].signature) }) { call, reply in
            reply.succeed(call.arguments)
        }
        try pair.server.export("/many", interfaces: [InterfaceSpec("org.peerlink.Many", methods: [many])])
        let r = try await pair.client.call(destination: pair.server.uniqueName, path: "/many", interface: "org.peerlink.Many",
                                           member: "Many", Self.samples)
        #expect(r == Self.samples)
    }

    @Test func fileDescriptorsPassBothWays() async throws {
        let pair = try await EchoPair()
        #expect(pair.client.canPassFileDescriptors)
        var fds: [Int32] = [-1, -1]
        try #require(pipe(&fds) == 0)
        defer { closeQuietly(fds[1]) }
        let sent = UnixFD(taking: fds[0])
        // In a variant, in a struct, in an array: each comes back as a new descriptor for the same pipe.
        let back = try await pair.echo(.structure([.unixFD(sent), .array(element: "h", [.unixFD(sent)])]))
        guard case .structure(let m) = back, case .unixFD(let got) = m[0],
              case .array(_, let arr) = m[1], case .unixFD(let got2) = arr[0] else {
            Issue.record("unexpected shape \(back)")
            return
        }
        #expect(got.fd != sent.fd && got2.fd != got.fd)
        try writeAll(fds[1], Array("ping".utf8))
        var buf = [UInt8](repeating: 0, count: 4)
        let n = read(got.fd, &buf, 4)
        #expect(n == 4 && buf == Array("ping".utf8))
    }

    @Test func errorRepliesCarryTheirName() async throws {
        let pair = try await EchoPair()
        await #expect(throws: BusError(name: "org.bluez.Error.InProgress", message: "asked to fail")) {
            _ = try await pair.client.call(destination: pair.server.uniqueName, path: EchoPair.path, interface: EchoPair.iface,
                                           member: "Fail", [.string("org.bluez.Error.InProgress")])
        }
    }

    @Test func wrongSignatureIsInvalidArgs() async throws {
        let pair = try await EchoPair()
        do {
            _ = try await pair.client.call(destination: pair.server.uniqueName, path: EchoPair.path, interface: EchoPair.iface,
                                           member: "Echo", [.string("not a variant")])
            Issue.record("expected an error")
        } catch let e as BusError {
            #expect(e.name == BusError.invalidArgs)
            #expect(e.message.contains("takes (v), got (s)"))
        }
    }

    @Test func unknownObjectInterfaceAndMethod() async throws {
        let pair = try await EchoPair()
        let dest = pair.server.uniqueName
        for (path, iface, member, expected) in [
            ("/nope", EchoPair.iface, "Echo", BusError.unknownObject),
            (EchoPair.path.rawValue, "org.peerlink.Nope", "Echo", BusError.unknownInterface),
            (EchoPair.path.rawValue, EchoPair.iface, "Nope", BusError.unknownMethod),
        ] {
            do {
                _ = try await pair.client.call(destination: dest, path: try ObjectPath(validating: path), interface: iface, member: member)
                Issue.record("expected \(expected)")
            } catch let e as BusError {
                #expect(e.name == expected)
            }
        }
    }

    @Test func missingDestinationFailsWithServiceUnknown() async throws {
        let pair = try await EchoPair()
        do {
            // A hang would end in NoReply after the timeout; the bus answers ServiceUnknown instead.
            _ = try await pair.client.call(destination: "org.peerlink.NobodyHere", path: "/", interface: "org.x", member: "Y",
                                           timeout: .seconds(60))
            Issue.record("expected ServiceUnknown")
        } catch let e as BusError {
            #expect(e.name == BusError.serviceUnknown, "\(e)")
        }
    }

    @Test func noReplyTimesOut() async throws {
        let pair = try await EchoPair()
        do {
            _ = try await pair.client.call(destination: pair.server.uniqueName, path: EchoPair.path, interface: EchoPair.iface,
                                           member: "Never", timeout: .milliseconds(200))
            Issue.record("expected NoReply")
        } catch let e as BusError {
            #expect(e.name == BusError.noReply)
            #expect(e.message.contains("Never"))
        }
        #expect(pair.client.pendingCallCount == 0)
    }

    @Test func cancellationEndsACall() async throws {
        let pair = try await EchoPair()
        let t = Task {
            try await pair.client.call(destination: pair.server.uniqueName, path: EchoPair.path, interface: EchoPair.iface,
                                       member: "Never", timeout: .seconds(20))
        }
        try await pair.held.wait(for: 1)
        t.cancel()
        await #expect(throws: CancellationError.self) { _ = try await t.value }
        #expect(pair.client.pendingCallCount == 0)
    }

    @Test func badValuesAreRefusedBeforeSending() async throws {
        let pair = try await EchoPair()
        #expect(throws: BusError.self) { _ = try ObjectPath(validating: "no/slash") }
        #expect(throws: BusError.self) { _ = try ObjectPath(validating: "/trailing/") }
        #expect(throws: BusError.self) { _ = try ObjectPath(validating: "/double//slash") }
        for bad: DBusValue in [
            .array(element: "s", [.int32(1)]),
            .string("nul\u{0}inside"),
            .signature("a{"),
            .structure([]),
            .dictionary(key: "v", value: "s", []),
        ] {
            await #expect(throws: BusError.self, "\(bad)") { _ = try await pair.echo(bad) }
        }
        await #expect(throws: BusError.self) {
            _ = try await pair.client.call(destination: "not a name!", path: "/", interface: "org.x", member: "Y")
        }
        await #expect(throws: BusError.self) {
            _ = try await pair.client.call(destination: pair.server.uniqueName, path: "/", interface: "bad..iface", member: "Y")
        }
        // And the connection still works afterwards.
        #expect(try await pair.echo(.int32(7)) == .int32(7))
    }

    @Test func busGoingAwayFailsPendingCallsAndFinishesStreams() async throws {
        let pair = try await EchoPair()
        let stream = try await pair.client.signals(MatchRule(interface: "org.peerlink.Nothing"))
        let t = Task {
            try await pair.client.call(destination: pair.server.uniqueName, path: EchoPair.path, interface: EchoPair.iface,
                                       member: "Never", timeout: .seconds(20))
        }
        try await pair.held.wait(for: 1)
        pair.bus.stop()
        do {
            _ = try await t.value
            Issue.record("expected Disconnected")
        } catch let e as BusError {
            #expect(e.name == BusError.disconnected)
        }
        await pair.client.waitUntilDisconnected()
        #expect(!pair.client.isConnected)
        for await _ in stream {}  // finishes
        await #expect(throws: BusError.self) { _ = try await pair.echo(.int32(1)) }
    }
}

/// Messages to and from their wire bytes without a bus (`BusMessage.demarshal`/`marshal`,
/// what the dbus-message fuzz target drives).
@Suite(.ownThreads, .memoryHeavy) struct WireBytesTests {
    static let signal = BusMessage.signal(path: "/org/bluez/hci0", interface: "org.freedesktop.DBus.Properties",
                                          member: "PropertiesChanged",
                                          body: [.string("org.bluez.Adapter1"),
                                                 .dictionary(key: "s", value: "v", [.init(.string("Powered"), .variant(.boolean(true)))]),
                                                 .array(element: "s", [])])

    @Test func aMessageSurvivesItsWireBytes() throws {
        let bytes = try Self.signal.marshal(serial: 3)
        #expect(BusMessage.wireLength(bytes) == bytes.count)
        guard case .success(let back) = BusMessage.demarshal(bytes) else { Issue.record("no message"); return }
        #expect(back.kind == .signal && back.serial == 3 && back.member == "PropertiesChanged" && back.body == Self.signal.body)
        guard case .failure = BusMessage.demarshal(Array(bytes.dropLast())) else { Issue.record("a truncated message was read"); return }
    }

    /// Found by the dbus-message fuzz target (Tests/Fuzz/regressions/dbus-message): libdbus
    /// accepts a message of an unknown type (7 here), and the decoder read it as a signal with
    /// no path, interface or member. Now it is ignored, as the D-Bus specification says.
    @Test func aMessageOfUnknownTypeIsIgnored() throws {
        var bytes = try Self.signal.marshal(serial: 3)
        bytes[1] = 7
        guard case .failure(let error) = BusMessage.demarshal(bytes) else {
            Issue.record("a message of type 7 was decoded")
            return
        }
        #expect(error.message.contains("type 7"))
    }
}
