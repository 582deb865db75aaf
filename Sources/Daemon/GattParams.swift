import BLE
import BlueZ
import Control
import FoundationEssentials

/// Parameter checks and JSON shapes for the `gatt.*` methods (shared BLE shapes are in
/// `BLEParams` and `BLEJSON`).
extension GattCapability {
    /// `gatt.register`'s definition and adapter; the definition's own errors name the path in it.
    static func registration(_ p: RPCParams, defaultAdapter: String?) throws(RPCError) -> (GattApplicationDefinition, AdapterSelector?) {
        try p.rejectUnknown(allowed: ["definition", "source", "adapter"])
        guard let doc = p.values["definition"], !doc.isNull else { throw .invalidParams("definition", "required: the definition document (an object)") }
        let source = try p.optionalString("source") ?? "definition"
        let selector = try BLEParams.adapter(p) ?? defaultAdapter.flatMap(AdapterSelector.init)
        let definition = try check { try GattApplicationDefinition.parse(doc, source: source) }
        return (definition, selector)
    }

    /// The registered characteristic named by `uuid` (and `app` when several applications have it).
    static func characteristic(_ p: RPCParams, _ gatt: GattServer) throws(RPCError) -> LocalCharacteristic {
        let uuid = try BLEParams.uuid(try p.string("uuid"), param: "uuid")
        let app = try p.optionalString("app")
        guard let c = gatt.characteristic(uuid, application: app) else {
            throw RPCError(code: RPCErrorCode.invalidParams, message: "invalid params: uuid: no characteristic \(uuid)\(app.map { " in application \($0)" } ?? "") is registered",
                           data: ["kind": "unknown-characteristic", "uuid": .string(uuid.uuidString)])
        }
        return c
    }

    /// The values of `gatt.notify`: one of `value`, `value_hex`, `value_base64` (one value) or
    /// `values`, `values_hex`, `values_base64` (a non-empty array of them, sent in order).
    static func notifyValues(_ p: RPCParams) throws(RPCError) -> [[UInt8]] {
        let given = BLEParams.given(p, BLEParams.valueForms + ["values", "values_hex", "values_base64"])
        guard given.count == 1 else {
            throw .invalidParams("value", given.isEmpty
                ? "required: give value (UTF-8 text), value_hex or value_base64, or an array of them as values, values_hex or values_base64"
                : "give one of \(given.joined(separator: ", ")), not several")
        }
        let key = given[0]
        guard key.hasPrefix("values") else { return [try BLEParams.value(p)] }
        let form = "value" + key.dropFirst("values".count)  // values_hex -> value_hex
        guard let items = p[key]?.arrayValue, !items.isEmpty else {
            throw .invalidParams(key, "expected a non-empty array of strings")
        }
        var out: [[UInt8]] = []
        out.reserveCapacity(items.count)
        for (i, item) in items.enumerated() {
            guard let text = item.stringValue else { throw .invalidParams(key, "expected strings, got \(item.typeName) at index \(i)") }
            guard let v = BLEParams.decode(text, as: form) else { throw .invalidParams(key, "\(BLEParams.notDecodable(form)) at index \(i)") }
            out.append(v)
        }
        return out
    }

    /// `gatt.respond`'s request id and answer: a value, or the ATT error named by `error`.
    static func answer(_ p: RPCParams) throws(RPCError) -> (request: String, result: Result<[UInt8], GattError>) {
        try p.rejectUnknown(allowed: ["request", "value", "value_hex", "value_base64", "error"])
        let id = try p.string("request")
        guard let e = try p.optionalString("error") else { return (id, .success(try BLEParams.value(p))) }
        guard let ge = GattError(name: e) else {
            throw .invalidParams("error", "expected invalid-offset, invalid-value-length, not-permitted, not-authorized, not-supported, in-progress or 0x80..0x9f, got \"\(e)\"")
        }
        return (id, .failure(ge))
    }
}

/// The JSON shapes of `gatt.*` results and events beyond the shared ones.
enum GattJSON {
    /// A characteristic's identity in results: its UUID and application.
    static func characteristic(_ c: LocalCharacteristic, _ extra: [String: JSONValue] = [:]) -> JSONValue {
        .object(extra.merging(["uuid": .string(c.uuid.uuidString), "app": .string(c.application)]) { _, new in new })
    }

    /// `gatt.notify`'s result.
    static func notified(_ c: LocalCharacteristic, _ values: [[UInt8]]) -> JSONValue {
        characteristic(c, ["length": .int(Int64(values.reduce(0) { $0 + $1.count })), "count": .int(Int64(values.count)),
                           "subscribers": .int(Int64(c.subscriberCount))])
    }

    /// A `gatt.read-request` event: what the handling client needs to answer it.
    static func readRequest(_ id: String, _ req: GattReadRequest) -> JSONValue {
        ["request": .string(id), "app": .string(req.application), "uuid": .string(req.uuid.uuidString),
         "device": BLEJSON.address(req.device), "offset": .int(Int64(req.offset)), "mtu": BLEJSON.int(req.mtu)]
    }

    /// An event about one characteristic of an application, seen from `device`.
    static func attributeEvent(_ app: String, _ uuid: BluetoothUUID, _ device: BluetoothAddress?, _ extra: [String: JSONValue] = [:]) -> JSONValue {
        .object(extra.merging(["app": .string(app), "uuid": .string(uuid.uuidString), "device": BLEJSON.address(device)]) { _, new in new })
    }
}
