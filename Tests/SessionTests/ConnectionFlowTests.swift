import Testing
@testable import Session

/// The machine's flow control: what it receives is counted against the windows it granted,
/// and what it sends goes through a scheduler within the peer's credit.
@Suite struct ConnectionFlowTests {
    static let t0 = ContinuousClock.now

    @Test func aLargeMessageFlowsThroughTheWindowsWithCredit() {
        var dialer = ConnectionRulesTests.connected(.dialer)
        var listener = ConnectionRulesTests.connected(.listener)
        var scheduler = SendScheduler()
        let message = (0..<(3 * 1_048_576)).map { UInt8(truncatingIfNeeded: $0 / 3) }
        #expect(scheduler.canAccept(byteCount: message.count))
        for case .send(let f) in dialer.handle(.sendMessage(message), now: Self.t0) { _ = scheduler.enqueue(f) }
        var delivered: [[UInt8]] = []
        var rounds = 0
        var credits = 0
        while delivered.isEmpty && rounds < 100 {
            rounds += 1
            // The dialer writes what its credit allows: never more than the window. The
            // listener's CREDIT frames reach the dialer after the burst.
            var burst = 0
            var returned: [Frame] = []
            while let f = dialer.nextFrame(from: &scheduler) {
                burst += f.flowControlledBytes
                for a in listener.handle(.frame(f), now: Self.t0) {
                    switch a {
                    case .emit(.message(let m)): delivered.append(m)
                    case .send(let c): returned.append(c)
                    case .emit(.disconnected(let r, let d, _)): Issue.record("dropped: \(r) \(d)")
                    default: break
                    }
                }
            }
            #expect(burst <= FlowWindow.initialStream)
            credits += returned.count
            for c in returned { _ = dialer.handle(.frame(c), now: Self.t0) }
        }
        #expect(delivered.count == 1 && delivered.first == message)
        #expect(credits >= 20 && rounds >= 12 && scheduler.queuedBytes == 0)
    }

    @Test func aSenderStallsWithoutCredit() {
        var dialer = ConnectionRulesTests.connected(.dialer)
        var scheduler = SendScheduler()
        for case .send(let f) in dialer.handle(.sendMessage([UInt8](repeating: 0, count: 1_048_576)), now: Self.t0) { _ = scheduler.enqueue(f) }
        var sent = 0
        while let f = dialer.nextFrame(from: &scheduler) { sent += f.flowControlledBytes }
        // Four fragments of 65,536 payload bytes fill the 256 KiB window of stream 0.
        #expect(sent == 262_144)
        #expect(dialer.sendCredit.available(on: 0) == 0)
        _ = dialer.handle(.frame(.credit(streamID: 0, streamBytes: 65_536, connectionBytes: 65_536)), now: Self.t0)
        #expect(dialer.nextFrame(from: &scheduler)?.flowControlledBytes == 65_536)
        #expect(dialer.nextFrame(from: &scheduler) == nil)
    }

    @Test func moreThanTheWindowClosesWithFlowControl() {
        var m = ConnectionRulesTests.connected(.listener)
        let chunk = Frame.streamData(streamID: 3, data: [UInt8](repeating: 0, count: 65_536))
        for _ in 0..<4 { #expect(m.handle(.frame(chunk), now: Self.t0).count == 1) }
        let actions = m.handle(.frame(chunk), now: Self.t0)
        #expect(actions.contains(.emit(.disconnected(.flowControl, detail: "65536 bytes on stream 3, whose window had 0 left", byPeer: false))))
        #expect(m.state == .closing(.flowControl))
        // Consuming returns credit: a second stream that is read keeps going.
        var n = ConnectionRulesTests.connected(.listener)
        for _ in 0..<4 { _ = n.handle(.frame(chunk), now: Self.t0) }
        #expect(n.handle(.consumed(streamID: 3, bytes: 262_144), now: Self.t0)
                == [.send(.credit(streamID: 3, streamBytes: 262_144, connectionBytes: 262_144))])
        #expect(n.handle(.frame(chunk), now: Self.t0).count == 1 && n.state == .connected)
        // A CREDIT that grows a window past 2^31 - 1 is the peer's error too.
        var o = ConnectionRulesTests.connected(.dialer)
        let bad = o.handle(.frame(.credit(streamID: 0, streamBytes: .max, connectionBytes: 0)), now: Self.t0)
        #expect(bad.contains(.emit(.disconnected(.flowControl, detail: "CREDIT for stream 0 grows a window past 2147483647 bytes", byPeer: false))))
    }
}
