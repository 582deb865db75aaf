import Arguments
import CLI
import Daemon
import Foundation
import Testing
import TestSupport
@testable import DocGen

/// The committed man pages and completion scripts are what the generator makes from the
/// tables now, they mention everything in the tables, and groff formats the pages cleanly.
@Suite(.ownThreads, .memoryHeavy) struct GeneratedFilesTests {
    /// The repository's root (this file is Tests/DocGenTests/GeneratedFilesTests.swift).
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func committed(_ path: String) -> String {
        (try? String(contentsOf: root.appendingPathComponent(path), encoding: .utf8)) ?? ""
    }

    @Test func committedFilesAreWhatTheGeneratorMakesNow() {
        for file in GeneratedFiles.all() {
            let committed = Self.committed(file.path)
            let firstDifference = zip(committed.split(separator: "\n", omittingEmptySubsequences: false),
                                      file.contents.split(separator: "\n", omittingEmptySubsequences: false))
                .enumerated().first { $0.element.0 != $0.element.1 }
                .map { "line \($0.offset + 1): committed \($0.element.0.debugDescription), generated \($0.element.1.debugDescription)" }
                ?? "committed \(committed.count) characters, generated \(file.contents.count)"
            // Issue.record rather than #expect(==): the message, not two whole files, is what helps.
            if committed != file.contents {
                Issue.record("\(file.path) is out of date with the command and configuration tables: run 'make man' and commit the result (\(firstDifference))")
            }
        }
    }

    @Test func theCLIPageHasEveryCommandAndOption() {
        let page = ManPages.peerlink()
        for option in CommandTable.globalOptions {
            #expect(page.contains(".TP\n" + Roff.optionTag(option) + "\n"), "global option --\(option.name)")
        }
        for command in CommandTable.commands {
            let title = ".SS \"\(Roff.text("peerlink " + command.path.joined(separator: " ")))\"\n"
            guard let start = page.range(of: title) else {
                Issue.record("peerlink(1) has no section for 'peerlink \(command.path.joined(separator: " "))'")
                continue
            }
            // The command's own section: up to the next .SS or .SH.
            let rest = page[start.upperBound...]
            let end = [rest.range(of: "\n.SS "), rest.range(of: "\n.SH ")].compactMap { $0?.lowerBound }.min() ?? rest.endIndex
            let section = rest[..<end]
            #expect(section.contains(Roff.text(command.abstract)), "abstract of \(command.path)")
            for option in command.options {
                #expect(section.contains(".TP\n" + Roff.optionTag(option) + "\n"), "--\(option.name) of \(command.path)")
            }
            for argument in command.arguments {
                #expect(section.contains(".TP\n" + Roff.italic(argument.name) + "\n"), "<\(argument.name)> of \(command.path)")
            }
        }
    }

    @Test func theDaemonPageHasEveryOptionAndTheConfigPageEveryKey() {
        let daemon = ManPages.peerlinkd()
        for option in DaemonCommandLine.command.options {
            #expect(daemon.contains(".TP\n" + Roff.optionTag(option) + "\n"), "peerlinkd --\(option.name)")
        }
        let conf = ManPages.peerlinkConf()
        for key in ConfigKeys.all {
            #expect(conf.contains(".TP\n" + Roff.bold(key.name) + "\n" + Roff.text(key.meaning)), "key \(key.name)")
        }
    }

    @Test func theCompletionsHaveEveryCommandAndOption() {
        let bash = ShellCompletion(model: CompletionModel(root: CommandTable.root), sources: DynamicSource.peerlink).bash()
        let zsh = ShellCompletion(model: CompletionModel(root: CommandTable.root), sources: DynamicSource.peerlink).zsh()
        for command in CommandTable.commands {
            let parent = command.path.dropLast().joined(separator: " ")
            let path = command.path.joined(separator: " ")
            // The parent group lists it among its subcommands.
            let subcommandsLine = bash.split(separator: "\n").first { $0.hasPrefix("    \(Shell.quote(parent))) echo ") && !$0.contains("--") }
            #expect(subcommandsLine?.split(separator: "'", omittingEmptySubsequences: false).dropFirst(3).first?.split(separator: " ").contains(Substring(command.path.last!)) == true,
                    "bash: '\(path)' is not among the subcommands of '\(parent)'")
            #expect(zsh.contains("print -r -- \(Shell.quote("\(command.path.last!):\(command.abstract)"))"), "zsh: \(path)")
            let optionsLine = bash.split(separator: "\n").first { $0.hasPrefix("    \(Shell.quote(path))) echo '--") }
            let offered = optionsLine.map { $0.split(separator: "'", omittingEmptySubsequences: false)[3].split(separator: " ").map(String.init) } ?? []
            for option in command.options + CommandTable.globalOptions {
                #expect(offered.contains("--" + option.name), "bash: --\(option.name) after '\(path)'")
                #expect(zsh.contains(Shell.quote("--\(option.name):\(option.help)")), "zsh: --\(option.name) after '\(path)'")
            }
        }
    }

    @Test func groffFormatsEveryPageWithoutWarnings() async throws {
        guard let groff = Self.executable("groff") else {
            Issue.record("groff is not installed, so the man pages cannot be checked: install groff-base (scripts/install-deps.sh does, as root)")
            return
        }
        for file in GeneratedFiles.all() where file.path.hasPrefix("docs/man/") {
            let result = try await runTool(groff, ["-man", "-ww", "-z", Self.root.appendingPathComponent(file.path).path])
            #expect(result.status == 0 && result.stderr.isEmpty, "groff -man -ww -z \(file.path): \(result)")
        }
    }

    /// The first `name` on PATH (or in /usr/bin, /bin), or nil.
    static func executable(_ name: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        for dir in path.split(separator: ":").map(String.init) + ["/usr/bin", "/bin"] {
            let candidate = dir + "/" + name
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }
}
