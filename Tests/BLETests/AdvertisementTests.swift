import BLE
import Testing

/// The advertising payload is counted as BlueZ 5.66 builds it, so errors come before registering.
@Suite struct AdvertisementTests {
    @Test func referenceFitsWithNameInScanResponse() throws {
        var d = AdvertisementDefinition()
        d.localName = "Kenshin Cui's Device"
        d.serviceUUIDs = [try BluetoothUUID(parsing: "C4FB2349-72FE-4CA2-94D6-1F3CB16331EE")]
        #expect(d.advertisingDataSize.total == 3 + 18)
        #expect(d.scanResponseSize == 22)
        #expect(d.sizeProblem(maxAdvertisingData: 31, maxScanResponse: 31) == nil)
    }

    @Test func countsEveryField() throws {
        var d = AdvertisementDefinition()
        d.serviceUUIDs = [try BluetoothUUID(parsing: "180F"), try BluetoothUUID(parsing: "180A"), try BluetoothUUID(parsing: "12345678")]
        d.manufacturerData = [0x004C: [1, 2, 3]]
        d.serviceData = [try BluetoothUUID(parsing: "180F"): [0x64]]
        d.appearance = 0x0340
        d.includeTxPower = true
        // flags 3, 16-bit UUIDs 2+4, 32-bit UUID 2+4, manufacturer 4+3, service data 2+2+1, appearance 4, tx power 3
        #expect(d.advertisingDataSize.total == 3 + 6 + 6 + 7 + 5 + 4 + 3)
        d.discoverable = false
        #expect(d.advertisingDataSize.total == 6 + 6 + 7 + 5 + 4 + 3)
    }

    @Test func tooLargeSaysWhatItNeedsAndWhatFits() throws {
        var d = AdvertisementDefinition()
        d.serviceUUIDs = [try BluetoothUUID(parsing: "C4FB2349-72FE-4CA2-94D6-1F3CB16331EE"),
                          try BluetoothUUID(parsing: "6A3E4B28-522D-4B3B-82A9-D5E2004534FC")]
        let p = try #require(d.sizeProblem(maxAdvertisingData: 31, maxScanResponse: 31))
        #expect(p.contains("needs 37 bytes but 31 fit"))
        #expect(p.contains("128-bit service UUIDs 34"))
        var n = AdvertisementDefinition()
        n.localName = String(repeating: "n", count: 40)
        #expect(n.sizeProblem(maxAdvertisingData: 31, maxScanResponse: 31)?.contains("needs 42 bytes of scan response") == true)
    }
}
