import Foundation
import TLS
import Testing
import TestSupport

/// The streaming SHA-256 agrees with `sha256sum` (not our code) whatever pieces the bytes
/// come in, and refuses to be used once finished.
@Suite struct SHA256DigestTests {
    static let sha256sum = ["/usr/bin/sha256sum", "/bin/sha256sum"].first { FileManager.default.isExecutableFile(atPath: $0) }

    @Test(arguments: [0, 1, 64, 65_536 + 3, (1 << 20) + 7])
    func agreesWithSha256sumInEveryChunking(_ size: Int) async throws {
        let tool = try #require(Self.sha256sum, "sha256sum is needed (coreutils)")
        let bytes = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 131 &+ ($0 >> 9)) }
        let directory = try TemporaryDirectory("sha")
        let file = directory.file("data")
        try Data(bytes).write(to: URL(fileURLWithPath: file))
        let printed = try await runTool(tool, [file], timeout: 30)
        #expect(printed.status == 0, "\(printed)")
        let expected = String(printed.stdout.prefix(64))
        for chunk in [1, 7, 4096, max(1, size)] where chunk == 1 ? size <= 65_536 : true {
            let digest = try SHA256Digest()
            var at = 0
            while at < bytes.count {
                try digest.update(bytes[at..<min(bytes.count, at + chunk)])
                at += chunk
            }
            #expect(digest.count == UInt64(size))
            let hex = try digest.finish().map { String(format: "%02x", $0) }.joined()
            #expect(hex == expected, "size \(size) in chunks of \(chunk)")
        }
        #expect(try SHA256Digest.hash(bytes).map { String(format: "%02x", $0) }.joined() == expected)
    }

    @Test func aFinishedDigestRefusesMore() throws {
        let digest = try SHA256Digest()
        _ = try digest.finish()
        #expect(throws: TLSError.self) { try digest.update([1]) }
        #expect(throws: TLSError.self) { try digest.finish() }
    }
}
