// The fuzzing binary, in two builds (docs/fuzzing.md):
//
// - `make fuzz` builds it with `-DFUZZING -sanitize=fuzzer,address`: a libFuzzer binary.
//   SwiftPM links every Linux executable with `--defsym main=peerlink_fuzz_main` (so tests
//   can link executable modules) and the module's entry point is compiled under that name.
//   libFuzzer's own `main` therefore cannot be used (the link fails on the missing
//   `peerlink_fuzz_main` when the file has no Swift entry point), so this build defines
//   `peerlink_fuzz_main` itself and hands over to libFuzzer's driver, `LLVMFuzzerRunDriver`,
//   with the target body as the callback. The target is named by PEERLINK_FUZZ_TARGET.
// - An ordinary `swift build` makes it a replay tool: `peerlink-fuzz TARGET FILE...` runs
//   each file through the target once and says which property failed, so a crash found by
//   the fuzzer can be looked at in a debug build, under a debugger, without libFuzzer;
//   `peerlink-fuzz --write-seeds DIR` writes the generated seeds (`FuzzSeeds`).
import FuzzTargets

#if canImport(Glibc)
import Glibc
#endif

/// Writes to standard error (fd 2 directly: Glibc's `stderr` is shared mutable state to Swift 6).
func printError(_ text: String) {
    var text = text
    text.withUTF8 { _ = write(2, $0.baseAddress, $0.count) }
}

#if FUZZING
import CLibFuzzer

/// The target chosen at start-up; the fuzzer calls only this one.
nonisolated(unsafe) private var selected: FuzzTarget?

/// The process's `main` (see above): picks the target, then runs libFuzzer's driver, which
/// parses libFuzzer's options from the command line as its own `main` would.
@_cdecl("peerlink_fuzz_main")
public func fuzzMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> Int32 {
    // "list": the names, one a line, for scripts/fuzz.sh.
    if let raw = getenv("PEERLINK_FUZZ_TARGET"), String(cString: raw) == "list" {
        for t in FuzzTarget.all { print(t.name) }
        return 0
    }
    guard let raw = getenv("PEERLINK_FUZZ_TARGET"), let target = FuzzTarget.named(String(cString: raw)) else {
        let names = FuzzTarget.all.map(\.name).joined(separator: " ")
        printError("peerlink-fuzz: set PEERLINK_FUZZ_TARGET to one of: \(names)\n")
        return 2
    }
    selected = target
    var count = argc
    var arguments: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = argv
    return LLVMFuzzerRunDriver(&count, &arguments, fuzzerTestOneInput)
}

/// One input (also exported under libFuzzer's conventional name, for other drivers).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzerTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let bytes = size == 0 ? [] : Array(UnsafeBufferPointer(start: data, count: size))
    do {
        try selected!.run(bytes)
    } catch {
        // A property failed: crash, so libFuzzer keeps the input as a crash artifact.
        printError("peerlink-fuzz: \(selected!.name): property violated: \(error)\n")
        abort()
    }
    return 0
}

#else

@main
struct ReplayTool {
    static func main() {
        let args = Array(CommandLine.arguments.dropFirst())
        if args.first == "--list" || args.isEmpty {
            for t in FuzzTarget.all { print("\(t.name)\t\(t.summary)") }
            exit(args.isEmpty ? 2 : 0)
        }
        if args.first == "--write-seeds", args.count == 2 {
            writeSeeds(into: args[1])
            return
        }
        guard let target = FuzzTarget.named(args[0]) else {
            printError("peerlink-fuzz: no target \(args[0]); see peerlink-fuzz --list\n")
            exit(2)
        }
        var failed = 0
        for path in args.dropFirst() {
            guard let bytes = readFile(path) else {
                printError("peerlink-fuzz: cannot read \(path)\n")
                exit(2)
            }
            do {
                try target.run(bytes)
                print("ok \(path)")
            } catch {
                print("FAIL \(path): \(error)")
                failed += 1
            }
        }
        exit(failed == 0 ? 0 : 1)
    }

    /// Writes `FuzzSeeds` as files, DIR/<target>/<name> (how the gen-* corpus files are made).
    private static func writeSeeds(into dir: String) {
        for (target, seeds) in FuzzSeeds.all() {
            let sub = dir + "/" + target
            mkdir(sub, 0o755)
            for (name, bytes) in seeds {
                guard let f = fopen(sub + "/" + name, "wb") else {
                    printError("peerlink-fuzz: cannot write \(sub)/\(name)\n")
                    exit(1)
                }
                _ = bytes.withUnsafeBufferPointer { fwrite($0.baseAddress, 1, $0.count, f) }
                fclose(f)
            }
            print("\(target): \(seeds.count) seeds")
        }
    }

    private static func readFile(_ path: String) -> [UInt8]? {
        guard let f = fopen(path, "rb") else { return nil }
        defer { fclose(f) }
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let n = fread(&buffer, 1, buffer.count, f)
            if n <= 0 { break }
            out += buffer[0..<n]
        }
        return out
    }
}

#endif
