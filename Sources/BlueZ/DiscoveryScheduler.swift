import BLE

/// The discovery filter bluetoothd is given for one adapter: what every scan on it together
/// lets through. Plain data (`ScanFilter.swift` turns it into `SetDiscoveryFilter`'s map).
public struct DiscoveryFilter: Sendable, Hashable {
    /// Service UUIDs, when every scan names some (else nil: any device).
    public var uuids: [BluetoothUUID]?
    /// The weakest RSSI any scan accepts, when every scan has a minimum (else nil).
    public var rssi: Int?

    /// The filter that lets through everything any of `filters` wants. LE only and
    /// duplicates on are implied: duplicate suppression is done per scan, after the
    /// per-scan match, because bluetoothd merges the filters of all its clients.
    public init(merging filters: [ScanFilter]) {
        // A UUID filter only when every scan has one: otherwise a scan for anything would miss devices.
        if !filters.isEmpty, filters.allSatisfy({ !$0.services.isEmpty }) {
            uuids = Array(Set(filters.flatMap(\.services))).sorted()
        }
        if !filters.isEmpty, filters.allSatisfy({ $0.minimumRSSI != nil }) {
            rssi = filters.compactMap(\.minimumRSSI).min()
        }
    }
}

/// When discovery runs on each adapter, and with which filter: a state machine without a
/// bus. Its inputs are scans starting and stopping, connects beginning and ending (discovery
/// is paused while one runs: scanning and connecting on one controller slow each other down
/// and some controllers refuse to connect while scanning), and the adapter or bluetoothd
/// coming, going or being powered (each makes bluetoothd forget our discovery session). `plan` says what to call to get from what bluetoothd has to what the
/// scans want; the caller makes the calls and reports each success back.
public struct DiscoveryScheduler: Sendable {
    /// A call to make on one adapter's `Adapter1`.
    public enum Action: Sendable, Hashable {
        /// `SetDiscoveryFilter` with the merged filter.
        case setFilter(DiscoveryFilter)
        /// `StartDiscovery`.
        case start
        /// `StopDiscovery`. The filter stays set: bluetoothd applies a client's filter only
        /// to that client's own discovery, and drops it when the client leaves the bus, so
        /// clearing it would cost a call on the way to a connect (the central's first read)
        /// and another on the next scan, and change nothing for anyone else.
        case stop
    }

    struct AdapterState: Sendable {
        /// Scan id → filter.
        var scans: [String: ScanFilter] = [:]
        /// Connects (or pairings) in progress; discovery is paused while above 0.
        var pauses = 0
        /// Whether our discovery session is running (as far as we know).
        var discovering = false
        /// The filter last set (nil: none of ours).
        var applied: DiscoveryFilter?
        /// The scans running when bluetoothd lost our session: the next start resumes them.
        var resumePending: Set<String> = []
        /// The adapter went (and has not been announced since).
        var gone = false
    }

    private var adapters: [BluetoothAddress: AdapterState] = [:]

    /// No scans, nothing running.
    public init() {}

    // MARK: Inputs

    /// A scan on `adapter` started.
    public mutating func scanStarted(_ id: String, adapter: BluetoothAddress, filter: ScanFilter) {
        adapters[adapter, default: AdapterState()].scans[id] = filter
    }

    /// A scan ended (stopped, timed out, its owner gone).
    public mutating func scanStopped(_ id: String) {
        for k in adapters.keys {
            adapters[k]?.scans.removeValue(forKey: id)
            adapters[k]?.resumePending.remove(id)
        }
    }

    /// A connect (or pairing) on `adapter` began: discovery pauses.
    public mutating func connectBegan(adapter: BluetoothAddress) {
        adapters[adapter, default: AdapterState()].pauses += 1
    }

    /// A connect (or pairing) on `adapter` ended: discovery resumes when no other runs.
    public mutating func connectEnded(adapter: BluetoothAddress) {
        guard let p = adapters[adapter]?.pauses, p > 0 else { return }
        adapters[adapter]?.pauses = p - 1
    }

