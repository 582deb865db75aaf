import BLE
import BlueZ
import Control
import Foundation
import Logging
import Synchronization
import SystemKit

/// The GATT server: applications from definition files, reads, writes, notifications, and
/// reads answered by a control client (`gatt.handle-reads` / `gatt.respond`).
final class GattCapability: DaemonCapability {
    let name = "gatt"
    private let context = Mutex<DaemonContext?>(nil)
    private let server = Mutex<GattServer?>(nil)
    private let pendingReads = Mutex<[String: PendingRead]>([:])
    private let nextRead = Mutex<UInt64>(1)
    /// Which client answers reads of which characteristic (app id + UUID → client id).
    private let readOwners = Mutex<[String: UInt64]>([:])
    private let nextStream = Mutex<UInt64>(1)
    /// `gatt.notify`'s parameters: made once, not hashed again for every value sent.
    static let notifyParams: Set<String> = ["uuid", "value", "value_hex", "value_base64", "values", "values_hex", "values_base64", "app", "device"]
    /// Seconds a handler client has to answer a read before the central gets an error.
    static let readTimeout: Duration = .seconds(5)

    struct PendingRead {
        let client: UInt64
        let continuation: CheckedContinuation<Result<[UInt8], GattError>, Never>
    }

    func register(_ ctx: DaemonContext) {
        context.withLock { $0 = ctx }
        let gatt = GattServer(logger: ctx.logger.child("gatt")) { [weak self] e in self?.publish(e) }
        server.withLock { $0 = gatt }
        ctx.onClientClose { [weak self] id in self?.clientClosed(id) }

        ctx.register("gatt.register") { params, _ throws(RPCError) in
            try params.rejectUnknown(allowed: ["definition", "source", "adapter"])
            guard let doc = params.values["definition"], !doc.isNull else { throw .invalidParams("definition", "required: the definition document (an object)") }
            let source = try params.optionalString("source") ?? "definition"
            let selector = try PeerlinkDaemon.selector(params) ?? ctx.defaultAdapter.flatMap(AdapterSelector.init)
            let def: GattApplicationDefinition
            do {
                def = try GattApplicationDefinition.parse(doc, source: source)
            } catch let error as GattDefinitionError {
                throw RPCError(code: RPCErrorCode.invalidParams, message: "invalid definition: \(error.description)",
                               data: ["kind": "invalid-definition", "source": .string(error.source), "path": .string(error.path), "reason": .string(error.reason)])
            } catch {
                throw .internalError("\(error)")
            }
            do {
                let app = try await gatt.add(def, adapter: selector)
                return await Self.json(app, registeredOn: gatt.list.first { $0.app.id == app.id }?.registeredOn)
            } catch let e as GattServerError {
                throw Self.rpc(e)
            } catch {
                throw .internalError("\(error)")
            }
        }
        ctx.register("gatt.unregister") { params, _ throws(RPCError) in
            try params.rejectUnknown(allowed: ["id"])
            let id = try params.string("id")
            do { try await gatt.remove(id) } catch let e as GattServerError { throw Self.rpc(e) } catch { throw .internalError("\(error)") }
            return ["id": .string(id), "removed": true]
        }
        ctx.register("gatt.list") { params, _ throws(RPCError) in
            try params.rejectUnknown(allowed: [])
            let apps = await gatt.list
            return ["applications": .array(apps.map { Self.json($0.app, registeredOn: $0.registeredOn) })]
        }
        ctx.register("gatt.set") { params, _ throws(RPCError) in
            try params.rejectUnknown(allowed: ["uuid", "value", "value_hex", "value_base64", "app"])
            let c = try Self.characteristic(params, gatt)
            let v = try Self.value(params)
            do { try c.setValue(v) } catch { throw RPCError(code: RPCErrorCode.invalidParams, message: "invalid params: value: \(error)", data: ["kind": "too-long"]) }
            return Self.valueJSON(v, extra: ["uuid": .string(c.uuid.uuidString), "app": .string(c.application)])
        }
        // Quick: a value goes straight into the notification socket (or its outbox) from the
        // client's queue; only a full socket makes the request wait (as a task).
        ctx.register("gatt.notify", quick: { params, _ throws(RPCError) in
            try params.rejectUnknown(allowed: Self.notifyParams)
            let c = try Self.characteristic(params, gatt)
            let values = try Self.notifyValues(params)
            var device: BluetoothAddress?
            if let d = try params.optionalString("device") {
                guard let a = BluetoothAddress(d) else { throw .invalidParams("device", "expected an address like 00:AA:01:01:00:01, got \"\(d)\"") }
                device = a
            }
            @Sendable func result() -> JSONValue {
                ["uuid": .string(c.uuid.uuidString), "app": .string(c.application),
                 "length": .int(Int64(values.reduce(0) { $0 + $1.count })), "count": .int(Int64(values.count)),
                 "subscribers": .int(Int64(c.subscriberCount))]
            }
            let rest: LocalCharacteristic.NotifyRest?
            do throws(GattNotifyError) {
                rest = try c.notifyWithoutWaiting(values: values, device: device)
            } catch {
                throw Self.rpc(error)
            }
            guard let rest else { return .reply(result()) }
            return .later { () async throws(RPCError) -> JSONValue in
                do throws(GattNotifyError) {
                    try await rest.finish()
                } catch {
                    throw Self.rpc(error)
                }
                return result()
            }
        })
        ctx.register("gatt.notify-stream") { [weak self] params, rc throws(RPCError) in
            try params.rejectUnknown(allowed: ["uuid", "app", "device"])
            let c = try Self.characteristic(params, gatt)
            guard c.definition.has(GattFlag.notifyLike) else { throw Self.rpc(.notNotifiable(c.uuid)) }
            var device: BluetoothAddress?
            if let d = try params.optionalString("device") {
                guard let a = BluetoothAddress(d) else { throw .invalidParams("device", "expected an address like 00:AA:01:01:00:01, got \"\(d)\"") }
                device = a
            }
            guard let self else { throw .internalError("shutting down") }
            return try self.openStream(c, device: device, gatt: gatt, rc)
        }
        ctx.register("gatt.handle-reads") { [weak self] params, rc throws(RPCError) in
            try params.rejectUnknown(allowed: ["uuid", "app", "enable"])
            let c = try Self.characteristic(params, gatt)
            let enable = try params.optionalBool("enable") ?? true
            let key = "\(c.application)/\(c.uuid)"
            if enable {
                self?.readOwners.withLock { $0[key] = rc.clientID }
                c.setReadHandler { [weak self] req in
                    await self?.forwardRead(req, to: rc.clientID) ?? .failure(.application(0x80))
                }
            } else {
                self?.readOwners.withLock { _ = $0.removeValue(forKey: key) }
                c.setReadHandler(nil)
            }
            return ["uuid": .string(c.uuid.uuidString), "app": .string(c.application), "handled": .bool(enable)]
        }
        ctx.register("gatt.respond") { [weak self] params, rc throws(RPCError) in
            try params.rejectUnknown(allowed: ["request", "value", "value_hex", "value_base64", "error"])
            let id = try params.string("request")
            let result: Result<[UInt8], GattError>
            if let e = try params.optionalString("error") {
                guard let ge = GattError(name: e) else {
                    throw .invalidParams("error", "expected invalid-offset, invalid-value-length, not-permitted, not-authorized, not-supported, in-progress or 0x80..0x9f, got \"\(e)\"")
                }
                result = .failure(ge)
            } else {
                result = .success(try Self.value(params))
            }
            guard let p = self?.pendingReads.withLock({ $0.removeValue(forKey: id) }), p.client == rc.clientID else {
                throw RPCError(code: RPCErrorCode.invalidState, message: "no pending read request \(id) for this connection (it may have timed out after \(Self.readTimeout))",
                               data: ["kind": "unknown-request"])
            }
            p.continuation.resume(returning: result)
            return ["request": .string(id), "answered": true]
        }
    }

