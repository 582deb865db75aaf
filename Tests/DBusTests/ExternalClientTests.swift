import DBus
import Foundation
import Testing
import TestSupport

/// An exported object tree called by real clients, `busctl` (sd-bus) and `dbus-send` (libdbus),
/// over a private bus: methods with arguments, Properties, ObjectManager, Introspectable.
@Suite(.ownThreads, .memoryHeavy) struct ExternalClientTests {
    static let dev0 = DeviceTree.path("dev0").rawValue

    // MARK: Methods

    @Test func busctlCallsMethodsWithSeveralArgumentTypes() async throws {
        let t = try await DeviceTree()
        let p = Self.dev0
        var r = try await Tools.busctl(t.bus, ["call", t.dest, p, DeviceTree.device, "Describe", "sub", "hello world", "42", "true"])
        #expect(r.status == 0 && r.stdout == "s \"name=hello world count=42 flag=true\"\n", "\(r)")

        r = try await Tools.busctl(t.bus, ["call", t.dest, p, DeviceTree.device, "Describe", "sub", "x'y\"z", "0", "false"], options: ["--json=short"])
        let json = try #require(try Tools.json(r) as? [String: Any], "\(r)")
        #expect(json["type"] as? String == "s")
        #expect(json["data"] as? [String] == ["name=x'y\"z count=0 flag=false"])

        r = try await Tools.busctl(t.bus, ["call", t.dest, p, DeviceTree.device, "Sum", "ai", "4", "1", "2", "-10", "2147483647"])
        #expect(r.stdout == "x 2147483640\n", "\(r)")

        r = try await Tools.busctl(t.bus, ["call", t.dest, p, DeviceTree.device, "Configure", "oa{sv}",
                                           "/x/y", "3", "Mode", "s", "fast", "Level", "u", "7", "On", "b", "true"])
        #expect(r.stdout == "ouas \"/x/y\" 3 3 \"Level\" \"Mode\" \"On\"\n", "\(r)")

        r = try await Tools.busctl(t.bus, ["call", t.dest, p, DeviceTree.device, "Reverse", "ay", "4", "1", "2", "3", "255"])
        #expect(r.stdout == "ayq 4 255 3 2 1 4\n", "\(r)")

        // The second interface of the same object, and Peer (answered by libdbus for us).
        r = try await Tools.busctl(t.bus, ["call", t.dest, DeviceTree.path("dev1").rawValue, DeviceTree.battery, "Refresh"])
        #expect(r.stdout == "y 80\n", "\(r)")
        r = try await Tools.busctl(t.bus, ["call", t.dest, p, "org.freedesktop.DBus.Peer", "Ping"])
        #expect(r.status == 0, "\(r)")
    }

    @Test func dbusSendCallsMethodsWithSeveralArgumentTypes() async throws {
        let t = try await DeviceTree()
        var r = try await Tools.dbusSend(t.bus, ["--print-reply", "--dest=\(t.dest)", Self.dev0, "\(DeviceTree.device).Describe",
                                                 "string:hi there", "uint32:5", "boolean:false"])
        #expect(r.status == 0 && r.stdout.contains("\n   string \"name=hi there count=5 flag=false\"\n"), "\(r)")

        r = try await Tools.dbusSend(t.bus, ["--print-reply", "--dest=\(t.dest)", Self.dev0, "\(DeviceTree.device).Sum",
                                             "array:int32:1,2,-10"])
        #expect(r.stdout.contains("\n   int64 -7\n"), "\(r)")

        r = try await Tools.dbusSend(t.bus, ["--print-reply", "--dest=\(t.dest)", Self.dev0, "\(DeviceTree.device).Configure",
                                             "objpath:/a/b", "dict:string:string:k1,v1,k2,v2"])
        // dbus-send cannot put variants in a dict: a{ss} for a{sv} is refused, with both signatures named.
        #expect(r.status != 0 && r.stderr == "Error org.freedesktop.DBus.Error.InvalidArgs: org.peerlink.Device1.Configure takes (oa{sv}), got (oa{ss})\n", "\(r)")

        r = try await Tools.dbusSend(t.bus, ["--print-reply", "--dest=\(t.dest)", Self.dev0, "\(DeviceTree.device).Reverse",
                                             "array:byte:1,2,3"])
        #expect(r.stdout.contains("array of bytes [\n      03 02 01\n   ]\n   uint16 3"), "\(r)")
    }

