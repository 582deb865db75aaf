import BLE
import Control
import Foundation
import Testing

@Suite struct GattDefinitionTests {
    static func parse(_ text: String) throws(GattDefinitionError) -> GattApplicationDefinition {
        let json: JSONValue
        do { json = try JSONValue.parse(text) } catch { fatalError("test JSON invalid: \(error)") }
        return try GattApplicationDefinition.parse(json, source: "app.json")
    }

    @Test func referenceExampleParses() throws {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../examples/seed-peripheral.json")
        let json = try JSONValue.parse(Array(try Data(contentsOf: url)))
        let app = try GattApplicationDefinition.parse(json, source: "seed-peripheral.json")
        #expect(app.services.count == 1)
        let s = app.services[0]
        #expect(s.uuid.uuidString == "c4fb2349-72fe-4ca2-94d6-1f3cb16331ee" && s.primary)
        let c = s.characteristics[0]
        #expect(c.uuid.uuidString == "6a3e4b28-522d-4b3b-82a9-d5e2004534fc")
        #expect(c.flags == [.read, .notify])
        #expect(String(decoding: c.value, as: UTF8.self) == "Kenshin Cui's Device")
        #expect(c.descriptors.count == 1 && c.descriptors[0].uuid.uuid16 == 0x2901)
    }

    @Test func everyFeatureParses() throws {
        let app = try Self.parse("""
        {"name":"full","services":[
          {"uuid":"180F","characteristics":[{"uuid":"2A19","flags":["read","notify","encrypt-read"],"value_hex":"64","max_length":1}]},
          {"uuid":"12345678","primary":false,"includes":["180f"],"characteristics":[
            {"uuid":"0000aaaa-0000-1000-8000-00805f9b34fb","flags":["write","write-without-response","reliable-write","authorize"],
             "value_base64":"AQID","descriptors":[{"uuid":"2904","flags":["read"],"value_hex":"04 00 01 27 01 00 00"}]}]}]}
        """)
        #expect(app.name == "full")
        let battery = try BluetoothUUID(parsing: "180F")
        #expect(app.services[1].primary == false && app.services[1].includes == [battery])
        #expect(app.services[0].characteristics[0].value == [0x64] && app.services[0].characteristics[0].maxLength == 1)
        #expect(app.services[1].characteristics[0].value == [1, 2, 3])
        #expect(app.services[1].characteristics[0].descriptors[0].value == [4, 0, 1, 0x27, 1, 0, 0])
    }

    /// (document, path, words the reason must contain)
    static let bad: [(String, String, String)] = [
        (#"{"services":[]}"#, "services", "at least one service"),
        (#"{}"#, "", "missing \"services\""),
        (#"{"services":[{"uuid":"xyz"}]}"#, "services[0].uuid", "invalid UUID \"xyz\""),
        (#"{"services":[{"uuid":"180G"}]}"#, "services[0].uuid", "not a hex digit"),
        (#"{"services":[{}]}"#, "services[0].uuid", "missing UUID"),
        (#"{"services":[{"uuid":"180F","characteristics":[{"uuid":"2A19","flags":["notfy"]}]}]}"#, "services[0].characteristics[0].flags[0]", "unknown flag \"notfy\" (did you mean \"notify\"?)"),
        (#"{"services":[{"uuid":"180F","characteristics":[{"uuid":"2A19"}]}]}"#, "services[0].characteristics[0].flags", "missing \"flags\""),
        (#"{"services":[{"uuid":"180F","characteristics":[{"uuid":"2A19","flags":[]}]}]}"#, "services[0].characteristics[0].flags", "at least one flag"),
        (#"{"services":[{"uuid":"180F"},{"uuid":"0000180f-0000-1000-8000-00805f9b34fb"}]}"#, "services[1].uuid", "duplicate service UUID"),
        (#"{"services":[{"uuid":"180F","characteristics":[{"uuid":"2A19","flags":["read"]},{"uuid":"2a19","flags":["read"]}]}]}"#, "services[0].characteristics[1].uuid", "duplicate characteristic UUID"),
        (#"{"services":[{"uuid":"180F","characteristics":[{"uuid":"2A19","flags":["read"],"value":"toolong","max_length":3}]}]}"#, "services[0].characteristics[0]", "7 bytes, over max_length 3"),
        (#"{"services":[{"uuid":"180F","characteristics":[{"uuid":"2A19","flags":["read"],"max_length":513}]}]}"#, "services[0].characteristics[0].max_length", "from 1 to 512"),
        (#"{"services":[{"uuid":"180F","characteristics":[{"uuid":"2A19","flags":["read"],"value":"a","value_hex":"00"}]}]}"#, "services[0].characteristics[0]", "not several"),
        (#"{"services":[{"uuid":"180F","characteristics":[{"uuid":"2A19","flags":["read"],"value_hex":"0g"}]}]}"#, "services[0].characteristics[0].value_hex", "not hex"),
        (#"{"services":[{"uuid":"180F","characterstics":[]}]}"#, "services[0].characterstics", "did you mean \"characteristics\"?"),
        (#"{"services":[{"uuid":"180F","includes":["1234"]}]}"#, "services[0].includes[0]", "not a service of this application"),
        (#"{"services":[{"uuid":"180F","characteristics":[{"uuid":"2A19","flags":["read"],"descriptors":[{"uuid":"2902","flags":["read"]}]}]}]}"#, "services[0].characteristics[0].descriptors[0].uuid", "managed by BlueZ"),
        (#"{"services":[{"uuid":"180F","characteristics":[{"uuid":"2A19","flags":["read"],"descriptors":[{"uuid":"2904","flags":["notify"]}]}]}]}"#, "services[0].characteristics[0].descriptors[0].flags[0]", "not allowed here"),
        (#"{"services":"no"}"#, "services", "expected an array, got string"),
        (#"{"services":[{"uuid":"180F","primary":"yes"}]}"#, "services[0].primary", "expected true or false"),
    ]

    @Test func badDefinitionsNameFilePathAndReason() {
        for (doc, path, words) in Self.bad {
            do {
                _ = try Self.parse(doc)
                Issue.record("accepted \(doc)")
            } catch {
                #expect(error.source == "app.json")
                #expect(error.path == path, "\(doc): \(error)")
                #expect(error.reason.contains(words), "\(doc): \(error)")
                #expect(error.description.hasPrefix(path.isEmpty ? "app.json: " : "app.json: \(path): "))
            }
        }
    }
}
