/// Method names of the DNS-SD part of the control protocol (see docs/dnssd.md).
extension ControlMethod {
    /// Publishes a service: `{"name", "type", "port", "txt"?, "subtypes"?, "domain"?, "interface"?, "owner"?, "wait"?}` → Publication.
    public static let dnssdPublish = "dnssd.publish"
    /// Withdraws a publication: `{"id"}` → Publication.
    public static let dnssdUnpublish = "dnssd.unpublish"
    /// Replaces a publication's TXT record: `{"id", "txt"}` → Publication.
    public static let dnssdUpdate = "dnssd.update"
    /// The daemon's publications: `{"avahi": {..}, "publications": [Publication]}`.
    public static let dnssdList = "dnssd.list"
    /// Starts a browse owned by the connection: `{"type", "domain"?, "interface"?, "resolve"?}` → `{"browse_id"}`.
    public static let dnssdBrowse = "dnssd.browse"
    /// Stops a browse: `{"browse_id"}`.
    public static let dnssdBrowseStop = "dnssd.browse.stop"
    /// Resolves a service: `{"name", "type", "domain"?, "interface"?, "timeout"?, "all_addresses"?, "fresh"?}` → Resolved
    /// (from the daemon's cache of recent results unless `fresh`).
    public static let dnssdResolve = "dnssd.resolve"
    /// Service types on the network: `{"domain"?, "interface"?, "timeout"?}` → `{"types": [..]}`.
    public static let dnssdTypes = "dnssd.types"
}

extension ControlEvent {
    /// Topic: a browse saw a service (sent to the browsing connection only).
    public static let dnssdFound = "dnssd.found"
    /// Topic: a service seen by a browse went away (browsing connection only).
    public static let dnssdRemoved = "dnssd.removed"
    /// Topic: a service found by a resolving browse was resolved (browsing connection only).
    public static let dnssdResolved = "dnssd.resolved"
    /// Topic: a publication is on the network.
    public static let dnssdPublished = "dnssd.published"
    /// Topic: a publication was renamed after a name collision.
    public static let dnssdRenamed = "dnssd.renamed"
    /// Topic: avahi-daemon is back.
    public static let dnssdAvahiAvailable = "dnssd.avahi-available"
    /// Topic: avahi-daemon went away.
    public static let dnssdAvahiUnavailable = "dnssd.avahi-unavailable"
    /// Topic: a publication could not be (re)published (`error`).
    public static let dnssdPublishFailed = "dnssd.publish-failed"
    /// Topic: a publication was withdrawn.
    public static let dnssdUnpublished = "dnssd.unpublished"
    /// Topic: a resolving browse could not resolve a service (browsing connection only).
    public static let dnssdResolveFailed = "dnssd.resolve-failed"
    /// Topic: a browse has reported what Avahi knew at its start (browsing connection only).
    public static let dnssdAllForNow = "dnssd.all-for-now"
    /// Topic: a browse failed and ended (browsing connection only).
    public static let dnssdBrowseFailed = "dnssd.browse-failed"
    /// Topic: a browse waits for avahi-daemon to come back (browsing connection only).
    public static let dnssdBrowseInterrupted = "dnssd.browse-interrupted"
    /// Topic: a browse runs again after avahi-daemon came back (browsing connection only).
    public static let dnssdBrowseResumed = "dnssd.browse-resumed"
}
