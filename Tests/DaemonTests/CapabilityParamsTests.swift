import BLE
import BlueZ
import Control
@testable import Daemon
@testable import Peer
import Session
import TestSupport
import Testing

/// The parameter checks of the BLE capabilities, without a daemon: what each accepts, and the
/// exact error (param and message) for what it refuses.
@Suite(.ownThreads, .memoryHeavy) struct CapabilityParamsTests {
    /// The message of the RPC error `body` throws, nil when it throws none.
    static func message<T>(_ body: () throws(RPCError) -> T) -> String? {
        do {
            _ = try body()
            return nil
        } catch {
            return error.message
        }
    }

    // MARK: Shared BLE params

    @Test func attributeValues() throws {
        #expect(try BLEParams.value(RPCParams(["value": "hi"])) == Array("hi".utf8))
        #expect(try BLEParams.value(RPCParams(["value_hex": "00ff"])) == [0, 255])
        #expect(try BLEParams.value(RPCParams(["value_base64": "AQI="])) == [1, 2])
        #expect(Self.message { () throws(RPCError) in try BLEParams.value(RPCParams()) }
            == "invalid params: value: required: give value (UTF-8 text), value_hex or value_base64")
        #expect(Self.message { () throws(RPCError) in try BLEParams.value(RPCParams(["value": "a", "value_hex": "00"])) }
            == "invalid params: value: give one of value, value_hex, not several")
        #expect(Self.message { () throws(RPCError) in try BLEParams.value(RPCParams(["value_hex": "0g"])) }
            == "invalid params: value_hex: not hex: expected pairs of 0-9a-f")
        #expect(Self.message { () throws(RPCError) in try BLEParams.value(RPCParams(["value_base64": "!!"])) }
            == "invalid params: value_base64: not valid base64")
    }

    @Test func adaptersAddressesAndUUIDs() throws {
        #expect(try BLEParams.adapter(RPCParams()) == nil)
        #expect(try BLEParams.adapter(RPCParams(["adapter": "hci1"])) == AdapterSelector("hci1"))
        #expect(Self.message { () throws(RPCError) in try BLEParams.adapter(RPCParams(["adapter": "usb0"])) }
            == "invalid params: adapter: expected hciN or an address like 00:AA:01:00:00:00, got \"usb0\"")
        #expect(Self.message { () throws(RPCError) in try BLEParams.deviceAddress(RPCParams(["address": "nope"])) }
            == "invalid params: address: expected a device address like 00:AA:01:01:00:01, got \"nope\"")
        #expect(Self.message { () throws(RPCError) in try BLEParams.device(RPCParams(["device": "nope"])) }
            == "invalid params: device: expected an address like 00:AA:01:01:00:01, got \"nope\"")
        #expect(try BLEParams.device(RPCParams()) == nil)
        #expect(try BLEParams.uuids(RPCParams(["services": ["180d", "2a37"]]), "services").count == 2)
        do {
            _ = try BLEParams.uuids(RPCParams(["services": ["180d", "zz"]]), "services")
            Issue.record("a bad UUID was taken")
        } catch {
            #expect(error.data?["param"] == "services[1]")
        }
    }

    // MARK: GATT

    @Test func notifyValues() throws {
        #expect(try GattCapability.notifyValues(RPCParams(["value": "a"])) == [[97]])
        #expect(try GattCapability.notifyValues(RPCParams(["values_hex": ["01", "0203"]])) == [[1], [2, 3]])
        #expect(Self.message { () throws(RPCError) in try GattCapability.notifyValues(RPCParams(["values_hex": ["01", "zz"]])) }
            == "invalid params: values_hex: not hex: expected pairs of 0-9a-f at index 1")
        #expect(Self.message { () throws(RPCError) in try GattCapability.notifyValues(RPCParams(["values": []])) }
            == "invalid params: values: expected a non-empty array of strings")
        #expect(Self.message { () throws(RPCError) in try GattCapability.notifyValues(RPCParams(["values": [1]])) }
            == "invalid params: values: expected strings, got number at index 0")
        #expect(Self.message { () throws(RPCError) in try GattCapability.notifyValues(RPCParams(["value": "a", "values": ["b"]])) }
            == "invalid params: value: give one of value, values, not several")
    }

    @Test func answers() throws {
        let ok = try GattCapability.answer(RPCParams(["request": "r1", "value": "x"]))
        #expect(ok.request == "r1" && ok.result == .success([120]))
        #expect(try GattCapability.answer(RPCParams(["request": "r2", "error": "0x80"])).result == .failure(.application(0x80)))
        #expect(try GattCapability.answer(RPCParams(["request": "r2", "error": "not-permitted"])).result == .failure(.notPermitted))
        #expect(Self.message { () throws(RPCError) in try GattCapability.answer(RPCParams(["request": "r3", "error": "nope"])) }
            == "invalid params: error: expected invalid-offset, invalid-value-length, not-permitted, not-authorized, not-supported, in-progress or 0x80..0x9f, got \"nope\"")
        #expect(Self.message { () throws(RPCError) in try GattCapability.answer(RPCParams(["request": "r3", "value": "x", "extra": 1])) }
            == "invalid params: extra: unknown parameter")
    }

    @Test func registrations() throws {
        #expect(Self.message { () throws(RPCError) in try GattCapability.registration(RPCParams(), defaultAdapter: nil) }
            == "invalid params: definition: required: the definition document (an object)")
        let doc: JSONValue = ["name": "t", "services": [["uuid": "180d", "characteristics": [["uuid": "2a37", "flags": ["read"]]]]]]
        let (def, adapter) = try GattCapability.registration(RPCParams(["definition": doc]), defaultAdapter: "hci1")
        #expect(def.name == "t" && adapter == AdapterSelector("hci1"))
        let bad = Self.message { () throws(RPCError) in try GattCapability.registration(RPCParams(["definition": ["services": 3], "source": "x.json"]), defaultAdapter: nil) }
        #expect(bad?.hasPrefix("invalid definition: x.json: ") == true)
    }

    // MARK: Central

    @Test func scans() throws {
        let (filter, timeout) = try CentralCapability.scan(RPCParams(["services": ["180d"], "name": "Po", "rssi": -70, "timeout": 1.5]))
        #expect(filter.services.count == 1 && filter.namePrefix == "Po" && filter.minimumRSSI == -70 && !filter.duplicates)
        #expect(timeout == .milliseconds(1500))
        #expect(try CentralCapability.scan(RPCParams()).1 == nil)
        #expect(Self.message { () throws(RPCError) in try CentralCapability.scan(RPCParams(["rssi": 30])) }
            == "invalid params: rssi: must be between -127 and 20, got 30")
        #expect(Self.message { () throws(RPCError) in try CentralCapability.scan(RPCParams(["frobnicate": true])) }
            == "invalid params: frobnicate: unknown parameter")
    }

    @Test func connections() throws {
        let r = try CentralCapability.connect(RPCParams(["address": "00:AA:01:01:00:01"]))
        #expect(r.address.description == "00:AA:01:01:00:01" && r.type == nil && r.timeout == .seconds(30) && !r.keep)
        #expect(Self.message { () throws(RPCError) in try CentralCapability.connect(RPCParams(["address": "00:AA:01:01:00:01", "address_type": "weird"])) }
            == "invalid params: address_type: expected public or random, got \"weird\"")
        #expect(Self.message { () throws(RPCError) in try CentralCapability.connect(RPCParams(["address": "00:AA:01:01:00:01", "timeout": 0.1])) }
            == "invalid params: timeout: must be between 0.5 and 600.0, got 0.1")
    }

    @Test func readsWritesAndSubscriptions() throws {
        let (a, ch, service) = try CentralCapability.target(RPCParams(["address": "00:AA:01:01:00:01", "characteristic": "2a37"]))
        let heartRate = try BluetoothUUID(parsing: "2a37")
        #expect(a.description == "00:AA:01:01:00:01" && ch == heartRate && service == nil)
        #expect(Self.message { () throws(RPCError) in try CentralCapability.target(RPCParams(["address": "00:AA:01:01:00:01"])) }
            == "invalid params: characteristic: required")
        let w = try CentralCapability.write(RPCParams(["value_hex": "0102", "command": true]))
        #expect(w.value == [1, 2] && w.command && w.offset == 0)
        #expect(Self.message { () throws(RPCError) in try CentralCapability.write(RPCParams(["value_hex": .string(String(repeating: "00", count: 513))])) }
            == "invalid params: value: 513 bytes: a characteristic value is at most 512 bytes")
        #expect(Self.message { () throws(RPCError) in try CentralCapability.delivery(RPCParams(["batch": true, "stream": true])) }
            == "invalid params: stream: give batch or stream, not both")
        #expect(try CentralCapability.delivery(RPCParams(["indicate": true])) == (indicate: true, batch: false, stream: false))
    }

    // MARK: Advertising and the agent

    @Test func advertisements() throws {
        let d = try AdvertiseCapability.definition(RPCParams(["name": "pl", "services": ["180d"], "interval_ms": ["min": 100, "max": 200]]))
        #expect(d.localName == "pl" && d.serviceUUIDs.count == 1 && d.interval == 100...200 && d.discoverable && d.connectable)
        #expect(Self.message { () throws(RPCError) in try AdvertiseCapability.definition(RPCParams(["name": ""])) }
            == "invalid params: name: an empty name; leave it out instead")
        #expect(Self.message { () throws(RPCError) in try AdvertiseCapability.definition(RPCParams(["interval_ms": ["min": 10, "max": 20]])) }
            == "invalid params: interval_ms: expected {\"min\": ms, \"max\": ms} with 20 <= min <= max <= 10240")
        #expect(Self.message { () throws(RPCError) in try AdvertiseCapability.definition(RPCParams(["manufacturer": [["id": 70000, "data_hex": "00"]]])) }
            == "invalid params: manufacturer[0].id: expected a company id from 0 to 65535")
    }

    @Test func resourceSettings() throws {
        #expect(try PeerCapability.settings([:]).config.acceptResources == .ask)
        #expect(try PeerCapability.settings(["peer.accept_resources": "trusted"]).config.acceptResources == .trusted)
        #expect(throws: ConfigError.self) { try PeerCapability.settings(["peer.accept_resources": "maybe"]) }
        #expect(try PeerCapability.settings([:]).config.transferIdleTimeout == .seconds(60))
        #expect(try PeerCapability.settings(["peer.transfer_idle_timeout": "2.5"]).config.transferIdleTimeout == .milliseconds(2500))
        for bad in ["0", "0.5", "3601", "soon", ""] {
            #expect(throws: ConfigError.self, "\(bad)") { try PeerCapability.settings(["peer.transfer_idle_timeout": bad]) }
        }
        let defaults = try PeerCapability.inboxSettings([:], stateDirectory: "/var/lib/peerlink")
        #expect(defaults.directory == "/var/lib/peerlink/peer/inbox" && defaults.limits.maxResourceBytes == 4 << 30)
        #expect(try PeerCapability.inboxSettings(["peer.max_resource_bytes": "64K", "peer.inbox_dir": "/srv/in"], stateDirectory: "/x")
            == ("/srv/in", Inbox.Limits(maxResourceBytes: 65_536)))
        for bad in ["", "12X", "0", "-1", "99999999999T"] {
            #expect(throws: ConfigError.self, "\(bad)") { try PeerCapability.inboxSettings(["peer.max_resource_bytes": bad], stateDirectory: "/x") }
        }
        #expect(throws: ConfigError.self) { try PeerCapability.inboxSettings(["peer.inbox_dir": "relative"], stateDirectory: "/x") }
    }

    /// A resource's numbers come from peers (any u64): the events carry them clamped, never
    /// trapping.
    @Test func resourceEventsTakeAnySize() throws {
        let peer = try #require(PeerID(bytes: [UInt8](repeating: 9, count: 32)))
        var t = ResourceTransfer(id: 1, peer: peer, outgoing: false, name: "huge", size: .max, sha256: [UInt8](repeating: 1, count: 32), mediaType: "x/y")
        t.bytes = .max
        let (topic, data) = PeerCapability.event(.ended(t, reason: .tooLarge, detail: "over", byPeer: false))
        #expect(topic == "peer.resource-ended" && data["size"] == .int(.max) && data["bytes"] == .int(.max))
        t.bytes = 10
        t.offset = 20
        #expect(PeerCapability.event(.progress(t, bytesPerSecond: 5)).data["seconds_left"] != nil)
    }

    @Test func agentSettingsAndPolicies() throws {
        let defaults = try AgentCapability.settings([:])
        #expect(defaults.policy.description == AgentPolicy.justWorks.description && defaults.timeout == 30)
        #expect(try AgentCapability.settings(["agent.policy": "confirm", "agent.timeout": "5"]).timeout == 5)
        #expect(throws: ConfigError.self) { try AgentCapability.settings(["agent.policy": "sometimes"]) }
        #expect(throws: ConfigError.self) { try AgentCapability.settings(["agent.timeout": "0"]) }
        #expect(try AgentCapability.policy(RPCParams()) == nil)
        #expect(try AgentCapability.policy(RPCParams(["policy": "reject"]))?.description == "reject")
        #expect(Self.message { () throws(RPCError) in try AgentCapability.policy(RPCParams(["policy": "passkey 12"])) }
            == "invalid params: policy: expected just-works, confirm, passkey NNNNNN (six digits) or reject, got \"passkey 12\"")
    }

    @Test func txtKeysHaveNoEquals() throws {
        #expect(try DNSSDCapability.txt(RPCParams(["txt": ["b": "2", "a": true]])).strings == ["a", "b=2"])
        #expect(Self.message { () throws(RPCError) in try DNSSDCapability.txt(RPCParams(["txt": ["a=b": "1"]])) }
            == "invalid params: txt: the key \"a=b\" must not contain '='")
        // "=" then a combining mark is one Character, which is not "=": still refused.
        #expect(Self.message { () throws(RPCError) in try DNSSDCapability.txt(RPCParams(["txt": ["a=\u{301}": "1"]])) }
            == "invalid params: txt: the key \"a=\u{301}\" must not contain '='")
    }
}
