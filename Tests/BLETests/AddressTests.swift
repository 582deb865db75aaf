import BLE
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
