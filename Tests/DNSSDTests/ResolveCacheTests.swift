import Testing
@testable import DNSSD

@Suite struct ResolveCacheTests {
    private func service(name: String = "Lab Printer", type: String = "_ipp._tcp", domain: String = "local",
                         interface: String = "eth0", proto: String = "ipv4", addresses: [String] = ["169.254.10.1"],
                         port: UInt16 = 631, txt: [String] = ["txtvers=1"]) -> ResolvedService {
        ResolvedService(name: name, type: type, domain: domain, interface: interface, proto: proto, host: "lab.local",
                        addresses: addresses, port: port, txt: try! TXTRecord(txt), isCached: false, elapsedMilliseconds: 12.5)
    }

    private func lookup(_ c: inout ResolveCache, _ name: String = "Lab Printer", type: String = "_ipp._tcp", domain: String? = nil,
                        interface: Int32? = nil, all: Bool = false, at now: Double) -> ResolveCache.Hit? {
        c.lookup(name: name, type: type, domain: domain, interfaceIndex: interface, allAddresses: all, now: now)
    }

    @Test func aStoredResultIsAnsweredWithItsAge() throws {
        var c = ResolveCache()
        c.store(service(port: 631), interfaceIndex: 2, now: 100)
        let hit = try #require(lookup(&c, at: 100.004))
        #expect(hit.service.port == 631)
        #expect(hit.service.txt.strings == ["txtvers=1"])
        #expect(hit.service.addresses == ["169.254.10.1"])
        #expect(abs(hit.age - 0.004) < 1e-9)
        // The stored answer's own timing is not passed off as the hit's.
        #expect(hit.service.elapsedMilliseconds == nil)
        #expect(lookup(&c, "Other Printer", at: 100.004) == nil)
        #expect(lookup(&c, type: "_http._tcp", at: 100.004) == nil)
    }

    @Test func namesTypesAndDomainsCompareWithoutCase() {
        var c = ResolveCache()
        c.store(service(name: "Lab Printer", type: "_IPP._tcp", domain: "local"), interfaceIndex: 2, now: 0)
        #expect(lookup(&c, "lab printer", type: "_ipp._tcp", at: 1) != nil)
        #expect(lookup(&c, domain: "local.", at: 1) != nil)
        #expect(lookup(&c, domain: "LOCAL", at: 1) != nil)
        #expect(lookup(&c, domain: "example.com", at: 1) == nil)
    }

    @Test func anUnwatchedEntryExpiresAfterMaxAge() {
        var c = ResolveCache()
        c.maxAge = 10
        c.store(service(), interfaceIndex: 2, now: 50)
        #expect(lookup(&c, at: 59.9) != nil)
        #expect(lookup(&c, at: 60) == nil)
        #expect(c.count == 0, "the expired entry is dropped")
        // A clock that went backwards does not make an entry usable.
        c.store(service(), interfaceIndex: 2, now: 50)
        #expect(lookup(&c, at: 49) == nil)
    }

    @Test func aWatchedEntryLastsWhileItsBrowseRuns() {
        var c = ResolveCache()
        c.maxAge = 10
        c.watchedMaxAge = 120
        c.store(service(), interfaceIndex: 2, browseID: "b1", now: 0)
        #expect(lookup(&c, at: 60) != nil, "a running browse would have reported a change or removal")
        #expect(lookup(&c, at: 120) == nil, "but not past watchedMaxAge")

        c.store(service(), interfaceIndex: 2, browseID: "b1", now: 200)
        c.store(service(name: "Other"), interfaceIndex: 2, browseID: "b2", now: 200)
        c.browseEnded("b1")
        #expect(lookup(&c, at: 215) == nil, "unwatched once its browse stopped: maxAge applies")
        #expect(lookup(&c, "Other", at: 215) != nil, "another browse's entry is still watched")
    }

    @Test func aOneShotRefreshKeepsTheWatchingBrowse() throws {
        var c = ResolveCache()
        c.maxAge = 10
        c.store(service(port: 1), interfaceIndex: 2, browseID: "b1", now: 0)
        c.store(service(port: 2), interfaceIndex: 2, now: 5)
        #expect(c.count == 1, "same interface and protocol: replaced")
        let hit = try #require(lookup(&c, at: 30))
        #expect(hit.service.port == 2)
        #expect(abs(hit.age - 25) < 1e-9)
    }