    func attach(_ session: BusSession) async {
        await server.withLock { $0 }?.attach(connection: session.connection, bluez: session.bluez)
    }

    func detach() async {
        await server.withLock { $0 }?.detach()
    }

    func shutdown() async {
        await server.withLock { $0 }?.removeAll()
    }

    // MARK: Reads answered by a client

    private func forwardRead(_ req: GattReadRequest, to client: UInt64) async -> Result<[UInt8], GattError> {
        let id = "r" + String(nextRead.withLock { n -> UInt64 in defer { n += 1 }; return n })
        let data: JSONValue = ["request": .string(id), "app": .string(req.application), "uuid": .string(req.uuid.uuidString),
                               "device": req.device.map { .string($0.description) } ?? .null, "offset": .int(Int64(req.offset)),
                               "mtu": req.mtu.map { .int(Int64($0)) } ?? .null]
        return await withCheckedContinuation { (c: CheckedContinuation<Result<[UInt8], GattError>, Never>) in
            pendingReads.withLock { $0[id] = PendingRead(client: client, continuation: c) }
            guard context.withLock({ $0 })?.send(topic: "gatt.read-request", data: data, to: client) == true else {
                pendingReads.withLock { $0.removeValue(forKey: id) }?.continuation.resume(returning: .failure(.application(0x80)))
                return
            }
            Task {
                try? await Task.sleep(for: Self.readTimeout)
                // Unanswered in time: the central gets an ATT error rather than a hang.
                self.pendingReads.withLock { $0.removeValue(forKey: id) }?.continuation.resume(returning: .failure(.application(0x80)))
            }
        }
    }

