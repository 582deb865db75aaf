import CLI
import Foundation

/// Every file the generator writes, by its path in the source tree.
///
/// The files are committed (so a reader of the repository sees the pages), installed by
/// `make install` as they are, and compared with a fresh generation by `DocGenTests`: a
/// command, option or key added to a table without `make man` fails the tests.
public enum GeneratedFiles {
    /// One generated file.
    public struct File: Sendable {
        /// Its path, relative to the repository's root.
        public let path: String
        /// Its contents.
        public let contents: String
    }

    /// The pages and completion scripts, generated now from the tables.
    public static func all() -> [File] {
        let completion = ShellCompletion(model: CompletionModel(root: CommandTable.root), sources: DynamicSource.peerlink)
        return [
            File(path: "docs/man/peerlink.1", contents: ManPages.peerlink()),
            File(path: "docs/man/peerlinkd.8", contents: ManPages.peerlinkd()),
            File(path: "docs/man/peerlink.conf.5", contents: ManPages.peerlinkConf()),
            File(path: "docs/completions/peerlink.bash", contents: completion.bash()),
            File(path: "docs/completions/_peerlink", contents: completion.zsh()),
        ]
    }

    /// Writes every file under `root`; returns the paths whose contents changed.
    public static func write(to root: URL) throws -> [String] {
        var changed: [String] = []
        for file in all() {
            let url = root.appendingPathComponent(file.path)
            let old = try? String(contentsOf: url, encoding: .utf8)
            guard old != file.contents else { continue }
            try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            try file.contents.write(to: url, atomically: true, encoding: .utf8)
            changed.append(file.path)
        }
        return changed
    }
}
