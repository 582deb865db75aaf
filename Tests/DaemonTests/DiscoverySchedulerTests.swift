import BLE
import BlueZ
import TestSupport
import Testing

/// The discovery scheduler without a bus: what it plans for scans coming and going,
/// connects pausing discovery, and bluetoothd forgetting our session.
@Suite(.ownThreads, .memoryHeavy) struct DiscoverySchedulerTests {
    static let hci0 = BluetoothAddress("00:AA:01:00:00:00")!
    static let hci1 = BluetoothAddress("00:AA:01:00:00:01")!
    static let hr = try! BluetoothUUID(parsing: "180d")
    static let battery = try! BluetoothUUID(parsing: "180f")

    static func filter(_ services: [BluetoothUUID] = [], rssi: Int? = nil) -> ScanFilter {
        var f = ScanFilter()
        f.services = services
        f.minimumRSSI = rssi
        return f
    }

    /// Makes every planned call succeed, as the central does; returns what was called and
    /// the scans reported resumed.
    @discardableResult
    static func run(_ s: inout DiscoveryScheduler, _ a: BluetoothAddress = hci0, powered: Bool = true) -> (actions: [DiscoveryScheduler.Action], resumed: [String]) {
        let actions = s.plan(for: a, powered: powered)
        var resumed: [String] = []
        for action in actions { resumed += s.completed(action, adapter: a) }
        return (actions, resumed)
    }

    /// `discoveryStopped` is mutating; `#expect` cannot call it on a captured value.
    static func stopped(_ s: inout DiscoveryScheduler) -> Bool { s.discoveryStopped(adapter: hci0) }

    @Test func aScanSetsItsFilterThenStartsAndNothingMoreIsPlanned() {
        var s = DiscoveryScheduler()
        #expect(s.plan(for: Self.hci0, powered: true).isEmpty)
        s.scanStarted("scan-1", adapter: Self.hci0, filter: Self.filter([Self.hr], rssi: -80))
        let merged = DiscoveryFilter(merging: [Self.filter([Self.hr], rssi: -80)])
        #expect(merged.uuids == [Self.hr] && merged.rssi == -80)
        #expect(Self.run(&s).actions == [.setFilter(merged), .start])
        #expect(s.isDiscovering(Self.hci0) && s.appliedFilter(Self.hci0) == merged)
        #expect(s.plan(for: Self.hci0, powered: true).isEmpty)
        // Another adapter is not touched.
        #expect(s.plan(for: Self.hci1, powered: true).isEmpty)
    }

    @Test func mergedFilterIsCheckedAgainWheneverTheScansChange() {
        var s = DiscoveryScheduler()
        s.scanStarted("scan-1", adapter: Self.hci0, filter: Self.filter([Self.hr], rssi: -80))
        Self.run(&s)
        // A second scan for anything: the UUID filter would hide what it wants, so it goes;
        // both have an RSSI minimum, so the weaker one is kept.
        s.scanStarted("scan-2", adapter: Self.hci0, filter: Self.filter(rssi: -90))
        #expect(Self.run(&s).actions == [.setFilter(DiscoveryFilter(merging: [Self.filter(rssi: -90)]))])
        #expect(s.appliedFilter(Self.hci0)?.uuids == nil && s.appliedFilter(Self.hci0)?.rssi == -90)
        // Back to the first scan alone: its own filter again, discovery keeps running.
        s.scanStopped("scan-2")
        #expect(Self.run(&s).actions == [.setFilter(DiscoveryFilter(merging: [Self.filter([Self.hr], rssi: -80)]))])
        // Two UUID scans: the union, sorted.
        s.scanStarted("scan-3", adapter: Self.hci0, filter: Self.filter([Self.battery]))
        let both = Self.run(&s).actions
        #expect(both == [.setFilter(DiscoveryFilter(merging: [Self.filter([Self.hr]), Self.filter([Self.battery])]))])
        #expect(s.appliedFilter(Self.hci0)?.uuids == [Self.hr, Self.battery].sorted() && s.appliedFilter(Self.hci0)?.rssi == nil)
    }

    @Test func discoveryPausesDuringAConnectAndResumesAfterTheLast() {
        var s = DiscoveryScheduler()
        s.scanStarted("scan-1", adapter: Self.hci0, filter: Self.filter())
        Self.run(&s)
        s.connectBegan(adapter: Self.hci0)
        #expect(s.isPaused(Self.hci0))
        #expect(Self.run(&s).actions == [.stop])
        #expect(!s.isDiscovering(Self.hci0))
        // A second operation queued behind the first keeps it paused.
        s.connectBegan(adapter: Self.hci0)
        s.connectEnded(adapter: Self.hci0)
        #expect(s.plan(for: Self.hci0, powered: true).isEmpty)
        s.connectEnded(adapter: Self.hci0)
        // The filter is still set: only StartDiscovery, and no resumed event (our doing).
        #expect(Self.run(&s) == ([.start], []))
        // An unmatched end does not go below zero.
        s.connectEnded(adapter: Self.hci0)
        s.connectBegan(adapter: Self.hci0)
        #expect(s.isPaused(Self.hci0))
    }

