import CLI
import Foundation
import Testing
import TestSupport
@testable import DocGen

/// The committed completion scripts, run by the real shells: bash through `_peerlink` with
/// COMP_WORDS/COMP_CWORD, zsh through `_peerlink` with `words`/`CURRENT` and stand-ins for
/// compsys's `compadd`, `_describe` and `_files` (which only exist inside a completion
/// widget). Dynamic values come from a fake `peerlink` first on PATH.
@Suite(.ownThreads, .serialized, .memoryHeavy) struct CompletionScriptTests {
    static let bashScript = GeneratedFilesTests.root.appendingPathComponent("docs/completions/peerlink.bash").path
    static let zshScript = GeneratedFilesTests.root.appendingPathComponent("docs/completions/_peerlink").path

    /// A directory holding a fake `peerlink` that answers `adapter list` and `gatt list`
    /// like the daemon's --json output, logs its arguments, and runs `behaviour` otherwise.
    /// The caller removes the directory.
    static func fakePeerlink(_ behaviour: String = "exit 3") throws -> String {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("peerlink-completion-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let script = """
            #!/bin/sh
            echo "$*" >> "\(dir)/calls"
            case "$*" in
            *"adapter list") echo '{"adapters":[{"name":"hci0","address":"00:AA:01:00:00:00","default":true},{"name":"hci1","address":"00:AA:01:00:00:01"}]}' ;;
            *"gatt list") echo '{"applications":[{"id":"app1","services":[{"uuid":"c4fb2349-72fe-4ca2-94d6-1f3cb16331ee","characteristics":[{"uuid":"6a3e4b28-522d-4b3b-82a9-d5e2004534fc","flags":["read"]}]}]}]}' ;;
            *) \(behaviour) ;;
            esac

            """
        try script.write(toFile: dir + "/peerlink", atomically: true, encoding: .utf8)
        chmod(dir + "/peerlink", 0o755)
        return dir
    }

    /// Runs `_peerlink` in bash for each line of `words` and returns one line per case:
    /// the candidates, space-separated.
    static func bash(_ cases: [[String]], fake: String) async throws -> ToolResult {
        var script = "source \(Shell.quote(bashScript))\n"
        for words in cases {
            script += "COMP_WORDS=(\(words.map(Shell.quote).joined(separator: " "))); COMP_CWORD=\(words.count - 1); COMPREPLY=(); _peerlink\n"
            script += "echo \"${COMPREPLY[*]}\"\n"
        }
        return try await runTool("/bin/bash", ["--norc", "--noprofile", "-c", script],
                                 environment: ["PATH": fake + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")])
    }

    @Test func bashCompletesCommandsSubcommandsOptionsAndValues() async throws {
        let fake = try Self.fakePeerlink()
        defer { try? FileManager.default.removeItem(atPath: fake) }
        let topLevel = CommandTable.root.subcommands.map(\.name) + ["help"]
        let peer = CommandTable.root.subcommand(named: "peer")!.subcommands.map(\.name)
        let result = try await Self.bash([
            ["peerlink", ""],
            ["peerlink", "pe"],
            ["peerlink", "peer", ""],
            ["peerlink", "--json", "peer", "in"],
            ["peerlink", "adapter", "power", "--"],
            ["peerlink", "adapter", "power", ""],
            ["peerlink", "adapter", "power", "--adapter", ""],
            ["peerlink", "--socket", "/x.sock", "gatt", "notify", ""],
            ["peerlink", "gatt", "notify", "6a3e", "hello", ""],
            ["peerlink", "connect", "--address-type", "r"],
            ["peerlink", "help", "adapter", ""],
        ], fake: fake)
        #expect(result.status == 0 && result.stderr.isEmpty, "\(result)")
        let lines = result.stdout.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        #expect(lines.count == 12, "\(result)")
        guard lines.count == 12 else { return }
        #expect(lines[0] == topLevel.joined(separator: " "))
        #expect(lines[1] == "peer")
        #expect(lines[2] == peer.joined(separator: " "))
        #expect(lines[3] == "invitations inbox invite")
        #expect(lines[4] == "--adapter --timeout --socket --json --verbose --help")
        #expect(lines[5] == "on off")
        #expect(lines[6] == "00:AA:01:00:00:00 00:AA:01:00:00:01 hci0 hci1")
        #expect(lines[7] == "6a3e4b28-522d-4b3b-82a9-d5e2004534fc c4fb2349-72fe-4ca2-94d6-1f3cb16331ee")
        #expect(lines[8] == "", "the values after the UUID are free text")
        #expect(lines[9] == "random")
        #expect(lines[10] == "list power")
        // The daemon was asked with --json, a short timeout, and the socket the line names.
        let calls = (try? String(contentsOfFile: fake + "/calls", encoding: .utf8)) ?? ""
        #expect(calls == "--json --timeout 1 adapter list\n--json --timeout 1 --socket /x.sock gatt list\n")
    }

    /// With bash-completion loaded (as on a Debian desktop) the script reads the line through
    /// `_get_comp_words_by_ref`, so an address, which readline splits at its colons, stays one word.
    @Test func bashWithBashCompletionKeepsAddressesWhole() async throws {
        let library = "/usr/share/bash-completion/bash_completion"
        guard FileManager.default.fileExists(atPath: library) else {
            Issue.record("bash-completion is not installed, so the script's bash-completion path cannot be checked: install bash-completion (scripts/install-deps.sh does, as root)")
            return
        }
        let fake = try Self.fakePeerlink()
        defer { try? FileManager.default.removeItem(atPath: fake) }
        // COMP_WORDS as readline splits them: at every ':' (COMP_WORDBREAKS).
        let line = "peerlink --socket /x.sock read 00:AA:01:00:00:00 6a"
        let split = ["peerlink", "--socket", "/x.sock", "read", "00", ":", "AA", ":", "01", ":", "00", ":", "00", ":", "00", "6a"]
        let addressLine = "peerlink adapter power --adapter 00:AA"
        let addressSplit = ["peerlink", "adapter", "power", "--adapter", "00", ":", "AA"]
        var script = "source \(library)\nsource \(Shell.quote(Self.bashScript))\n"
        for (line, words) in [(line, split), (addressLine, addressSplit)] {
            script += "COMP_LINE=\(Shell.quote(line)); COMP_POINT=${#COMP_LINE}; COMP_WORDS=(\(words.map(Shell.quote).joined(separator: " "))); "
                + "COMP_CWORD=\(words.count - 1); COMPREPLY=(); _peerlink; echo \"${COMPREPLY[*]}\"\n"
        }
        let result = try await runTool("/bin/bash", ["--norc", "--noprofile", "-c", script],
                                       environment: ["PATH": fake + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")])
        #expect(result.status == 0 && result.stderr.isEmpty, "\(result)")
        // The characteristic after a whole address; then the addresses, less the part before
        // the last colon readline keeps (what __ltrim_colon_completions is for).
        #expect(result.stdout == "6a3e4b28-522d-4b3b-82a9-d5e2004534fc\nAA:01:00:00:00 AA:01:00:00:01\n", "\(result)")
    }

    @Test func bashOffersNothingWhenTheDaemonFailsOrHangs() async throws {
        for behaviour in ["echo 'peerlink: cannot reach peerlinkd' >&2; exit 3", "sleep 30"] {
            let fake = try Self.fakePeerlink(behaviour)
            defer { try? FileManager.default.removeItem(atPath: fake) }
            // Every command fails (or hangs) this way, the dynamic ones too.
            try "#!/bin/sh\necho \"$*\" >> \"\(fake)/calls\"\n\(behaviour)\n".write(toFile: fake + "/peerlink", atomically: true, encoding: .utf8)
            chmod(fake + "/peerlink", 0o755)
            let started = ContinuousClock.now
            let result = try await Self.bash([["peerlink", "adapter", "power", "--adapter", ""]], fake: fake)
            #expect(ContinuousClock.now - started < .seconds(10), "\(behaviour)")
            #expect(result.status == 0 && result.stdout == "\n" && result.stderr.isEmpty, "\(behaviour): \(result)")
            // It was asked: the empty answer is the failure's, not a missing program's.
            #expect((try? String(contentsOfFile: fake + "/calls", encoding: .utf8)) == "--json --timeout 1 adapter list\n", "\(behaviour)")
        }
    }

    @Test func zshCompletesTheSameWay() async throws {
        guard let zsh = GeneratedFilesTests.executable("zsh") else {
            Issue.record("zsh is not installed, so the zsh completion cannot be checked: install zsh (scripts/install-deps.sh does, as root)")
            return
        }
        let fake = try Self.fakePeerlink()
        defer { try? FileManager.default.removeItem(atPath: fake) }
        var script = """
            compadd() { if [[ $1 == -a ]]; then print -r -- "values ${(P)2}"; else [[ $1 == -- ]] && shift; print -r -- "values $*"; fi }
            _describe() { print -r -- "$2 ${(P)4}"; }
            _files() { print -r -- "files"; }
            words=(peerlink ''); CURRENT=2
            source \(Shell.quote(Self.zshScript)) >/dev/null

            """
        for words in [["peerlink", "peer", ""], ["peerlink", "adapter", "power", "--t"], ["peerlink", "adapter", "power", ""],
                      ["peerlink", "scan", "--adapter", ""], ["peerlink", "read", "00:AA:01:00:00:00", ""], ["peerlink", "gatt", "register", ""]] {
            script += "words=(\(words.map(Shell.quote).joined(separator: " "))); CURRENT=\(words.count); _peerlink\n"
        }
        let result = try await runTool(zsh, ["-f", "-c", script],
                                       environment: ["PATH": fake + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")])
        #expect(result.status == 0 && result.stderr.isEmpty, "\(result)")
        let lines = result.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count == 6, "\(result)")
        guard lines.count == 6 else { return }
        #expect(lines[0].hasPrefix("commands identity:Show this board's peer ID, name and port. connect:"))
        // _describe gets every option; it filters by the prefix itself.
        #expect(lines[1].hasPrefix("options --adapter:The adapter to use") && lines[1].contains(" --timeout:"))
        #expect(lines[2] == "values on off")
        #expect(lines[3] == "values 00:AA:01:00:00:00 00:AA:01:00:00:01 hci0 hci1")
        #expect(lines[4] == "values 6a3e4b28-522d-4b3b-82a9-d5e2004534fc c4fb2349-72fe-4ca2-94d6-1f3cb16331ee")
        #expect(lines[5] == "files")
    }
}
