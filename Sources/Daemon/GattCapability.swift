import BLE
import BlueZ
import Control
import FoundationEssentials
import Logging
import Synchronization
import SystemKit

/// The GATT server: applications from definition files, reads, writes, notifications, and
/// reads answered by a control client (`gatt.handle-reads` / `gatt.respond`, through a
/// `GattReadBroker`). Parameters and result shapes are in `GattParams.swift`.
final class GattCapability: DaemonCapability {
    let name = "gatt"
    private let context = Mutex<DaemonContext?>(nil)
    private let server = Mutex<GattServer?>(nil)
    private let nextStream = Mutex<UInt64>(1)
    /// Notification streams open now, by id, with their application (an unregistered
    /// application's streams end then, not at their next value).
    private let openStreams = Mutex<[String: (app: String, stream: NotifyStream)]>([:])
    /// `gatt.notify`'s parameters: made once, not hashed again for every value sent.
    static let notifyParams: Set<String> = ["uuid", "value", "value_hex", "value_base64", "values", "values_hex", "values_base64", "app", "device"]

    func register(_ ctx: DaemonContext) {
        context.withLock { $0 = ctx }
        let gatt = GattServer(logger: ctx.logger.child("gatt")) { [weak self] e in self?.publish(e) }
        server.withLock { $0 = gatt }
        let reads = GattReadBroker { id, request, owner in
            ctx.send(topic: ControlEvent.gattReadRequest, data: GattJSON.readRequest(id, request), to: owner)
        }
        ctx.onClientClose { id in reads.ownerGone(id) }

        ctx.register(ControlMethod.gattRegister) { params, _ throws(RPCError) in
            let (definition, selector) = try Self.registration(params, defaultAdapter: ctx.defaultAdapter)
            let app = try await rpc { try await gatt.add(definition, adapter: selector) }
            return await BLEJSON.application(app, registeredOn: gatt.list.first { $0.app.id == app.id }?.registeredOn)
        }
        ctx.register(ControlMethod.gattUnregister) { [weak self] params, _ throws(RPCError) in
            try params.rejectUnknown(allowed: ["id"])
            let id = try params.string("id")
            try await rpc { try await gatt.remove(id) }
            self?.endStreams(of: id)
            return ["id": .string(id), "removed": true]
        }
        ctx.register(ControlMethod.gattList) { params, _ throws(RPCError) in
            try params.rejectUnknown(allowed: [])
            let apps = await gatt.list
            return ["applications": .array(apps.map { BLEJSON.application($0.app, registeredOn: $0.registeredOn) })]
        }
        ctx.register(ControlMethod.gattSet) { params, _ throws(RPCError) in
            try params.rejectUnknown(allowed: ["uuid", "value", "value_hex", "value_base64", "app"])
            let c = try Self.characteristic(params, gatt)
            let v = try BLEParams.value(params)
            // Too long for the characteristic is the caller's value at fault, not a notification state.
            do { try c.setValue(v) } catch { throw RPCError(code: RPCErrorCode.invalidParams, message: "invalid params: value: \(error)", data: ["kind": "too-long"]) }
            return BLEJSON.value(v, extra: ["uuid": .string(c.uuid.uuidString), "app": .string(c.application)])
        }
        // Quick: a value goes straight into the notification socket (or its outbox) from the
        // client's queue; only a full socket makes the request wait (as a task).
        ctx.register(ControlMethod.gattNotify, quick: { params, _ throws(RPCError) in
            try params.rejectUnknown(allowed: Self.notifyParams)
            let c = try Self.characteristic(params, gatt)
            let values = try Self.notifyValues(params)
            let device = try BLEParams.device(params)
            let rest: LocalCharacteristic.NotifyRest?
            do throws(GattNotifyError) {
                rest = try c.notifyWithoutWaiting(values: values, device: device)
            } catch {
                throw error.rpcError
            }
            guard let rest else { return .reply(GattJSON.notified(c, values)) }
            return .later { () async throws(RPCError) -> JSONValue in
                do throws(GattNotifyError) {
                    try await rest.finish()
                } catch {
                    throw error.rpcError
                }
                return GattJSON.notified(c, values)
            }
        })
        ctx.register(ControlMethod.gattNotifyStream) { [weak self] params, rc throws(RPCError) in
            try params.rejectUnknown(allowed: ["uuid", "app", "device"])
            let c = try Self.characteristic(params, gatt)
            guard c.definition.has(GattFlag.notifyLike) else { throw GattNotifyError.notNotifiable(c.uuid).rpcError }
            let device = try BLEParams.device(params)
            // As gatt.notify refuses it (the stream took every value as "no subscriber").
            if let device, !c.perDeviceNotify { throw GattNotifyError.deviceNotSubscribed(device, perDeviceSupported: false).rpcError }
            guard let self else { throw .internalError("shutting down") }
            return try self.openStream(c, device: device, gatt: gatt, rc)
        }
        ctx.register(ControlMethod.gattHandleReads) { params, rc throws(RPCError) in
            try params.rejectUnknown(allowed: ["uuid", "app", "enable"])
            let c = try Self.characteristic(params, gatt)
            let enable = try params.optionalBool("enable") ?? true
            let owner = rc.clientID
            if enable {
                reads.handle(c, by: owner)
                // A client dropped while this ran (a batch goes on after its close) would hold
                // the reads for ever: every central's read refused until another took over.
                if rc.connectionClosed { reads.release(c, by: owner) }
            } else if !reads.release(c, by: owner), c.hasReadHandler {
                throw RPCError(code: RPCErrorCode.invalidState, message: "reads of \(c.uuid.uuidString) are handled by another connection",
                               data: ["kind": "not-yours"])
            }
            return GattJSON.characteristic(c, ["handled": .bool(enable)])
        }
        ctx.register(ControlMethod.gattRespond) { params, rc throws(RPCError) in
            let (id, result) = try Self.answer(params)
            try check { try reads.answer(id, from: rc.clientID, with: result) }
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

    // MARK: Streams

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
            _ = self?.openStreams.withLock { $0.removeValue(forKey: id) }
            _ = self?.context.withLock({ $0 })?.send(topic: ControlEvent.gattStreamEnded, data: .object(data), to: owner)
        }
        openStreams.withLock { $0[id] = (app, stream) }
        rc.onConnectionClose(while: { [weak self] in self?.openStreams.withLock { $0[id] != nil } ?? false }) { [weak stream] in stream?.stop() }
        rc.passWithReply(theirs)
        var out: [String: JSONValue] = [
            "stream": .string(id), "uuid": .string(uuid.uuidString), "app": .string(app), "fd": true,
            "subscribers": .int(Int64(c.subscriberCount)), "max_length": .int(Int64(c.definition.maxLength)),
        ]
        if let device { out["device"] = .string(device.description) }
        return .object(out)
    }

