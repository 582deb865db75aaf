import BLE
@testable import BlueZ
import Control
import Synchronization
import TestSupport
import Testing

/// `GattReadBroker` without a bus: the characteristic's read handler is called as its
/// ReadValue would call it, and the test plays the owner.
@Suite(.ownThreads, .memoryHeavy) struct GattReadBrokerTests {
    static func characteristic() throws -> LocalCharacteristic {
        let def = try GattApplicationDefinition.parse(["name": "t", "services": [["uuid": "180d", "characteristics": [
            ["uuid": "2a37", "flags": ["read"], "value": "stored"],
        ]]]], source: "test")
        return LocalCharacteristic(application: "app1", definition: def.services[0].characteristics[0],
                                   path: "/peerlink/app1/service0/char0", servicePath: "/peerlink/app1/service0", onEvent: { _ in })
    }

    /// A broker whose deliveries arrive on `requests` (and are accepted unless `reachable` is false).
    static func broker(timeout: Duration = .seconds(30), reachable: Bool = true)
        -> (GattReadBroker, AsyncStream<(id: String, request: GattReadRequest, owner: UInt64)>) {
        let (requests, sink) = AsyncStream<(id: String, request: GattReadRequest, owner: UInt64)>.makeStream()
        let broker = GattReadBroker(timeout: timeout) { id, request, owner in
            sink.yield((id, request, owner))
            return reachable
        }
        return (broker, requests)
    }

    static func read(_ c: LocalCharacteristic, offset: Int = 0) -> Task<Result<[UInt8], GattError>, Never> {
        let handler = c.state.withLock { $0.readHandler }
        let request = GattReadRequest(application: c.application, uuid: c.uuid, device: BluetoothAddress("00:AA:01:01:00:01"), offset: offset, mtu: 185)
        return Task { await handler?(request) ?? .success(c.value) }
    }

    /// A characteristic handled by owner 7 with one read waiting for that owner: what the owner was given.
    struct PendingRead {
        let characteristic: LocalCharacteristic
        let broker: GattReadBroker
        let read: Task<Result<[UInt8], GattError>, Never>
        let id: String
        let request: GattReadRequest
    }

    static func pendingRead(timeout: Duration = .seconds(30), offset: Int = 0) async throws -> PendingRead {
        let c = try characteristic()
        let (broker, requests) = broker(timeout: timeout)
        broker.handle(c, by: 7)
        let read = read(c, offset: offset)
        var it = requests.makeAsyncIterator()
        let delivered = try #require(await it.next())
        #expect(delivered.owner == 7)
        return PendingRead(characteristic: c, broker: broker, read: read, id: delivered.id, request: delivered.request)
    }

    @Test func theOwnerAnswersAndTheCentralGetsItsAnswer() async throws {
        let p = try await Self.pendingRead(offset: 2)
        #expect(p.id == "r1" && p.request.offset == 2 && p.request.mtu == 185 && p.characteristic.hasReadHandler)
        try p.broker.answer(p.id, from: 7, with: .success(Array("dynamic".utf8)))
        #expect(await p.read.value == .success(Array("dynamic".utf8)))
        #expect(throws: GattReadAnswerError.unknownRequest("r1", timeout: .seconds(30))) { try p.broker.answer("r1", from: 7, with: .success([])) }
    }

    @Test func anotherOwnersAnswerLeavesTheReadPending() async throws {
        let p = try await Self.pendingRead()
        #expect(throws: GattReadAnswerError.self) { try p.broker.answer(p.id, from: 8, with: .success([1])) }
        try p.broker.answer(p.id, from: 7, with: .failure(.notAuthorized))
        #expect(await p.read.value == .failure(.notAuthorized))
    }

    @Test func anUnreachableOwnerFailsTheReadAtOnce() async throws {
        let c = try Self.characteristic()
        let (broker, _) = Self.broker(reachable: false)
        broker.handle(c, by: 7)
        #expect(await Self.read(c).value == .failure(GattReadBroker.unanswered))
    }

    @Test func noAnswerWithinTheTimeoutIsAnError() async throws {
        let p = try await Self.pendingRead(timeout: .milliseconds(20))
        #expect(await p.read.value == .failure(GattReadBroker.unanswered))
        // Too late: the central already has its error.
        #expect(throws: GattReadAnswerError.self) { try p.broker.answer(p.id, from: 7, with: .success([1])) }
    }

    @Test func anOwnerGoingAwayFailsItsReadsAndReleasesItsCharacteristics() async throws {
        let p = try await Self.pendingRead()
        p.broker.ownerGone(8)
        #expect(p.characteristic.hasReadHandler, "another owner's going leaves this one's characteristic")
        p.broker.ownerGone(7)
        #expect(await p.read.value == .failure(GattReadBroker.unanswered))
        #expect(!p.characteristic.hasReadHandler)
    }

    @Test func releaseAndTakingOver() async throws {
        let c = try Self.characteristic()
        let (broker, requests) = Self.broker()
        broker.handle(c, by: 7)
        broker.handle(c, by: 8)
        broker.ownerGone(7)
        #expect(c.hasReadHandler, "the newer owner keeps it")
        let read = Self.read(c)
        var it = requests.makeAsyncIterator()
        #expect(try #require(await it.next()).owner == 8)
        broker.ownerGone(8)
        _ = await read.value
        broker.handle(c, by: 9)
        #expect(!broker.release(c, by: 10) && c.hasReadHandler, "another owner's handler is not released")
        #expect(broker.release(c, by: 9))
        // Released: bluetoothd's reads get the stored value again (no handler to ask).
        #expect(!c.hasReadHandler && c.value == Array("stored".utf8))
    }
}
