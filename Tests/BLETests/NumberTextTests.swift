import BLE
import Testing

/// The zero-padded numbers the CLI and the agent print (what `%06u`, `%04x` and `%.1f` gave).
@Suite struct NumberTextTests {
    @Test(arguments: [
        (0, 10, 6, "000000"), (4821, 10, 6, "004821"), (999_999, 10, 6, "999999"), (1_234_567, 10, 6, "1234567"),
        (0x2a, 16, 4, "002a"), (0xffff, 16, 4, "ffff"), (0x1_0000, 16, 4, "10000"), (-5, 10, 3, "-005"), (7, 16, 0, "7"),
    ])
    func padsToTheWidth(value: Int, radix: Int, width: Int, text: String) {
        #expect(String(value, radix: radix, zeroPaddedTo: width) == text)
    }

    @Test func paddingAnUnsignedPasskey() {
        #expect(String(UInt32(42), zeroPaddedTo: 6) == "000042")
        #expect(String(UInt16(0x180d), radix: 16, zeroPaddedTo: 4) == "180d")
    }

    @Test(arguments: [(0.0, "0.0"), (1.0, "1.0"), (1.04, "1.0"), (1.05, "1.1"), (1023.96, "1024.0"), (-2.25, "-2.3"), (0.04, "0.0")])
    func oneDecimal(value: Double, text: String) {
        #expect(String(oneDecimal: value) == text)
    }
}
