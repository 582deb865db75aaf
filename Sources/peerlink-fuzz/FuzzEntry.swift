// The fuzzing binary, in two builds (docs/fuzzing.md):
//
// - `make fuzz` builds it with `-DFUZZING -sanitize=fuzzer,address`: libFuzzer supplies
//   `main` and calls `LLVMFuzzerTestOneInput` below; this file must then define no Swift
//   entry point, which is why it is not called main.swift (SwiftPM compiles a lone file of
//   another name with -parse-as-library) and why `@main` is only in the other branch. The
//   target is named by PEERLINK_FUZZ_TARGET, read once in `LLVMFuzzerInitialize`.
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

/// The target chosen at start-up; the fuzzer calls only this one.
nonisolated(unsafe) private var selected: FuzzTarget?

@_cdecl("LLVMFuzzerInitialize")
public func fuzzerInitialize(_ argc: UnsafeMutablePointer<Int32>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>) -> Int32 {
    // "list": the names, one a line, for scripts/fuzz.sh (libFuzzer owns the command line).
    if let raw = getenv("PEERLINK_FUZZ_TARGET"), String(cString: raw) == "list" {
        for t in FuzzTarget.all { print(t.name) }
        exit(0)
    }
    guard let raw = getenv("PEERLINK_FUZZ_TARGET"), let target = FuzzTarget.named(String(cString: raw)) else {
        let names = FuzzTarget.all.map(\.name).joined(separator: " ")
        printError("peerlink-fuzz: set PEERLINK_FUZZ_TARGET to one of: \(names)\n")
        exit(2)
    }
    selected = target
    return 0
}

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
