#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SystemKit
import TestSupport
import Testing
@testable import Daemon

/// A datagram socket standing in for systemd's notify socket.
private final class FakeSystemd {
    let name: String
    let fd: Int32
    private let directory: String?

    /// Binds a socket in a fresh temporary directory, or an abstract one when `abstract`.
    init(abstract: Bool = false) throws {
        if abstract {
            directory = nil
            name = "@peerlink-test-\(getpid())-\(UUID().uuidString.prefix(8))"
        } else {
            let dir = "/tmp/peerlink-notify-\(UUID().uuidString.prefix(8))"
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: false)
            directory = dir
            name = dir + "/notify"
        }
        fd = try UnixDatagram.bind(name)
    }

    deinit {
        closeQuietly(fd)
        if let directory { try? FileManager.default.removeItem(atPath: directory) }
    }

    var environment: [String: String] { ["NOTIFY_SOCKET": name] }

    /// The next message, or nil after a second.
    func next() throws -> String? {
        try UnixDatagram.receive(fd, timeout: .seconds(1)).map { String(decoding: $0, as: UTF8.self) }
    }
}

@Suite(.ownThreads, .memoryHeavy) struct SystemdNotifyTests {
    @Test func disabledWithoutNotifySocket() {
        let n = SystemdNotifier(environment: [:])
        #expect(!n.isEnabled)
        #expect(n.notify("READY=1") == false)
        #expect(!SystemdNotifier(environment: ["NOTIFY_SOCKET": "relative"]).isEnabled)
        #expect(!SystemdNotifier(environment: ["NOTIFY_SOCKET": "@"]).isEnabled)
        #expect(!SystemdNotifier(environment: ["NOTIFY_SOCKET": ""]).isEnabled)
    }

    @Test func sendsToAPathSocket() throws {
        let systemd = try FakeSystemd()
        let n = SystemdNotifier(environment: systemd.environment)
        #expect(n.isEnabled)
        #expect(n.notify("READY=1\nSTATUS=serving"))
        #expect(try systemd.next() == "READY=1\nSTATUS=serving")
    }

    @Test func sendsToAnAbstractSocket() throws {
        let systemd = try FakeSystemd(abstract: true)
        let n = SystemdNotifier(environment: systemd.environment)
        #expect(n.notify("WATCHDOG=1"))
        #expect(try systemd.next() == "WATCHDOG=1")
    }

    @Test func abstractNameLengthExcludesTerminator() throws {
        // A receiver bound to "@name" must not receive what is sent to "@name\0"-style
        // longer addresses, and vice versa: lengths have to match exactly.
        let systemd = try FakeSystemd(abstract: true)
        #expect(SystemdNotifier(environment: ["NOTIFY_SOCKET": systemd.name + "x"]).notify("X=1") == false)
        #expect(SystemdNotifier(environment: systemd.environment).notify("Y=1"))
        #expect(try systemd.next() == "Y=1")
    }

    @Test func helperMessages() throws {
        let systemd = try FakeSystemd()
        let n = SystemdNotifier(environment: systemd.environment)
        n.ready(status: "serving 2 clients")
        #expect(try systemd.next() == "READY=1\nSTATUS=serving 2 clients")
        n.status("line one\nline two")
        #expect(try systemd.next() == "STATUS=line one line two")
        n.stopping()
        #expect(try systemd.next() == "STOPPING=1")
        n.watchdog()
        #expect(try systemd.next() == "WATCHDOG=1")
    }

    @Test func reloadingCarriesTheMonotonicClock() throws {
        let systemd = try FakeSystemd()
        let n = SystemdNotifier(environment: systemd.environment)
        let before = SystemdNotifier.monotonicMicroseconds()
        n.reloading()
        let after = SystemdNotifier.monotonicMicroseconds()
        let message = try #require(try systemd.next())
        let lines = message.split(separator: "\n")
        #expect(lines.first == "RELOADING=1")
        let value = try #require(lines.last.flatMap { $0.split(separator: "=").last }.flatMap { UInt64($0) })
        #expect(lines.last?.hasPrefix("MONOTONIC_USEC=") == true)
        #expect(before <= value && value <= after)
    }

    @Test func sendToAMissingSocketReportsFailure() {
        let n = SystemdNotifier(environment: ["NOTIFY_SOCKET": "/nonexistent/peerlink/notify"])
        #expect(n.isEnabled)
        #expect(n.notify("READY=1") == false)
    }

    @Test func watchdogInterval() {
        #expect(SystemdNotifier(environment: [:]).watchdogInterval == nil)
        #expect(SystemdNotifier(environment: ["WATCHDOG_USEC": "30000000"]).watchdogInterval == .seconds(30))
        #expect(SystemdNotifier(environment: ["WATCHDOG_USEC": "500"]).watchdogInterval == .microseconds(500))
        #expect(SystemdNotifier(environment: ["WATCHDOG_USEC": "0"]).watchdogInterval == nil)
        #expect(SystemdNotifier(environment: ["WATCHDOG_USEC": "soon"]).watchdogInterval == nil)
        #expect(SystemdNotifier(environment: ["WATCHDOG_USEC": "-5"]).watchdogInterval == nil)
        let me = "\(getpid())"
        #expect(SystemdNotifier(environment: ["WATCHDOG_USEC": "1000000", "WATCHDOG_PID": me]).watchdogInterval
            == .seconds(1))
        #expect(SystemdNotifier(environment: ["WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"]).watchdogInterval
            == nil)
        #expect(SystemdNotifier(environment: ["WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "x"]).watchdogInterval
            == nil)
    }

    @Test func datagramAddressValidation() {
        #expect(throws: SystemError.self) { try UnixDatagram.send([1], to: "relative") }
        #expect(throws: SystemError.self) { try UnixDatagram.send([1], to: "/" + String(repeating: "a", count: 107)) }
        #expect(throws: SystemError.self) { try UnixDatagram.send([1], to: "@" + String(repeating: "a", count: 108)) }
    }
}
