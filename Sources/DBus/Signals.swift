internal import CDBus
import Synchronization

extension BusConnection {
    /// The messages matching `rule`, in the order they arrive, until the stream is dropped
    /// (or the connection is lost, which finishes it).
    ///
    /// The rule is on the bus (`AddMatch` answered) before this returns, so a caller can
    /// subscribe and then read the current state without missing a change. Subscriptions
    /// that use the same rule share one bus match rule; the last one to end removes it
    /// (`RemoveMatch`), so the number of rules on the bus stays bounded by the number of
    /// distinct live subscriptions.
    ///
    /// With `followingOwner` (for a rule with a well-known sender), the same stream also
    /// carries that name's `NameOwnerChanged` signals, in the order the connection received
    /// them among the owner's signals, beginning with one that gives the owner at subscription
    /// (old owner empty; `ownerChange` reads them). A reader of one stream then applies each
    /// owner change exactly between the signals of the old owner and those of the new one,
    /// which two streams read by two loops cannot promise.
    public func signals(_ rule: MatchRule, followingOwner: Bool = false) async throws -> AsyncStream<BusMessage> {
        // A well-known sender (org.bluez) is matched through its current owner (:1.7):
        // follow that owner with an internal subscription linked to this one. It has no
        // stream (a dropped stream would end it at once); it ends when this one does.
        var linked: UInt64?
        if let name = rule.wellKnownSender {
            let id = try await subscribe(MatchRule.nameOwnerChanged(name), continuation: nil, linked: nil)
            do {
                try await resolveOwner(name)
            } catch {
                unsubscribe(id)
                throw error
            }
            linked = id
        }
        let (stream, continuation) = AsyncStream<BusMessage>.makeStream()
        let id: UInt64
        do {
            id = try await subscribe(rule, continuation: continuation, linked: linked,
                                     followsOwner: followingOwner ? rule.wellKnownSender : nil)
        } catch {
            if let linked { unsubscribe(linked) }
            throw error
        }
        // Dropping the stream, or cancelling the task iterating it, ends the subscription.
        continuation.onTermination = { [weak self] _ in self?.unsubscribe(id) }
        return stream
    }

    /// Registers a subscription and returns its id once its rule is on the bus.
    ///
    /// Reference counts change under the state lock, and the `AddMatch` or `RemoveMatch` a
    /// change calls for is put on the queue while the lock is still held: the bus sees them in
    /// the order the counts changed (a `RemoveMatch` can never overtake the `AddMatch` of a
    /// later subscription). A subscription that shares a rule still being added waits for that
    /// `AddMatch` answer.
    private func subscribe(_ rule: MatchRule, continuation: AsyncStream<BusMessage>.Continuation?,
                           linked: UInt64?, followsOwner: String? = nil) async throws -> UInt64 {
        let text = rule.description
        let add = try Codec.encode(.methodCall(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                                               interface: "org.freedesktop.DBus", member: "AddMatch", body: [.string(text)]))
        let encoded = QueuePointer(add)
        return try await withCheckedThrowingContinuation { (cont: CheckedContinuation<UInt64, Error>) in
            enum Step { case gone, ready(UInt64), wait, add }
            let step = state.withLock { s -> Step in
                if s.disconnected { return .gone }
                let id = s.nextSubscriptionID
                s.nextSubscriptionID += 1
                s.subscriptions[id] = Subscription(rule: rule, continuation: continuation, linked: linked, followsOwner: followsOwner)
                if let name = followsOwner {
                    // Under the lock that deliverSignal takes: no change falls between this and the stream.
                    continuation?.yield(.nameOwnerChanged(name, old: nil, new: s.nameOwners[name]))
                }
                var r = s.matchRefs[text] ?? BusRule()
                r.refs += 1
                defer { s.matchRefs[text] = r }
                if r.onBus { return .ready(id) }
                r.waiters.append((id, cont))
                guard r.refs == 1 else { return .wait }
                queue.async {
                    self.startCall(encoded, what: "AddMatch \(text)", timeout: .seconds(25)) { self.addMatchAnswered(text, $0) }
                }
                return .add
            }
            switch step {
            case .gone:
                libdbus.dbus_message_unref(encoded.pointer)
                cont.resume(throwing: BusError(name: BusError.disconnected, message: "not connected to the \(address)"))
            case .ready(let id):
                libdbus.dbus_message_unref(encoded.pointer)
                cont.resume(returning: id)
            case .wait:
                libdbus.dbus_message_unref(encoded.pointer)
            case .add:
                break
            }
        }
    }

    /// Records the answer to `AddMatch` for `text` and resumes the subscriptions waiting for it;
    /// on failure they are removed. On the queue.
    private func addMatchAnswered(_ text: String, _ result: Result<BusMessage, Error>) {
        let waiters = state.withLock { s -> [(id: UInt64, continuation: CheckedContinuation<UInt64, Error>)] in
            // Gone: the connection was lost, and handleDisconnect resumed the waiters.
            guard var r = s.matchRefs[text] else { return [] }
            let w = r.waiters
            r.waiters = []
            switch result {
            case .success:
                r.onBus = true
                s.matchRefs[text] = r
            case .failure:
                // Every user of a rule not yet on the bus is a waiter: none remains.
                for (id, _) in w { s.subscriptions.removeValue(forKey: id) }
                s.matchRefs.removeValue(forKey: text)
            }
            return w
        }
        for (id, c) in waiters { c.resume(with: result.map { _ in id }) }
    }

