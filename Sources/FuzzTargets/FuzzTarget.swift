import Session
#if canImport(Glibc)
import Glibc
#endif

/// The fuzz targets: one function per decoder of outside input, each taking the raw bytes
/// an attacker (or a broken peer, bluetoothd, avahi-daemon, an editor) could hand it.
///
/// The same bodies run in two places, so what the fuzzer checks is what `make check` keeps
/// checking: the libFuzzer binary (`peerlink-fuzz`, built by `make fuzz`) calls them millions
/// of times, and `FuzzTests` replays every file of `Tests/Fuzz/corpus/<target>/` and
/// `Tests/Fuzz/regressions/<target>/` through them. A body returns normally when the input was
/// handled as the decoder promises (accepted or rejected with an error) and throws
/// `PropertyViolation` when a property beyond "no crash" does not hold; the libFuzzer entry
/// point turns that into a crash so the input is kept, the tests into a failed expectation.
public struct FuzzTarget: Sendable {
    /// The name used on the command line, in `FUZZ_TARGETS` and as the corpus directory.
    public let name: String
    /// What the target feeds and which property it checks (for `peerlink-fuzz --list`).
    public let summary: String
    /// The body.
    public let run: @Sendable ([UInt8]) throws(PropertyViolation) -> Void

    public init(name: String, summary: String, run: @escaping @Sendable ([UInt8]) throws(PropertyViolation) -> Void) {
        self.name = name
        self.summary = summary
        self.run = run
    }

    /// Every target, in the order `make fuzz` runs them.
    public static let all: [FuzzTarget] = [
        FuzzTarget(name: "json", summary: "JSON parser: parse, encode, parse again gives the same value and bytes",
                   run: ControlTargets.json),
        FuzzTarget(name: "rpc-request", summary: "JSON-RPC request lines as the server classifies them; requests and error replies round-trip",
                   run: ControlTargets.rpcRequest),
        FuzzTarget(name: "rpc-response", summary: "JSON-RPC lines as the client decodes them; responses and notifications round-trip",
                   run: ControlTargets.rpcResponse),
        FuzzTarget(name: "line-framer", summary: "control-socket line framing: any chunking gives the lines of a reference split",
                   run: ControlTargets.lineFramer),
        FuzzTarget(name: "dbus-message", summary: "D-Bus messages from bytes (dbus_message_demarshal), their arguments decoded; re-encoding is stable",
                   run: DBusTargets.message),
        FuzzTarget(name: "gatt-definition", summary: "GATT definition files: a parsed definition written back parses to itself",
                   run: BLETargets.gattDefinition),
        FuzzTarget(name: "advertisement", summary: "scan results: Device1 properties (advertised data) from D-Bus bytes, and the BLE text forms",
                   run: BLETargets.advertisement),
        FuzzTarget(name: "config", summary: "peerlink.conf: the parser on raw file bytes",
                   run: ServiceTargets.config),
        FuzzTarget(name: "dnssd", summary: "DNS-SD types, names, domains, subtypes and TXT records: accepted forms are stable",
                   run: ServiceTargets.dnssd),
        FuzzTarget(name: "frames", summary: "peer frame decoder: any chunking gives the same frames; each frame re-encodes to itself",
                   run: SessionTargets.frames),
        FuzzTarget(name: "discovery-record", summary: "a peer's DNS-SD TXT record: a record that parses re-publishes to the same record",
                   run: SessionTargets.discoveryRecord),
        FuzzTarget(name: "connection-machine", summary: "the session state machine driven by random frames and commands: rejected frames change nothing but the close",
                   run: MachineTarget.run),
        FuzzTarget(name: "stream-table", summary: "byte streams between two tables with a lying peer's frames injected: rejected frames change no other stream, bytes arrive as written",
                   run: StreamTableTarget.run),
        FuzzTarget(name: "resource-table", summary: "resources between two tables, frames crossing, a lying peer's frames injected: honest traffic breaks no rule and is never refused busy, rejected frames change no other resource",
                   run: ResourceTableTarget.run),
        FuzzTarget(name: "resource-name", summary: "a resource name from a peer: the sanitised name is one safe file name in the inbox, stable when sanitised again",
                   run: SessionTargets.resourceName),
        FuzzTarget(name: "image-header", summary: "a received file's first bytes as PNG or JPEG headers: a header found is stable when more bytes follow",
                   run: SessionTargets.imageHeader),
    ]

