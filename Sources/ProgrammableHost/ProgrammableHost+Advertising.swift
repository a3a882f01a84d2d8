import BlemuCore
import BlemuHCI

/// An advertisement as a program asks for it (`advertise`, Docs/CONTROL.md "The programmable host").
public struct HostAdvertiseRequest: Equatable, Sendable {
    /// What to advertise. Its `ownAddressType` is replaced when the advertisement starts: by
    /// `ownAddressType`, or the host's identity type when that is nil.
    public var parameters: ProgrammedAdvertising.Parameters
    /// nil: the host's identity type (public when the controller has a public address).
    public var ownAddressType: ProgrammedAdvertising.OwnAddressType?

    public init(parameters: ProgrammedAdvertising.Parameters = ProgrammedAdvertising.Parameters(),
                ownAddressType: ProgrammedAdvertising.OwnAddressType? = nil) {
        self.parameters = parameters
        self.ownAddressType = ownAddressType
    }
}

// The peripheral side of the programmable host: its `ProgrammedAdvertising` (made in `init`, on
// the same ControllerHost as the central) started and stopped on request, the links it accepts in
// the one `HostLinks` table, its advertisements stopped by a reset.
extension ProgrammableHost {
    func wireAdvertising() {
        advertising.onConnection = { [weak self] link in
            self?.peripheralLinkOpened(link.connection, advertisement: link.advertisement, ownAddress: link.ownAddress)
        }
        advertising.onLinkClosed = { [weak self] handle, reason in self?.peripheralLinkClosed(handle: handle, reason: reason) }
        advertising.onStopped = { [weak self] id, reason in self?.onEvent?(.advertisingStopped(advertisement: id, reason: reason)) }
        addResetStep { [weak self] in self?.advertising.stopAll(reason: .hostReset) }
    }

    /// Starts an advertisement; returns its id. Refused (nothing sent) when the controller is not
    /// ready, a reset is under way, the combination breaks a rule of Vol 4, Part E, 7.8.5 or
    /// 7.8.53 – 7.8.57 (the message names it), or no advertising set is free (`no-room`).
    public func startAdvertising(_ request: HostAdvertiseRequest) throws(HostError) -> Int {
        try checkReady()
        var parameters = request.parameters
        parameters.ownAddressType = request.ownAddressType ?? (hasPublicAddress ? .publicAddress : .randomAddress)
        switch advertising.start(parameters) {
        case .success(let id):
            return id
        case .failure(let refusal):
            throw HostError(refusal.code.flatMap(HostError.Code.init(rawValue:)), refusal.message)
        }
    }

    /// Stops advertisement `id`; `advertising-stopped` (reason `stopped`) is told at once.
    public func stopAdvertising(_ id: Int) throws(HostError) {
        guard advertising.stop(id) else {
            let running = advertising.advertisements.keys.sorted()
            throw HostError(.unknownAdvertisement, "no advertisement \(id) is running"
                            + (running.isEmpty ? "" : "; running: \(running.map(String.init).joined(separator: ", "))"))
        }
    }
}
