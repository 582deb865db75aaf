import BLE
import Synchronization

/// Remote reads of local characteristics answered by an owner instead of the stored value.
///
/// A central's ReadValue on a handled characteristic becomes a request with an id (`r1`,
/// `r2`, …) handed to the owner (for the daemon: a control client, as a `gatt.read-request`
/// event); the ReadValue waits until the owner answers with `answer`, and gets ATT error
/// 0x80 when the owner cannot be reached, does not answer within `timeout`, or goes away.
/// It lives beside `LocalCharacteristic` because the waiting is the peripheral's business
/// (what a central sees while a read is pending); how a request reaches an owner and how an
/// answer comes back are the caller's (`deliver`, `answer`).
public final class GattReadBroker: Sendable {
    /// How long an owner has to answer before the central gets an error.
    public let timeout: Duration
    private let deliver: @Sendable (_ id: String, _ request: GattReadRequest, _ owner: UInt64) -> Bool
    private let state = Mutex(State())

    private struct State {
        /// Which owner answers reads of which characteristic (key: application id / UUID).
        var handlers: [String: (owner: UInt64, characteristic: LocalCharacteristic)] = [:]
        var pending: [String: Pending] = [:]
        var nextID: UInt64 = 1
    }

    private struct Pending {
        let owner: UInt64
        let continuation: CheckedContinuation<Result<[UInt8], GattError>, Never>
        /// The characteristic's `max_length`: a longer answer is refused to its client.
        let maxLength: Int
    }

    /// What a central gets for a read nobody answered: the first application error code.
    public static let unanswered = GattError.application(0x80)

    /// Creates a broker; `deliver` hands a request to its owner and is false when the owner is gone.
    public init(timeout: Duration = .seconds(5),
                deliver: @escaping @Sendable (_ id: String, _ request: GattReadRequest, _ owner: UInt64) -> Bool) {
        self.timeout = timeout
        self.deliver = deliver
    }

    /// From now on `owner` answers the remote reads of `c` (replacing any other owner).
    public func handle(_ c: LocalCharacteristic, by owner: UInt64) {
        state.withLock { $0.handlers[Self.key(c)] = (owner, c) }
        c.setReadHandler { [weak self] request in
            await self?.forward(request, to: owner, maxLength: c.definition.maxLength) ?? .failure(Self.unanswered)
        }
    }

    /// Reads of `c` are answered with its stored value again, when `owner` handles them
    /// (another connection's handler is not this one's to remove); false when it does not.
    @discardableResult
    public func release(_ c: LocalCharacteristic, by owner: UInt64) -> Bool {
        let released = state.withLock { s -> Bool in
            guard s.handlers[Self.key(c)]?.owner == owner else { return false }
            s.handlers.removeValue(forKey: Self.key(c))
            return true
        }
        if released { c.setReadHandler(nil) }
        return released
    }

    /// `owner`'s answer to request `id`: the value, or the ATT error to give the central.
    /// Throws when `owner` has no such request pending (never made, answered, timed out,
    /// or another owner's: that one stays pending for its owner).
    public func answer(_ id: String, from owner: UInt64, with result: Result<[UInt8], GattError>) throws(GattReadAnswerError) {
        let pending = try state.withLock { s throws(GattReadAnswerError) -> Pending? in
            guard let p = s.pending[id], p.owner == owner else { return nil }
            // Refused to the one answering, the request still pending: it may answer again.
            if case .success(let v) = result, v.count > p.maxLength { throw .tooLong(id, bytes: v.count, maxLength: p.maxLength) }
            return s.pending.removeValue(forKey: id)
        }
        guard let pending else { throw .unknownRequest(id, timeout: timeout) }
        pending.continuation.resume(returning: result)
    }

    /// `owner` is gone: its characteristics answer with their stored values again, and its
    /// pending reads fail now rather than at their timeout.
    public func ownerGone(_ owner: UInt64) {
        let (released, orphans) = state.withLock { s -> ([LocalCharacteristic], [Pending]) in
            let keys = s.handlers.filter { $0.value.owner == owner }.map(\.key)
            let released = keys.compactMap { s.handlers.removeValue(forKey: $0)?.characteristic }
            let ids = s.pending.filter { $0.value.owner == owner }.map(\.key)
            return (released, ids.compactMap { s.pending.removeValue(forKey: $0) })
        }
        for c in released { c.setReadHandler(nil) }
        for o in orphans { o.continuation.resume(returning: .failure(Self.unanswered)) }
    }

    /// Hands `request` to `owner` and waits for its answer (or the timeout).
    private func forward(_ request: GattReadRequest, to owner: UInt64, maxLength: Int) async -> Result<[UInt8], GattError> {
        let id = state.withLock { s -> String in
            defer { s.nextID += 1 }
            return "r\(s.nextID)"
        }
        return await withCheckedContinuation { (c: CheckedContinuation<Result<[UInt8], GattError>, Never>) in
            state.withLock { $0.pending[id] = Pending(owner: owner, continuation: c, maxLength: maxLength) }
            guard deliver(id, request, owner) else {
                finish(id, .failure(Self.unanswered))
                return
            }
            Task {
                try? await Task.sleep(for: self.timeout)
                // Unanswered in time: the central gets an ATT error rather than a hang.
                self.finish(id, .failure(Self.unanswered))
            }
        }
    }

    /// Resumes request `id` with `result` unless it was already answered.
    private func finish(_ id: String, _ result: Result<[UInt8], GattError>) {
        state.withLock { $0.pending.removeValue(forKey: id) }?.continuation.resume(returning: result)
    }

    private static func key(_ c: LocalCharacteristic) -> String { "\(c.application)/\(c.uuid)" }
}

/// Why an answer to a read request was not taken.
public enum GattReadAnswerError: Error, Sendable, Hashable, CustomStringConvertible {
    /// No such request is pending for the one answering.
    case unknownRequest(String, timeout: Duration)
    /// The value is longer than the characteristic's `max_length` (the request stays pending).
    case tooLong(String, bytes: Int, maxLength: Int)

    /// A sentence for users.
    public var description: String {
        switch self {
        case .unknownRequest(let id, let timeout):
            "no pending read request \(id) for this connection (it may have timed out after \(timeout))"
        case .tooLong(let id, let bytes, let maxLength):
            "the answer to read request \(id) is \(bytes) bytes, over the characteristic's max_length \(maxLength) (the request still waits for an answer)"
        }
    }
}