    /// Resolves the current owner of `name` for sender matching. Call with the owner-tracking
    /// subscription for `name` live.
    private func resolveOwner(_ name: String) async throws {
        let encoded = QueuePointer(try Codec.encode(.methodCall(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
            member: "GetNameOwner", body: [.string(name)])))
        let tracking = MatchRule.nameOwnerChanged(name).description
        try await withCheckedThrowingContinuation { (cont: CheckedContinuation<Void, Error>) in
            queue.async {
                self.startCall(encoded, what: "GetNameOwner \(name)", timeout: .seconds(25)) { result in
                    // Recorded here, on the queue, in order with the NameOwnerChanged signals: a
                    // change that comes after this answer is applied after it, never before.
                    let owner: String?
                    switch result {
                    case .success(let m): owner = m.body.first?.string
                    case .failure(let e as BusError) where e.name == BusError.nameHasNoOwner: owner = nil
                    case .failure(let e):
                        cont.resume(throwing: e)
                        return
                    }
                    self.state.withLock { s in
                        if s.matchRefs[tracking] != nil { s.nameOwners[name] = owner }
                    }
                    cont.resume()
                }
            }
        }
    }

    /// Ends subscription `id` (and the owner-tracking subscription linked to it); removes the
    /// bus rule when no other subscription uses it.
    ///
    /// Never blocks: it runs from `onTermination`, which `Task.cancel()` calls with the task's
    /// status locked, while the queue may be resuming that very task from `deliverSignal`.
    func unsubscribe(_ id: UInt64) {
        let linked = state.withLock { s -> UInt64? in
            guard let sub = s.subscriptions.removeValue(forKey: id) else { return nil }
            let text = sub.rule.description
            guard var r = s.matchRefs[text] else { return sub.linked }
            r.refs -= 1
            if r.refs > 0 || !r.waiters.isEmpty {
                s.matchRefs[text] = r
                return sub.linked
            }
            s.matchRefs.removeValue(forKey: text)
            if let name = sub.rule.arguments[0], sub.rule == MatchRule.nameOwnerChanged(name) {
                s.nameOwners.removeValue(forKey: name)
            }
            if r.onBus {
                // Queued under the lock: see subscribe(_:continuation:linked:).
                var m = BusMessage.methodCall(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                                              interface: "org.freedesktop.DBus", member: "RemoveMatch", body: [.string(text)])
                m.noReplyExpected = true
                let remove = m
                queue.async { _ = try? self.send(remove) }
            }
            return sub.linked
        }
        if let linked { unsubscribe(linked) }
    }

    /// How many subscriptions are live and how many distinct rules they put on the bus.
    public var subscriptionCounts: (subscriptions: Int, rules: Int) {
        state.withLock { ($0.subscriptions.count, $0.matchRefs.count) }
    }

    // MARK: Names

    /// The unique name that currently owns `name`, or nil when no one does.
    public func nameOwner(_ name: String) async throws -> String? {
        do {
            return try await call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                                  interface: "org.freedesktop.DBus", member: "GetNameOwner", [.string(name)]).first?.string
        } catch let e as BusError where e.name == BusError.nameHasNoOwner {
            return nil
        }
    }

    /// The owner of `name` now, then each time it changes (nil: nobody owns it), until dropped.
    ///
    /// The changes come in a stream of their own: a reader that also follows the owner's
    /// signals and must apply each change between them uses `signals(_:followingOwner:)`
    /// (as BlueZClient does for `bluetoothd`).
    public func watchNameOwner(_ name: String) async throws -> AsyncStream<String?> {
        let changes = try await signals(MatchRule.nameOwnerChanged(name))
        let initial = try await nameOwner(name)
        let (stream, continuation) = AsyncStream<String?>.makeStream()
        continuation.yield(initial)
        let task = Task {
            var last = initial
            for await m in changes {
                guard m.body.count == 3, let new = m.body[2].string else { continue }
                let owner: String? = new.isEmpty ? nil : new
                if owner != last {
                    last = owner
                    continuation.yield(owner)
                }
            }
            continuation.finish()
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream
    }

    /// Asks the bus for a well-known name. Returns whether this connection is now its primary owner.
    @discardableResult
    public func requestName(_ name: String, replaceExisting: Bool = false) async throws -> Bool {
        let flags: UInt32 = 0x4 | (replaceExisting ? 0x2 : 0)  // DO_NOT_QUEUE | REPLACE_EXISTING
        let r = try await call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                               interface: "org.freedesktop.DBus", member: "RequestName", [.string(name), .uint32(flags)])
        return r.first?.integer == 1 || r.first?.integer == 4  // PRIMARY_OWNER or ALREADY_OWNER
    }
}

extension BusMessage {
    /// A `NameOwnerChanged` signal from the bus driver (`signals(_:followingOwner:)` makes
    /// the first one of its stream itself).
    static func nameOwnerChanged(_ name: String, old: String?, new: String?) -> BusMessage {
        var m = BusMessage.signal(path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus", member: "NameOwnerChanged",
                                  body: [.string(name), .string(old ?? ""), .string(new ?? "")])
        m.sender = "org.freedesktop.DBus"
        return m
    }

    /// For a `NameOwnerChanged` signal from the bus driver: the name and its new owner (nil:
    /// nobody). Nil for any other message.
    public var ownerChange: (name: String, owner: String?)? {
        guard kind == .signal, sender == "org.freedesktop.DBus", interface == "org.freedesktop.DBus", member == "NameOwnerChanged",
              body.count == 3, let name = body[0].string, let new = body[2].string else { return nil }
        return (name, new.isEmpty ? nil : new)
    }
}
