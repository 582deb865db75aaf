import DocGen
import Foundation

// `peerlink-docgen [DIR]`: writes the man pages and shell completions under DIR (default: the
// current directory, the repository's root when run by `make man`). A separate program, so
// the shipped binaries carry no generator.
let arguments = CommandLine.arguments.dropFirst()
if arguments.contains("-h") || arguments.contains("--help") || arguments.count > 1 {
    print("usage: peerlink-docgen [DIR]   (writes docs/man/* and docs/completions/* under DIR)")
    exit(arguments.count > 1 ? 2 : 0)
}
let root = URL(fileURLWithPath: arguments.first ?? FileManager.default.currentDirectoryPath)
do {
    let changed = try GeneratedFiles.write(to: root)
    for path in changed { print("wrote \(path)") }
    if changed.isEmpty { print("peerlink-docgen: every file is up to date") }
} catch {
    FileHandle.standardError.write(Data("peerlink-docgen: \(error)\n".utf8))
    exit(1)
}