    @Test func errorsReachExternalClientsByName() async throws {
        let t = try await DeviceTree()
        // Wrong signature: InvalidArgs with our text, by name from dbus-send and as text from busctl.
        var r = try await Tools.busctl(t.bus, ["call", t.dest, Self.dev0, DeviceTree.device, "Describe", "s", "only one"])
        #expect(r.status != 0 && r.stderr.contains("org.peerlink.Device1.Describe takes (sub), got (s)"), "\(r)")
        r = try await Tools.dbusSend(t.bus, ["--print-reply", "--dest=\(t.dest)", Self.dev0, "\(DeviceTree.device).Describe", "int32:1"])
        #expect(r.status != 0 && r.stderr.hasPrefix("Error org.freedesktop.DBus.Error.InvalidArgs: "), "\(r)")
        r = try await Tools.dbusSend(t.bus, ["--print-reply", "--dest=\(t.dest)", Self.dev0, "org.freedesktop.DBus.Properties.Get",
                                             "string:\(DeviceTree.device)"])
        #expect(r.stderr.hasPrefix("Error org.freedesktop.DBus.Error.InvalidArgs: "), "\(r)")

        for (path, member, name) in [
            ("/org/peerlink/nothing", "\(DeviceTree.device).Sum", BusError.unknownObject),
            (Self.dev0, "org.peerlink.Nope.Sum", BusError.unknownInterface),
            (Self.dev0, "\(DeviceTree.device).Nope", BusError.unknownMethod),
        ] {
            r = try await Tools.dbusSend(t.bus, ["--print-reply", "--dest=\(t.dest)", path, member])
            #expect(r.status != 0 && r.stderr.hasPrefix("Error \(name): "), "\(member) on \(path): \(r)")
        }
    }

    // MARK: Properties

    @Test func busctlGetsProperties() async throws {
        let t = try await DeviceTree()
        let r = try await Tools.busctl(t.bus, ["get-property", t.dest, Self.dev0, DeviceTree.device, "Name", "RSSI", "Connected", "UUIDs"])
        #expect(r.stdout == "s \"dev0\"\nn -40\nb true\nas 2 \"180f\" \"180a\"\n", "\(r)")
        for (iface, name, value) in [(DeviceTree.battery, "Calibration", DBusValue.double(1.5)),
                                     (DeviceTree.battery, "Percentage", .byte(80)),
                                     (DeviceTree.device, "UUIDs", .stringArray(["180f", "180a"]))] {
            let j = try await Tools.busctl(t.bus, ["get-property", t.dest, Self.dev0, iface, name], options: ["--json=short"])
            #expect(Self.matches(try Tools.json(j), typed: value), "\(name): \(j)")
        }
        // A write-only property cannot be read.
        let secret = try await Tools.dbusSend(t.bus, ["--print-reply", "--dest=\(t.dest)", Self.dev0, "org.freedesktop.DBus.Properties.Get",
                                                      "string:\(DeviceTree.device)", "string:Secret"])
        #expect(secret.stderr.hasPrefix("Error \(BusError.accessDenied): "), "\(secret)")
    }

