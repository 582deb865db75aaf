import BLE
import BlueZ
import DBus
import TestSupport
import Testing

/// The connect state machine and the one backoff, without a bus or a clock: time is
/// passed in, so every decision is checked at an exact instant.
@Suite(.ownThreads, .memoryHeavy) struct ConnectorTests {
    static let abort = BlueZCallError(BusError(name: "org.bluez.Error.Failed", message: "le-connection-abort-by-local"))

    @Test func backoffDoublesUpToItsMaximum() {
        let r = Backoff.connectRetry
        #expect((1...6).map { r.delay(after: $0) } == [.milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2), .seconds(2), .seconds(2)])
        let k = Backoff.reconnect
        #expect((1...8).map { k.delay(after: $0) } == [.milliseconds(500), .seconds(1), .seconds(2), .seconds(4), .seconds(8), .seconds(16), .seconds(30), .seconds(30)])
        #expect(k.delay(after: 0) == .milliseconds(500) && k.delay(after: 1000) == .seconds(30))
    }

    @Test func transientFailuresAreRetriedWithTheBackoffUntilTheDeadline() {
        let t0 = ContinuousClock.now
        var c = Connector(deadline: t0 + .seconds(10))
        var now = t0
        var delays: [Duration] = []
        for n in 1...5 {
            #expect(step(&c, .down, now: now) == .attempt(n, linkWait: min(t0 + .seconds(10) - now, Connector.linkLimit)))
            guard case .retry(let d) = fail(&c, Self.abort) else { Issue.record("attempt \(n) not retried"); return }
            delays.append(d)
            now = now + d + .milliseconds(100)
        }
        #expect(delays == [.milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2), .seconds(2)])
        #expect(c.attempts == 5 && c.lastError == "le-connection-abort-by-local")
        // Past the deadline (less than 50 ms left): give up with what was seen.
        #expect(step(&c, .down, now: t0 + .milliseconds(9960)) == .fail(.timedOut(attempts: 5, lastError: "le-connection-abort-by-local")))
        #expect(step(&c, .connected, now: t0 + .seconds(11)) == .fail(.timedOut(attempts: 5, lastError: "le-connection-abort-by-local")))
        // A link that resolved just as time ran out is still taken.
        #expect(step(&c, .resolved, now: t0 + .seconds(11)) == .done)
    }

    @Test func aLinkIsWaitedForItsServices() {
        let t0 = ContinuousClock.now
        var c = Connector(deadline: t0 + .seconds(30))
        #expect(step(&c, .connected, now: t0) == .awaitServices(.seconds(10)))
        #expect(step(&c, .connected, now: t0 + .seconds(25)) == .awaitServices(.seconds(5)))
        #expect(c.attempts == 0)
        #expect(step(&c, .resolved, now: t0 + .seconds(26)) == .done)
        // A link without services the caller drops: noted, then a new attempt.
        c.connectedWithoutServices()
        #expect(step(&c, .down, now: t0 + .seconds(27)) == .attempt(1, linkWait: .seconds(3)))
        #expect(c.lastError == "connected but the services were not resolved")
        #expect(c.resolveWait(now: t0) == Connector.resolveLimit)
        #expect(c.resolveWait(now: t0 + .seconds(40)) == .milliseconds(100))
        #expect(c.hasTimeToRetry(now: t0 + .seconds(29)) && !c.hasTimeToRetry(now: t0 + .milliseconds(29_600)))
    }

    @Test func eachBlueZAnswerHasItsStep() {
        let t0 = ContinuousClock.now
        var c = Connector(deadline: t0 + .seconds(30))
        _ = c.next(link: .down, now: t0)
        func e(_ name: String, _ message: String = "") -> BlueZCallError { BlueZCallError(BusError(name: name, message: message)) }
        #expect(fail(&c, e("org.bluez.Error.AlreadyConnected", "Already Connected")) == .awaitLink(.seconds(2)))
        #expect(fail(&c, e("org.bluez.Error.AlreadyExists")) == .awaitLink(.seconds(2)))
        #expect(c.lastError == "org.bluez.Error.AlreadyExists")
        #expect(fail(&c, e(BusError.noReply, "no reply")) == .retryNow)
        #expect(fail(&c, e(BusError.unknownMethod)) == .fail(.unknownDevice))
        #expect(fail(&c, e(BusError.serviceUnknown)) == .fail(.bluetoothdGone))
        #expect(fail(&c, e("org.bluez.Error.InProgress", "In Progress")) == .retry(after: .milliseconds(250)))
        let refused = e("org.bluez.Error.AuthenticationFailed", "Authentication Failed")
        #expect(fail(&c, refused) == .fail(.refused(refused)))
        #expect(fail(&c, e("org.bluez.Error.NotAvailable", "Operation currently not available")) == .fail(.refused(e("org.bluez.Error.NotAvailable", "Operation currently not available"))))
        #expect(fail(&c, BlueZCallError(CancellationError())) == .fail(.cancelled))
    }

