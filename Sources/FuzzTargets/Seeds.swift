import BLE
import Control
import DBus
import Session

/// The seed inputs of the binary targets, built from typed values so they stay valid as the
/// formats change: `peerlink-fuzz --write-seeds DIR` writes them as files (committed in
/// `Tests/Fuzz/corpus/<target>/gen-*`), and `FuzzTests` checks each still keeps its target's
/// properties. Text targets (JSON, configuration, definitions) have hand-written files only.
public enum FuzzSeeds {
    /// Seeds by target name: (file name, bytes).
    public static func all() -> [String: [(String, [UInt8])]] {
        [
            "frames": frames(),
            "connection-machine": machine(),
            "stream-table": streamTable(),
            "resource-table": resourceTable(),
            "discovery-record": discoveryRecords(),
            "dbus-message": dbusMessages(),
            "advertisement": advertisements(),
            "line-framer": lineFramer(),
        ]
    }

    // MARK: Session

    static let peer = PeerID(bytes: [UInt8](repeating: 0xA5, count: 32))!

    /// One frame of every type, as the session tests use them.
    static let everyFrame: [Frame] = [
        .hello(Hello(versions: [1, 2], peerID: peer, displayName: "Kitchen Pi ☕", encryption: .optional, role: .dialer)),
        .invite(Invite(invitationID: 7, context: Array("join me".utf8), timeoutMilliseconds: 30_000)),
        .inviteReply(InviteReply(invitationID: 7, declineReason: nil)),
        .inviteReply(InviteReply(invitationID: 7, declineReason: .full)),
        .ping(0x0102_0304_0506_0708),
        .pong(0xFFFF_FFFF_FFFF_FFFF),
        .close(.protocolError, text: "bad frame"),
        .credit(streamID: 3, streamBytes: 65_536, connectionBytes: 1_048_576),
        .message(MessageFragment(messageID: 1, data: Array("hello".utf8), isFinal: false)),
        .message(MessageFragment(messageID: 1, data: Array(" world".utf8), isFinal: true)),
        .unreliable([1, 2, 3]),
        .resourceOffer(ResourceOffer(resourceID: 5, name: "photo.jpg", size: 1 << 40, sha256: [UInt8](0..<32), mediaType: "image/jpeg")),
        .resourceAccept(resourceID: 5, offset: 4096),
        .resourceDecline(resourceID: 5, reason: .declined),
        .resourceData(resourceID: 5, data: [9, 8, 7]),
        .resourceDone(resourceID: 5),
        .resourceCancel(resourceID: 5, reason: .cancelled),
        .streamOpen(streamID: 9, name: "audio"),
        .streamData(streamID: 9, data: [0xFF]),
        .streamClose(streamID: 9, reason: .normal),
    ]

    static func frames() -> [(String, [UInt8])] {
        func encoded(_ f: Frame) -> [UInt8] { (try? FrameEncoder.encode(f)) ?? [] }
        var out: [(String, [UInt8])] = []
        for f in everyFrame { out.append(("gen-\(f.type)-\(out.count)", [0] + encoded(f))) }
        // The whole conversation in 1-, 3- and 7-byte chunks.
        let stream = everyFrame.flatMap(encoded)
        out.append(("gen-all-bytewise", [1, 0] + stream))
        out.append(("gen-all-chunks", [2, 2, 6] + stream))
        // An unknown ignorable type between two pings, and one without the flag.
        out.append(("gen-ignorable", [0] + encoded(.ping(1)) + [1, 0x7E, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0xAB, 0xCD] + encoded(.ping(2))))
        out.append(("gen-unknown-type", [0] + [1, 0x7E, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]))
        return out
    }

    /// Programs for `MachineTarget`: a plain-text dialer and listener through to messages.
    static func machine() -> [(String, [UInt8])] {
        func op(_ code: UInt8, _ operands: [UInt8] = []) -> [UInt8] { [code << 3] + operands }
        let helloPlain: [UInt8] = op(1, [0x02])                 // the peer's HELLO, role opposite, no encryption
        let message = op(17, [0x09, 5] + Array("hello".utf8))    // MESSAGE 1, final
        let dialer = [0x00] + op(6, [2, 0x61, 0x62, 0x00, 0x10]) + op(0) + helloPlain + op(16, [1, 0]) + op(14, [0, 1, 2, 3, 4, 5, 6, 7, 8])
            + op(17, [0x09, 3] + Array("abc".utf8)) + op(9, [4, 1, 2, 3, 4]) + op(13, [0x10, 0]) + op(19, [0])
        let listener = [0x01] + op(0) + op(1, [0x02]) + op(15, [1, 0, 0x40, 0]) + op(7) + message + op(18, [0, 0, 1, 0, 0, 0, 1, 0, 0])
            + op(21, [1, 0, 2, 0xAA, 0xBB]) + op(12, [0, 0, 0, 0x10, 0]) + op(11, [0, 3] + Array("bye".utf8)) + op(5)
        let encrypted = [0x04] + op(0) + op(1, [0x12]) + op(3, [0, 1, 2, 3, 4, 5, 6, 7, 8]) + op(6, [0, 0, 0x10]) + op(16, [1, 0])
        let timeouts = [0x00] + op(0) + op(13, [0xFF, 0xFF]) + op(13, [0xFF, 0xFF]) + op(5)
        let hello = encodedHello(role: .dialer)
        let raw = [0x01] + op(0) + op(2, [UInt8(hello.count)] + hello) + op(2, [4, 1, 2, 3, 4])
        return [("gen-dialer", dialer), ("gen-listener", listener), ("gen-encrypted", encrypted), ("gen-timeouts", timeouts),
                ("gen-raw-hello", raw)]
    }