    /// A packet socket pair: our end feeds `c`'s notifications, the other goes to the client
    /// with the reply. The stream ends with the client's control connection.
    private func openStream(_ c: LocalCharacteristic, device: BluetoothAddress?, gatt: GattServer, _ rc: RequestContext) throws(RPCError) -> JSONValue {
        let ours: Int32, theirs: Int32
        do {
            (ours, theirs) = try DescriptorPassing.packetPair()
        } catch {
            throw .internalError("cannot make the stream's socket pair: \(error)")
        }
        let id = nextStream.withLock { n -> String in defer { n += 1 }; return "stream\(n)" }
        let owner = rc.clientID
        let app = c.application, uuid = c.uuid
        let stream = NotifyStream(fd: ours, characteristic: c, device: device,
                                  isRegistered: { gatt.characteristic(uuid, application: app) === c }) { [weak self] end, counts in
            var data: [String: JSONValue] = [
                "stream": .string(id), "uuid": .string(uuid.uuidString), "app": .string(app),
                "reason": .string(end.name), "message": .string(end.message),
                "received": .int(Int64(counts.received)), "sent": .int(Int64(counts.sent)),
                "unsent": .int(Int64(counts.unsent)), "dropped": .int(Int64(counts.dropped)),
            ]
            if let device { data["device"] = .string(device.description) }
            _ = self?.context.withLock({ $0 })?.send(topic: "gatt.stream.ended", data: .object(data), to: owner)
        }
        rc.onConnectionClose { stream.stop() }
        rc.passWithReply(theirs)
        var out: [String: JSONValue] = [
            "stream": .string(id), "uuid": .string(uuid.uuidString), "app": .string(app), "fd": true,
            "subscribers": .int(Int64(c.subscriberCount)), "max_length": .int(Int64(c.definition.maxLength)),
        ]
        if let device { out["device"] = .string(device.description) }
        return .object(out)
    }

    private func clientClosed(_ id: UInt64) {
        let keys = readOwners.withLock { owners -> [String] in
            let k = owners.filter { $0.value == id }.map(\.key)
            for key in k { owners.removeValue(forKey: key) }
            return k
        }
        if !keys.isEmpty, let gatt = server.withLock({ $0 }) {
            Task {
                for app in await gatt.list.map(\.app) {
                    for c in app.characteristics where keys.contains("\(c.application)/\(c.uuid)") { c.setReadHandler(nil) }
                }
            }
        }
        let orphans = pendingReads.withLock { p -> [PendingRead] in
            let o = p.filter { $0.value.client == id }
            for k in o.keys { p.removeValue(forKey: k) }
            return Array(o.values)
        }
        for o in orphans { o.continuation.resume(returning: .failure(.application(0x80))) }
    }