    @Test func stalledAttemptsAreMadeAgainWhileThereIsTime() {
        let t0 = ContinuousClock.now
        var c = Connector(deadline: t0 + .seconds(30))
        _ = c.next(link: .down, now: t0)
        // No link, no answer: cancel and try again, with the reason kept for the timeout error.
        let cancel = c.noLink(now: t0 + .seconds(12))
        #expect(cancel)
        #expect(c.lastError == "no connection within 12 s")
        #expect(step(&c, .down, now: t0 + .seconds(15)) == .attempt(2, linkWait: .seconds(12)))
        // A link whose services stall: drop it and try again.
        let drop = c.servicesStalled(now: t0 + .seconds(20))
        #expect(drop)
        #expect(c.lastError == "connected but the services were not resolved within 15 s")
        c.answeredWithoutLink()
        #expect(c.lastError == "BlueZ answered Connect but the device did not connect")
        // Too close to the deadline: neither is retried, the attempt's own answer decides.
        var late = Connector(deadline: t0 + .seconds(1))
        let lateCancel = late.noLink(now: t0 + .milliseconds(600)), lateDrop = late.servicesStalled(now: t0 + .milliseconds(600))
        #expect(!lateCancel && !lateDrop)
        #expect(late.lastError == nil)
    }

    @Test func theLinkWaitIsBoundedBothWays() {
        let t0 = ContinuousClock.now
        var c = Connector(deadline: t0 + .seconds(60))
        #expect(step(&c, .down, now: t0) == .attempt(1, linkWait: Connector.linkLimit))
        #expect(step(&c, .down, now: t0 + .milliseconds(59_920)) == .attempt(2, linkWait: .milliseconds(100)))
    }

    @Test func aFailedConnectReadsAsBefore() {
        let d = BluetoothAddress("00:AA:01:09:09:09")!
        let timedOut = CentralError.connectFailure(.timedOut(attempts: 2, lastError: "le-connection-abort-by-local"), device: d, adapter: "hci0", timeout: .seconds(6))
        #expect(timedOut.description.hasPrefix("timed out: could not connect to 00:AA:01:09:09:09 on hci0 within "))
        #expect(timedOut.description.hasSuffix(" (2 attempts; last: le-connection-abort-by-local)"))
        let one = CentralError.connectFailure(.timedOut(attempts: 1, lastError: nil), device: d, adapter: "hci0", timeout: .seconds(6))
        #expect(one.description.hasSuffix(" (1 attempt)"))
        let unknown = CentralError.connectFailure(.unknownDevice, device: d, adapter: "hci0", timeout: .seconds(6))
        #expect(unknown.description == "not found: device 00:AA:01:09:09:09 is not known to BlueZ on hci0; scan for it first (connecting to an unseen address needs ConnectDevice, bluetoothd --experimental)")
        #expect(CentralError.connectFailure(.refused(Self.abort), device: d, adapter: "hci0", timeout: .seconds(6)).description
            == "connecting to 00:AA:01:09:09:09 failed: org.bluez.Error.Failed: le-connection-abort-by-local")
    }
}

/// `Connector.next` and `failed` are mutating; `#expect` cannot call those on a captured value.
private func step(_ c: inout Connector, _ link: Connector.Link, now: ContinuousClock.Instant) -> Connector.Step { c.next(link: link, now: now) }
private func fail(_ c: inout Connector, _ e: BlueZCallError) -> Connector.Step { c.failed(e) }