    /// The adapter appeared (bluetoothd came back, or the controller did): it has no session
    /// of ours; its scans are resumed by the next plan. An announcement of an adapter whose
    /// discovery we started since (the daemon's first look at bluetoothd, handled after a
    /// scan that came in meanwhile) changes nothing: a controller that really went was
    /// `adapterGone` first, and bluetoothd gone is `bluetoothdGone`, both ending our session.
    public mutating func adapterAppeared(_ adapter: BluetoothAddress) {
        guard let s = adapters[adapter] else { return }
        if !s.gone, s.discovering { return }
        adapters[adapter]?.gone = false
        reset(adapter, resume: true)
    }

    /// The adapter went: its session went with it (the scans stay, for when it is back).
    public mutating func adapterGone(_ adapter: BluetoothAddress) {
        adapters[adapter]?.gone = true
        reset(adapter, resume: false)
    }

    /// The adapter was powered on or off: bluetoothd drops discovery sessions and filters
    /// either way; after power on, the scans are resumed by the next plan.
    public mutating func adapterPowerChanged(_ adapter: BluetoothAddress, on: Bool) { reset(adapter, resume: on) }

    /// bluetoothd no longer has our discovery session or filter on `adapter`: the next plan
    /// starts from nothing, and with `resume` the scans running now are reported resumed
    /// when discovery starts again.
    private mutating func reset(_ adapter: BluetoothAddress, resume: Bool) {
        guard var s = adapters[adapter] else { return }
        s.discovering = false
        s.applied = nil
        if resume { s.resumePending.formUnion(s.scans.keys) }
        adapters[adapter] = s
    }

    /// bluetoothd went (or the bus connection did): every adapter's session is gone.
    public mutating func bluetoothdGone() {
        for k in adapters.keys { reset(k, resume: false) }
    }

    /// The adapter reports discovery off. True when that was not our doing (our session was
    /// running, unpaused, with scans): then it is marked stopped and the caller plans again.
    public mutating func discoveryStopped(adapter: BluetoothAddress) -> Bool {
        guard let s = adapters[adapter], s.discovering, s.pauses == 0, !s.scans.isEmpty else { return false }
        adapters[adapter]?.discovering = false
        return true
    }

    /// A planned action succeeded. For `.start`, returns the scans to report resumed
    /// (empty unless bluetoothd had lost our session).
    @discardableResult
    public mutating func completed(_ action: Action, adapter: BluetoothAddress) -> [String] {
        guard adapters[adapter] != nil else { return [] }
        switch action {
        case .setFilter(let f): adapters[adapter]?.applied = f
        case .stop: adapters[adapter]?.discovering = false
        case .start:
            adapters[adapter]?.discovering = true
            let resumed = adapters[adapter]?.resumePending.sorted() ?? []
            adapters[adapter]?.resumePending = []
            return resumed
        }
        return []
    }

    // MARK: Outputs

    /// The calls that bring `adapter` in line with its scans, in order. Make them one by one
    /// and report each success with `completed`; after a failed `.setFilter` or `.start`,
    /// make no more (the next plan tries again). `.stop` counts as done even when it fails:
    /// our session is then gone either way.
    public func plan(for adapter: BluetoothAddress, powered: Bool) -> [Action] {
        guard let s = adapters[adapter] else { return [] }
        if !s.scans.isEmpty, s.pauses == 0, powered {
            var actions: [Action] = []
            let merged = DiscoveryFilter(merging: s.scans.keys.sorted().map { s.scans[$0]! })
            if s.applied != merged { actions.append(.setFilter(merged)) }
            if !s.discovering { actions.append(.start) }
            return actions
        }
        guard s.discovering else { return [] }
        return [.stop]
    }

    /// Whether our discovery session on `adapter` is running.
    public func isDiscovering(_ adapter: BluetoothAddress) -> Bool { adapters[adapter]?.discovering ?? false }

    /// Whether discovery on `adapter` is paused for a connect.
    public func isPaused(_ adapter: BluetoothAddress) -> Bool { (adapters[adapter]?.pauses ?? 0) > 0 }

    /// The merged filter bluetoothd has for `adapter` (nil: none of ours).
    public func appliedFilter(_ adapter: BluetoothAddress) -> DiscoveryFilter? { adapters[adapter]?.applied }

    /// The scans on `adapter`, by id.
    public func scanIDs(_ adapter: BluetoothAddress) -> [String] { adapters[adapter]?.scans.keys.sorted() ?? [] }
}