    /// The target called `name`.
    public static func named(_ name: String) -> FuzzTarget? {
        all.first { $0.name == name }
    }
}

/// A property of a target that did not hold for an input.
public struct PropertyViolation: Error, Sendable, CustomStringConvertible {
    /// What did not hold.
    public let description: String

    public init(_ description: String) {
        self.description = description
    }
}

/// Throws unless `frame`, which a side built to send, encodes and decodes back to itself. A
/// data frame's payload is compared with `memcmp`: compared a byte at a time, each byte's
/// comparison is traced by the fuzzer's instrumentation (half of `stream-table`'s time once).
func checkRoundTrip(_ frame: Frame) throws(PropertyViolation) {
    let bytes: [UInt8]
    do { bytes = try FrameEncoder.encode(frame) } catch {
        throw PropertyViolation("a \(frame.type) frame built to send does not encode: \(error)")
    }
    var decoder = FrameDecoder()
    decoder.append(bytes)
    let back = Result { () throws(FrameError) in try decoder.nextFrame() }
    let same = switch (frame, back) {
    case (.streamData(let id, let data), .success(.streamData(let backID, let backData)?)),
         (.resourceData(let id, let data), .success(.resourceData(let backID, let backData)?)):
        backID == id && sameBytes(backData[...], data[...])
    default:
        (try? back.get()) == frame
    }
    guard same else { throw PropertyViolation("a \(frame.type) frame built to send is read as \(back)") }
}

/// Whether two byte runs are equal, by `memcmp` (not traced byte by byte by the fuzzer).
func sameBytes(_ a: ArraySlice<UInt8>, _ b: ArraySlice<UInt8>) -> Bool {
    guard a.count == b.count else { return false }
    return a.withUnsafeBytes { x in b.withUnsafeBytes { y in x.count == 0 || memcmp(x.baseAddress!, y.baseAddress!, x.count) == 0 } }
}

/// Throws when `condition` is false: `check(a == b, "why")` reads like the property.
@inline(__always)
func check(_ condition: Bool, _ what: @autoclosure () -> String) throws(PropertyViolation) {
    if !condition { throw PropertyViolation(what()) }
}

/// Reads structured values from the front of a fuzz input, so one byte string can choose a
/// configuration, a chunking or a sequence of commands. Reads past the end give zeros, so
/// every input is a valid program and the fuzzer never wastes executions on short inputs.
struct ByteReader {
    private let bytes: [UInt8]
    private(set) var index: Int

    init(_ bytes: [UInt8]) {
        self.bytes = bytes
        index = 0
    }

    /// Whether every byte has been read.
    var isAtEnd: Bool { index >= bytes.count }

    /// Bytes not yet read.
    var remaining: Int { max(0, bytes.count - index) }

    mutating func byte() -> UInt8 {
        guard index < bytes.count else { return 0 }
        defer { index += 1 }
        return bytes[index]
    }

    mutating func uint16() -> UInt16 { UInt16(byte()) << 8 | UInt16(byte()) }

    mutating func uint32() -> UInt32 { UInt32(uint16()) << 16 | UInt32(uint16()) }

    mutating func uint64() -> UInt64 { UInt64(uint32()) << 32 | UInt64(uint32()) }

    /// At most `count` bytes (fewer at the end of the input).
    mutating func bytes(_ count: Int) -> [UInt8] {
        let n = min(count, remaining)
        defer { index += n }
        return Array(bytes[index..<(index + n)])
    }

    /// A length byte, then that many bytes.
    mutating func shortBlob() -> [UInt8] { bytes(Int(byte())) }

    /// Everything not yet read.
    mutating func rest() -> [UInt8] { bytes(remaining) }
}

/// Chunk sizes for replaying a stream in pieces: taken from `seed` (each 1 to 64, a zero
/// byte meaning "the rest at once") and cycled, so a short seed still splits long input.
func chunks(of input: [UInt8], sizes seed: [UInt8]) -> [ArraySlice<UInt8>] {
    let sizes = seed.isEmpty ? [1] : seed.map { $0 == 0 ? Int.max : Int($0 % 64) + 1 }
    var out: [ArraySlice<UInt8>] = []
    var start = 0
    var i = 0
    while start < input.count {
        let end = start + min(sizes[i % sizes.count], input.count - start)
        out.append(input[start..<end])
        start = end
        i += 1
    }
    return out
}