    // MARK: Events

    private func publish(_ e: GattServerEvent) {
        guard let ctx = context.withLock({ $0 }) else { return }
        func dev(_ d: BluetoothAddress?) -> JSONValue { d.map { .string($0.description) } ?? .null }
        switch e {
        case .registered(let app, let a, let again):
            ctx.publish(topic: again ? "gatt.reregistered" : "gatt.registered",
                        data: ["app": .string(app), "adapter": .string(a.name), "address": .string(a.address.description)])
        case .registrationFailed(let app, let a, let why):
            ctx.publish(topic: "gatt.registration-failed", data: ["app": .string(app), "address": a.map { .string($0.description) } ?? .null, "reason": .string(why)])
        case .read(let app, let uuid, let d, let offset):
            ctx.publish(topic: "gatt.read", data: ["app": .string(app), "uuid": .string(uuid.uuidString), "device": dev(d), "offset": .int(Int64(offset))])
        case .wrote(let app, let uuid, let d, let data, let offset, let type, let value):
            ctx.publish(topic: "gatt.write", data: Self.valueJSON(data, extra: [
                "app": .string(app), "uuid": .string(uuid.uuidString), "device": dev(d), "offset": .int(Int64(offset)),
                "type": type.map { .string($0) } ?? .null, "stored_hex": .string(Self.hex(value)),
            ]))
        case .subscribed(let app, let uuid, let d, let mtu, let via):
            ctx.publish(topic: "gatt.subscribed", data: ["app": .string(app), "uuid": .string(uuid.uuidString), "device": dev(d),
                                                         "mtu": mtu.map { .int(Int64($0)) } ?? .null, "via": .string(via)])
        case .unsubscribed(let app, let uuid, let d):
            ctx.publish(topic: "gatt.unsubscribed", data: ["app": .string(app), "uuid": .string(uuid.uuidString), "device": dev(d)])
        case .confirmed(let app, let uuid, let d):
            ctx.publish(topic: "gatt.confirmed", data: ["app": .string(app), "uuid": .string(uuid.uuidString), "device": dev(d)])
        }
    }

    // MARK: Helpers

    static func characteristic(_ params: RPCParams, _ gatt: GattServer) throws(RPCError) -> LocalCharacteristic {
        let text = try params.string("uuid")
        let uuid: BluetoothUUID
        do { uuid = try BluetoothUUID(parsing: text) } catch { throw .invalidParams("uuid", error.description) }
        let app = try params.optionalString("app")
        guard let c = gatt.characteristic(uuid, application: app) else {
            throw RPCError(code: RPCErrorCode.invalidParams, message: "invalid params: uuid: no characteristic \(uuid)\(app.map { " in application \($0)" } ?? "") is registered",
                           data: ["kind": "unknown-characteristic", "uuid": .string(uuid.uuidString)])
        }
        return c
    }

    /// `value` (UTF-8), `value_hex` or `value_base64`: exactly one.
    static func value(_ params: RPCParams) throws(RPCError) -> [UInt8] {
        let given = given(params, ["value", "value_hex", "value_base64"])
        guard given.count == 1 else {
            throw .invalidParams("value", given.isEmpty ? "required: give value (UTF-8 text), value_hex or value_base64" : "give one of \(given.joined(separator: ", ")), not several")
        }
        let text = try params.string(given[0])
        guard let v = decode(text, as: given[0]) else { throw .invalidParams(given[0], notDecodable(given[0])) }
        return v
    }

