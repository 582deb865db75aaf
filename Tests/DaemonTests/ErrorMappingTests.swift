import BLE
@testable import BlueZ
import Control
@testable import Daemon
import DBus
import DNSSD
import TestSupport
import Testing

/// Every domain error case → the JSON-RPC code, message and `data.kind` a control client
/// sees: the table pins what `RPCErrorConvertible` conformances promise, case by case.
@Suite(.ownThreads, .memoryHeavy) struct ErrorMappingTests {
    struct Row: Sendable, CustomStringConvertible {
        let error: any RPCErrorConvertible
        let code: Int
        let message: String
        let kind: String?
        var description: String { "\(error)" }
    }

    static let adapter = AdapterInfo(path: "/org/bluez/hci0", properties: [
        "Address": .string("00:AA:01:00:00:00"), "PowerState": .string("off-blocked"),
    ])!
    static let bus = BusError(name: "org.bluez.Error.Failed", message: "boom")

    static var bluez: [Row] { [
        Row(error: BlueZError.unavailable("bluetoothd is not running"), code: -32001, message: "Bluetooth is unavailable: bluetoothd is not running", kind: "bluetooth-unavailable"),
        Row(error: BlueZError.adapterNotFound(AdapterSelector("hci3")!, known: ["hci0"]), code: -32002, message: "no adapter hci3; adapters present: hci0", kind: "adapter-not-found"),
        Row(error: BlueZError.noAdapters, code: -32002, message: "no Bluetooth adapter is present", kind: "no-adapters"),
        Row(error: BlueZError.blocked(adapter), code: -32003,
            message: "adapter hci0 (00:AA:01:00:00:00) is blocked by rfkill (power state off-blocked); unblock it with 'rfkill unblock bluetooth'", kind: "rfkill-blocked"),
        Row(error: BlueZError.timeout("powering hci0"), code: -32004, message: "timed out: powering hci0", kind: "timeout"),
        Row(error: BlueZError.bus(BlueZCallError(bus)), code: -32005, message: "BlueZ error org.bluez.Error.Failed: boom", kind: "dbus-error"),
    ] }

    static var gatt: [Row] { [
        Row(error: GattServerError.bluez(.noAdapters), code: -32002, message: "no Bluetooth adapter is present", kind: "no-adapters"),
        Row(error: GattServerError.registration("not ready"), code: -32005, message: "bluetoothd refused the application: not ready", kind: "registration-failed"),
        Row(error: GattServerError.unknownApplication("app9"), code: -32602, message: "invalid params: id: no application app9", kind: "unknown-application"),
        Row(error: GattReadAnswerError.unknownRequest("r7", timeout: .seconds(5)), code: -32008,
            message: "no pending read request r7 for this connection (it may have timed out after 5.0 seconds)", kind: "unknown-request"),
    ] + notify.map { e, kind in Row(error: e, code: -32008, message: e.description, kind: kind) } }

    static var notify: [(GattNotifyError, String)] { [
        (.unknownCharacteristic(try! BluetoothUUID(parsing: "2a37")), "unknown-characteristic"),
        (.notNotifiable(try! BluetoothUUID(parsing: "2a37")), "not-notifiable"),
        (.noSubscribers(try! BluetoothUUID(parsing: "2a37")), "no-subscribers"),
        (.tooLong(length: 30, limit: 20, mtu: 23), "too-long"),
        (.deviceNotSubscribed(BluetoothAddress("00:AA:01:01:00:01")!, perDeviceSupported: true), "device-not-subscribed"),
        (.failed("EPIPE"), "failed"),
        (.interrupted(sent: 2, of: 5, reason: "the central went away"), "interrupted"),
    ] }

    static var central: [Row] { [
        Row(error: CentralError.bluez(.unavailable("no bus")), code: -32001, message: "Bluetooth is unavailable: no bus", kind: "bluetooth-unavailable"),
        Row(error: CentralError.notFound("device 00:AA:01:01:00:01"), code: -32009, message: "not found: device 00:AA:01:01:00:01", kind: "not-found"),
        Row(error: CentralError.invalidState("00:AA:01:01:00:01 is not connected"), code: -32008, message: "00:AA:01:01:00:01 is not connected", kind: "invalid-state"),
        Row(error: CentralError.timeout("connecting"), code: -32004, message: "timed out: connecting", kind: "timeout"),
        Row(error: CentralError.refused("reading 2a37", BlueZCallError(BusError(name: "org.bluez.Error.NotPermitted", message: "Read not permitted"))), code: -32005,
            message: "reading 2a37 failed: org.bluez.Error.NotPermitted: Read not permitted", kind: "bluez-error"),
        Row(error: CentralError.notSupported("indications"), code: -32007, message: "not supported: indications", kind: "not-supported"),
        Row(error: CentralError.invalid("value", "longer than MTU-3 (20)"), code: -32602, message: "invalid params: value: longer than MTU-3 (20)", kind: nil),
        Row(error: UnknownCentralID(what: "scan", id: "scan-9"), code: -32009, message: "no scan scan-9 of this connection's (a scan belongs to the connection that made it)", kind: "not-found"),
    ] }

