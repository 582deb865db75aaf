import Foundation
import Testing
@testable import DNSSD

@Suite struct NameStoreTests {
    private func tempPath() -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("dnssd-names-\(UUID().uuidString)/names.json").path
    }

    @Test func unknownNamesAreKept() {
        let s = NameStore(path: nil)
        #expect(s.name(for: "Printer", type: "_ipp._tcp", domain: nil) == "Printer")
    }

    @Test func chosenNameSurvivesARestart() throws {
        let path = tempPath()
        defer { try? FileManager.default.removeItem(atPath: (path as NSString).deletingLastPathComponent) }
        let s = NameStore(path: path)
        #expect(s.record(requested: "Printer", type: "_ipp._tcp", domain: nil, chosen: "Printer #2") == nil)
        // A new store (the daemon restarted) reads the same choice.
        let again = NameStore(path: path)
        #expect(again.name(for: "Printer", type: "_ipp._tcp", domain: nil) == "Printer #2")
        #expect(again.name(for: "Printer", type: "_IPP._tcp", domain: "local") == "Printer #2")
        // Other types and domains are separate.
        #expect(again.name(for: "Printer", type: "_http._tcp", domain: nil) == "Printer")
        #expect(again.name(for: "Printer", type: "_ipp._tcp", domain: "example.com") == "Printer")
        // Choosing the requested name again forgets the entry.
        again.record(requested: "Printer", type: "_ipp._tcp", domain: nil, chosen: "Printer")
        #expect(NameStore(path: path).name(for: "Printer", type: "_ipp._tcp", domain: nil) == "Printer")
    }

    @Test func unreadableFileMeansNoNames() throws {
        let path = tempPath()
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: (path as NSString).deletingLastPathComponent) }
        try "not json".write(toFile: path, atomically: true, encoding: .utf8)
        #expect(NameStore(path: path).name(for: "A", type: "_x._tcp", domain: nil) == "A")
    }

    @Test func unwritableFileIsReported() {
        let s = NameStore(path: "/proc/nonexistent/names.json")
        #expect(s.record(requested: "A", type: "_x._tcp", domain: nil, chosen: "A #2") != nil)
        // Still remembered in memory.
        #expect(s.name(for: "A", type: "_x._tcp", domain: nil) == "A #2")
    }
}
