import CLI
import Daemon
import Glibc

// One binary for both programs: installed as /usr/bin/peerlinkd with /usr/bin/peerlink a
// link to it, it is the CLI when started under the name `peerlink`. The Swift runtime and
// FoundationEssentials are linked statically into each program, so two binaries would carry
// them twice on a board's SD card (docs/packaging.md). `swift build` still makes a separate
// `peerlink` too, from the same CLI module.
let invokedAs = CommandLine.arguments.first?.split(separator: "/").last ?? ""
if invokedAs == "peerlink" { exit(PeerlinkCLI.main(CommandLine.arguments)) }

// The composition root: everything lives in the Daemon module, which tests drive directly.
exit(await DaemonCommandLine.main(Array(CommandLine.arguments.dropFirst())))