    @Test func busctlSetsPropertiesAndChangesAreSignalled() async throws {
        let t = try await DeviceTree()
        let changes = Collector(try await t.client.signals(.propertiesChanged(sender: t.dest, path: DeviceTree.path("dev0"))))

        var r = try await Tools.busctl(t.bus, ["set-property", t.dest, Self.dev0, DeviceTree.device, "Alias", "s", "Kitchen speaker"])
        #expect(r.status == 0, "\(r)")
        #expect(t.server.property(DeviceTree.path("dev0"), DeviceTree.device, "Alias") == .string("Kitchen speaker"))
        r = try await Tools.busctl(t.bus, ["get-property", t.dest, Self.dev0, DeviceTree.device, "Alias"])
        #expect(r.stdout == "s \"Kitchen speaker\"\n", "\(r)")

        // An invalidating property: the change names it without a value.
        r = try await Tools.busctl(t.bus, ["set-property", t.dest, Self.dev0, DeviceTree.battery, "Calibration", "d", "0.25"])
        #expect(r.status == 0, "\(r)")
        #expect(t.server.property(DeviceTree.path("dev0"), DeviceTree.battery, "Calibration") == .double(0.25))

        // Refused: read-only (PropertyReadOnly by name), refused by the validator, wrong type. Values unchanged.
        r = try await Tools.busctl(t.bus, ["set-property", t.dest, Self.dev0, DeviceTree.device, "RSSI", "n", "-5"])
        #expect(r.status != 0 && r.stderr.contains("RSSI is read-only"), "\(r)")
        r = try await Tools.dbusSend(t.bus, ["--print-reply", "--dest=\(t.dest)", Self.dev0, "org.freedesktop.DBus.Properties.Set",
                                             "string:\(DeviceTree.device)", "string:RSSI", "variant:int16:-5"])
        #expect(r.status != 0 && r.stderr.hasPrefix("Error \(BusError.propertyReadOnly): "), "\(r)")
        await #expect(throws: BusError(name: BusError.propertyReadOnly, message: "org.peerlink.Device1.RSSI is read-only")) {
            try await t.client.setRemoteProperty(destination: t.dest, path: DeviceTree.path("dev0"), interface: DeviceTree.device,
                                                 name: "RSSI", value: .int16(-5))
        }
        r = try await Tools.busctl(t.bus, ["set-property", t.dest, Self.dev0, DeviceTree.battery, "Threshold", "q", "150"])
        #expect(r.status != 0 && r.stderr.contains("Threshold above 100"), "\(r)")
        r = try await Tools.dbusSend(t.bus, ["--print-reply", "--dest=\(t.dest)", Self.dev0, "org.freedesktop.DBus.Properties.Set",
                                             "string:\(DeviceTree.device)", "string:Alias", "variant:int32:1"])
        #expect(r.stderr.hasPrefix("Error \(BusError.invalidArgs): "), "\(r)")
        #expect(t.server.property(DeviceTree.path("dev0"), DeviceTree.device, "RSSI") == .int16(-40))
        #expect(t.server.property(DeviceTree.path("dev0"), DeviceTree.battery, "Threshold") == .uint16(20))
        #expect(t.server.property(DeviceTree.path("dev0"), DeviceTree.device, "Alias") == .string("Kitchen speaker"))

        // A write-only property can be set.
        r = try await Tools.busctl(t.bus, ["set-property", t.dest, Self.dev0, DeviceTree.device, "Secret", "s", "s3cret"])
        #expect(r.status == 0, "\(r)")
        #expect(t.server.property(DeviceTree.path("dev0"), DeviceTree.device, "Secret") == .string("s3cret"))

