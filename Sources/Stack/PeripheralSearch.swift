import BlemuCentral
import BlemuCore
import Logging

/// Which advertisers a central command picks (`--name`, `--service`, `--address`).
public struct AdvertiserFilter: Sendable {
    public var name: String?
    public var service: BluetoothUUID?
    public var address: BluetoothAddress?

    public init(name: String? = nil, service: BluetoothUUID? = nil, address: BluetoothAddress? = nil) {
        self.name = name
        self.service = service
        self.address = address
    }

    public func matches(_ advertisement: Advertisement) -> Bool {
        if let address, advertisement.address != address { return false }
        if let name, !advertisement.name.contains(name) { return false }
        if let service, !advertisement.services.contains(service) { return false }
        return true
    }

    /// What the filter asks for, as a failure names it.
    public var describe: String {
        if let address { return "address \(address)" }
        if let name { return "name '\(name)'" }
        return "service \(service?.description ?? "?")"
    }
}

extension CentralSession {
    /// Scans for the one connectable advertiser that matches `filter` and connects to it
    /// (`blemu gatt`): an address names one peripheral, a name or a service may fit several
    /// (`AdvertiserChoice`: the scan lasts its window, then several matches are an error listing
    /// them). `connected` gets the link and what it advertised; a search that finds none in
    /// `timeout` seconds, an ambiguity, a connection that fails and a later disconnection finish
    /// the session with a failure naming it. Call before `run()`.
    public func connect(to filter: AdvertiserFilter, timeout: Double,
                        connected: @escaping (CentralLink, Advertisement) -> Void) {
        var connecting = false
        var choice = AdvertiserChoice(startedAt: 0)
        var windowTimer: TimerID?
        var deadline: TimerID?
        /// The choice is made: no more scanning, no more timers of the search.
        func chosen() {
            connecting = true
            host.stopScanning()
            for timer in [deadline, windowTimer].compactMap({ $0 }) { loop.cancel(timer) }
        }
        func connect(_ advertisement: Advertisement) {
            chosen()
            host.connect(to: advertisement.advertiser,
                         timeout: .milliseconds(Int64(timeout * 1000))) { [unowned self] result in
                switch result {
                case .failure(let error):
                    finish(failure: "connecting to \(advertisement.address): \(error)")
                case .success(let link):
                    link.onDisconnected = { [unowned self] reason in
                        finish(failure: "the peripheral disconnected (reason \(Hex.byte(reason)))")
                    }
                    connected(link, advertisement)
                }
            }
        }
        /// What the choice says; true when it is final (connecting, or failed).
        @discardableResult
        func act(_ decision: AdvertiserChoice.Decision) -> Bool {
            switch decision {
            case .keepScanning:
                return false
            case .waitUntil(let end):
                guard windowTimer == nil else { return false }
                let now = loop.nowNanoseconds
                windowTimer = loop.schedule(after: .nanoseconds(Int64(clamping: end &- min(end, now)))) {
                    if !connecting { act(choice.windowEnded()) }
                }
                return false
            case .connect(let advertisement):
                connect(advertisement)
                return true
            case .ambiguous(let matches):
                chosen()
                finish(failure: AdvertiserChoice.ambiguity(matches, matching: filter.describe))
                return true
            }
        }
        deadline = loop.schedule(after: .milliseconds(Int64(timeout * 1000))) { [unowned self] in
            // A timeout shorter than the window: the choice as it stands.
            guard !connecting, !act(choice.windowEnded()) else { return }
            finish(failure: "no advertiser matching \(filter.describe) within \(timeout) s")
        }
        host.onError = { [unowned self] message in finish(failure: message) }
        host.onReady = { [unowned self] in
            choice = AdvertiserChoice(startedAt: loop.nowNanoseconds, window: filter.address != nil ? .zero : AdvertiserChoice.defaultWindow)
            host.startScanning(active: true)
        }
        host.onAdvertisement = { [unowned self] advertisement, _ in
            // A name may come in the scan response: wait for the advertiser that matches whole.
            guard !connecting, advertisement.isConnectable, filter.matches(advertisement) else { return }
            act(choice.heard(advertisement, now: loop.nowNanoseconds))
        }
    }
}
