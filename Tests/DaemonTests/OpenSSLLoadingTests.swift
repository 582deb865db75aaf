import Foundation
import Testing
import TestSupport

/// OpenSSL is loaded with dlopen by the TLS module when TLS is first used, not linked
/// (Sources/COpenSSL/shim.h): the binary that is also the `peerlink` CLI must start without
/// it, and a daemon whose libssl3 is unusable must say so at start, naming the library.
///
/// Each case puts a file that is not a library first on the loader's path as libssl.so.3:
/// had the binary been linked against libssl, the dynamic loader would refuse to start it at
/// all (exit 127, "error while loading shared libraries").
@Suite struct OpenSSLLoadingTests {
    /// A directory holding a libssl.so.3 that no loader can load.
    private static func brokenLibraryDirectory() throws -> String {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("peerlink-nossl-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try "not a shared library\n".write(toFile: dir + "/libssl.so.3", atomically: true, encoding: .utf8)
        return dir
    }

    @Test func theCLIStartsWithoutLoadingOpenSSL() async throws {
        let libs = try Self.brokenLibraryDirectory()
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
        #expect(!status.stderr.contains("libssl"), "\(status)")
        #expect(status.stderr.contains("absent.sock"), "\(status)")
    }

    @Test func aDaemonWhoseOpenSSLCannotLoadSaysSoAtStart() async throws {
        let libs = try Self.brokenLibraryDirectory()
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
}
