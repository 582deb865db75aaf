// swift-tools-version:6.0
// PeerLink: a BLE / DNS-SD / peer-session daemon for Linux boards.
// No outside Swift packages: the toolchain plus Debian C libraries through
// system-library targets (see README, "Layout").
import PackageDescription

let package = Package(
    name: "PeerLink",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "peerlinkd", targets: ["peerlinkd"]),
        .executable(name: "peerlink", targets: ["peerlink"]),
    ],
    targets: [
        // C bindings: only their one adapter module imports them.
        // libdbus-1's headers, whose paths pkg-config gives (it also gives -ldbus-1 to builds
        // here; the package's build gets a dbus-1.pc without it: scripts/make-deb.sh). The
        // DBus module loads libdbus-1.so.3 at first use (Sources/CDBus/shim.h).
        .systemLibrary(name: "CDBus", pkgConfig: "dbus-1",
                       providers: [.apt(["libdbus-1-dev"])]),
        // Avahi's headers (Debian's libavahi-client-dev, in the default include path); not
        // linked: the DNSSD module loads libavahi-client.so.3 at first use (Sources/CAvahi/shim.h).
        .systemLibrary(name: "CAvahi"),
        // Linux's epoll, which Swift's Glibc module does not export (imported by SystemKit only).
        .systemLibrary(name: "CEpoll"),
        // OpenSSL 3's headers (Debian's libssl-dev); not linked: the TLS module loads libssl.so.3
        // at first use (Sources/COpenSSL/shim.h says why), so no pkg-config link flags here.
        .systemLibrary(name: "COpenSSL"),

        // Pure modules (Foundation only).
        .target(name: "BLE", dependencies: ["Control"]),
        .target(name: "Control"),
        // Logger value passed into every module (swift-log's shape).
        .target(name: "Logging", dependencies: ["SystemKit"]),
        // Declarative command-line parsing for both executables.
        .target(name: "Arguments"),
        // Peer sessions without I/O: frames, handshake and invitation machines, flow control.
        .target(name: "Session"),

        // POSIX: the one place syscalls are made and errno is turned into errors.
        .target(name: "SystemKit", dependencies: ["CEpoll"]),

        // The only importer of CDBus.
        .target(name: "DBus", dependencies: ["CDBus", "SystemKit", "Logging"]),
        // The only importer of CAvahi: DNS-SD over Avahi's poll API.
        .target(name: "DNSSD", dependencies: ["CAvahi", "SystemKit", "Logging"]),
        // The only importer of COpenSSL: TLS 1.3 over memory buffers, identities, pinning.
        // SystemKit for the identity files (written atomically).
        .target(name: "TLS", dependencies: ["COpenSSL", "SystemKit"]),
        // Peer sessions over TCP: connections (TLS, frames, the machine), the node's rules.
        .target(name: "Peer", dependencies: ["Session", "TLS", "SystemKit", "Logging"]),
        // BlueZ object model over D-Bus.
        .target(name: "BlueZ", dependencies: ["DBus", "BLE", "Logging"]),
        // Daemon: services, config, logging, control server.
        .target(name: "Daemon", dependencies: ["BlueZ", "DBus", "Control", "SystemKit", "BLE", "Logging", "Arguments", "DNSSD",
                                              "Peer", "Session", "TLS"]),
        // CLI: argument parsing, commands, output.
        .target(name: "CLI", dependencies: ["Control", "SystemKit", "Arguments", "BLE"]),

        // peerlinkd is also the CLI when started as `peerlink`: the package ships one binary
        // (the static Swift runtime once) and a link; `peerlink` is built for development.
        .executableTarget(name: "peerlinkd", dependencies: ["Daemon", "CLI"]),
        .executableTarget(name: "peerlink", dependencies: ["CLI"]),

        // Man pages and shell completions from the CLI's command table, the daemon's command
        // line and its configuration keys (`make man`); not installed, so the shipped
        // binaries carry no generator.
        .target(name: "DocGen", dependencies: ["Arguments", "CLI", "Control", "Daemon"]),
        .executableTarget(name: "peerlink-docgen", dependencies: ["DocGen"]),

        // Fuzzing (`make fuzz`, docs/fuzzing.md): one function per decoder of outside input,
        // shared by the libFuzzer binary and the corpus replay in FuzzTests.
        .target(name: "FuzzTargets", dependencies: ["Control", "Session", "BLE", "BlueZ", "DBus", "DNSSD", "Daemon"]),
        // Built with -DFUZZING and -sanitize=fuzzer,address it is a libFuzzer binary (its entry
        // point runs libFuzzer's driver); otherwise a small tool that replays files through a target.
        .executableTarget(name: "peerlink-fuzz", dependencies: ["FuzzTargets", "CLibFuzzer"]),
        // libFuzzer's LLVMFuzzerRunDriver, declared (module map + header only; linked by
        // -sanitize=fuzzer, referenced only in that build).
        .systemLibrary(name: "CLibFuzzer"),

        // Helpers for tests: a private dbus-daemon, running external tools.
        .target(name: "TestSupport", dependencies: ["SystemKit"], path: "Tests/Support"),

        .testTarget(name: "BLETests", dependencies: ["BLE", "Control"]),
        .testTarget(name: "ControlTests", dependencies: ["Control"]),
        .testTarget(name: "DBusTests", dependencies: ["DBus", "SystemKit", "TestSupport"]),
        .testTarget(name: "DaemonTests", dependencies: ["Daemon", "Control", "SystemKit", "DBus", "BlueZ", "Logging", "Arguments", "TestSupport"]),
        .testTarget(name: "CLITests", dependencies: ["CLI", "Control", "Arguments", "SystemKit", "TestSupport"]),
        .testTarget(name: "LoggingTests", dependencies: ["Logging", "SystemKit"]),
        .testTarget(name: "ArgumentsTests", dependencies: ["Arguments"]),
        .testTarget(name: "DNSSDTests", dependencies: ["DNSSD", "Logging"]),
        .testTarget(name: "SystemKitTests", dependencies: ["SystemKit", "TestSupport"]),
        .testTarget(name: "SessionTests", dependencies: ["Session", "TestSupport"]),
        .testTarget(name: "PeerTests", dependencies: ["Peer", "Session", "TLS", "SystemKit", "Logging", "TestSupport"]),
        .testTarget(name: "TLSTests", dependencies: ["TLS", "SystemKit", "TestSupport"]),
        .testTarget(name: "FuzzTests", dependencies: ["FuzzTargets", "DBus", "Session", "TestSupport"]),
        .testTarget(name: "DocGenTests", dependencies: ["DocGen", "CLI", "Daemon", "Arguments", "TestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
