import Foundation
import Testing
import TestSupport

/// OpenSSL, libdbus-1 and Avahi are loaded with dlopen when first used, not linked
/// (Sources/COpenSSL/shim.h): the binary that is also the `peerlink` CLI must start without
/// them; a daemon whose libssl3 is unusable must say so at start, naming the library; one
/// without Avahi runs, with DNS-SD unavailable for that reason.
///
/// Each case puts files that are not libraries first on the loader's path under those names:
/// had the binary been linked against one, the dynamic loader would refuse to start it at all
/// (exit 127, "error while loading shared libraries"). libdbus-1 is left out: the build these
/// tests run links it (pkg-config gives its header paths and -ldbus-1 together), only the
/// package's build does not, and scripts/make-deb.sh checks that binary's libraries.
@Suite(.ownThreads, .memoryHeavy) struct LibraryLoadingTests {
    /// A directory holding `names`, none of them a library any loader can load.
    private static func brokenLibraryDirectory(_ names: [String]) throws -> String {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("peerlink-nolib-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        for name in names {
            try "not a shared library\n".write(toFile: dir + "/" + name, atomically: true, encoding: .utf8)
        }
        return dir
    }

    @Test func theCLIStartsWithoutLoadingTheDaemonsLibraries() async throws {
        let libs = try Self.brokenLibraryDirectory(["libssl.so.3", "libcrypto.so.3", "libavahi-client.so.3", "libavahi-common.so.3"])
        defer { try? FileManager.default.removeItem(atPath: libs) }
        // The package's shape: `peerlink` a link to `peerlinkd`, which is the CLI under that name.
        try FileManager.default.createSymbolicLink(atPath: libs + "/peerlink", withDestinationPath: binDirectory + "/peerlinkd")
        let help = try await runTool(libs + "/peerlink", ["--help"], environment: ["LD_LIBRARY_PATH": libs])
        #expect(help.status == 0, "\(help)")
        #expect(help.stdout.contains("Control the PeerLink daemon"), "\(help)")
        // A request that fails for its own reason (no daemon there), not for the library.
        let status = try await runTool(libs + "/peerlink", ["--socket", libs + "/absent.sock", "status"],
                                       environment: ["LD_LIBRARY_PATH": libs])
        #expect(status.status != 0 && status.status != 127, "\(status)")
        #expect(!status.stderr.contains("libssl") && !status.stderr.contains("libavahi"), "\(status)")
        #expect(status.stderr.contains("absent.sock"), "\(status)")
    }

    @Test func aDaemonWhoseOpenSSLCannotLoadSaysSoAtStart() async throws {
        let libs = try Self.brokenLibraryDirectory(["libssl.so.3"])
        defer { try? FileManager.default.removeItem(atPath: libs) }
        let bus = try PrivateBus()
        let result = try await runTool(binDirectory + "/peerlinkd", [
            "--config", "/dev/null", "--socket", libs + "/control.sock", "--state-dir", libs + "/state",
            "--bus", bus.address,
        ], environment: ["LD_LIBRARY_PATH": libs], timeout: 30)
        #expect(result.status == 1, "\(result)")
        #expect(result.stderr.contains("cannot start: peer sessions: cannot load OpenSSL 3 (libssl3): \(libs)/libssl.so.3"),
                "\(result)")
        // Nothing was made in the state directory's identity files.
        #expect(!FileManager.default.fileExists(atPath: libs + "/state/peer/identity.key"))
    }

    @Test func aDaemonWithoutAvahiRunsWithDNSSDUnavailable() async throws {
        let libs = try Self.brokenLibraryDirectory(["libavahi-client.so.3"])
        defer { try? FileManager.default.removeItem(atPath: libs) }
        let bus = try PrivateBus()
        let daemon = try await DaemonHarness(busAddress: bus.address, environment: ["LD_LIBRARY_PATH": libs])
        defer { _ = daemon.stop() }
        let list = try daemon.call("dnssd.list")
        #expect(list["avahi"]?["available"] == false, "\(list)")
        let reason = list["avahi"]?["reason"]?.stringValue ?? ""
        #expect(reason.hasPrefix("cannot load libavahi-client (libavahi-client3): \(libs)/libavahi-client.so.3"), "\(list)")
        // A DNS-SD request is refused with that reason; the rest of the daemon serves on.
        let publish = try RawClient(daemon.socketPath).request("dnssd.publish", ["name": "x", "type": "_peerlink-test._tcp", "port": 9])
        #expect(publish["error"]?["message"]?.stringValue?.contains("cannot load libavahi-client") == true, "\(publish)")
        #expect(try daemon.call("daemon.status")["version"] != nil)
    }
}
