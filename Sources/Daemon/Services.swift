import BlueZ
import DBus
import FoundationEssentials
import Logging

/// Suspends until the task is cancelled.
func waitUntilCancelled() async {
    let (stream, continuation) = AsyncStream<Void>.makeStream()
    // The stream never yields; iteration ends when the task is cancelled.
    for await _ in stream {}
    continuation.finish()
}

/// Keeps the control socket's service slot: the socket is started before the group (so READY
/// is true) and stopped on shutdown; this service only marks its lifetime.
struct ControlSocketService: Service {
    var name: String { "control" }
    func run() async throws { await waitUntilCancelled() }
}

/// Connects to the bus and follows BlueZ on it; when the bus goes away, connects again with
/// backoff (1 s doubling to 30 s). Never gives up: the control socket keeps answering, and
/// `daemon.status` says what is missing.
struct BusService: Service {
    let daemon: PeerlinkDaemon
    var name: String { "bus" }

    func run() async throws {
        let logger = daemon.logger.child("bus")
        var delay = 1.0
        while !Task.isCancelled {
            let address = daemon.config.withLock { $0.bus }.busAddress
            let connection: BusConnection
            do {
                connection = try await BusConnection.connect(address, label: "bus")
            } catch {
                daemon.disconnected("\(error)")
                logger.warning("cannot connect to the bus; retrying", ["bus": "\(address)", "error": "\(error)", "retry.seconds": "\(delay)"])
                try? await Task.sleep(for: .seconds(delay))
                delay = min(delay * 2, 30)
                continue
            }
            delay = 1
            logger.info("connected to the bus", ["bus": "\(address)", "dbus.name": connection.uniqueName])
            let daemon = self.daemon
            let bluez = BlueZClient(bus: connection, logger: daemon.logger.child("bluez")) { [weak daemon] event in
                guard let daemon else { return }
                daemon.publishBlueZ(event)
            }
            daemon.connected(connection, bluez)
            let session = BusSession(connection: connection, bluez: bluez)
            for c in daemon.capabilities { await c.attach(session) }
            do {
                try await bluez.run()
            } catch is CancellationError {
            } catch {
                logger.warning("lost the bus", ["error": "\(error)"])
            }
            // The shutdown closes the connection first (see PeerlinkDaemon.run): nothing was
            // lost, and there is nothing to connect again to.
            let shuttingDown = connection.wasClosed
            for c in daemon.capabilities { await c.detach() }
            connection.close()
            daemon.disconnected(shuttingDown ? "shutting down" : "the connection to the \(address) was lost")
            if shuttingDown { return }
        }
    }
}

/// Sends WATCHDOG=1 at half the interval systemd asked for.
struct WatchdogService: Service {
    let notifier: SystemdNotifier
    let interval: Duration
    var name: String { "watchdog" }

    func run() async throws {
        while !Task.isCancelled {
            notifier.watchdog()
            try? await Task.sleep(for: interval / 2)
        }
    }
}

extension BusChoice {
    /// The D-Bus module's name for this bus.
    var busAddress: BusAddress {
        switch self {
        case .system: .system
        case .session: .session
        case .address(let a): .address(a)
        }
    }
}