    /// The values of `gatt.notify`: one of `value`, `value_hex`, `value_base64` (one value) or
    /// `values`, `values_hex`, `values_base64` (a non-empty array of them, sent in order).
    static func notifyValues(_ params: RPCParams) throws(RPCError) -> [[UInt8]] {
        let given = given(params, ["value", "value_hex", "value_base64", "values", "values_hex", "values_base64"])
        guard given.count == 1 else {
            throw .invalidParams("value", given.isEmpty
                ? "required: give value (UTF-8 text), value_hex or value_base64, or an array of them as values, values_hex or values_base64"
                : "give one of \(given.joined(separator: ", ")), not several")
        }
        let key = given[0]
        guard key.hasPrefix("values") else { return [try value(params)] }
        let form = "value" + key.dropFirst("values".count)  // values_hex -> value_hex
        guard let items = params[key]?.arrayValue, !items.isEmpty else {
            throw .invalidParams(key, "expected a non-empty array of strings")
        }
        var out: [[UInt8]] = []
        out.reserveCapacity(items.count)
        for (i, item) in items.enumerated() {
            guard let text = item.stringValue else { throw .invalidParams(key, "expected strings, got \(item.typeName) at index \(i)") }
            guard let v = decode(text, as: form) else { throw .invalidParams(key, "\(notDecodable(form)) at index \(i)") }
            out.append(v)
        }
        return out
    }

    /// Which of `keys` are given (present and not null).
    private static func given(_ params: RPCParams, _ keys: [String]) -> [String] {
        keys.filter { params[$0] != nil }
    }

    /// `text` decoded as the form `value`, `value_hex` or `value_base64`; nil when it is not.
    private static func decode(_ text: String, as form: String) -> [UInt8]? {
        switch form {
        case "value": Array(text.utf8)
        case "value_hex": parseHex(text)
        default: Data(base64Encoded: text).map { Array($0) }
        }
    }

    private static func notDecodable(_ form: String) -> String {
        form == "value_hex" ? "not hex: expected pairs of 0-9a-f" : "not valid base64"
    }

    static func hex(_ b: [UInt8]) -> String { hexString(b) }

    /// A value as hex, plus UTF-8 text when it is printable text.
    static func valueJSON(_ v: [UInt8], extra: [String: JSONValue] = [:]) -> JSONValue {
        var o = extra
        o["value_hex"] = .string(hex(v))
        if let s = String(validating: v, as: UTF8.self), !s.unicodeScalars.contains(where: { $0.value < 0x20 && $0 != "\n" && $0 != "\t" }) {
            o["value"] = .string(s)
        }
        return .object(o)
    }

    static func json(_ app: LocalGattApplication, registeredOn: BluetoothAddress?) -> JSONValue {
        [
            "id": .string(app.id), "name": .string(app.definition.name), "root": .string(app.root.rawValue),
            "registered": .bool(registeredOn != nil), "address": registeredOn.map { .string($0.description) } ?? .null,
            "services": .array(app.definition.services.map { s in
                ["uuid": .string(s.uuid.uuidString), "primary": .bool(s.primary),
                 "characteristics": .array(app.characteristics.filter { s.characteristics.contains($0.definition) }
                     .map { c in valueJSON(c.value, extra: [
                         "uuid": .string(c.uuid.uuidString), "flags": .array(c.definition.flags.map { .string($0.rawValue) }),
                         "subscribers": .int(Int64(c.subscriberCount)), "read_handler": .bool(c.hasReadHandler),
                     ]) })]
            }),
        ]
    }

    static func rpc(_ e: GattServerError) -> RPCError {
        switch e {
        case .bluez(let b): PeerlinkDaemon.rpc(b)
        case .registration(let why): RPCError(code: RPCErrorCode.dbusError, message: "bluetoothd refused the application: \(why)", data: ["kind": "registration-failed"])
        case .unknownApplication(let id): RPCError(code: RPCErrorCode.invalidParams, message: "invalid params: id: no application \(id)", data: ["kind": "unknown-application"])
        }
    }

    static func rpc(_ e: GattNotifyError) -> RPCError {
        let kind: String
        switch e {
        case .unknownCharacteristic: kind = "unknown-characteristic"
        case .notNotifiable: kind = "not-notifiable"
        case .noSubscribers: kind = "no-subscribers"
        case .tooLong: kind = "too-long"
        case .deviceNotSubscribed: kind = "device-not-subscribed"
        case .failed: kind = "failed"
        case .interrupted(let sent, _, _):
            return RPCError(code: RPCErrorCode.invalidState, message: e.description, data: ["kind": "interrupted", "sent": .int(Int64(sent))])
        }
        return RPCError(code: RPCErrorCode.invalidState, message: e.description, data: ["kind": .string(kind)])
    }
}