    /// Programs for `StreamTableTarget`: (op, arg) pairs, ops 0 open, 1 write, 2 finish,
    /// 3 close, 4 refill and deliver, 5 the receiver closes, 6 and 7 a lie into either side.
    static func streamTable() -> [(String, [UInt8])] {
        let whole: [UInt8] = [0, 1, 1, 0, 1, 200, 4, 3, 2, 0, 4, 5, 4, 5, 4, 5]      // open, 2 writes, finish, drain until confirmed
        let two: [UInt8] = [0, 1, 0, 2, 1, 0, 1, 1, 4, 2, 3, 1, 2, 0, 4, 1, 4, 1, 5, 0]  // two streams, one cancelled, one declined
        let lies: [UInt8] = [0, 1, 1, 50, 6, 1, 1, 3, 0xAA, 0xBB, 0xCC, 6, 2, 5, 0, 7, 0, 2, 4, 0, 6, 0, 1, 4, 4, 2, 0, 4, 4]
        let busy: [UInt8] = [0, 1, 0, 2, 0, 3, 4, 4, 1, 0, 1, 1, 4, 4, 5, 0, 0, 4, 4, 4]  // a third incoming stream, then another after one ends
        return [("gen-whole", whole), ("gen-two", two), ("gen-lies", lies), ("gen-busy", busy)]
    }

    /// Programs for `ResourceTableTarget` (op, arg pairs; an accept reads two more bytes, the
    /// offset; a lie reads an id byte and its operands).
    static func resourceTable() -> [(String, [UInt8])] {
        // Offer 970 bytes, accept from 0, send them all (and DONE), verify: delivered.
        let whole: [UInt8] = [0, 10, 3, 0, 4, 1, 0, 0, 6, 0, 1, 200, 3, 3, 6, 3]
        // Accepted from 500 of 970: the rest only.
        let resumed: [UInt8] = [0, 10, 3, 0, 4, 1, 1, 244, 6, 0, 1, 200, 3, 3, 6, 3]
        // 18 offers: 16 go, 2 are held; the receiver declines one and the next goes.
        let held: [UInt8] = (0..<18).flatMap { [0, UInt8($0 + 1)] } + [3, 3, 3, 3, 3, 3, 3, 3, 4, 5, 6, 0, 3, 3, 4, 5, 6, 0, 3, 0]
        // The sender cancels while the receiver's accept is on the wire; both ignore what crossed.
        let crossing: [UInt8] = [0, 10, 3, 0, 4, 1, 0, 0, 2, 0, 6, 0, 3, 0, 1, 3]
        // Lies into both sides: an offer, data before an accept, a decline of an honest offer.
        let lies: [UInt8] = [0, 10, 7, 0, 2, 7, 3, 2, 3, 1, 2, 3, 3, 0, 7, 0x82, 1, 3, 6, 0, 1, 50, 3, 3]
        return [("gen-whole", whole), ("gen-resumed", resumed), ("gen-held", held), ("gen-crossing", crossing), ("gen-lies", lies)]
    }

    private static func encodedHello(role: Role) -> [UInt8] {
        (try? FrameEncoder.encode(.hello(Hello(peerID: peer, displayName: "peer", encryption: .none, role: role)))) ?? []
    }

    /// TXT records in wire format: what this side publishes, and the rules' edge cases.
    static func discoveryRecords() -> [(String, [UInt8])] {
        func wire(_ entries: [String]) -> [UInt8] { entries.flatMap { [UInt8($0.utf8.count)] + Array($0.utf8) } }
        let published = (try? SessionValidation.discoveryInfo(["room": "kitchen", "Flag": ""], peerID: peer, displayName: "Kitchen Pi"))?.entries ?? []
        let pid = "pid=" + peer.text
        return [
            ("gen-published", wire(published)),
            ("gen-capitals-and-flag", wire(["PV=1,7", "PID=" + peer.text, "pn=b", "solo"])),
            ("gen-future-version", wire(["pv=9", pid, "pn=b"])),
            ("gen-no-pn", wire(["pv=1", pid])),
            ("gen-empty-pv", wire(["pv=", pid, "pn=b"])),
            ("gen-twice", wire(["pv=1", pid, "pn=b", "x=1", "X=2"])),
            ("gen-equals-in-value", wire(["pv=1", pid, "pn=a=b", "k==v"])),
            ("gen-unicode-name", wire(["pv=1,2", pid, "pn=Kitchen Pi ☕"])),
        ]
    }

