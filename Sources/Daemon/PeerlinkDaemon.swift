import BLE
import BlueZ
import Control
import DBus
import FoundationEssentials
import Glibc
import Logging
import Synchronization
import SystemKit

/// The daemon: the control socket, the bus connection and what follows BlueZ, run as services
/// under one supervisor that turns SIGTERM into a clean shutdown and SIGHUP into a reload.
public final class PeerlinkDaemon: Sendable {
    /// The version printed by `--version` and `daemon.status`.
    public static let version = "0.1.0"

    let configPath: String?
    let overrides: DaemonOverrides
    let config: Mutex<DaemonConfig>
    let logLevel: DynamicLevelLogHandler
    let logger: Logger
    let server: ControlServer
    let notifier: SystemdNotifier
    /// On the monotonic clock: uptime is not changed by setting the wall clock.
    let started = ContinuousClock.now
    let link = Mutex(BusLink())
    /// The capabilities beyond adapters, each in its own files (see `DaemonCapability`).
    let capabilities: [any DaemonCapability]

    /// The bus connection and the BlueZ client on it, while connected.
    struct BusLink {
        var connection: BusConnection?
        var bluez: BlueZClient?
        var lastError: String? = "not connected yet"
    }

    /// Prepares a daemon from a loaded configuration. `configPath` and `overrides` are kept for reloads.
    public init(config: DaemonConfig, configPath: String?, overrides: DaemonOverrides,
                logHandler: any LogHandler = StderrLogHandler(),
                environment: [String: String] = ProcessInfo.processInfo.environment) throws {
        self.configPath = configPath
        self.overrides = overrides
        self.config = Mutex(config)
        logLevel = DynamicLevelLogHandler(wrapping: logHandler, level: config.logLevel)
        logger = Logger(label: "peerlinkd", level: .debug, handler: logLevel)
        var options = ControlServerOptions(path: config.socketPath)
        options.mode = config.socketMode
        if let g = config.socketGroup {
            guard let gid = UnixSocket.groupID(named: g) else { throw ConfigError(file: configPath ?? DaemonConfig.defaultPath, key: "socket_group", reason: "no group named \(g)") }
            options.group = gid
        }
        options.maxClients = config.maxClients
        options.maxLineBytes = config.maxRequestBytes
        options.requestTimeout = config.requestTimeout
        server = ControlServer(options: options, logger: logger.child("control"))
        notifier = SystemdNotifier(environment: environment)
        capabilities = PeerlinkDaemon.makeCapabilities()
        registerMethods()
        let context = DaemonContext(logger: logger, stateDirectory: config.stateDirectory, defaultAdapter: config.adapter,
                                    settings: config.extra, server: server)
        for c in capabilities { try c.register(context) }
    }

    /// Every capability the daemon has. A new capability is added here (one line) and lives in its own files.
    static func makeCapabilities() -> [any DaemonCapability] {
        // Peer sessions advertise and browse through the DNS-SD capability's Avahi client.
        let dnssd = DNSSDCapability()
        return [GattCapability(), AdvertiseCapability(), AgentCapability(), CentralCapability(), dnssd, PeerCapability(dnssd: dnssd)]
    }

    /// Clients connected to the control socket now.
    public var clientCount: Int { server.clientCount }

    /// Runs until SIGTERM/SIGINT (from `signals`) or until the task is cancelled.
    public func run(signals: AsyncStream<ProcessSignal>?) async throws {
        let cfg = config.withLock { $0 }
        do {
            try AtomicFile.makeDirectory(cfg.stateDirectory, mode: 0o750)
        } catch {
            throw DaemonError("cannot create the state directory \(cfg.stateDirectory): \(error)")
        }
        // What a `kill -9` mid-write left of the state files (the DNS-SD names here; the peer
        // module's own directory and the inbox are tidied where they are opened).
        AtomicFile.removeAbandonedTemporaries(in: cfg.stateDirectory)
        do {
            try server.start()
        } catch {
            throw DaemonError("cannot open the control socket \(cfg.socketPath): \(error)")
        }
        var services: [any Service] = [ControlSocketService(), BusService(daemon: self)]
        if let interval = notifier.watchdogInterval {
            // The unit asks for pings (WatchdogSec=): silent, the daemon would be killed and
            // restarted every interval, so `watchdog = no` cannot be honoured here.
            if !cfg.watchdog {
                logger.warning("watchdog = no, but the service manager expects watchdog pings (WatchdogSec=): sending them anyway; set WatchdogSec=0 in a drop-in to turn them off",
                               ["interval": "\(interval)"])
            }
            services.append(WatchdogService(notifier: notifier, interval: interval))
        }
        notifier.ready(status: "serving on \(cfg.socketPath)")
        logger.notice("peerlinkd \(Self.version) ready", ["socket.path": cfg.socketPath, "pid": "\(getpid())"])
        let group = ServiceGroup(services: services, logger: logger, signals: signals,
                                 onReload: { [self] in reload() },
                                 onShutdown: { [self] in
                                     notifier.stopping()
                                     for c in capabilities { await c.shutdown() }
                                     server.stop()
                                     link.withLock { $0.connection }?.close()
                                 })
        try await group.run()
        server.stop()
        logger.notice("peerlinkd stopped")
    }

