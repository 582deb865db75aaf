import BLE
import BlueZ
import Control
@testable import Daemon
import TestSupport
import Testing

/// BlueZ reports the agent's and the advertiser's events and errors as types; the daemon
/// alone words them for control clients. These are the topics, data and messages clients
/// got when BlueZ wrote them itself.
@Suite(.ownThreads, .memoryHeavy) struct PeripheralWordingTests {
    static let device = BluetoothAddress("00:AA:01:01:00:01")

    @Test func agentEventsKeepTheirTopicsAndData() {
        func event(_ e: AgentEvent) -> String {
            let (topic, data) = AgentCapability.event(e)
            return "\(topic) \(String(decoding: data.encoded(), as: UTF8.self))"
        }
        #expect(event(.asked(.confirm, device: Self.device, passkey: 42)) == #"agent.confirm {"device":"00:AA:01:01:00:01","passkey":"000042"}"#)
        #expect(event(.asked(.authorize, device: nil, passkey: nil)) == #"agent.authorize {"device":null,"passkey":null}"#)
        #expect(event(.asked(.authorizeService, device: Self.device, passkey: nil)) == #"agent.authorize-service {"device":"00:AA:01:01:00:01","passkey":null}"#)
        #expect(event(.displayPinCode(device: Self.device, pinCode: "0000")) == #"agent.display {"device":"00:AA:01:01:00:01","pincode":"0000"}"#)
        #expect(event(.displayPinCode(device: nil, pinCode: "")) == #"agent.display {"device":null,"pincode":null}"#)
        #expect(event(.displayPasskey(device: Self.device, passkey: 123456)) == #"agent.display {"device":"00:AA:01:01:00:01","passkey":"123456"}"#)
        #expect(event(.canceled) == "agent.canceled {}")
        #expect([AgentQuestion.confirm, .authorize, .authorizeService].map(AgentCapability.name) == ["confirm", "authorize", "authorize-service"])
    }

    @Test func noInstancesSaysWhichCommandsFreeOne() {
        let e = AdvertiseError.noInstances(active: 4, adapter: "hci0").rpcError
        #expect(e.message == "maximum advertisements reached on hci0: 4 running, no instance left; stop one first (peerlink advertise list / stop)")
        #expect(e.code == RPCErrorCode.busy && e.data?["kind"] == "no-instances")
        #expect(!AdvertiseError.noInstances(active: 4, adapter: "hci0").description.contains("peerlink"), "BlueZ names no peerlink command")
    }
}