    // MARK: D-Bus

    /// Replies and signals as bluetoothd and avahi-daemon send them.
    static func dbusMessages() -> [(String, [UInt8])] {
        let device = ObjectPath(stringLiteral: "/org/bluez/hci0/dev_00_AA_01_01_00_01")
        let props: DBusValue = .dictionary(key: "s", value: "v", [
            .init(.string("Address"), .variant(.string("00:AA:01:01:00:01"))),
            .init(.string("RSSI"), .variant(.int16(-60))),
            .init(.string("UUIDs"), .variant(.array(element: "s", [.string("0000180f-0000-1000-8000-00805f9b34fb")]))),
            .init(.string("ManufacturerData"), .variant(.dictionary(key: "q", value: "v", [.init(.uint16(0x004C), .variant(.bytes([2, 0x15, 1])))]))),
        ])
        var changed = BusMessage.signal(path: device, interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged",
                                        body: [.string("org.bluez.Device1"), props, .array(element: "s", [.string("TxPower")])])
        changed.sender = ":1.7"
        let added = BusMessage.signal(path: "/", interface: "org.freedesktop.DBus.ObjectManager", member: "InterfacesAdded",
                                      body: [.objectPath(device), .dictionary(key: "s", value: "a{sv}", [.init(.string("org.bluez.Device1"), props)])])
        var call = BusMessage.methodCall(destination: "org.bluez", path: "/", interface: "org.freedesktop.DBus.ObjectManager", member: "GetManagedObjects")
        call.serial = 5
        let managed = BusMessage.reply(to: call, body: [.dictionary(key: "o", value: "a{sa{sv}}", [
            .init(.objectPath(device), .dictionary(key: "s", value: "a{sv}", [.init(.string("org.bluez.Device1"), props)])),
        ])])
        let error = BusMessage.errorReply(to: call, BusError(name: "org.bluez.Error.Failed", message: "Operation failed with ATT error: 0x0e"))
        let value = BusMessage.reply(to: call, body: [.bytes(Array("Kenshin".utf8))])
        let avahi = BusMessage.signal(path: "/Client1/ServiceBrowser1", interface: "org.freedesktop.Avahi.ServiceBrowser", member: "ItemNew",
                                      body: [.int32(2), .int32(0), .string("Kitchen Pi"), .string("_peerlink._tcp"), .string("local"), .uint32(4)])
        let structs = BusMessage.reply(to: call, body: [.structure([.double(.nan), .uint64(.max), .signature("a{sv}"), .boolean(true)]),
                                                         .variant(.variant(.int64(-1)))])
        let messages = [("gen-properties-changed", changed), ("gen-interfaces-added", added), ("gen-managed-objects", managed),
                        ("gen-error", error), ("gen-read-value", value), ("gen-avahi-item-new", avahi), ("gen-structs", structs)]
        return messages.compactMap { name, m in (try? m.marshal(serial: 9)).map { (name, $0) } }
    }

    // MARK: BLE

    /// Device1 property programs for `BLETargets.advertisement` (name byte, type byte, operands).
    static func advertisements() -> [(String, [UInt8])] {
        func str(_ s: String) -> [UInt8] { [UInt8(s.utf8.count)] + Array(s.utf8) }
        let address: [UInt8] = [0, 0] + str("00:AA:01:01:00:01")
        let full = address + [2, 0] + str("Kitchen Pi") + [4, 2, 0xFF, 0xC4] + [6, 5, 2] + str("180f") + str("0000fe2c-0000-1000-8000-00805f9b34fb")
            + [8, 6, 1, 0x00, 0x4C, 3, 2, 0x15, 1] + [9, 7, 1] + str("180a") + [2, 0xAA, 0xBB] + [10, 8, 1, 0x16, 2, 1, 2]
            + [7, 3, 0x03, 0xC1] + [11, 4, 1]
        return [
            ("gen-address-only", address),
            ("gen-full", full),
            ("gen-wrong-types", [0, 1, 3, 1, 2, 3] + [4, 0] + str("loud") + [6, 0] + str("not a list")),
            ("gen-bad-address", [0, 0] + str("00:AA:01:01:00") + [2, 0] + str("x")),
            ("gen-nested-variants", address + [8, 11, 11, 11, 6, 1, 0x01, 0x02, 0]),
        ]
    }

    // MARK: Control

    /// Line framer inputs: limit byte, chunk seed, stream.
    static func lineFramer() -> [(String, [UInt8])] {
        let lines = Array("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"status\"}\r\n{\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n".utf8)
        return [
            ("gen-two-requests", [63, 1, 5] + lines),
            ("gen-crlf-at-limit", [3, 2, 1, 3] + Array("abcd\r\nabc\r\nabcde\n\r\n\n".utf8)),
            ("gen-long-then-short", [7, 1, 3] + Array("0123456789abcdef\nok\n0123456789".utf8)),
            ("gen-bytewise", [15, 1, 0] + lines),
        ]
    }
}
