import BLE

/// A delay that grows with each attempt: `initial`, doubled per attempt, at most `maximum`.
/// The one backoff policy of the central: connect retries and kept-device reconnects both
/// use it, with their own bounds.
public struct Backoff: Sendable, Hashable {
    /// The delay before the second attempt.
    public var initial: Duration
    /// The longest delay.
    public var maximum: Duration

    /// A policy.
    public init(initial: Duration, maximum: Duration) {
        self.initial = initial
        self.maximum = maximum
    }

    /// Retries within one connect: BlueZ was busy or the link attempt was aborted; 0.25 s
    /// doubling to 2 s keeps the retries inside a typical connect timeout.
    public static let connectRetry = Backoff(initial: .milliseconds(250), maximum: .seconds(2))
    /// Keep-connected reconnects: 0.5 s doubling to 30 s, so a device that is away for long
    /// is not asked for every second.
    public static let reconnect = Backoff(initial: .milliseconds(500), maximum: .seconds(30))

    /// The delay after failed attempt `attempt` (from 1).
    public func delay(after attempt: Int) -> Duration {
        var d = initial
        var n = max(attempt, 1)
        while n > 1, d < maximum {
            d = d * 2
            n -= 1
        }
        return min(d, maximum)
    }
}

/// One connect to a device as a state machine without a bus: it counts the attempts,
/// keeps the last error, holds the deadline, and says after every observation what to do
/// next. The caller (`Central`) makes the calls and waits; this decides.
public struct Connector: Sendable {
    /// The link as BlueZ's objects show it.
    public enum Link: Sendable, Hashable {
        /// No link (or no device object yet).
        case down
        /// Connected, services not resolved yet.
        case connected
        /// Connected with its services resolved: the goal.
        case resolved
    }

    /// What to do next.
    public enum Step: Sendable, Hashable {
        /// Connected with services: done.
        case done
        /// Connected: wait at most this long for ServicesResolved, then ask again.
        case awaitServices(Duration)
        /// Make attempt `attempt` (Connect, or ConnectDevice for an unknown device) and wait
        /// at most `linkWait` for a link or an answer.
        case attempt(Int, linkWait: Duration)
        /// BlueZ says it is connected already: wait (at most this long) for the link to show.
        case awaitLink(Duration)
        /// Ask again at once.
        case retryNow
        /// Back off this long, then ask again.
        case retry(after: Duration)
        /// Give up.
        case fail(Failure)
    }

    /// Why a connect failed.
    public enum Failure: Error, Sendable, Hashable {
        /// The deadline passed (attempts made, the last error seen).
        case timedOut(attempts: Int, lastError: String?)
        /// BlueZ refused in a way a retry does not fix.
        case refused(BlueZCallError)
        /// BlueZ has no object for the device and no `ConnectDevice` (not `--experimental`).
        case unknownDevice
        /// bluetoothd left the bus.
        case bluetoothdGone
        /// The waiting task was cancelled.
        case cancelled
    }

    /// When the attempt must be over.
    public let deadline: ContinuousClock.Instant
    /// The backoff between attempts that failed with a transient error.
    public let backoff: Backoff
    /// Attempts made so far.
    public private(set) var attempts = 0
    /// The last thing that went wrong (shown in the timeout error and reconnect events).
    public private(set) var lastError: String?

    /// How long a connected device may take to resolve its services before the link is
    /// dropped and tried again.
    public static let resolveLimit: Duration = .seconds(15)
    /// How long one attempt may go without a link before it is cancelled and made again.
    public static let linkLimit: Duration = .seconds(12)
    /// Below this much time left, nothing new is started.
    static let lastMoment: Duration = .milliseconds(50)
    /// Below this much time left, a stalled link is not dropped to try again.
    static let noTimeToRetry: Duration = .milliseconds(500)

    /// A connect that must be done by `deadline`.
    public init(deadline: ContinuousClock.Instant, backoff: Backoff = .connectRetry) {
        self.deadline = deadline
        self.backoff = backoff
    }

    /// What to do with the link as it is now. A resolved link is taken even at the deadline.
    public mutating func next(link: Link, now: ContinuousClock.Instant) -> Step {
        if link == .resolved { return .done }
        let remaining = deadline - now
        if remaining <= Self.lastMoment { return .fail(.timedOut(attempts: attempts, lastError: lastError)) }
        switch link {
        case .resolved:
            return .done
        case .connected:
            // Connected (by us, or already): wait for GATT discovery (bluez #191, bleak #882).
            return .awaitServices(min(remaining, .seconds(10)))
        case .down:
            attempts += 1
            return .attempt(attempts, linkWait: min(max(remaining, .milliseconds(100)), Self.linkLimit))
        }
    }

    /// How long to wait for the services of a link the current attempt brought up.
    public func resolveWait(now: ContinuousClock.Instant) -> Duration {
        min(max(deadline - now, .milliseconds(100)), Self.resolveLimit)
    }

    /// Whether there is time left to drop a stalled link (or cancel a stalled attempt) and try again.
    public func hasTimeToRetry(now: ContinuousClock.Instant) -> Bool { deadline - now > Self.noTimeToRetry }

    /// The attempt brought neither a link nor an answer within its link wait. True: cancel
    /// it and make it again (bluetoothd 5.66 can lose a Connect and never answer). False
    /// when too little time is left to try again: wait for its answer as it is.
    public mutating func noLink(now: ContinuousClock.Instant) -> Bool {
        guard hasTimeToRetry(now: now) else { return false }
        lastError = "no connection within \(Self.text(Self.linkLimit))"
        return true
    }

    /// The attempt's link came up but its services did not resolve within `resolveWait`.
    /// True: drop the link and try again (GATT discovery can stall on a live link). False
    /// when too little time is left.
    public mutating func servicesStalled(now: ContinuousClock.Instant) -> Bool {
        guard hasTimeToRetry(now: now) else { return false }
        lastError = "connected but the services were not resolved within \(Self.text(Self.resolveLimit))"
        return true
    }

    /// A link found connected (`awaitServices`) did not resolve its services: the caller
    /// drops it, and the next `next` attempts again.
    public mutating func connectedWithoutServices() { lastError = "connected but the services were not resolved" }

    /// BlueZ answered the attempt but no link showed, even after reading its objects again.
    public mutating func answeredWithoutLink() { lastError = "BlueZ answered Connect but the device did not connect" }

    /// "12 s" (whole seconds: the limits are).
    private static func text(_ d: Duration) -> String { "\(d.components.seconds) s" }

    /// The attempt's call failed: what now.
    public mutating func failed(_ e: BlueZCallError) -> Step {
        lastError = e.message.isEmpty ? e.name : e.message
        switch e.kind {
        case .alreadyConnected, .alreadyExists: return .awaitLink(.seconds(2))
        case .unknownMethod: return .fail(.unknownDevice)
        case .serviceGone: return .fail(.bluetoothdGone)
        case .noReply: return .retryNow
        case .cancelled: return .fail(.cancelled)
        default:
            guard e.isTransientConnectFailure else { return .fail(.refused(e)) }
            return .retry(after: backoff.delay(after: attempts))
        }
    }
}

extension Duration {
    /// The duration in seconds, fractions included (0.25 for 250 ms).
    var seconds: Double {
        let c = components
        return Double(c.seconds) + Double(c.attoseconds) / 1e18
    }
}
