/// Ids used on a connection and done with (resources and streams that ended), remembered
/// mostly as one run a side: a late frame for one is ignored and a new resource or stream may
/// not reuse one, for the connection's life.
///
/// Each side allocates its ids in order (odd for the dialer, even for the listener, two
/// apart), so however many resources and streams a session carries, the ended ones form one
/// run per side, give or take the few that ended before an older one still in progress: those
/// wait in a set until the run reaches them. A set of every id kept about ten bytes for each
/// instead: a session that sends a file every ten seconds for a month grew by some 2.5 MB for
/// nothing. A peer that picks its ids out of order fills the set, as it did before, and every
/// step stays constant time, amortised (a sorted list of runs would let a peer that counts
/// down make each insert move the whole list). Only a table that sees every id of its side
/// keeps one run: `ResourceTable` does (streams take theirs through it); `StreamTable` sees
/// stream ids only, so where resources come between streams its ids stay strays, as many as
/// a set held before.
public struct UsedIDs: Sendable {
    private struct Side: Sendable {
        /// Consecutive ids of this parity (as `id >> 1`), all inserted.
        var run: ClosedRange<UInt32>?
        /// Inserted ids (as `id >> 1`) not next to the run yet.
        var strays: Set<UInt32> = []

        func contains(_ k: UInt32) -> Bool { run?.contains(k) == true || strays.contains(k) }

        mutating func insert(_ k: UInt32) {
            guard let r = run else {
                run = k...k
                return absorb()
            }
            if r.contains(k) { return }
            // (k is at most 2^31 - 1: neither side of the run can overflow.)
            if k == r.upperBound + 1 || (r.lowerBound > 0 && k == r.lowerBound - 1) {
                run = min(k, r.lowerBound)...max(k, r.upperBound)
                absorb()
            } else {
                // A stray is never next to the run (it would have been absorbed).
                strays.insert(k)
            }
        }

        /// Takes the strays the run now reaches, either way.
        private mutating func absorb() {
            guard var r = run else { return }
            while r.upperBound < UInt32.max >> 1, strays.remove(r.upperBound + 1) != nil { r = r.lowerBound...(r.upperBound + 1) }
            while r.lowerBound > 0, strays.remove(r.lowerBound - 1) != nil { r = (r.lowerBound - 1)...r.upperBound }
            run = r
            // A set keeps its largest storage when emptied: give back what a burst grew.
            if strays.isEmpty && strays.capacity > 64 { strays = [] }
        }
    }

    /// Index 0: even ids, 1: odd.
    private var sides = [Side(), Side()]

    public init() {}

    /// Whether `id` was inserted.
    public func contains(_ id: UInt32) -> Bool { sides[Int(id & 1)].contains(id >> 1) }

    /// Remembers `id`.
    public mutating func insert(_ id: UInt32) { sides[Int(id & 1)].insert(id >> 1) }

    /// Ids kept one by one, outside the runs (what the memory grows with).
    public var strayCount: Int { sides[0].strays.count + sides[1].strays.count }

    /// Room the strays' sets hold (tests: given back once they are empty).
    var strayStorage: Int { sides[0].strays.capacity + sides[1].strays.capacity }
}