    static var advertise: [Row] { [
        Row(error: AdvertiseError.bluez(.noAdapters), code: -32002, message: "no Bluetooth adapter is present", kind: "no-adapters"),
        Row(error: AdvertiseError.tooLarge("needs 40 bytes, 31 fit"), code: -32602, message: "the advertisement does not fit: needs 40 bytes, 31 fit", kind: "too-large"),
        Row(error: AdvertiseError.noInstances(active: 2, adapter: "hci0"), code: -32006,
            message: "maximum advertisements reached on hci0: 2 running, no instance left; stop one first (peerlink advertise list / stop)", kind: "no-instances"),
        Row(error: AdvertiseError.refused("Failed"), code: -32005, message: "bluetoothd refused the advertisement: Failed", kind: "refused"),
        Row(error: AdvertiseError.unknown("adv3"), code: -32602, message: "invalid params: id: no advertisement adv3", kind: "unknown-advertisement"),
    ] }

    static var dnssd: [Row] { [
        Row(error: DNSSDError.invalid(param: "type", reason: "must start with _"), code: -32602, message: "invalid params: type: must start with _", kind: nil),
        Row(error: DNSSDError.unavailable("avahi-daemon is not running"), code: -32010, message: "DNS-SD is unavailable: avahi-daemon is not running", kind: "avahi-unavailable"),
        Row(error: DNSSDError.notFound(kind: "publication", id: "pub-1"), code: -32011, message: "no publication with ID pub-1", kind: "not-found"),
        Row(error: DNSSDError.avahi(operation: "publish", code: -8, message: "Local name collision"), code: -32012,
            message: "Avahi failed to publish: Local name collision (Avahi error -8)", kind: "avahi-error"),
        Row(error: DNSSDError.timeout("no answer", seconds: 5), code: -32004, message: "no answer within 5.0 s", kind: "timeout"),
        Row(error: DNSSDError.resolveFailed("web._http._tcp was not resolved"), code: -32013, message: "web._http._tcp was not resolved", kind: "not-resolved"),
    ] }

    static var agent: [Row] { [
        Row(error: AgentRegistrationError(underlying: bus), code: -32005, message: "registering the agent with bluetoothd failed: \(bus)", kind: "agent-registration"),
        Row(error: UnknownPairingRequest(id: "req-4"), code: -32008,
            message: "no pending pairing request req-4 (it may have been answered, canceled or timed out)", kind: "unknown-request"),
    ] }

    /// One domain's rows, shown by the domain's name in test output.
    struct Table: Sendable, CustomTestStringConvertible {
        let domain: String
        let rows: [Row]
        var testDescription: String { domain }
    }

    static var tables: [Table] {
        [Table(domain: "BlueZ", rows: bluez), Table(domain: "GATT server", rows: gatt), Table(domain: "central", rows: central),
         Table(domain: "advertising", rows: advertise), Table(domain: "DNS-SD", rows: dnssd), Table(domain: "agent", rows: agent)]
    }

    @Test(arguments: tables)
    func eachCaseHasItsCodeMessageAndKind(_ table: Table) {
        for row in table.rows {
            let e = row.error.rpcError
            #expect(e.code == row.code, "\(row)")
            #expect(e.message == row.message, "\(row)")
            #expect(e.data?["kind"]?.stringValue == row.kind, "\(row)")
        }
    }

    @Test func detailsForPrograms() {
        #expect(BlueZError.adapterNotFound(AdapterSelector("hci3")!, known: ["hci0"]).rpcError.data?["known"] == ["hci0"])
        #expect(BlueZError.bus(BlueZCallError(Self.bus)).rpcError.data?["name"] == "org.bluez.Error.Failed")
        #expect(GattNotifyError.interrupted(sent: 2, of: 5, reason: "x").rpcError.data?["sent"] == 2)
        #expect(DNSSDError.avahi(operation: "publish", code: -8, message: "m").rpcError.data?["avahi_error"] == -8)
        #expect(DNSSDError.notFound(kind: "browse", id: "b1").rpcError.data == ["kind": "not-found", "what": "browse", "id": "b1"])
        #expect(CentralError.invalid("value", "too long").rpcError.data == ["param": "value", "reason": "too long"])
    }

    @Test func definitionErrorsNameThePlaceInTheDocument() throws {
        let e = try #require(throws: GattDefinitionError.self) {
            try GattApplicationDefinition.parse(["services": [["uuid": "nonsense"]]], source: "app.json")
        }
        let r = e.rpcError
        #expect(r.code == RPCErrorCode.invalidParams)
        #expect(r.message == "invalid definition: \(e.description)")
        #expect(r.data?["kind"] == "invalid-definition" && r.data?["source"] == "app.json" && r.data?["path"] == .string(e.path))
    }

    struct Unexpected: Error {}

    @Test func handlersConvertOnce() async throws {
        // A domain error becomes its own RPC error, an RPCError passes as is, anything else is a bug.
        #expect(throws: CentralError.timeout("x").rpcError) { try check { throw CentralError.timeout("x") } }
        #expect(throws: RPCError.invalidParams("a", "b")) { try check { throw RPCError.invalidParams("a", "b") } }
        #expect(throws: RPCError.internalError("Unexpected()")) { try check { throw Unexpected() } }
        await #expect(throws: AdvertiseError.unknown("adv1").rpcError) { try await rpc { throw AdvertiseError.unknown("adv1") } }
        #expect(try await rpc { 42 } == 42)
    }
}
