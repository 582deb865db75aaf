import BLE
import DBus
import FoundationEssentials
import Logging
import Synchronization

/// Follows `bluetoothd` on the bus and keeps a live table of adapters, keyed by address.
///
/// It watches the owner of `org.bluez`, so a restart of `bluetoothd` (or an adapter coming
/// back as `hci1`) is seen and reported instead of silently breaking everything (the first
/// complaint in docs/reference-flows.md, U1). Later issues hang devices, GATT and advertising here.
public actor BlueZClient {
    /// The bus connection used.
    public nonisolated let bus: BusConnection
    private let logger: Logger
    private let onEvent: @Sendable (BlueZEvent) -> Void
    /// Every consumer's ordered stream of events (`events()`, `follow(_:)`); internal for
    /// tests that count subscribers.
    nonisolated let fanOut = EventFanOut<BlueZEvent>()
    private var owner: String?
    private var adapters: [BluetoothAddress: AdapterInfo] = [:]
    /// The name each controller had when last seen, so one that comes back under another
    /// hciN (unplugged and replugged, or its index taken meanwhile) is reported as the same.
    private var lastNames: [BluetoothAddress: String] = [:]
    /// Names whose controller now has another name: a selector by the old name follows it
    /// until a controller appears under that name again.
    private var movedNames: [String: BluetoothAddress] = [:]
    private var waiters: [UUID: Waiter] = [:]
    /// A copy of the table for readers outside the actor, updated before every event.
    private nonisolated let snapshot = Mutex<(available: Bool, adapters: [AdapterInfo], moved: [String: BluetoothAddress])>((false, [], [:]))

    private struct Waiter {
        let address: BluetoothAddress
        let predicate: @Sendable (AdapterInfo) -> Bool
        let continuation: CheckedContinuation<AdapterInfo, Error>
    }

    /// Creates a client; call `run()` to start following BlueZ. `onEvent` gets every change,
    /// in order, from the actor.
    public init(bus: BusConnection, logger: Logger, onEvent: @escaping @Sendable (BlueZEvent) -> Void) {
        self.bus = bus
        self.logger = logger
        self.onEvent = onEvent
    }

    /// Whether `bluetoothd` is on the bus now.
    public var isAvailable: Bool { owner != nil }

    /// Whether `bluetoothd` was on the bus at the last event (readable without waiting for the actor).
    public nonisolated var availableNow: Bool { snapshot.withLock { $0.available } }

    /// The adapters at the last event, ordered by name (readable without waiting for the actor).
    public nonisolated var adaptersNow: [AdapterInfo] { snapshot.withLock { $0.adapters } }

    /// Reports an event after refreshing the snapshot, so handlers see the new state.
    private func emit(_ event: BlueZEvent) {
        let list = adapterList
        let available = owner != nil
        let moved = movedNames
        snapshot.withLock { $0 = (available, list, moved) }
        onEvent(event)
        fanOut.yield(event)
    }

    /// Every event emitted after this call returns, in order, until this client stops
    /// following BlueZ (`run()` returns) or the reading task is cancelled. Each consumer takes
    /// its own stream and reads it from one loop (see `follow(_:)`): capabilities use it to
    /// register again with a restarted bluetoothd.
    public nonisolated func events() -> AsyncStream<BlueZEvent> { fanOut.subscribe() }

    /// All adapters, ordered by name.
    public var adapterList: [AdapterInfo] { adapters.values.sorted { ($0.name.count, $0.name) < ($1.name.count, $1.name) } }

    /// The adapter a selector names, or the first one when the selector is nil.
    public func adapter(_ selector: AdapterSelector?) throws(BlueZError) -> AdapterInfo {
        guard owner != nil else { throw .unavailable("bluetoothd is not running (no owner of \(BlueZNames.service) on the \(bus.address))") }
        if let selector {
            guard let a = Self.resolve(selector, in: adapterList, moved: movedNames) else {
                throw .adapterNotFound(selector, known: adapterList.map { "\($0.name) (\($0.address))" })
            }
            return a
        }
        guard let first = adapterList.first else { throw .noAdapters }
        return first
    }

    /// The adapter a selector names at the last event (readable without waiting for the actor).
    public nonisolated func adapterNow(_ selector: AdapterSelector) -> AdapterInfo? {
        snapshot.withLock { Self.resolve(selector, in: $0.adapters, moved: $0.moved) }
    }

    /// The adapter `selector` names: by address, or by name; a name no adapter has now means
    /// the controller last known by it, if that one is present under another name.
    private static func resolve(_ selector: AdapterSelector, in adapters: [AdapterInfo], moved: [String: BluetoothAddress]) -> AdapterInfo? {
        if let a = adapters.first(where: { $0.matches(selector) }) { return a }
        guard case .name(let n) = selector, let address = moved[n] else { return nil }
        return adapters.first { $0.address == address }
    }

    // MARK: Following BlueZ

    /// Follows BlueZ until cancelled (or the bus connection is lost, which throws). The
    /// streams of `events()` end when it returns.
    public func run() async throws {
        defer { fanOut.finish() }
        // One rule for every signal from bluetoothd keeps them in the order it sent them, and
        // its owner changes come in the same stream, in the order the bus sent them. One loop
        // applies each before taking the next; an owner change awaits its GetManagedObjects.
        // With owners and signals in two loops, a signal could be applied before the owner
        // change that preceded it (an adapter of a bluetoothd not yet "available", or of one
        // that left), and one applied while a resync waited was then undone by that older
        // snapshot. Signals that arrive during a resync are applied after it, in order, so
        // the table ends in bluetoothd's state whatever the snapshot already held.
        let messages = try await bus.signals(MatchRule(sender: BlueZNames.service), followingOwner: true)
        // The stream ends when the connection is lost, or when this task is cancelled.
        for await m in messages {
            if let change = m.ownerChange { await ownerChanged(change.owner) } else { handle(m) }
        }
        // Closed on purpose (the daemon shutting down): bluetoothd did not leave.
        if bus.wasClosed { return }
        if !bus.isConnected {
            await ownerChanged(nil)
            throw BlueZError.unavailable("the connection to the \(bus.address) was lost")
        }
    }

    private func ownerChanged(_ newOwner: String?) async {
        if newOwner == owner { return }
        if owner != nil {
            // The old bluetoothd is gone: everything it had is gone with it.
            owner = nil
            for a in adapterList {
                adapters.removeValue(forKey: a.address)
                emit(.adapterRemoved(a))
            }
            logger.notice("bluetoothd left the bus")
            emit(.unavailable)
        }
        guard let newOwner else { return }
        owner = newOwner
        logger.notice("bluetoothd is on the bus", ["bluez.owner": newOwner])
        emit(.available)
        await resync()
    }

    /// Reads every adapter again with GetManagedObjects and reports the differences. Only
    /// from `run()`'s loop: a signal applied while it waits would be undone by its snapshot.
    private func resync() async {
        guard owner != nil else { return }
        let objects: ManagedObjects
        do {
            objects = try await bus.getManagedObjects(destination: BlueZNames.service)
        } catch {
            logger.warning("cannot read BlueZ objects", ["error": "\(error)"])
            return
        }
        var seen = Set<BluetoothAddress>()
        for (path, ifaces) in objects {
            guard let props = ifaces[BlueZNames.adapter] else { continue }
            guard let info = AdapterInfo(path: path, properties: props) else {
                logger.warning("adapter without a valid address ignored", ["dbus.path": path.rawValue])
                continue
            }
            seen.insert(info.address)
            store(info)
        }
        for a in adapterList where !seen.contains(a.address) {
            adapters.removeValue(forKey: a.address)
            emit(.adapterRemoved(a))
        }
    }

    private func store(_ info: AdapterInfo) {
        if let old = adapters[info.address] {
            guard old != info else { return }
            adapters[info.address] = info
            var changed: [String] = []
            if old.powered != info.powered { changed.append("powered") }
            if old.powerState != info.powerState { changed.append("power_state") }
            if old.path != info.path { changed.append("path") }
            if old.alias != info.alias { changed.append("alias") }
            if old.discoverable != info.discoverable { changed.append("discoverable") }
            if old.discovering != info.discovering { changed.append("discovering") }
            if old.roles != info.roles { changed.append("roles") }
            emit(.adapterChanged(info, changed: changed))
        } else {
            adapters[info.address] = info
            let previous = lastNames[info.address].flatMap { $0 == info.name ? nil : $0 }
            lastNames[info.address] = info.name
            // A controller under a new name: its old name follows it; its new name now means it.
            movedNames[info.name] = nil
            if let previous {
                movedNames[previous] = info.address
                logger.notice("adapter back under another name", ["adapter.name": info.name, "adapter.previous_name": previous,
                                                                   "adapter.address": info.address.description])
            } else {
                logger.info("adapter added", ["adapter.name": info.name, "adapter.address": info.address.description])
            }
            emit(.adapterAdded(info, previousName: previous))
        }
        wake(info)
    }

    private func handle(_ m: BusMessage) {
        guard let path = m.path else { return }
        switch (m.interface, m.member) {
        case (StandardInterface.properties, "PropertiesChanged"):
            guard m.body.count >= 2, m.body[0].string == BlueZNames.adapter, let changed = m.body[1].stringKeyedMap,
                  var info = adapters.values.first(where: { $0.path == path }) else { return }
            let keys = info.apply(changed)
            guard !keys.isEmpty else { return }
            adapters[info.address] = info
            emit(.adapterChanged(info, changed: keys))
            wake(info)
        case (StandardInterface.objectManager, "InterfacesAdded"):
            guard m.body.count == 2, let p = m.body[0].objectPath, let ifaces = InterfaceProperties(decoding: m.body[1]),
                  let props = ifaces[BlueZNames.adapter] else { return }
            if let info = AdapterInfo(path: p, properties: props) { store(info) }
        case (StandardInterface.objectManager, "InterfacesRemoved"):
            guard m.body.count == 2, let p = m.body[0].objectPath, let names = m.body[1].stringArray,
                  names.contains(BlueZNames.adapter),
                  let info = adapters.values.first(where: { $0.path == p }) else { return }
            adapters.removeValue(forKey: info.address)
            logger.info("adapter removed", ["adapter.name": info.name, "adapter.address": info.address.description])
            emit(.adapterRemoved(info))
        default:
            break
        }
    }

    // MARK: Power

    /// Powers an adapter on or off and waits until BlueZ reports the new state.
    public func setPowered(_ selector: AdapterSelector?, on: Bool, timeout: Duration = .seconds(10)) async throws(BlueZError) -> AdapterInfo {
        let a = try adapter(selector)
        if on, a.powerState == "off-blocked" { throw .blocked(a) }
        if a.powered == on, a.powerState == (on ? "on" : "off") { return a }
        do {
            try await Adapter1(bus, a.path).setPowered(on, timeout: timeout)
        } catch {
            if error.isRFKillBlock { throw .blocked((try? adapter(.address(a.address))) ?? a) }
            switch error.kind {
            case .noReply: throw .timeout("adapter \(a.name) did not answer a power change within \(timeout)")
            case .serviceGone: throw .unavailable("bluetoothd went away")
            default: throw .bus(error)
            }
        }
        do {
            return try await waitFor(a.address, timeout: timeout) { $0.powered == on && $0.powerState == (on ? "on" : "off") }
        } catch let e as BlueZError {
            throw e
        } catch {
            throw .timeout("adapter \(a.name) did not reach power state \(on ? "on" : "off")")
        }
    }

    /// Waits until the adapter with `address` satisfies `predicate`.
    func waitFor(_ address: BluetoothAddress, timeout: Duration, _ predicate: @escaping @Sendable (AdapterInfo) -> Bool) async throws -> AdapterInfo {
        if let a = adapters[address], predicate(a) { return a }
        let id = UUID()
        return try await withThrowingTaskGroup(of: AdapterInfo.self) { group in
            group.addTask {
                try await withTaskCancellationHandler {
                    try await withCheckedThrowingContinuation { c in
                        Task { await self.addWaiter(id, Waiter(address: address, predicate: predicate, continuation: c)) }
                    }
                } onCancel: {
                    Task { await self.cancelWaiter(id) }
                }
            }
            group.addTask {
                try await Task.sleep(for: timeout)
                throw BlueZError.timeout("adapter \(address) did not reach the expected state within \(timeout)")
            }
            defer { group.cancelAll() }
            return try await group.next()!
        }
    }

    private func addWaiter(_ id: UUID, _ w: Waiter) {
        if let a = adapters[w.address], w.predicate(a) {
            w.continuation.resume(returning: a)
        } else {
            waiters[id] = w
        }
    }

    private func cancelWaiter(_ id: UUID) {
        waiters.removeValue(forKey: id)?.continuation.resume(throwing: CancellationError())
    }

    private func wake(_ info: AdapterInfo) {
        for (id, w) in waiters where w.address == info.address && w.predicate(info) {
            waiters.removeValue(forKey: id)
            w.continuation.resume(returning: info)
        }
    }
}
