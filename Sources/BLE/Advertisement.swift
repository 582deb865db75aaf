/// An LE advertisement as plain data (what `peerlink advertise start` asks for).
public struct AdvertisementDefinition: Sendable, Hashable {
    /// The local name (BlueZ sends it in the scan response).
    public var localName: String?
    /// Service UUIDs.
    public var serviceUUIDs: [BluetoothUUID] = []
    /// Manufacturer data: company id → bytes.
    public var manufacturerData: [UInt16: [UInt8]] = [:]
    /// Service data: UUID → bytes.
    public var serviceData: [BluetoothUUID: [UInt8]] = [:]
    /// GAP appearance.
    public var appearance: UInt16?
    /// Include the TX power level.
    public var includeTxPower = false
    /// General discoverable (the Flags AD).
    public var discoverable = true
    /// Connectable (`peripheral`) or not (`broadcast`).
    public var connectable = true
    /// Advertising interval range in milliseconds.
    public var interval: ClosedRange<UInt32>?
    /// Seconds each rotation lasts when several advertisements share the controller.
    public var duration: UInt16?
    /// Seconds until the advertisement stops by itself.
    public var timeout: UInt16?

    /// An advertisement with nothing in it yet.
    public init() {}

    /// The bytes the advertising data takes, counted as BlueZ 5.66 builds it (flags, appearance
    /// and TX power included), with the part each field takes.
    public var advertisingDataSize: (total: Int, parts: [(String, Int)]) {
        var parts: [(String, Int)] = []
        if discoverable { parts.append(("flags", 3)) }
        for size in [2, 4, 16] {
            let n = serviceUUIDs.filter { $0.advertisedSize == size }.count
            if n > 0 { parts.append(("\(size * 8)-bit service UUIDs", 2 + size * n)) }
        }
        for (id, data) in manufacturerData.sorted(by: { $0.key < $1.key }) {
            parts.append(("manufacturer data 0x\(String(id, radix: 16))", 4 + data.count))
        }
        for (uuid, data) in serviceData.sorted(by: { $0.key < $1.key }) {
            parts.append(("service data \(uuid.uuid16.map { String($0, radix: 16) } ?? uuid.uuidString)", 2 + uuid.advertisedSize + data.count))
        }
        if appearance != nil { parts.append(("appearance", 4)) }
        if includeTxPower { parts.append(("tx power", 3)) }
        return (parts.reduce(0) { $0 + $1.1 }, parts)
    }

    /// The bytes the scan response takes (the local name: 2 + its UTF-8 length).
    public var scanResponseSize: Int {
        guard let n = localName, !n.isEmpty else { return 0 }
        return 2 + n.utf8.count
    }

    /// Why the advertisement does not fit the controller, or nil when it does.
    public func sizeProblem(maxAdvertisingData: Int, maxScanResponse: Int) -> String? {
        let adv = advertisingDataSize
        if adv.total > maxAdvertisingData {
            let detail = adv.parts.map { "\($0.0) \($0.1)" }.joined(separator: ", ")
            return "the advertising data needs \(adv.total) bytes but \(maxAdvertisingData) fit (\(detail))"
        }
        let scan = scanResponseSize
        if scan > maxScanResponse {
            return "the local name needs \(scan) bytes of scan response (2 + \(scan - 2) bytes of UTF-8) but \(maxScanResponse) fit"
                + (maxScanResponse == 0 ? " (this controller has no scan response)" : "")
        }
        return nil
    }
}
