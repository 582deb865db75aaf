import BLE
import Foundation
import Testing

@Suite struct AddressTests {
    @Test func parsesAndPrintsUppercase() {
        let a = BluetoothAddress("00:aa:01:0f:00:ff")
        #expect(a?.description == "00:AA:01:0F:00:FF")
        #expect(a?.bytes == [0x00, 0xAA, 0x01, 0x0F, 0x00, 0xFF])
        #expect(a?.bluezPathElement == "dev_00_AA_01_0F_00_FF")
        #expect(BluetoothAddress(bluezPathElement: "dev_00_AA_01_0F_00_FF") == a)
    }

    @Test(arguments: ["", "00:AA:01:00:00", "00:AA:01:00:00:00:11", "0:AA:01:00:00:00", "GG:AA:01:00:00:00", "00-AA-01-00-00-00", "00:AA:01:00:00:000"])
    func rejectsMalformed(_ text: String) {
        #expect(BluetoothAddress(text) == nil)
    }

    @Test func selectors() {
        #expect(AdapterSelector("hci0") == .name("hci0"))
        #expect(AdapterSelector("HCI12") == .name("hci12"))
        #expect(AdapterSelector("00:aa:01:01:00:01") == .address(BluetoothAddress("00:AA:01:01:00:01")!))
        #expect(AdapterSelector("hci") == nil)
        #expect(AdapterSelector("hcix") == nil)
        #expect(AdapterSelector("wlan0") == nil)
    }
}

@Suite struct UUIDTests {
    @Test func shortAndLongFormsAreEqual() throws {
        let a = try BluetoothUUID(parsing: "180F")
        let b = try BluetoothUUID(parsing: "0x180f")
        let c = try BluetoothUUID(parsing: "0000180F-0000-1000-8000-00805F9B34FB")
        #expect(a == b && b == c)
        #expect(a.uuid16 == 0x180F && a.isShort && a.advertisedSize == 2)
        #expect(a.uuidString == "0000180f-0000-1000-8000-00805f9b34fb")
        let ref = try BluetoothUUID(parsing: "C4FB2349-72FE-4CA2-94D6-1F3CB16331EE")
        #expect(ref.uuidString == "c4fb2349-72fe-4ca2-94d6-1f3cb16331ee")
        #expect(!ref.isShort && ref.uuid16 == nil && ref.advertisedSize == 16)
        let u32 = try BluetoothUUID(parsing: "12345678")
        #expect(u32.isShort && u32.uuid16 == nil && u32.advertisedSize == 4)
        #expect(u32.uuidString == "12345678-0000-1000-8000-00805f9b34fb")
    }

    /// The fast reading of the common forms agrees with the general one, and formatting
    /// round-trips.
    @Test func commonFormsRoundTrip() throws {
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<200 {
            let bytes = (0..<16).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let u = try #require(BluetoothUUID(bytes: bytes))
            let text = bytes.map { String(format: "%02x", $0) }.joined()
            let dashed = [text.prefix(8), text.dropFirst(8).prefix(4), text.dropFirst(12).prefix(4), text.dropFirst(16).prefix(4), text.dropFirst(20)].joined(separator: "-")
            #expect(u.uuidString == dashed)
            #expect(try BluetoothUUID(parsing: dashed) == u && BluetoothUUID(parsing: dashed.uppercased()) == u)
            #expect(try BluetoothUUID(parsing: "0x" + dashed) == u)
        }
        #expect(try BluetoothUUID(parsing: "0X2A37") == BluetoothUUID(uuid16: 0x2A37))
        #expect(try BluetoothUUID(parsing: "0000fEaA") == BluetoothUUID(uuid16: 0xFEAA))
        #expect(try BluetoothUUID(parsing: "ABCDEF01").uuidString == "abcdef01-0000-1000-8000-00805f9b34fb")
    }

    @Test(arguments: [
        ("", "empty"), ("18F", "expected 4 hex digits"), ("180G", "'G' is not a hex digit"),
        ("c4fb2349-72fe-4ca2-94d61f3cb16331ee-", "expected the form"), ("c4fb234972fe4ca294d61f3cb16331ee", "got 32 characters"),
        ("c4fb2349-72fe-4ca2-94d6-1f3cb16331eg", "'g' is not a hex digit"), ("c4fb2349+72fe-4ca2-94d6-1f3cb16331ee", "expected the form"),
        ("0x", "empty"), ("18é", "expected 4 hex digits"), ("180-", "'-' is not a hex digit"),
    ])
    func rejectsMalformed(_ text: String, _ reason: String) {
        do {
            _ = try BluetoothUUID(parsing: text)
            Issue.record("accepted \(text)")
        } catch {
            #expect(error.description.contains(reason), "\(error)")
        }
    }
}

@Suite struct HexTests {
    @Test func hexRoundTrips() {
        let all = (0...255).map { UInt8($0) }
        #expect(hexString([]) == "")
        #expect(hexString([0x0a, 0xff, 0x00]) == "0aff00")
        #expect(parseHex(hexString(all)) == all)
        #expect(hexString(all).count == 512)
    }
}
