/// Method names of the peripheral part of the control protocol: the GATT server, advertising
/// and the pairing agent (see docs/peripheral.md). The daemon registers them under these
/// names and the CLI sends them, so the two cannot drift apart.
extension ControlMethod {
    /// Adds a GATT application: `{"definition", "source"?, "adapter"?}` → Application.
    public static let gattRegister = "gatt.register"
    /// Removes an application: `{"id"}` → `{"id", "removed": true}`.
    public static let gattUnregister = "gatt.unregister"
    /// The applications: `{"applications": [Application]}`.
    public static let gattList = "gatt.list"
    /// Stores a characteristic's value: `{"uuid", "value" | "value_hex" | "value_base64", "app"?}` → the value.
    public static let gattSet = "gatt.set"
    /// Notifies subscribers: `{"uuid", value or "values"…, "app"?, "device"?}` → `{"uuid", "app", "length", "count", "subscribers"}`.
    public static let gattNotify = "gatt.notify"
    /// Opens a notification stream: `{"uuid", "app"?, "device"?}` → `{"stream", …, "fd": true}` and a packet socket.
    public static let gattNotifyStream = "gatt.notify-stream"
    /// This connection answers remote reads of a characteristic: `{"uuid", "app"?, "enable"?}`.
    public static let gattHandleReads = "gatt.handle-reads"
    /// Answers a `gatt.read-request`: `{"request", value or "error"}` → `{"request", "answered": true}`.
    public static let gattRespond = "gatt.respond"

    /// Starts an advertisement: `{"name"?, "services"?, "manufacturer"?, …, "adapter"?}` → Advertisement.
    public static let advertiseStart = "advertise.start"
    /// Stops one advertisement or all: `{"id"?}` → `{"stopped": [id]}`.
    public static let advertiseStop = "advertise.stop"
    /// The advertisements: `{"advertisements": [Advertisement]}`.
    public static let advertiseList = "advertise.list"

    /// Reads or sets the pairing policy: `{"policy"?}` → `{"policy"}`.
    public static let agentPolicy = "agent.policy"
    /// Answers an `agent.request`: `{"id", "accept"}` → `{"id", "accepted"}`.
    public static let agentConfirm = "agent.confirm"
}

/// Topics of the peripheral part of the control protocol.
extension ControlEvent {
    /// Topic: an application is registered with bluetoothd.
    public static let gattRegistered = "gatt.registered"
    /// Topic: an application is registered again (bluetoothd or its adapter came back).
    public static let gattReregistered = "gatt.reregistered"
    /// Topic: registering an application failed (it is tried again later).
    public static let gattRegistrationFailed = "gatt.registration-failed"
    /// Topic: a central read a value.
    public static let gattRead = "gatt.read"
    /// Topic: a central wrote a value.
    public static let gattWrite = "gatt.write"
    /// Topic: a central subscribed to a characteristic.
    public static let gattSubscribed = "gatt.subscribed"
    /// Topic: a subscription ended.
    public static let gattUnsubscribed = "gatt.unsubscribed"
    /// Topic: an indication was confirmed.
    public static let gattConfirmed = "gatt.confirmed"
    /// Topic: a remote read waits for this connection's `gatt.respond` (handling connection only).
    public static let gattReadRequest = "gatt.read-request"
    /// Topic: a notification stream ended (the stream's connection only).
    public static let gattStreamEnded = "gatt.stream.ended"

    /// Topic: an advertisement is on the air.
    public static let advertiseStarted = "advertise.started"
    /// Topic: an advertisement is on the air again (bluetoothd or its adapter came back).
    public static let advertiseRestarted = "advertise.restarted"
    /// Topic: an advertisement ended (`reason`).
    public static let advertiseStopped = "advertise.stopped"

    /// Topic: a pairing question waits for `agent.confirm`.
    public static let agentRequest = "agent.request"
    /// Topic: bluetoothd asked to confirm a passkey.
    public static let agentConfirm = "agent.confirm"
    /// Topic: bluetoothd asked to authorize a pairing.
    public static let agentAuthorize = "agent.authorize"
    /// Topic: bluetoothd asked to authorize a service.
    public static let agentAuthorizeService = "agent.authorize-service"
    /// Topic: a PIN code or passkey to show to the user.
    public static let agentDisplay = "agent.display"
    /// Topic: bluetoothd canceled its question.
    public static let agentCanceled = "agent.canceled"
}