    /// The notification streams of an application that was unregistered end now (they
    /// ended at their next value, which a sensor writing every few minutes was long in sending).
    private func endStreams(of app: String) {
        for s in openStreams.withLock({ $0.values.filter { $0.app == app } }) { s.stream.stop(.unregistered) }
    }

    // MARK: Events

    private func publish(_ e: GattServerEvent) {
        guard let ctx = context.withLock({ $0 }) else { return }
        switch e {
        case .registered(let app, let a, let again):
            ctx.publish(topic: again ? ControlEvent.gattReregistered : ControlEvent.gattRegistered,
                        data: ["app": .string(app), "adapter": .string(a.name), "address": .string(a.address.description)])
        case .registrationFailed(let app, let a, let why):
            ctx.publish(topic: ControlEvent.gattRegistrationFailed, data: ["app": .string(app), "address": BLEJSON.address(a), "reason": .string(why)])
        case .read(let app, let uuid, let d, let offset):
            ctx.publish(topic: ControlEvent.gattRead, data: GattJSON.attributeEvent(app, uuid, d, ["offset": .int(Int64(offset))]))
        case .wrote(let app, let uuid, let d, let data, let offset, let type, let value):
            ctx.publish(topic: ControlEvent.gattWrite, data: BLEJSON.value(data, extra: [
                "app": .string(app), "uuid": .string(uuid.uuidString), "device": BLEJSON.address(d), "offset": .int(Int64(offset)),
                "type": type.map { .string($0) } ?? .null, "stored_hex": .string(BLEJSON.hex(value)),
            ]))
        case .subscribed(let app, let uuid, let d, let mtu, let via):
            ctx.publish(topic: ControlEvent.gattSubscribed, data: GattJSON.attributeEvent(app, uuid, d, ["mtu": BLEJSON.int(mtu), "via": .string(via)]))
        case .unsubscribed(let app, let uuid, let d):
            ctx.publish(topic: ControlEvent.gattUnsubscribed, data: GattJSON.attributeEvent(app, uuid, d))
        case .confirmed(let app, let uuid, let d):
            ctx.publish(topic: ControlEvent.gattConfirmed, data: GattJSON.attributeEvent(app, uuid, d))
        }
    }
}

// MARK: Errors

extension GattServerError: RPCErrorConvertible {
    /// Adding or removing an application failed.
    var rpcError: RPCError {
        switch self {
        case .bluez(let b): b.rpcError
        case .registration(let why): RPCError(code: RPCErrorCode.dbusError, message: "bluetoothd refused the application: \(why)", data: ["kind": "registration-failed"])
        case .unknownApplication(let id): RPCError(code: RPCErrorCode.invalidParams, message: "invalid params: id: no application \(id)", data: ["kind": "unknown-application"])
        }
    }
}

extension GattNotifyError: RPCErrorConvertible {
    /// A notification could not be sent: always the state of the characteristic or its subscribers.
    var rpcError: RPCError {
        let kind: String
        switch self {
        case .unknownCharacteristic: kind = "unknown-characteristic"
        case .notNotifiable: kind = "not-notifiable"
        case .noSubscribers: kind = "no-subscribers"
        case .tooLong, .overMaxLength: kind = "too-long"
        case .deviceNotSubscribed: kind = "device-not-subscribed"
        case .failed: kind = "failed"
        case .interrupted(let sent, _, _):
            return RPCError(code: RPCErrorCode.invalidState, message: description, data: ["kind": "interrupted", "sent": .int(Int64(sent))])
        }
        return RPCError(code: RPCErrorCode.invalidState, message: description, data: ["kind": .string(kind)])
    }
}

extension GattDefinitionError: RPCErrorConvertible {
    /// A definition document the server cannot use: a parameter error naming the place in it.
    var rpcError: RPCError {
        RPCError(code: RPCErrorCode.invalidParams, message: "invalid definition: \(description)",
                 data: ["kind": "invalid-definition", "source": .string(source), "path": .string(path), "reason": .string(reason)])
    }
}

extension GattReadAnswerError: RPCErrorConvertible {
    /// A `gatt.respond` for a read this connection has no longer (or never had) pending.
    var rpcError: RPCError {
        switch self {
        case .unknownRequest: RPCError(code: RPCErrorCode.invalidState, message: description, data: ["kind": "unknown-request"])
        case .tooLong(_, _, let maxLength):
            RPCError(code: RPCErrorCode.invalidParams, message: "invalid params: value_hex: \(description)",
                     data: ["kind": "too-large", "param": "value_hex", "max_length": .int(Int64(maxLength))])
        }
    }
}
