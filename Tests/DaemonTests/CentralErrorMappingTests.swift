import BLE
import BlueZ
import Control
import DBus
@testable import Daemon
import TestSupport
import Testing

/// The daemon turns the central's typed errors into the texts users have always seen:
/// the `peerlink` command to run is added here, not in BlueZ.
@Suite(.ownThreads, .memoryHeavy) struct CentralErrorMappingTests {
    static let device = BluetoothAddress("00:AA:01:01:00:01")!
    static let hci0 = AdapterInfo(path: "/org/bluez/hci0", properties: ["Address": .string("00:AA:01:00:00:00"), "Powered": .boolean(false)])!

    @Test func hintsNamingAPeerlinkCommandAreAddedByTheDaemon() {
        let off = (.adapterOff(Self.hci0) as CentralError).rpcError
        #expect(off.message == "adapter hci0 (00:AA:01:00:00:00) is powered off; turn it on with 'peerlink adapter power on --adapter hci0'")
        #expect(off.code == RPCErrorCode.invalidState && off.data?["kind"] == "invalid-state")
        let notConnected = (.notConnected(Self.device) as CentralError).rpcError
        #expect(notConnected.message == "device 00:AA:01:01:00:01 is not connected; connect first ('peerlink connect 00:AA:01:01:00:01')")
        #expect(notConnected.code == RPCErrorCode.invalidState)
        let paired = (.refreshWouldUnpair(Self.device) as CentralError).rpcError
        #expect(paired.message == "00:AA:01:01:00:01 is paired: a refresh would remove its bond; use 'peerlink forget' and pair again to rebuild the cache")
        let hr = try! BluetoothUUID(parsing: "2a37"), svc = try! BluetoothUUID(parsing: "180d")
        let missing = (.characteristicNotFound(hr, service: svc, device: Self.device) as CentralError).rpcError
        #expect(missing.message == "not found: characteristic \(hr.uuidString) in service \(svc.uuidString) on 00:AA:01:01:00:01 (see 'peerlink services 00:AA:01:01:00:01')")
        #expect(missing.code == RPCErrorCode.notFound && missing.data?["kind"] == "not-found")
        let anywhere = (.characteristicNotFound(hr, service: nil, device: Self.device) as CentralError).rpcError
        #expect(anywhere.message == "not found: characteristic \(hr.uuidString) on 00:AA:01:01:00:01 (see 'peerlink services 00:AA:01:01:00:01')")
        // BlueZ's own texts say what is wrong and name no command.
        for e: CentralError in [.adapterOff(Self.hci0), .notConnected(Self.device), .refreshWouldUnpair(Self.device),
                                .characteristicNotFound(hr, service: nil, device: Self.device)] {
            #expect(!e.description.contains("peerlink"))
        }
    }

    @Test func attErrorsAreNamedInTheMessageAndTheData() {
        let att = BlueZCallError(BusError(name: "org.bluez.Error.Failed", message: "Operation failed with ATT error: 0x0e"))
        let r = (.refused("reading 2a19 of 00:AA:01:01:00:01", att) as CentralError).rpcError
        #expect(r.message == "reading 2a19 of 00:AA:01:01:00:01 failed: org.bluez.Error.Failed: Operation failed with ATT error: 0x0e (Unlikely Error (0x0e): pairing was refused or is needed)")
        #expect(r.code == RPCErrorCode.dbusError)
        #expect(r.data?["kind"] == "bluez-error" && r.data?["name"] == "org.bluez.Error.Failed")
        #expect(r.data?["message"] == "Operation failed with ATT error: 0x0e")
        #expect(r.data?["att_error"] == 14 && r.data?["att_name"] == "Unlikely Error")
        // Without an ATT code, the error reads as it always did.
        let plain = (.refused("pairing with 00:AA:01:01:00:01", BlueZCallError(BusError(name: "org.bluez.Error.AuthenticationRejected", message: "Authentication Rejected"))) as CentralError).rpcError
        #expect(plain.message == "pairing with 00:AA:01:01:00:01 failed: org.bluez.Error.AuthenticationRejected: Authentication Rejected")
        #expect(plain.data?["att_error"] == nil)
    }
}
