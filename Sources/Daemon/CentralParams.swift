import BLE
import BlueZ
import Control
import FoundationEssentials

/// Parameter checks and JSON shapes for the `central.*` methods (shared BLE shapes are in
/// `BLEParams` and `BLEJSON`).
extension CentralCapability {
    /// `central.scan`'s filter and timeout.
    static func scan(_ p: RPCParams) throws(RPCError) -> (ScanFilter, Duration?) {
        try p.rejectUnknown(allowed: ["adapter", "services", "name", "name_pattern", "rssi", "manufacturer", "duplicates", "timeout"])
        var f = ScanFilter()
        f.services = try BLEParams.uuids(p, "services")
        f.namePrefix = try p.optionalString("name")
        if let pattern = try p.optionalString("name_pattern") {
            if let why = ScanFilter.validatePattern(pattern) { throw .invalidParams("name_pattern", why) }
            f.namePattern = pattern
        }
        f.minimumRSSI = try p.optionalInt("rssi", in: -127...20).map { Int($0) }
        f.manufacturer = try p.optionalInt("manufacturer", in: 0...0xFFFF).map { UInt16($0) }
        f.duplicates = try p.optionalBool("duplicates") ?? false
        let timeout = try p.optionalDouble("timeout", in: 0.1...86_400).map { Duration.milliseconds(Int64($0 * 1000)) }
        return (f, timeout)
    }

    /// `central.connect`'s address, address type, timeout and keep flag.
    static func connect(_ p: RPCParams) throws(RPCError) -> (address: BluetoothAddress, type: String?, timeout: Duration, keep: Bool) {
        try p.rejectUnknown(allowed: ["adapter", "address", "address_type", "timeout", "keep"])
        let address = try BLEParams.deviceAddress(p)
        let type = try p.optionalString("address_type")
        if let type, type != "public", type != "random" { throw .invalidParams("address_type", "expected public or random, got \"\(type)\"") }
        let timeout = try seconds(p, "timeout", in: 0.5...600, default: 30)
        let keep = try p.optionalBool("keep") ?? false
        return (address, type, timeout, keep)
    }

    /// The device, characteristic and optional service a read, write or subscription is for.
    static func target(_ p: RPCParams) throws(RPCError) -> (BluetoothAddress, BluetoothUUID, BluetoothUUID?) {
        let a = try BLEParams.deviceAddress(p)
        let u = try BLEParams.uuid(try p.string("characteristic"), param: "characteristic")
        let s = try p.optionalString("service").map { t throws(RPCError) in try BLEParams.uuid(t, param: "service") }
        return (a, u, s)
    }

    /// `central.write`'s value (at most 512 bytes), write type and offset.
    static func write(_ p: RPCParams) throws(RPCError) -> (value: [UInt8], command: Bool, offset: Int) {
        let value = try BLEParams.value(p)
        guard value.count <= 512 else { throw .invalidParams("value", "\(value.count) bytes: a characteristic value is at most 512 bytes") }
        let command = try p.optionalBool("command") ?? false
        let offset = Int(try p.optionalInt("offset", in: 0...511) ?? 0)
        return (value, command, offset)
    }

    /// `central.subscribe`'s delivery: indications, batched events or a stream (not batch and stream).
    static func delivery(_ p: RPCParams) throws(RPCError) -> (indicate: Bool, batch: Bool, stream: Bool) {
        let indicate = try p.optionalBool("indicate") ?? false
        let batch = try p.optionalBool("batch") ?? false
        let stream = try p.optionalBool("stream") ?? false
        if batch && stream { throw .invalidParams("stream", "give batch or stream, not both") }
        return (indicate, batch, stream)
    }

    /// A timeout in seconds within `range`, as a duration.
    static func seconds(_ p: RPCParams, _ key: String, in range: ClosedRange<Double>, default value: Double) throws(RPCError) -> Duration {
        .milliseconds(Int64((try p.optionalDouble(key, in: range) ?? value) * 1000))
    }
}

/// The JSON shapes of `central.*` results and events beyond the shared ones.
enum CentralJSON {
    /// A value read from a characteristic, with where it came from.
    static func read(_ address: BluetoothAddress, _ ch: RemoteAttribute, _ v: [UInt8], offset: Int) -> JSONValue {
        BLEJSON.value(v, extra: ["device": .string(address.description), "characteristic": .string(ch.uuid.uuidString),
                                 "length": .int(Int64(v.count)), "offset": .int(Int64(offset))])
    }

    /// `central.status`: every connection's scans and subscriptions.
    static func status(_ scans: [ScanInfo], _ subs: [SubscriptionInfo]) -> JSONValue {
        ["scans": .array(scans.map { ["scan": .string($0.id), "client": .int(Int64($0.owner)), "address": .string($0.adapter.description),
                                      "reported": .int(Int64($0.reported))] }),
         "subscriptions": .array(subs.map { ["subscription": .string($0.id), "client": .int(Int64($0.owner)),
                                             "device": .string($0.key.device.description), "characteristic": .string($0.characteristic.uuidString),
                                             "via": .string($0.via), "mtu": BLEJSON.int($0.mtu)] })]
    }

    /// The fields every notification event of a subscription carries.
    static func notificationFields(_ sub: String, _ d: BluetoothAddress, _ ch: BluetoothUUID) -> [String: JSONValue] {
        ["subscription": .string(sub), "device": .string(d.description), "characteristic": .string(ch.uuidString)]
    }
}
