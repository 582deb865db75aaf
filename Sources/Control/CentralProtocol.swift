/// Method names of the central part of the control protocol (see docs/central.md). Every
/// method takes `adapter`? (hciN or an address).
extension ControlMethod {
    /// Starts a scan owned by the connection: `{"services"?, "name"?, "name_pattern"?, "rssi"?, "manufacturer"?, "duplicates"?, "timeout"?}`
    /// → `{"scan", "adapter", "address"}`.
    public static let centralScan = "central.scan"
    /// Stops a scan, or this connection's scans: `{"scan"?}` → `{"stopped": [id]}`.
    public static let centralScanStop = "central.scan.stop"
    /// Connects: `{"address", "address_type"?, "timeout"?, "keep"?}` → `{"adapter", "device": Device, "keep"}`.
    public static let centralConnect = "central.connect"
    /// Disconnects (and ends keep mode): `{"address"}` → `{"address", "was_connected"}`.
    public static let centralDisconnect = "central.disconnect"
    /// Devices BlueZ knows: `{"connected"?}` → `{"adapter", "devices": [Device]}`.
    public static let centralDevices = "central.devices"
    /// A device's GATT tree: `{"address", "refresh"?, "timeout"?}` → `{"device", "services": [..]}`.
    public static let centralServices = "central.services"
    /// Reads a characteristic: `{"address", "characteristic", "service"?, "offset"?}` → the value.
    public static let centralRead = "central.read"
    /// Writes a characteristic: `{"address", "characteristic", "service"?, value, "command"?, "offset"?}`.
    public static let centralWrite = "central.write"
    /// Subscribes (owned by the connection): `{"address", "characteristic", "service"?, "indicate"?, "batch"?, "stream"?}`.
    public static let centralSubscribe = "central.subscribe"
    /// Ends a subscription: `{"subscription"}` → `{"subscription", "ended": true}`.
    public static let centralUnsubscribe = "central.unsubscribe"
    /// Scans and subscriptions of every connection: `{"scans": [..], "subscriptions": [..]}`.
    public static let centralStatus = "central.status"
    /// Pairs: `{"address", "timeout"?}` → `{"device": Device, "already_paired"}`.
    public static let centralPair = "central.pair"
    /// Trusts or distrusts: `{"address", "trusted"?}` → `{"device": Device}`.
    public static let centralTrust = "central.trust"
    /// Removes a device and its bond: `{"address"}` → `{"address", "removed": true}`.
    public static let centralForget = "central.forget"
}

/// Topics of the central part of the control protocol.
extension ControlEvent {
    /// Topic: a scan saw a device (the scan's connection only).
    public static let centralDiscovered = "central.discovered"
    /// Topic: a scan ended (`reason`: timeout, stopped, client-gone; the scan's connection only).
    public static let centralScanEnded = "central.scan.ended"
    /// Topic: a scan runs again after bluetoothd or its adapter came back (the scan's connection only).
    public static let centralScanResumed = "central.scan.resumed"
    /// Topic: a device connected.
    public static let centralConnected = "central.connected"
    /// Topic: a device disconnected.
    public static let centralDisconnected = "central.disconnected"
    /// Topic: a kept device is being connected again.
    public static let centralReconnecting = "central.reconnecting"
    /// Topic: one value of a subscription (the subscription's connection only).
    public static let centralNotification = "central.notification"
    /// Topic: the values of a `batch` subscription that arrived together (the subscription's connection only).
    public static let centralNotifications = "central.notifications"
    /// Topic: a subscription ended (the subscription's connection only).
    public static let centralSubscriptionEnded = "central.subscription.ended"
}
