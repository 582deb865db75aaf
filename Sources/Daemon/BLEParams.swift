import BLE
import BlueZ
import Control
import FoundationEssentials

/// Parameters shared by the BLE methods (adapter, central and peripheral): adapters,
/// addresses, UUIDs and attribute values, each checked the same way wherever it appears.
enum BLEParams {
    /// The optional `adapter` parameter as a selector (hciN or an address).
    static func adapter(_ p: RPCParams) throws(RPCError) -> AdapterSelector? {
        guard let text = try p.optionalString("adapter") else { return nil }
        guard let s = AdapterSelector(text) else {
            throw RPCError.invalidParams("adapter", "expected hciN or an address like 00:AA:01:00:00:00, got \"\(text)\"")
        }
        return s
    }

    /// `text` as a UUID, the error naming `param` (which may be an element: `services[2]`).
    static func uuid(_ text: String, param: String) throws(RPCError) -> BluetoothUUID {
        do { return try BluetoothUUID(parsing: text) } catch { throw .invalidParams(param, error.description) }
    }

    /// The optional array of UUIDs `key`, each element's error naming its index.
    static func uuids(_ p: RPCParams, _ key: String) throws(RPCError) -> [BluetoothUUID] {
        var out: [BluetoothUUID] = []
        for (i, text) in (try p.optionalStringArray(key) ?? []).enumerated() {
            out.append(try uuid(text, param: "\(key)[\(i)]"))
        }
        return out
    }

    /// The required `address` of a remote device.
    static func deviceAddress(_ p: RPCParams) throws(RPCError) -> BluetoothAddress {
        let text = try p.string("address")
        guard let a = BluetoothAddress(text) else { throw .invalidParams("address", "expected a device address like 00:AA:01:01:00:01, got \"\(text)\"") }
        return a
    }

    /// The optional `device`: the one central a peripheral operation is for.
    static func device(_ p: RPCParams) throws(RPCError) -> BluetoothAddress? {
        guard let d = try p.optionalString("device") else { return nil }
        guard let a = BluetoothAddress(d) else { throw .invalidParams("device", "expected an address like 00:AA:01:01:00:01, got \"\(d)\"") }
        return a
    }

    /// The forms an attribute value can be given in: UTF-8 text, hex or base64.
    static let valueForms = ["value", "value_hex", "value_base64"]

    /// `value` (UTF-8), `value_hex` or `value_base64`: exactly one.
    static func value(_ p: RPCParams) throws(RPCError) -> [UInt8] {
        let given = given(p, valueForms)
        guard given.count == 1 else {
            throw .invalidParams("value", given.isEmpty ? "required: give value (UTF-8 text), value_hex or value_base64" : "give one of \(given.joined(separator: ", ")), not several")
        }
        let text = try p.string(given[0])
        guard let v = decode(text, as: given[0]) else { throw .invalidParams(given[0], notDecodable(given[0])) }
        return v
    }

    /// Which of `keys` are given (present and not null).
    static func given(_ p: RPCParams, _ keys: [String]) -> [String] {
        keys.filter { p[$0] != nil }
    }

    /// `text` decoded as the form `value`, `value_hex` or `value_base64`; nil when it is not.
    static func decode(_ text: String, as form: String) -> [UInt8]? {
        switch form {
        case "value": Array(text.utf8)
        case "value_hex": parseHex(text)
        default: Data(base64Encoded: text).map { Array($0) }
        }
    }

    /// Why a value in `form` could not be decoded.
    static func notDecodable(_ form: String) -> String {
        form == "value_hex" ? "not hex: expected pairs of 0-9a-f" : "not valid base64"
    }
}