    @Test func aConnectWithoutScansPlansNothingAndTheLastScanOnlyStops() {
        var s = DiscoveryScheduler()
        s.connectBegan(adapter: Self.hci0)
        #expect(s.plan(for: Self.hci0, powered: true).isEmpty)
        s.connectEnded(adapter: Self.hci0)
        s.scanStarted("scan-1", adapter: Self.hci0, filter: Self.filter())
        Self.run(&s)
        s.scanStopped("scan-1")
        #expect(Self.run(&s).actions == [.stop])
        #expect(s.appliedFilter(Self.hci0) == DiscoveryFilter(merging: [Self.filter()]) && !s.isDiscovering(Self.hci0))
        // The same filter again: bluetoothd still has it, so the scan only starts.
        s.scanStarted("scan-1b", adapter: Self.hci0, filter: Self.filter())
        #expect(Self.run(&s).actions == [.start])
        s.scanStopped("scan-1b")
        Self.run(&s)
        // A scan stopped during a pause: discovery is already off; the filter stays until the next scan.
        s.scanStarted("scan-2", adapter: Self.hci0, filter: Self.filter())
        Self.run(&s)
        s.connectBegan(adapter: Self.hci0)
        Self.run(&s)
        s.scanStopped("scan-2")
        s.connectEnded(adapter: Self.hci0)
        #expect(s.plan(for: Self.hci0, powered: true).isEmpty)
    }

    @Test func aFailedCallIsPlannedAgain() {
        var s = DiscoveryScheduler()
        s.scanStarted("scan-1", adapter: Self.hci0, filter: Self.filter())
        let first = s.plan(for: Self.hci0, powered: true)
        // SetDiscoveryFilter refused: nothing is reported done; the next plan is the same.
        #expect(s.plan(for: Self.hci0, powered: true) == first)
        s.completed(first[0], adapter: Self.hci0)
        // StartDiscovery refused: only the start is left.
        #expect(s.plan(for: Self.hci0, powered: true) == [.start])
        #expect(!s.isDiscovering(Self.hci0))
    }

    @Test func poweredOffAdapterGetsNoDiscoveryAndIsResumedWhenBack() {
        var s = DiscoveryScheduler()
        s.scanStarted("scan-1", adapter: Self.hci0, filter: Self.filter())
        s.scanStarted("scan-2", adapter: Self.hci0, filter: Self.filter())
        Self.run(&s)
        // Powered off: bluetoothd drops our session and filter.
        s.adapterPowerChanged(Self.hci0, on: false)
        #expect(s.plan(for: Self.hci0, powered: false).isEmpty)
        // Powered on again: filter and start again, and both scans are reported resumed.
        s.adapterPowerChanged(Self.hci0, on: true)
        let (actions, resumed) = Self.run(&s)
        #expect(actions == [.setFilter(DiscoveryFilter(merging: [Self.filter(), Self.filter()])), .start])
        #expect(resumed == ["scan-1", "scan-2"])
        // Once only: the adapter going is no resume.
        s.adapterGone(Self.hci0)
        #expect(Self.run(&s).resumed.isEmpty)
        // Only scans that were running when the session was lost are resumed: not one
        // started meanwhile, nor one stopped meanwhile.
        s.adapterAppeared(Self.hci0)
        s.scanStopped("scan-1")
        s.scanStarted("scan-3", adapter: Self.hci0, filter: Self.filter())
        #expect(Self.run(&s).resumed == ["scan-2"])
        // An adapter that comes back without scans resumes nothing later.
        var idle = DiscoveryScheduler()
        idle.connectBegan(adapter: Self.hci1)
        idle.connectEnded(adapter: Self.hci1)
        idle.adapterAppeared(Self.hci1)
        idle.scanStarted("scan-9", adapter: Self.hci1, filter: Self.filter())
        #expect(Self.run(&idle, Self.hci1).resumed.isEmpty)
    }

    /// A late announcement of an adapter whose discovery is ours already (the daemon's
    /// start-up look at bluetoothd, handled after a scan came in) is no loss: no second
    /// StartDiscovery, no scan reported resumed that never stopped.
    @Test func aLateAnnouncementOfAnAdapterInUseChangesNothing() {
        var s = DiscoveryScheduler()
        s.scanStarted("scan-1", adapter: Self.hci0, filter: Self.filter())
        Self.run(&s)
        s.adapterAppeared(Self.hci0)
        #expect(s.plan(for: Self.hci0, powered: true).isEmpty && s.isDiscovering(Self.hci0))
        #expect(Self.run(&s).resumed.isEmpty)
    }

    @Test func bluetoothdGoneForgetsEverySession() {
        var s = DiscoveryScheduler()
        s.scanStarted("scan-1", adapter: Self.hci0, filter: Self.filter())
        s.scanStarted("scan-2", adapter: Self.hci1, filter: Self.filter([Self.hr]))
        Self.run(&s, Self.hci0)
        Self.run(&s, Self.hci1)
        s.bluetoothdGone()
        #expect(!s.isDiscovering(Self.hci0) && !s.isDiscovering(Self.hci1))
        #expect(s.appliedFilter(Self.hci1) == nil)
        #expect(s.plan(for: Self.hci1, powered: true).count == 2)
        #expect(s.scanIDs(Self.hci1) == ["scan-2"])
    }

    @Test func discoveryStoppedUnderUsIsRestartedButNotWhenPausedOrIdle() {
        var s = DiscoveryScheduler()
        #expect(!Self.stopped(&s))
        s.scanStarted("scan-1", adapter: Self.hci0, filter: Self.filter())
        Self.run(&s)
        s.connectBegan(adapter: Self.hci0)
        #expect(!Self.stopped(&s))
        s.connectEnded(adapter: Self.hci0)
        #expect(Self.stopped(&s))
        #expect(Self.run(&s).actions == [.start])
        s.scanStopped("scan-1")
        #expect(!Self.stopped(&s))
    }
}
