import FoundationEssentials

/// What to publish: a checked service description.
public struct ServiceSpec: Sendable, Hashable {
    /// The instance name asked for (the published name may differ after a collision).
    public var name: String
    /// The service type.
    public var type: ServiceType
    /// The port.
    public var port: UInt16
    /// The TXT record.
    public var txt: TXTRecord
    /// Subtypes in full form (`_printer._sub._ipp._tcp`).
    public var subtypes: [String]
    /// The domain (nil: the default, .local).
    public var domain: String?
    /// The interface to publish on (nil: all).
    public var interface: String?
    /// Its index, looked up when the spec was made.
    public var interfaceIndex: Int32?

    /// A spec from values already checked (see `DNSSDValidation`, `ServiceType`, `TXTRecord`).
    public init(name: String, type: ServiceType, port: UInt16, txt: TXTRecord = TXTRecord(), subtypes: [String] = [],
                domain: String? = nil, interface: String? = nil, interfaceIndex: Int32? = nil) {
        self.name = name
        self.type = type
        self.port = port
        self.txt = txt
        self.subtypes = subtypes
        self.domain = domain
        self.interface = interface
        self.interfaceIndex = interfaceIndex
    }
}

/// Where a publication stands with Avahi.
public enum PublicationState: String, Sendable {
    /// Avahi is probing the name.
    case registering
    /// The service is on the network.
    case established
    /// avahi-daemon is gone (or busy with its host name); published again when it is back.
    case waiting
    /// Avahi refused it; `PublicationInfo.error` says why.
    case failed
}

/// A publication as the daemon knows it.
public struct PublicationInfo: Sendable, Hashable {
    /// The daemon's ID for it ("p1").
    public var id: String
    /// What was asked for.
    public var spec: ServiceSpec
    /// The name it is published under now (differs from `spec.name` after a collision).
    public var name: String
    /// Where it stands.
    public var state: PublicationState
    /// Why it failed, when it did.
    public var error: String?
    /// How many times it was renamed after a collision since it was published.
    public var renames: Int
}

/// A service seen by a browse.
public struct FoundService: Sendable, Hashable {
    /// The instance name.
    public var name: String
    /// The service type.
    public var type: String
    /// The domain.
    public var domain: String
    /// The interface it was seen on.
    public var interface: String
    /// The interface index.
    public var interfaceIndex: Int32
    /// "ipv4" or "ipv6": the protocol it was seen over.
    public var proto: String
    /// Published by this machine.
    public var isLocal: Bool
    /// Answered from avahi-daemon's cache.
    public var isCached: Bool
}

/// A resolved service.
public struct ResolvedService: Sendable, Hashable {
    /// The instance name.
    public var name: String
    /// The service type.
    public var type: String
    /// The domain.
    public var domain: String
    /// The interface it was resolved on.
    public var interface: String
    /// "ipv4" or "ipv6" (the protocol of the lookup).
    public var proto: String
    /// The target host name, e.g. "board.local".
    public var host: String
    /// The addresses found, IPv4 first.
    public var addresses: [String]
    /// The port.
    public var port: UInt16
    /// The TXT entries.
    public var txt: TXTRecord
    /// Answered from avahi-daemon's cache.
    public var isCached: Bool
    /// Milliseconds from the request to the answer (for one-shot resolves).
    public var elapsedMilliseconds: Double?
    /// Answered from the daemon's own cache of recent results (`ResolveCache`), without asking avahi-daemon.
    public var fromDaemonCache = false
    /// With `fromDaemonCache`: how old the stored result was, in milliseconds.
    public var cacheAgeMilliseconds: Double?
    /// The interface's index (-1: unknown). Unlike its name it still identifies the
    /// interface once that has gone, when its services' removals arrive.
    public var interfaceIndex: Int32 = -1
}

/// A service type seen on the network.
public struct ServiceTypeInfo: Sendable, Hashable {
    /// "_http._tcp".
    public var type: String
    /// The domain.
    public var domain: String
    /// Interfaces it was seen on.
    public var interfaces: [String]
}

/// What to browse for.
public struct BrowseSpec: Sendable, Hashable {
    /// The service type (a subtype in full form is allowed too).
    public var type: String
    /// The domain (nil: default).
    public var domain: String?
    /// The interface (nil: all).
    public var interfaceIndex: Int32?
    /// Resolve every service found (and report changes to it, such as a new TXT).
    public var resolve: Bool

    /// A browse spec.
    public init(type: String, domain: String? = nil, interfaceIndex: Int32? = nil, resolve: Bool = false) {
        self.type = type
        self.domain = domain
        self.interfaceIndex = interfaceIndex
        self.resolve = resolve
    }
}

/// What the DNS-SD client reports as it happens.
public enum DNSSDEvent: Sendable {
    /// avahi-daemon is running and reachable (again).
    case avahiAvailable(version: String?)
    /// avahi-daemon went away (or could not be reached); what was published waits for it.
    case avahiUnavailable(reason: String)
    /// A publication is on the network; `again` after avahi-daemon came back or a host name change.
    case published(PublicationInfo, again: Bool)
    /// A publication's name collided; it is now published as `info.name`.
    case renamed(PublicationInfo, from: String)
    /// Avahi refused a publication.
    case publishFailed(PublicationInfo, error: String)
    /// A publication was withdrawn (`unpublish`, or its connection closed).
    case unpublished(PublicationInfo)
    /// A browse saw a service appear.
    case found(browseID: String, FoundService)
    /// A service seen by a browse went away.
    case removed(browseID: String, FoundService)
    /// A service found by a browse with `resolve` was resolved (again after a change).
    case resolved(browseID: String, ResolvedService)
    /// A service found by a browse with `resolve` could not be resolved.
    case resolveFailed(browseID: String, FoundService, error: String)
    /// A browse has reported what is known for now ("no more coming").
    case allForNow(browseID: String)
    /// A browse failed and stopped.
    case browseFailed(browseID: String, error: String)
    /// avahi-daemon went away under a browse; it resumes when it is back.
    case browseInterrupted(browseID: String)
    /// A browse runs again after avahi-daemon came back.
    case browseResumed(browseID: String)
}
