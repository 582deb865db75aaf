import BLE
import DBus
import FoundationEssentials

/// What one scan wants to see. bluetoothd merges the discovery filters of all its clients
/// (ours and others'), so every device it reports is checked against this again.
public struct ScanFilter: Sendable, Hashable {
    /// Any of these service UUIDs advertised (empty: any device).
    public var services: [BluetoothUUID] = []
    /// The name starts with this (case-sensitive, as BlueZ's Pattern).
    public var namePrefix: String?
    /// The name matches this regular expression (NSRegularExpression syntax).
    public var namePattern: String?
    /// At least this RSSI (dBm).
    public var minimumRSSI: Int?
    /// Manufacturer data with this company id present.
    public var manufacturer: UInt16?
    /// Report every advertisement, not only the first of each device.
    public var duplicates = false

    /// A filter with no conditions.
    public init() {}

    /// Checks a pattern once, so a bad one is an error at scan start, not a silent no-match.
    public static func validatePattern(_ pattern: String) -> String? {
        do { _ = try Regex(pattern) } catch { return "not a valid regular expression" }
        return nil
    }

    /// Whether a device (as BlueZ reports it now) passes every condition.
    public func matches(_ d: RemoteDevice) -> Bool {
        if !services.isEmpty {
            let advertised = Set(d.uuids).union(d.serviceData.keys)
            guard services.contains(where: advertised.contains) else { return false }
        }
        if let namePrefix {
            guard let n = d.name, n.hasPrefix(namePrefix) else { return false }
        }
        if let namePattern {
            guard let n = d.name, let re = try? Regex(namePattern), n.contains(re) else { return false }
        }
        if let minimumRSSI {
            guard let r = d.rssi, r >= minimumRSSI else { return false }
        }
        if let manufacturer {
            guard d.manufacturerData[manufacturer] != nil else { return false }
        }
        return true
    }

    /// The discovery filter for bluetoothd that lets through everything any of `filters`
    /// wants (LE only, duplicates on: duplicate suppression is done per scan here).
    public static func discoveryFilter(merging filters: [ScanFilter]) -> [String: DBusValue] {
        DiscoveryFilter(merging: filters).properties
    }
}

extension DiscoveryFilter {
    /// `SetDiscoveryFilter`'s map.
    public var properties: [String: DBusValue] {
        var f: [String: DBusValue] = ["Transport": .string("le"), "DuplicateData": .boolean(true)]
        if let uuids { f["UUIDs"] = .stringArray(uuids.map(\.uuidString)) }
        if let rssi { f["RSSI"] = .int16(Int16(clamping: rssi)) }
        return f
    }
}