        // Exactly the three successful sets were signalled, in order, each from the server.
        let got = await changes.wait(for: 3)
        try await Task.sleep(for: .milliseconds(50))
        #expect(changes.all.count == 3)
        #expect(got.allSatisfy { $0.sender == t.dest && $0.path == DeviceTree.path("dev0") })
        #expect(got.map(\.body) == [
            [.string(DeviceTree.device), .propertyMap(["Alias": .string("Kitchen speaker")]), .stringArray([])],
            [.string(DeviceTree.battery), .propertyMap([:]), .stringArray(["Calibration"])],
            [.string(DeviceTree.device), .propertyMap(["Secret": .string("s3cret")]), .stringArray([])],
        ])
    }

    @Test func propertiesGetAllAnswersReadableProperties() async throws {
        let t = try await DeviceTree()
        for iface in [DeviceTree.device, DeviceTree.battery] {
            let r = try await Tools.busctl(t.bus, ["call", t.dest, Self.dev0, "org.freedesktop.DBus.Properties", "GetAll", "s", iface], options: ["--json=short"])
            let json = try #require(try Tools.json(r) as? [String: Any], "\(r)")
            #expect(json["type"] as? String == "a{sv}")
            let map = try #require((json["data"] as? [Any])?.first as? [String: Any], "\(r)")
            let expected = DeviceTree.values("dev0", index: 0)[iface]!.filter { $0.key != "Secret" }
            #expect(Set(map.keys) == Set(expected.keys), "\(iface): \(r)")
            for (name, value) in expected {
                #expect(Self.matches(map[name] as Any, typed: value), "\(iface).\(name): \(map[name] ?? "missing")")
            }
        }
        let r = try await Tools.dbusSend(t.bus, ["--print-reply", "--dest=\(t.dest)", Self.dev0, "org.freedesktop.DBus.Properties.GetAll",
                                                 "string:\(DeviceTree.battery)"])
        for needle in ["string \"Percentage\"\n         variant             byte 80", "string \"Threshold\"\n         variant             uint16 20",
                       "string \"Calibration\"\n         variant             double 1.5"] {
            #expect(r.stdout.contains(needle), "\(needle): \(r)")
        }
    }

    // MARK: ObjectManager and introspection

    @Test func getManagedObjectsListsEveryObjectInterfaceAndValue() async throws {
        let t = try await DeviceTree()
        // busctl's JSON: compared value by value with what was exported.
        let r = try await Tools.busctl(t.bus, ["call", t.dest, DeviceTree.root.rawValue, "org.freedesktop.DBus.ObjectManager", "GetManagedObjects"], options: ["--json=short"])
        let json = try #require(try Tools.json(r) as? [String: Any], "\(r)")
        #expect(json["type"] as? String == "a{oa{sa{sv}}}")
        let objects = try #require((json["data"] as? [Any])?.first as? [String: [String: [String: Any]]], "\(r)")
        #expect(Set(objects.keys) == Set(DeviceTree.names.map { DeviceTree.path($0).rawValue }))
        for (i, name) in DeviceTree.names.enumerated() {
            let object = try #require(objects[DeviceTree.path(name).rawValue])
            let expected = DeviceTree.values(name, index: i)
            #expect(Set(object.keys) == [DeviceTree.device, DeviceTree.battery])
            for (iface, props) in expected {
                let readable = props.filter { $0.key != "Secret" }  // write-only: never shown
                #expect(Set(object[iface]?.keys ?? [:].keys) == Set(readable.keys), "\(name) \(iface)")
                for (prop, value) in readable {
                    #expect(Self.matches(object[iface]?[prop] as Any, typed: value), "\(name) \(iface).\(prop)")
                }
            }
        }

        // dbus-send's printout names every object, interface and property with its value.
        let s = try await Tools.dbusSend(t.bus, ["--print-reply", "--dest=\(t.dest)", DeviceTree.root.rawValue,
                                                 "org.freedesktop.DBus.ObjectManager.GetManagedObjects"])
        #expect(s.status == 0, "\(s)")
        let text = s.stdout.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.joined(separator: "|")
        for name in DeviceTree.names { #expect(text.contains("object path \"\(DeviceTree.path(name))\"|array [|dict entry(|string \"\(DeviceTree.device)\"")) }
        #expect(text.components(separatedBy: "string \"\(DeviceTree.battery)\"").count == 3)
        for needle in [
            "string \"Name\"|variant string \"dev0\"", "string \"Name\"|variant string \"dev1\"",
            "string \"Alias\"|variant string \"Device 0\"", "string \"RSSI\"|variant int16 -40", "string \"RSSI\"|variant int16 -41",
            "string \"Connected\"|variant boolean true", "string \"Connected\"|variant boolean false",
            "string \"UUIDs\"|variant array [|string \"180f\"|string \"180a\"|]",
            "string \"Percentage\"|variant byte 80", "string \"Percentage\"|variant byte 81",
            "string \"Threshold\"|variant uint16 20", "string \"Calibration\"|variant double 1.5",
        ] {
            #expect(text.replacingOccurrences(of: "variant                         ", with: "variant ").contains(needle), "\(needle)")
        }
        #expect(!text.contains("Secret") && !text.contains("hidden"))

        // And our own client reads the same.
        let mine = try await t.client.getManagedObjects(destination: t.dest, path: DeviceTree.root)
        #expect(mine[DeviceTree.path("dev1")]?[DeviceTree.battery] == DeviceTree.values("dev1", index: 1)[DeviceTree.battery])
    }

    @Test func busctlIntrospectShowsMembersWithSignatures() async throws {
        let t = try await DeviceTree()
        let r = try await Tools.busctl(t.bus, ["introspect", t.dest, Self.dev0])
        #expect(r.status == 0, "\(r)")
        // NAME TYPE SIGNATURE RESULT/VALUE FLAGS, grouped under each interface.
        var rows: [String: [String]] = [:]
        var iface = ""
        for line in r.stdout.split(separator: "\n").dropFirst() {
            let cols = line.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
            if cols.count >= 2, cols[1] == "interface" { iface = cols[0]; rows[iface] = ["interface"]; continue }
            rows[iface + cols[0]] = Array(cols.dropFirst())
        }
        let d = DeviceTree.device, b = DeviceTree.battery
        let expected: [String: [String]] = [
            d: ["interface"], b: ["interface"],
            "org.freedesktop.DBus.Properties": ["interface"], "org.freedesktop.DBus.Introspectable": ["interface"],
            d + ".Describe": ["method", "sub", "s", "-"],
            d + ".Sum": ["method", "ai", "x", "-"],
            d + ".Configure": ["method", "oa{sv}", "ouas", "-"],
            d + ".Reverse": ["method", "ay", "ayq", "-"],
            d + ".Name": ["property", "s", "\"dev0\"", "emits-change"],
            d + ".Alias": ["property", "s", "\"Device", "0\"", "emits-change", "writable"],
            d + ".RSSI": ["property", "n", "-40", "emits-change"],
            d + ".Connected": ["property", "b", "true", "emits-change"],
            d + ".UUIDs": ["property", "as", "2", "\"180f\"", "\"180a\"", "emits-change"],
            d + ".Secret": ["property", "s", "-", "emits-change", "writable"],
            d + ".Notified": ["signal", "ay", "-", "-"],
            b + ".Refresh": ["method", "-", "y", "-"],
            b + ".Percentage": ["property", "y", "80", "emits-change"],
            b + ".Threshold": ["property", "q", "20", "emits-change", "writable"],
            b + ".Calibration": ["property", "d", "1.5", "emits-invalidation", "writable"],
            "org.freedesktop.DBus.Properties.PropertiesChanged": ["signal", "sa{sv}as", "-", "-"],
            "org.freedesktop.DBus.Properties.Set": ["method", "ssv", "-", "-"],
        ]
        for (key, cols) in expected { #expect(rows[key] == cols, "\(key)\n\(r.stdout)") }
        // Nothing else in our interfaces.
        #expect(rows.keys.filter { $0.hasPrefix("org.peerlink.") }.count == 17, "\(r.stdout)")

        // The manager root has the ObjectManager interface and its signals.
        let root = try await Tools.busctl(t.bus, ["introspect", t.dest, DeviceTree.root.rawValue])
        #expect(root.stdout.contains("org.freedesktop.DBus.ObjectManager"), "\(root)")
        #expect(root.stdout.range(of: #"\.InterfacesAdded +signal +oa\{sa\{sv\}\}"#, options: .regularExpression) != nil, "\(root)")
        #expect(root.stdout.range(of: #"\.InterfacesRemoved +signal +oas"#, options: .regularExpression) != nil, "\(root)")
        #expect(root.stdout.range(of: #"\.GetManagedObjects +method +- +a\{oa\{sa\{sv\}\}\}"#, options: .regularExpression) != nil, "\(root)")
    }

    @Test func busctlTreeShowsTheTree() async throws {
        let t = try await DeviceTree()
        var r = try await Tools.busctl(t.bus, ["tree", t.dest], options: ["--list"])
        #expect(r.stdout == "/\n/org\n/org/peerlink\n/org/peerlink/test\n/org/peerlink/test/dev0\n/org/peerlink/test/dev1\n", "\(r)")
        // Adding and removing objects changes it.
        try t.server.export(DeviceTree.root.appending("dev0").appending("char7"),
                            interfaces: [InterfaceSpec("org.peerlink.Char1")])
        t.server.unexport(DeviceTree.path("dev1"))
        r = try await Tools.busctl(t.bus, ["tree", t.dest])
        #expect(r.stdout == """
        └─/org
          └─/org/peerlink
            └─/org/peerlink/test
              └─/org/peerlink/test/dev0
                └─/org/peerlink/test/dev0/char7

        """, "\(r)")
    }

    // MARK: Helpers

    /// Whether busctl's JSON `{"type": …, "data": …}` is `value`.
    static func matches(_ json: Any, typed value: DBusValue) -> Bool {
        guard let j = json as? [String: Any], j["type"] as? String == value.signature, let data = j["data"] else { return false }
        return matches(data, value)
    }

    /// Whether busctl's JSON data is `value` (the shapes the tree uses).
    static func matches(_ data: Any, _ value: DBusValue) -> Bool {
        switch value {
        case .string(let s): return data as? String == s
        case .boolean(let b): return data as? Bool == b
        case .double(let d): return (data as? NSNumber)?.doubleValue == d
        case .byte, .int16, .uint16, .int32, .uint32, .int64, .uint64: return (data as? NSNumber)?.int64Value == value.integer
        case .array(_, let items):
            guard let a = data as? [Any], a.count == items.count else { return false }
            return zip(a, items).allSatisfy { matches($0, $1) }
        default: return false
        }
    }
}
