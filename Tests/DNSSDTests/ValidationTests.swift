import Testing
@testable import DNSSD

/// The reason text of an `.invalid` error, or nil for another outcome.
private func invalidParam<T>(_ body: () throws(DNSSDError) -> T) -> String? {
    do {
        _ = try body()
        return nil
    } catch {
        if case .invalid(let param, _) = error { return param }
        return nil
    }
}

@Suite struct ServiceTypeTests {
    @Test(arguments: ["_http._tcp", "_ipp._tcp", "_a._udp", "_cmj-stream._tcp", "_x1-2-3._udp", "_abcdefghijklmno._tcp", "_HTTP._tcp"])
    func valid(_ text: String) throws {
        #expect(try ServiceType(text).description == text)
    }

    @Test(arguments: [
        "", "http._tcp", "_http", "_http._sctp", "_http._tcp.local", "__._tcp", "_._tcp", "_abcdefghijklmnop._tcp",
        "_-http._tcp", "_http-._tcp", "_ht--tp._tcp", "_123._tcp", "_ht tp._tcp", "_ht_tp._tcp", "_http.._tcp", "_http._TCP",
        "_é._tcp",
    ])
    func invalid(_ text: String) {
        #expect(invalidParam { () throws(DNSSDError) in try ServiceType(text) } == "type")
    }

    @Test func errorSaysWhy() {
        do {
            _ = try ServiceType("_abcdefghijklmnop._tcp")
            Issue.record("accepted a 16-character name")
        } catch {
            #expect(error.description.contains("1 to 15"))
        }
    }
}

@Suite struct NameAndPortTests {
    @Test func instanceNames() throws {
        #expect(try DNSSDValidation.instanceName("Kenshin Cui's Device") == "Kenshin Cui's Device")
        #expect(try DNSSDValidation.instanceName(String(repeating: "a", count: 63)).utf8.count == 63)
        // 21 three-byte characters: 63 bytes.
        #expect(try DNSSDValidation.instanceName(String(repeating: "€", count: 21)).utf8.count == 63)
        #expect(invalidParam { () throws(DNSSDError) in try DNSSDValidation.instanceName("") } == "name")
        #expect(invalidParam { () throws(DNSSDError) in try DNSSDValidation.instanceName(String(repeating: "a", count: 64)) } == "name")
        #expect(invalidParam { () throws(DNSSDError) in try DNSSDValidation.instanceName(String(repeating: "€", count: 22)) } == "name")
        #expect(invalidParam { () throws(DNSSDError) in try DNSSDValidation.instanceName("tab\there") } == "name")
    }

    @Test(arguments: [(Int64(1), true), (80, true), (65535, true), (0, false), (65536, false), (-1, false)])
    func ports(_ port: Int64, _ ok: Bool) {
        let r = invalidParam { () throws(DNSSDError) in try DNSSDValidation.port(port) }
        #expect((r == nil) == ok)
        if !ok { #expect(r == "port") }
    }

    @Test func domains() throws {
        #expect(try DNSSDValidation.domain(nil) == nil)
        #expect(try DNSSDValidation.domain("local") == nil)
        #expect(try DNSSDValidation.domain("local.") == nil)
        #expect(try DNSSDValidation.domain("example.com") == "example.com")
        #expect(invalidParam { () throws(DNSSDError) in try DNSSDValidation.domain("a..b") } == "domain")
        #expect(invalidParam { () throws(DNSSDError) in try DNSSDValidation.domain("a b") } == "domain")
        #expect(invalidParam { () throws(DNSSDError) in try DNSSDValidation.domain(String(repeating: "a", count: 64)) } == "domain")
    }

    @Test func subtypes() throws {
        let t = try ServiceType("_ipp._tcp")
        #expect(try DNSSDValidation.subtype("_universal", of: t) == "_universal._sub._ipp._tcp")
        #expect(try DNSSDValidation.subtype("_universal._sub._ipp._tcp", of: t) == "_universal._sub._ipp._tcp")
        for bad in ["universal", "_", "_a b", "_x._sub._http._tcp", "_x._sub", String(repeating: "_a", count: 40)] {
            #expect(invalidParam { () throws(DNSSDError) in try DNSSDValidation.subtype(bad, of: t) } == "subtypes", "\(bad)")
        }
    }

    @Test func interfaces() throws {
        #expect(try DNSSDValidation.interfaceIndex("lo") > 0)
        #expect(DNSSDValidation.interfaceName(try DNSSDValidation.interfaceIndex("lo")) == "lo")
        #expect(invalidParam { () throws(DNSSDError) in try DNSSDValidation.interfaceIndex("nosuch0") } == "interface")
        #expect(invalidParam { () throws(DNSSDError) in try DNSSDValidation.interfaceIndex("") } == "interface")
    }
}

@Suite struct TXTTests {
    @Test func encodesInOrder() throws {
        let t = try TXTRecord(["txtvers=1", "path=/", "secure"])
        #expect(t.wireFormat == [9] + Array("txtvers=1".utf8) + [6] + Array("path=/".utf8) + [6] + Array("secure".utf8))
        #expect(TXTRecord(wireFormat: t.wireFormat)?.strings == ["txtvers=1", "path=/", "secure"])
        #expect(t.strings == ["txtvers=1", "path=/", "secure"])
    }

    @Test func emptyRecordIsOneZeroByte() throws {
        #expect(TXTRecord().wireFormat == [0])
        #expect(try TXTRecord([]).entries.isEmpty)
        #expect(TXTRecord(wireFormat: [0])?.entries.isEmpty == true)
        #expect(TXTRecord(wireFormat: [5, 0x61]) == nil)
    }

    @Test func valuesMayHoldAnything() throws {
        let t = try TXTRecord(["k=a=b", "e=", "u=ünïcødé", "s=with space"])
        #expect(t.entries.count == 4)
        // Keys longer than RFC 6763's recommended 9 are allowed (IPP uses "printer-type").
        #expect(try TXTRecord(["printer-type=0x1"]).entries.count == 1)
    }

    @Test func entrySizeLimit() throws {
        let max = "k=" + String(repeating: "v", count: 253)
        #expect(try TXTRecord([max]).entries[0].count == 255)
        #expect(invalidParam { () throws(DNSSDError) in try TXTRecord([max + "v"]) } == "txt")
    }

    @Test func recordSizeLimit() throws {
        // 34 entries of 255 bytes: 34 * 256 = 8704 bytes; one more of 195 reaches 8900 exactly.
        var entries = (0..<34).map { i in "k\(i < 10 ? "0" : "")\(i)=" + String(repeating: "x", count: 251) }
        entries.append("z=" + String(repeating: "y", count: 193))
        let t = try TXTRecord(entries)
        #expect(t.wireFormat.count == 8900)
        entries[34] += "y"
        #expect(invalidParam { () throws(DNSSDError) in try TXTRecord(entries) } == "txt")
    }

    @Test(arguments: ["=value", "", "k\u{01}=x", "ké=x"])
    func badKeys(_ entry: String) {
        #expect(invalidParam { () throws(DNSSDError) in try TXTRecord([entry]) } == "txt")
    }

    @Test func duplicateKeysWithoutCase() {
        #expect(invalidParam { () throws(DNSSDError) in try TXTRecord(["Path=/", "path=/x"]) } == "txt")
    }
}
