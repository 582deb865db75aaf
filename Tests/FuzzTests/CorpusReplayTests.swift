import DBus
import Foundation
import FuzzTargets
import Session
import TestSupport
import Testing

/// Replays the fuzz corpora and the regression inputs through the fuzz targets' bodies, so
/// `make check` keeps every property the fuzzer checked, for every input it was given or
/// found, without fuzzing (the whole replay takes well under a second).
///
/// `Tests/Fuzz/corpus/<target>/`: the seed inputs (valid examples and edge cases).
/// `Tests/Fuzz/regressions/<target>/`: inputs that once crashed a target or broke a
/// property; each came with a fix in the product and a focused unit test beside it.
@Suite("Fuzz corpus replay", .ownThreads, .memoryHeavy)
struct CorpusReplayTests {
    /// `Tests/Fuzz`, found from this file's path so the tests run from any directory.
    static let fuzzDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fuzz")

    static func files(_ kind: String, _ target: String) -> [URL] {
        let dir = fuzzDirectory.appendingPathComponent(kind).appendingPathComponent(target)
        let names = (try? FileManager.default.contentsOfDirectory(atPath: dir.path)) ?? []
        return names.filter { !$0.hasPrefix(".") }.sorted().map { dir.appendingPathComponent($0) }
    }

    static let targetNames = FuzzTarget.all.map(\.name)

    @Test("every target has a seed corpus", arguments: targetNames)
    func hasCorpus(_ name: String) {
        #expect(Self.files("corpus", name).count >= 3, "Tests/Fuzz/corpus/\(name)/ needs seed inputs")
    }

    @Test("every corpus and regression directory names a target")
    func noStrayDirectories() throws {
        for kind in ["corpus", "regressions"] {
            let dir = Self.fuzzDirectory.appendingPathComponent(kind)
            let names = (try? FileManager.default.contentsOfDirectory(atPath: dir.path)) ?? []
            for name in names where !name.hasPrefix(".") {
                #expect(FuzzTarget.named(name) != nil, "Tests/Fuzz/\(kind)/\(name) is not a fuzz target")
            }
        }
    }

    @Test("corpus inputs keep the target's properties", arguments: targetNames)
    func replayCorpus(_ name: String) throws {
        try replay(name, kind: "corpus")
    }

    @Test("regression inputs keep the target's properties", arguments: targetNames)
    func replayRegressions(_ name: String) throws {
        try replay(name, kind: "regressions")
    }

    private func replay(_ name: String, kind: String) throws {
        let target = try #require(FuzzTarget.named(name))
        for file in Self.files(kind, name) {
            let bytes = try [UInt8](Data(contentsOf: file))
            do {
                try target.run(bytes)
            } catch {
                Issue.record("\(kind)/\(name)/\(file.lastPathComponent): \(error)")
            }
        }
    }
}

/// The generated seeds (`FuzzSeeds`): committed as the corpus's gen-* files, and valid
/// inputs of their formats (a seed the decoder rejects at once would teach the fuzzer nothing).
@Suite("Generated fuzz seeds", .ownThreads, .memoryHeavy)
struct GeneratedSeedTests {
    @Test("the committed gen-* files are the generated seeds (else run peerlink-fuzz --write-seeds Tests/Fuzz/corpus)")
    func committedSeedsAreCurrent() throws {
        for (target, seeds) in FuzzSeeds.all() {
            let dir = CorpusReplayTests.fuzzDirectory.appendingPathComponent("corpus").appendingPathComponent(target)
            for (name, bytes) in seeds {
                let file = dir.appendingPathComponent(name)
                let committed = try? [UInt8](Data(contentsOf: file))
                #expect(committed == bytes, "Tests/Fuzz/corpus/\(target)/\(name) differs from FuzzSeeds")
            }
        }
    }

    @Test("D-Bus seeds are messages libdbus accepts")
    func dbusSeedsDemarshal() throws {
        for (name, bytes) in try #require(FuzzSeeds.all()["dbus-message"]) {
            guard case .success(let m) = BusMessage.demarshal(bytes) else {
                Issue.record("\(name) does not demarshal")
                continue
            }
            #expect(!m.body.isEmpty, "\(name) has no arguments")
        }
    }

    @Test("frame seeds decode to frames")
    func frameSeedsDecode() throws {
        for (name, bytes) in try #require(FuzzSeeds.all()["frames"]) where name != "gen-unknown-type" {
            var decoder = FrameDecoder()
            decoder.append(bytes.dropFirst(Int(bytes[0]) + 1))
            var count = 0
            while let _ = try decoder.nextFrame() { count += 1 }
            #expect(count > 0, "\(name) decodes to no frame")
        }
    }
}