/// BlueZ's error replies read once: kind from the name, ATT code from the message.
@Suite(.ownThreads, .memoryHeavy) struct BlueZCallErrorTests {
    @Test(arguments: [
        ("Failed", BlueZCallError.Kind.failed), ("InProgress", .inProgress), ("NotPermitted", .notPermitted),
        ("NotAuthorized", .notAuthorized), ("NotReady", .notReady), ("NotSupported", .notSupported),
        ("NotAvailable", .notAvailable), ("NotConnected", .notConnected), ("AlreadyConnected", .alreadyConnected),
        ("AlreadyExists", .alreadyExists), ("DoesNotExist", .doesNotExist), ("InvalidArguments", .invalidArguments),
        ("InvalidLength", .invalidLength), ("InvalidOffset", .invalidOffset), ("AuthenticationFailed", .authenticationFailed),
        ("AuthenticationCanceled", .authenticationCanceled), ("AuthenticationRejected", .authenticationRejected),
        ("AuthenticationTimeout", .authenticationTimeout), ("ConnectionAttemptFailed", .connectionAttemptFailed),
        ("Blocked", .blocked), ("Rejected", .rejected), ("Canceled", .canceled),
    ])
    func bluezNamesHaveKinds(_ short: String, _ kind: BlueZCallError.Kind) {
        #expect(BlueZCallError(BusError(name: "org.bluez.Error." + short, message: "")).kind == kind)
    }

    @Test func busErrorsHaveKinds() {
        #expect(BlueZCallError(BusError(name: BusError.noReply, message: "")).kind == .noReply)
        #expect(BlueZCallError(BusError(name: BusError.disconnected, message: "")).kind == .serviceGone)
        #expect(BlueZCallError(BusError(name: BusError.nameHasNoOwner, message: "")).kind == .serviceGone)
        #expect(BlueZCallError(BusError(name: BusError.unknownMethod, message: "")).kind == .unknownMethod)
        #expect(BlueZCallError(BusError(name: BusError.unknownObject, message: "")).kind == .unknownObject)
        #expect(BlueZCallError(BusError(name: "org.bluez.Error.Brand.New", message: "")).kind == .other("org.bluez.Error.Brand.New"))
        #expect(BlueZCallError(BusError(name: BusError.accessDenied, message: "")).kind == .other(BusError.accessDenied))
        #expect(BlueZCallError(CancellationError()).kind == .cancelled)
    }

    @Test func attCodeIsReadFromTheMessageAndNamed() {
        // What a new user sees reading an encrypt-read characteristic whose peripheral's agent refuses pairing.
        let e = BlueZCallError(BusError(name: "org.bluez.Error.Failed", message: "Operation failed with ATT error: 0x0e"))
        #expect(e.kind == .failed && e.att == .unlikelyError)
        #expect(e.description == "org.bluez.Error.Failed: Operation failed with ATT error: 0x0e (Unlikely Error (0x0e): pairing was refused or is needed)")
        #expect(BlueZCallError(BusError(name: "org.bluez.Error.Failed", message: "Operation failed with ATT error: 0x80")).att == ATTError(0x80))
        #expect(BlueZCallError(BusError(name: "org.bluez.Error.Failed", message: "Operation failed with ATT error: 0xfd")).att == .cccdImproperlyConfigured)
        #expect(BlueZCallError(BusError(name: "org.bluez.Error.NotPermitted", message: "Read not permitted")).att == nil)
        #expect(BlueZCallError(BusError(name: "org.bluez.Error.Failed", message: "ATT error: 0x")).att == nil)
        let plain = BlueZCallError(BusError(name: "org.bluez.Error.Failed", message: "Operation failed"))
        #expect(plain.description == "org.bluez.Error.Failed: Operation failed")
    }

    @Test func transientConnectFailures() {
        func t(_ name: String, _ message: String) -> Bool { BlueZCallError(BusError(name: name, message: message)).isTransientConnectFailure }
        #expect(t("org.bluez.Error.Failed", "le-connection-abort-by-local"))
        #expect(t("org.bluez.Error.Failed", "Software caused connection abort"))
        #expect(t("org.bluez.Error.NotReady", "Resource Not Ready"))
        #expect(t("org.bluez.Error.InProgress", "In Progress"))
        #expect(!t("org.bluez.Error.Failed", "Operation failed with ATT error: 0x0e"))
        #expect(!t("org.bluez.Error.NotAvailable", "Operation currently not available"))
    }
}