    @Test func aChangeReportedByTheBrowseReplacesTheEntry() throws {
        var c = ResolveCache()
        c.store(service(txt: ["v=1"]), interfaceIndex: 2, browseID: "b1", now: 0)
        c.store(service(txt: ["v=2"]), interfaceIndex: 2, browseID: "b1", now: 1)
        #expect(try #require(lookup(&c, at: 2)).service.txt.strings == ["v=2"])
    }

    @Test func removalOnOneInterfaceAndProtocolLeavesTheOthers() throws {
        var c = ResolveCache()
        c.store(service(interface: "eth0", proto: "ipv4", addresses: ["10.0.0.1"]), interfaceIndex: 2, now: 0)
        c.store(service(interface: "eth0", proto: "ipv6", addresses: ["fe80::1"]), interfaceIndex: 2, now: 0)
        c.store(service(interface: "wlan0", proto: "ipv4", addresses: ["10.0.1.1"]), interfaceIndex: 3, now: 1)
        #expect(c.count == 3)
        c.remove(name: "LAB PRINTER", type: "_ipp._tcp", domain: "local", interfaceIndex: 3, proto: "ipv4")
        #expect(c.count == 2)
        #expect(lookup(&c, interface: 3, at: 2) == nil)
        let left = try #require(lookup(&c, interface: 2, at: 2))
        #expect(left.service.interface == "eth0")
        c.remove(name: "Lab Printer", type: "_ipp._tcp", domain: nil, interfaceIndex: 2, proto: "ipv6")
        #expect(try #require(lookup(&c, at: 2)).service.addresses == ["10.0.0.1"])
        // Without an interface and protocol (the daemon withdrew its own publication): everywhere.
        c.store(service(interface: "wlan0", proto: "ipv4"), interfaceIndex: 3, now: 2)
        c.remove(name: "Lab Printer", type: "_ipp._tcp", domain: nil)
        #expect(c.count == 0)
        #expect(lookup(&c, at: 2) == nil)
    }

    @Test func theInterfaceAskedForMustMatch() throws {
        var c = ResolveCache()
        c.store(service(interface: "eth0"), interfaceIndex: 2, now: 0)
        c.store(service(interface: "wlan0", port: 9), interfaceIndex: 3, now: 1)
        #expect(lookup(&c, interface: 4, at: 2) == nil)
        #expect(try #require(lookup(&c, interface: 2, at: 2)).service.interface == "eth0")
        // Any interface: the newest.
        #expect(try #require(lookup(&c, at: 2)).service.port == 9)
    }

    @Test func allAddressesNeedsAnEntryLookedUpForBothFamilies() throws {
        var c = ResolveCache()
        c.store(service(addresses: ["169.254.10.1"]), interfaceIndex: 2, now: 0)
        #expect(lookup(&c, all: true, at: 1) == nil)
        c.store(service(name: "Both", addresses: ["169.254.10.1", "fe80::1"]), interfaceIndex: 2, allAddresses: true, now: 0)
        #expect(try #require(lookup(&c, "Both", all: true, at: 1)).service.addresses == ["169.254.10.1", "fe80::1"])
        #expect(lookup(&c, "Both", all: false, at: 1) != nil, "it answers a plain resolve too")
    }

    @Test func removeAllForgetsEverything() {
        var c = ResolveCache()
        c.store(service(), interfaceIndex: 2, browseID: "b1", now: 0)
        c.store(service(name: "B"), interfaceIndex: 2, now: 0)
        c.removeAll()
        #expect(c.count == 0)
        #expect(lookup(&c, at: 0.1) == nil)
    }

    @Test func theOldestGoWhenFull() {
        var c = ResolveCache()
        c.capacity = 3
        for i in 0..<5 { c.store(service(name: "S\(i)"), interfaceIndex: 2, now: Double(i)) }
        #expect(c.count == 3)
        #expect(lookup(&c, "S0", at: 5) == nil)
        #expect(lookup(&c, "S1", at: 5) == nil)
        for i in 2..<5 { #expect(lookup(&c, "S\(i)", at: 5) != nil) }
    }
}
