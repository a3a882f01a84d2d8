/// blemu's version: `blemu run`'s start line, a device's firmware revision (`PeripheralConfiguration`)
/// and the Device Information service's revisions. In Core so the devices report it without the host.
public let blemuVersion = "0.1.0"