    /// Re-reads the configuration file: the log level applies at once; other changes are
    /// reported as needing a restart. A file with errors leaves the running configuration,
    /// and says so where a reload's caller looks: the journal, the unit's status line
    /// (`systemctl status`, until a reload succeeds) and a `daemon.reload-failed` event.
    func reload() {
        notifier.reloading()
        var fresh: DaemonConfig
        do {
            fresh = try DaemonConfig.load(path: configPath)
        } catch {
            logger.error("reload failed; keeping the running configuration", ["error": error.description])
            notifier.ready(status: "serving; the last reload was refused: \(error.description)")
            server.publish(topic: ControlEvent.daemonReloadFailed, data: ["error": .string(error.description)])
            return
        }
        defer { notifier.ready(status: "serving") }
        fresh.apply(overrides)
        let old = config.withLock { $0 }
        let changed = fresh.changedKeys(comparedTo: old)
        let needRestart = changed.filter { !DaemonConfig.liveKeys.contains($0) }
        // Reported at the more verbose of the two levels: a reload to `error` still says what
        // it changed and what waits for a restart.
        logLevel.level = max(old.logLevel, fresh.logLevel)
        if !needRestart.isEmpty {
            logger.warning("configuration changes need a restart to apply", ["keys": needRestart.joined(separator: ",")])
        }
        logger.notice("configuration reloaded", ["changed": changed.joined(separator: ",")])
        logLevel.level = fresh.logLevel
        config.withLock { $0.logLevel = fresh.logLevel }
        server.publish(topic: ControlEvent.daemonReloaded, data: ["changed": .array(changed.map { .string($0) }),
                                                        "restart_needed": .array(needRestart.map { .string($0) })])
    }

    // MARK: Bus

    func connected(_ c: BusConnection, _ bluez: BlueZClient) {
        link.withLock {
            $0.connection = c
            $0.bluez = bluez
            $0.lastError = nil
        }
    }

    func disconnected(_ why: String) {
        link.withLock {
            $0.connection = nil
            $0.bluez = nil
            $0.lastError = why
        }
    }

    /// The BlueZ client, or the error a method should give when there is none.
    func bluez() throws(RPCError) -> BlueZClient {
        let (b, why) = link.withLock { ($0.bluez, $0.lastError) }
        guard let b else {
            let bus = config.withLock { $0.bus }
            throw BlueZError.unavailable("not connected to the \(bus) bus (\(why ?? "unknown"))").rpcError
        }
        return b
    }

    /// The configured default adapter selector (nil: the first adapter).
    var defaultSelector: AdapterSelector? { config.withLock { $0.adapter }.flatMap(AdapterSelector.init) }

    /// Turns BlueZ events into control-socket events.
    func publish(_ event: BlueZEvent, defaultAddress: BluetoothAddress?) {
        func j(_ a: AdapterInfo) -> JSONValue { BLEJSON.adapter(a, isDefault: a.address == defaultAddress) }
        switch event {
        case .available: server.publish(topic: ControlEvent.bluezAvailable, data: [:])
        case .unavailable: server.publish(topic: ControlEvent.bluezUnavailable, data: [:])
        case .adapterAdded(let a, let previous):
            var data: [String: JSONValue] = ["adapter": j(a)]
            if let previous { data["previous_name"] = .string(previous) }
            server.publish(topic: ControlEvent.adapterAdded, data: .object(data))
        case .adapterRemoved(let a): server.publish(topic: ControlEvent.adapterRemoved, data: ["adapter": j(a)])
        case .adapterChanged(let a, let changed):
            server.publish(topic: ControlEvent.adapterChanged, data: ["adapter": j(a), "changed": .array(changed.map { .string($0) })])
            if changed.contains("powered") {
                server.publish(topic: ControlEvent.adapterPowered, data: ["adapter": j(a), "powered": .bool(a.powered)])
            }
        }
    }
}

/// A start-up failure, said plainly.
public struct DaemonError: Error, CustomStringConvertible {
    /// What went wrong.
    public let description: String
    init(_ description: String) { self.description = description }
}
