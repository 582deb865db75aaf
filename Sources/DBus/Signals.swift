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
    public func signals(_ rule: MatchRule) async throws -> AsyncStream<BusMessage> {
        // A well-known sender (org.bluez) is matched through its current owner (:1.7):
        // follow that owner with an internal subscription linked to this one.
        var linked: UInt64?
        if let name = rule.wellKnownSender {
            linked = try await subscribe(MatchRule.nameOwnerChanged(name), linked: nil).id
            let owner = try? await nameOwner(name)
            state.withLock { s in
                if s.nameOwners[name] == nil, let owner { s.nameOwners[name] = owner }
            }
        }
        do {
            return try await subscribe(rule, linked: linked).stream
        } catch {
            if let linked { unsubscribe(linked) }
            throw error
        }
    }

    private func subscribe(_ rule: MatchRule, linked: UInt64?) async throws -> (id: UInt64, stream: AsyncStream<BusMessage>) {
        let (stream, continuation) = AsyncStream<BusMessage>.makeStream()
        let text = rule.description
        let (id, first, gone) = state.withLock { s -> (UInt64, Bool, Bool) in
            if s.disconnected { return (0, false, true) }
            let id = s.nextSubscriptionID
            s.nextSubscriptionID += 1
            s.subscriptions[id] = Subscription(rule: rule, continuation: continuation, linked: linked)
            let n = s.matchRefs[text, default: 0] + 1
            s.matchRefs[text] = n
            return (id, n == 1, false)
        }
        if gone { throw BusError(name: BusError.disconnected, message: "not connected to the \(address)") }
        if first {
            do {
                _ = try await call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                                   interface: "org.freedesktop.DBus", member: "AddMatch", [.string(text)])
            } catch {
                unsubscribe(id, removeRule: false)
                throw error
            }
        }
        continuation.onTermination = { [weak self] _ in self?.unsubscribe(id) }
        return (id, stream)
    }

    /// Ends subscription `id` (and the owner-tracking subscription linked to it); removes the
    /// bus rule when no other subscription uses it.
    func unsubscribe(_ id: UInt64, removeRule: Bool = true) {
        let (removeText, linked) = state.withLock { s -> (String?, UInt64?) in
            guard let sub = s.subscriptions.removeValue(forKey: id) else { return (nil, nil) }
            let text = sub.rule.description
            let n = (s.matchRefs[text] ?? 1) - 1
            if n > 0 {
                s.matchRefs[text] = n
                return (nil, sub.linked)
            }
            s.matchRefs.removeValue(forKey: text)
            if sub.rule.member == "NameOwnerChanged", let name = sub.rule.arguments[0] {
                s.nameOwners.removeValue(forKey: name)
            }
            return (text, sub.linked)
        }
        if removeRule, let removeText {
            var m = BusMessage.methodCall(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                                          interface: "org.freedesktop.DBus", member: "RemoveMatch", body: [.string(removeText)])
            m.noReplyExpected = true
            _ = try? send(m)
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
    /// This is how the daemon notices `bluetoothd` or `avahi-daemon` going away and coming back.
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
